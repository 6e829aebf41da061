"""The `vllm serve` arguments that make a real engine admit work as a planned pool does.

Flags are vLLM 0.32's (``vllm serve --help``): ``--max-model-len``, ``--max-num-seqs``,
``--max-num-batched-tokens``, ``--tensor-parallel-size``, ``--gpu-memory-utilization``,
``--block-size``. Under the paper's admission the planned ``max_num_seqs`` is
``floor(KV / max_model_len)``; vLLM would otherwise admit up to its own default, so the flag is always
written.
"""

from __future__ import annotations

from planner.model.profiles import PoolProfile

__all__ = ["GPU_MEMORY_UTILIZATION", "vllm_serve_args"]

GPU_MEMORY_UTILIZATION = 0.90
"""vLLM's default ``--gpu-memory-utilization``, the one the roofline profiles' KV capacity assumes."""


def vllm_serve_args(profile: PoolProfile, max_model_len: int) -> list[str]:
    """``vllm serve`` arguments (after the model name) for one pool of ``profile`` at ``max_model_len``
    tokens: ``["--max-model-len", "8192", ...]``. Raises ``ValueError`` when one sequence of
    ``max_model_len`` does not fit the profile's KV (vLLM would refuse to start)."""
    args = [
        "--max-model-len",
        str(max_model_len),
        "--max-num-seqs",
        str(profile.max_num_seqs(max_model_len)),
    ]
    if profile.max_num_batched_tokens is not None:
        args += ["--max-num-batched-tokens", str(profile.max_num_batched_tokens)]
    args += [
        "--tensor-parallel-size",
        str(profile.tp),
        "--gpu-memory-utilization",
        f"{GPU_MEMORY_UTILIZATION:g}",
        "--block-size",
        str(profile.block_size_tokens),
    ]
    return args
