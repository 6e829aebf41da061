"""Pool profiles: KV capacity, concurrency and iteration-time constants from a model and a GPU.

Formulas (docs/method.md §2, transcribed from arXiv 2604.08075 §1.1 via [S4]):

- KV bytes per token ``= 2 * n_layers * n_kv_heads * head_dim * kv_dtype_bytes`` (K and V);
- KV capacity ``= (tp * gpu_memory_bytes * gpu_memory_utilization - weight_bytes
  - tp * non_kv_reserve_bytes) / kv_bytes_per_token`` tokens, rounded down to whole blocks;
- concurrency, by the profile's ``admission``:

  * ``"paper"``: ``max_num_seqs = min(cap, floor(kv_capacity_tokens / max_model_len))`` (the paper's
    ``N_seq = floor((M_gpu u - M_model) / M_seq)``: every admitted sequence can grow to ``max_model_len``);
  * ``"vllm"``: vLLM's own admission (PagedAttention): ``max_num_seqs`` is the scheduler's cap alone
    (vLLM's default for the GPU unless given, :func:`vllm_scheduler_defaults`), KV blocks are taken on
    demand, a full KV preempts by recomputation, and ``max_num_batched_tokens`` bounds every
    iteration's tokens (chunked prefill). :func:`with_admission` builds such a profile.

Iteration time (the paper's "W + H n" linear model [S1], with chunked prefill):
``t_iter = W + S * (running sequences) + H * sum(context tokens of the batch) + P * (prefill tokens in
the iteration) + A * sum(prefill chunk * prompt / 2)``, seconds (S = ``s_s_per_running_seq`` and
A = ``a_s_per_prefill_context_token``, 0 unless measured: :mod:`planner.model.profile_fit`).
W is one read of the weights per iteration, H one read of a KV token, P the compute of one prefill
token (roofline; see :func:`derive_profile`). Times are seconds, sizes bytes unless a suffix says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

__all__ = [
    "A100_80GB",
    "ADMISSION_MODES",
    "GPUS",
    "H100_80GB",
    "LLAMA3_70B",
    "MI300X",
    "MODELS",
    "PROFILES",
    "QWEN3_235B_A22B",
    "GpuSpec",
    "ModelConfig",
    "PoolProfile",
    "VllmSchedulerDefaults",
    "derive_profile",
    "kv_bytes_per_token",
    "kv_capacity_tokens",
    "max_num_seqs",
    "vllm_scheduler_defaults",
    "with_admission",
]

GIB = 1024**3

ADMISSION_MODES = ("vllm", "paper")
"""How an instance admits work: ``vllm`` (its scheduler: ``max_num_seqs`` cap, KV blocks on demand,
recompute preemption, ``max_num_batched_tokens`` with chunked prefill) or ``paper`` (a slot per
``max_model_len`` of KV: ``floor(KV / max_model_len)`` sequences, the paper's convention)."""


@dataclass(frozen=True)
class ModelConfig:
    """Transformer dimensions that size the KV cache and the per-token compute.

    ``total_params`` sets the weight bytes; ``active_params`` the prefill FLOPs (``2 * active_params``
    per token; equal to ``total_params`` for dense models).
    """

    name: str
    n_layers: int
    n_kv_heads: int
    head_dim: int
    total_params: float
    active_params: float
    weight_dtype_bytes: float
    kv_dtype_bytes: float


@dataclass(frozen=True)
class GpuSpec:
    """One accelerator: memory (bytes), HBM bandwidth (bytes/s), dense peak (FLOP/s), price ($/GPU-hour)."""

    name: str
    memory_bytes: float
    hbm_bytes_per_s: float
    peak_flops: float
    price_usd_per_gpu_h: float


@dataclass(frozen=True)
class PoolProfile:
    """Everything the cost model and the simulator need about one serving instance (``tp`` GPUs).

    ``w_s`` fixed iteration time; ``h_s_per_kv_token`` attention time per context token in the batch;
    ``p_s_per_prefill_token`` compute time per prefilled token; ``chunk_tokens`` chunked-prefill size
    per sequence per iteration; ``kv_capacity_tokens`` = num_gpu_blocks * block_size;
    ``max_num_batched_tokens`` vLLM's chunked-prefill token budget per iteration (None = off);
    ``max_num_seqs_cap`` the scheduler cap (vLLM ``max_num_seqs``) before the KV bound;
    ``request_overhead_s`` the server's fixed per-request time added to each TTFT;
    ``admission`` one of :data:`ADMISSION_MODES` (``paper`` keeps the shipped profiles' convention;
    :func:`with_admission` makes a ``vllm`` one, which ``tbr plan``/``tbr simulate`` use by default).
    """

    name: str
    model: str
    gpu: str
    tp: int
    price_usd_per_gpu_h: float
    kv_capacity_tokens: int
    block_size_tokens: int
    max_num_seqs_cap: int
    w_s: float
    h_s_per_kv_token: float
    p_s_per_prefill_token: float
    chunk_tokens: int
    source: str = ""
    max_num_batched_tokens: int | None = None
    """vLLM's per-iteration token budget (decode tokens + prefill chunks); None = not enforced."""
    admission: str = "paper"
    """One of :data:`ADMISSION_MODES`."""
    s_s_per_running_seq: float = 0.0
    """Time per running sequence per iteration (its sampling and output projection, which scale with the
    batch, not with its context), seconds: ``t_iter`` gains ``S * n_running``. 0 for the roofline
    profiles (on a GPU the batched output projection is one weight read, inside W); ``tbr profile``
    fits it (on the CPU engine a 151,936-token vocabulary projection per sequence dominates decode).
    """
    a_s_per_prefill_context_token: float = 0.0
    """Prefill attention: time per prefill token per context token it attends to, seconds; a prompt of
    L tokens costs ``A * L² / 2`` over its prefill (``t_iter`` gains ``A * chunk * L / 2`` per prefilling
    sequence). 0 for the roofline profiles (P covers prefill; attention is small beside the weights at
    their prompt lengths); ``tbr profile`` fits it (on the CPU engine a 2,048-token prompt's prefill
    takes ~3× the linear model's time, issue 32 item 3)."""
    request_overhead_s: float = 0.0
    """The server's fixed time per request outside the engine's iterations (HTTP, tokenising, handing
    the request to the engine, streaming the first token back), seconds; added to every TTFT. 0 for
    the roofline profiles; ``tbr profile`` fits it (issue 32 item 3: without it a single request's
    TTFT on real vLLM was 39 % off)."""

    def __post_init__(self) -> None:
        if self.admission not in ADMISSION_MODES:
            raise ValueError(
                f"profile {self.name}: unknown admission {self.admission!r}; choose from {ADMISSION_MODES}"
            )

    def max_num_seqs(self, max_model_len: int) -> int:
        """The scheduler's ``max_num_seqs`` at ``max_model_len``: the paper's :func:`max_num_seqs`, or
        under ``vllm`` admission the cap alone (KV is then taken on demand). Raises ``ValueError`` when
        one sequence of ``max_model_len`` does not fit the KV (vLLM refuses to start)."""
        if self.admission == "vllm":
            if max_model_len > self.kv_capacity_tokens:
                raise ValueError(
                    f"max_model_len {max_model_len} exceeds the KV capacity {self.kv_capacity_tokens}"
                )
            return self.max_num_seqs_cap
        return max_num_seqs(self.kv_capacity_tokens, max_model_len, self.max_num_seqs_cap)

    @property
    def price_usd_per_instance_h(self) -> float:
        """``tp * price per GPU-hour``, $/h."""
        return self.tp * self.price_usd_per_gpu_h


def kv_bytes_per_token(model: ModelConfig) -> float:
    """``2 * n_layers * n_kv_heads * head_dim * kv_dtype_bytes`` bytes per token (K and V).

    Example: Llama-3-70B in BF16: 2*80*8*128*2 = 327,680 B (320 KiB).
    """
    return 2.0 * model.n_layers * model.n_kv_heads * model.head_dim * model.kv_dtype_bytes


def kv_capacity_tokens(
    model: ModelConfig,
    gpu: GpuSpec,
    *,
    tp: int,
    gpu_memory_utilization: float,
    non_kv_reserve_bytes_per_gpu: float,
    block_size_tokens: int = 16,
) -> int:
    """KV tokens one instance holds: ``floor((tp*mem*u - weights - tp*reserve)/kv_per_token)``, block-rounded.

    ``weights = total_params * weight_dtype_bytes``. Raises ``ValueError`` when the weights and
    reserve do not fit (the paper's N_seq numerator would be negative).
    """
    if not 0 < gpu_memory_utilization <= 1:
        raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization}")
    free = tp * gpu.memory_bytes * gpu_memory_utilization
    free -= model.total_params * model.weight_dtype_bytes + tp * non_kv_reserve_bytes_per_gpu
    if free <= 0:
        raise ValueError(f"{model.name} does not fit on {tp} x {gpu.name} at u={gpu_memory_utilization}")
    tokens = int(free // kv_bytes_per_token(model))
    return tokens - tokens % block_size_tokens


def max_num_seqs(kv_capacity: int, max_model_len: int, cap: int) -> int:
    """``min(cap, floor(kv_capacity / max_model_len))``: sequences that can all reach ``max_model_len``.

    Example (paper): 1,048,576 KV tokens -> 16 at 65,536 and 128 at 8,192. Raises ``ValueError`` if
    not even one sequence fits.
    """
    n = min(cap, kv_capacity // max_model_len)
    if n < 1:
        raise ValueError(f"max_model_len {max_model_len} exceeds the KV capacity {kv_capacity}")
    return n


def derive_profile(
    model: ModelConfig,
    gpu: GpuSpec,
    *,
    tp: int,
    gpu_memory_utilization: float = 0.90,
    non_kv_reserve_bytes_per_gpu: float = 4 * GIB,
    hbm_efficiency: float = 0.8,
    mfu: float = 0.5,
    chunk_tokens: int = 512,
    max_num_seqs_cap: int = 256,
    block_size_tokens: int = 16,
    name: str | None = None,
) -> PoolProfile:
    """Roofline profile of ``tp`` x ``gpu`` serving ``model``.

    - ``W = weight_bytes / tp / (hbm * hbm_efficiency)``: every decode step streams all weights;
    - ``H = kv_bytes_per_token / tp / (hbm * hbm_efficiency)``: each context token's K,V read once;
    - ``P = 2 * active_params / tp / (peak_flops * mfu)``: prefill is compute-bound.

    ``hbm_efficiency`` 0.8 and ``mfu`` 0.5 are the calibration constants (typical achieved fractions
    for vLLM decode / prefill on A100/H100; replace them with a measured benchmark when available).
    """
    weights = model.total_params * model.weight_dtype_bytes
    bw = gpu.hbm_bytes_per_s * hbm_efficiency
    return PoolProfile(
        name=name or f"{model.name}@{tp}x{gpu.name}",
        model=model.name,
        gpu=gpu.name,
        tp=tp,
        price_usd_per_gpu_h=gpu.price_usd_per_gpu_h,
        kv_capacity_tokens=kv_capacity_tokens(
            model,
            gpu,
            tp=tp,
            gpu_memory_utilization=gpu_memory_utilization,
            non_kv_reserve_bytes_per_gpu=non_kv_reserve_bytes_per_gpu,
            block_size_tokens=block_size_tokens,
        ),
        block_size_tokens=block_size_tokens,
        max_num_seqs_cap=max_num_seqs_cap,
        w_s=weights / tp / bw,
        h_s_per_kv_token=kv_bytes_per_token(model) / tp / bw,
        p_s_per_prefill_token=2.0 * model.active_params / tp / (gpu.peak_flops * mfu),
        chunk_tokens=chunk_tokens,
        source=(
            f"derived: tp={tp}, gpu_memory_utilization={gpu_memory_utilization}, "
            f"reserve={non_kv_reserve_bytes_per_gpu / GIB:g} GiB/GPU, hbm_eff={hbm_efficiency}, mfu={mfu}"
        ),
    )


LLAMA3_70B = ModelConfig(
    name="llama-3-70b",
    n_layers=80,
    n_kv_heads=8,
    head_dim=128,
    total_params=70.6e9,
    active_params=70.6e9,
    weight_dtype_bytes=2.0,
    kv_dtype_bytes=2.0,
)
"""Llama-3-70B(-Instruct), BF16. Source: HF ``meta-llama/Meta-Llama-3-70B`` config.json
(num_hidden_layers 80, num_key_value_heads 8, hidden_size 8192 / 64 heads = head_dim 128);
70.6B parameters from the model card."""

QWEN3_235B_A22B = ModelConfig(
    name="qwen3-235b-a22b",
    n_layers=94,
    n_kv_heads=4,
    head_dim=128,
    total_params=235e9,
    active_params=22e9,
    weight_dtype_bytes=1.0,
    kv_dtype_bytes=2.0,
)
"""Qwen3-235B-A22B in FP8 (weights 1 byte; KV cache left at BF16, vLLM's default kv_cache_dtype).
Source: HF ``Qwen/Qwen3-235B-A22B`` config.json (num_hidden_layers 94, num_key_value_heads 4,
head_dim 128); 235B total / 22B activated parameters from the model card; FP8 per the paper [S3]."""

A100_80GB = GpuSpec("A100-80GB", 80 * GIB, 2.039e12, 312e12, 2.21)
"""NVIDIA A100-SXM4-80GB datasheet: 80 GiB HBM2e, 2.039 TB/s, 312 TFLOPS dense BF16.
$2.21/GPU-h: the paper's price [S3] and vllm-sr-sim's ``A100_80GB.cost_per_hr``."""

H100_80GB = GpuSpec("H100-80GB", 80 * GIB, 3.35e12, 989e12, 4.02)
"""NVIDIA H100-SXM5-80GB datasheet: 80 GiB HBM3, 3.35 TB/s, 989 TFLOPS dense BF16.
$4.02/GPU-h: vllm-sr-sim ``H100_80GB.cost_per_hr`` (AWS on-demand per GPU)."""

MI300X = GpuSpec("MI300X", 192e9, 5.3e12, 2614.9e12, 3.67)
"""AMD Instinct MI300X datasheet: 192 GB HBM3, 5.3 TB/s, 2,614.9 TFLOPS dense FP8 (the model is FP8).
$3.67/GPU-h: the paper's price [S3] (1,576 GPUs x 3.67 x 8760 = $50.7M matches its Table 6)."""

MODELS = {m.name: m for m in (LLAMA3_70B, QWEN3_235B_A22B)}
GPUS = {g.name: g for g in (A100_80GB, H100_80GB, MI300X)}

PROFILES: dict[str, PoolProfile] = {
    "llama3-70b-a100": derive_profile(LLAMA3_70B, A100_80GB, tp=8, name="llama3-70b-a100"),
    "llama3-70b-h100": derive_profile(LLAMA3_70B, H100_80GB, tp=8, chunk_tokens=1024, name="llama3-70b-h100"),
    "qwen3-235b-mi300x": derive_profile(QWEN3_235B_A22B, MI300X, tp=8, name="qwen3-235b-mi300x"),
    # vllm-sr-sim's hand-calibrated A100 profile (fleet_sim/gpu_profiles/profiles.py: W=8 ms,
    # H=0.65 ms/seq at 8,192 tokens, 65,536 blocks x 16, chunk 512, 128 slots at 8K) priced as ONE
    # A100 (tp=1) exactly as that simulator and the paper's tables do; prefill costs one iteration
    # per chunk (P=0), as in its ManualProfile.
    "a100-simcompat": PoolProfile(
        name="a100-simcompat",
        model="llama-3-70b",
        gpu="A100-80GB",
        tp=1,
        price_usd_per_gpu_h=2.21,
        kv_capacity_tokens=65536 * 16,
        block_size_tokens=16,
        max_num_seqs_cap=128,
        w_s=0.008,
        h_s_per_kv_token=0.00065 / 8192,
        p_s_per_prefill_token=0.0,
        chunk_tokens=512,
        source="vllm-sr-sim 0.1.0 A100_80GB ManualProfile constants (Llama-3-70B, 8-GPU TP calibration)",
    ),
}


def with_overrides(profile: PoolProfile, **changes: float | int | str) -> PoolProfile:
    """Copy of ``profile`` with fields replaced (e.g. ``max_num_seqs_cap=512``)."""
    return replace(profile, **changes)  # type: ignore[arg-type]


def iteration_time_s(
    profile: PoolProfile, batch_context_tokens: float, prefill_tokens: float, running_seqs: int = 0
) -> float:
    """``W + S * running_seqs + H * batch_context_tokens + P * prefill_tokens`` seconds (module docstring)."""
    return (
        profile.w_s
        + profile.s_s_per_running_seq * running_seqs
        + profile.h_s_per_kv_token * batch_context_tokens
        + profile.p_s_per_prefill_token * prefill_tokens
    )


def prefill_iterations(input_tokens: int, chunk_tokens: int) -> int:
    """``ceil(input_tokens / chunk_tokens)`` iterations of chunked prefill (at least 1)."""
    return max(1, math.ceil(input_tokens / chunk_tokens))


@dataclass(frozen=True)
class VllmSchedulerDefaults:
    """vLLM's scheduler defaults for ``vllm serve`` on one kind of device: ``max_num_seqs`` sequences
    and ``max_num_batched_tokens`` tokens per iteration."""

    max_num_seqs: int
    max_num_batched_tokens: int


def vllm_scheduler_defaults(gpu_memory_bytes: float, gpu_name: str) -> VllmSchedulerDefaults:
    """``vllm serve``'s defaults when neither flag is given, as vLLM 0.32 sets them.

    Source: vLLM 0.32.0 ``vllm/engine/arg_utils.py`` ``EngineArgs.get_batch_defaults``, the
    ``UsageContext.OPENAI_API_SERVER`` entries: a device of >= 160 GiB (B200, MI300X's 192 GB):
    1,024 sequences, 16,384 tokens; >= 70 GiB and not an A100 (H100, H200): 1,024 and 8,192; any
    other GPU (A100 included: larger budgets lowered its throughput, vLLM PR #17885): 256 and 2,048.
    ``gpu_memory_bytes`` is one device's memory.
    """
    if gpu_memory_bytes >= 160 * GIB:
        return VllmSchedulerDefaults(1024, 16384)
    if gpu_memory_bytes >= 70 * GIB and "a100" not in gpu_name.lower():
        return VllmSchedulerDefaults(1024, 8192)
    return VllmSchedulerDefaults(256, 2048)


def with_admission(
    profile: PoolProfile,
    admission: str,
    *,
    max_num_seqs: int | None = None,
    max_num_batched_tokens: int | None = None,
) -> PoolProfile:
    """``profile`` under ``admission`` (one of :data:`ADMISSION_MODES`).

    ``vllm``: ``max_num_seqs_cap`` and ``max_num_batched_tokens`` are the given values, else the
    profile's own when it is already a ``vllm`` profile (a measured ``tbr profile`` file), else
    :func:`vllm_scheduler_defaults` for the profile's GPU (:data:`GPUS`; an unknown GPU gets the
    "other hardware" defaults 256 / 2,048); the per-sequence prefill chunk is the whole token budget
    (vLLM 0.32 sets no per-request chunk limit: ``long_prefill_token_threshold`` 0), and the DES
    hands a newcomer what the iteration's budget has left (:mod:`planner.des.instance`).
    ``paper``: the profile's own cap and chunk, ``max_num_batched_tokens`` only when given.
    Raises ``ValueError`` for an unknown mode or a non-positive value.
    """
    if admission not in ADMISSION_MODES:
        raise ValueError(f"unknown admission {admission!r}; choose from {ADMISSION_MODES}")
    for label, v in (("max_num_seqs", max_num_seqs), ("max_num_batched_tokens", max_num_batched_tokens)):
        if v is not None and v < 1:
            raise ValueError(f"{label} must be >= 1, got {v}")
    if admission == "paper":
        return replace(
            profile,
            admission="paper",
            max_num_seqs_cap=max_num_seqs or profile.max_num_seqs_cap,
            max_num_batched_tokens=max_num_batched_tokens or profile.max_num_batched_tokens,
        )
    gpu = GPUS.get(profile.gpu)
    d = vllm_scheduler_defaults(gpu.memory_bytes if gpu else 0.0, profile.gpu)
    if profile.admission == "vllm":  # already a vLLM profile (a `tbr profile` file): keep its values
        d = VllmSchedulerDefaults(
            profile.max_num_seqs_cap, profile.max_num_batched_tokens or d.max_num_batched_tokens
        )
    budget = max_num_batched_tokens or d.max_num_batched_tokens
    return replace(
        profile,
        admission="vllm",
        max_num_seqs_cap=max_num_seqs or d.max_num_seqs,
        max_num_batched_tokens=budget,
        chunk_tokens=budget,
    )
