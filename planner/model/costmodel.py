"""Closed-form cost model: α, ρ, ``savings = α(1 − 1/ρ)``, per-instance throughput, M/G/c sizing, $/yr.

Sources: the savings formula is arXiv 2604.09613 [A1] (``ΔG/G = α(1−1/ρ)`` in 2604.08075); its
derivation and assumptions are in docs/method.md §5. Erlang-C is the standard M/M/c waiting probability;
the M/G/c P99 wait uses the Kimura (1994) two-moment correction ``(1 + C_s²)/2`` as vllm-sr-sim's
``optimizer/analytical.py`` does. All times are seconds, rates requests/second.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from planner.model.profiles import PoolProfile

__all__ = [
    "HOURS_PER_YEAR",
    "MixStats",
    "PoolSizing",
    "alpha_at_threshold",
    "annual_cost_usd",
    "concurrency",
    "erlang_c",
    "fluid_savings",
    "instance_throughput_req_per_s",
    "mix_stats",
    "p99_wait_mgc_s",
    "savings_closed_form",
    "size_pool_mgc",
    "ttft_floor_s",
]

HOURS_PER_YEAR = 8760.0


def alpha_at_threshold(budget_tokens: npt.NDArray[np.int64], threshold_tokens: int) -> float:
    """α = F(B): fraction of requests whose ``L_total = input + output budget`` is ``<= B`` (inclusive).

    ``budget_tokens`` shape ``(n,)``. Raises ``ValueError`` when empty.
    """
    if budget_tokens.shape[0] == 0:
        raise ValueError("alpha of an empty trace")
    return float(np.count_nonzero(budget_tokens <= threshold_tokens)) / float(budget_tokens.shape[0])


def savings_closed_form(alpha: float, rho: float) -> float:
    """Fraction of GPUs saved by splitting: ``α (1 − 1/ρ)`` [A1].

    Example: α = 0.8, ρ = 4 -> 0.8 * 0.75 = 0.6. Raises ``ValueError`` for α outside [0, 1] or ρ <= 0.
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if rho <= 0:
        raise ValueError(f"rho must be > 0, got {rho}")
    return alpha * (1.0 - 1.0 / rho)


def fluid_savings(alpha: float, mu_homogeneous: float, mu_short: float, mu_long: float) -> float:
    """Savings without assumption 1 of docs/method.md §5 (one service rate for all traffic).

    ``G_h = 1/μ_h``, ``G_d = α/μ_s + (1−α)/μ_l`` (per unit λ); returns ``1 − G_d/G_h``. Equals
    :func:`savings_closed_form` when ``μ_l = μ_h`` and ``μ_s = ρ μ_h``. Rates in req/s per instance.
    """
    if min(mu_homogeneous, mu_short) <= 0 or (alpha < 1 and mu_long <= 0):
        raise ValueError("service rates must be > 0")
    g_d = alpha / mu_short + ((1.0 - alpha) / mu_long if alpha < 1 else 0.0)
    return 1.0 - g_d * mu_homogeneous


@dataclass(frozen=True)
class MixStats:
    """Per-request moments of a request mix on one profile (computed by :func:`mix_stats`).

    ``mean_iters`` E[k], k = prefill iterations + output − 1 (slot-iterations a request holds);
    ``cs2_iters`` squared coefficient of variation of k; ``mean_context_tokens`` the slot-time-weighted
    mean context ``E[k c]/E[k]`` with ``c = input + output/2``; ``mean_input_tokens`` E[input];
    ``p99_prefill_iters`` 99th percentile of prefill iterations; ``n`` requests.
    """

    n: int
    mean_iters: float
    cs2_iters: float
    mean_context_tokens: float
    mean_input_tokens: float
    p99_prefill_iters: float


def mix_stats(
    input_tokens: npt.NDArray[np.int64], output_tokens: npt.NDArray[np.int64], chunk_tokens: int
) -> MixStats:
    """Moments of a request mix for chunk size ``chunk_tokens`` (arrays shape ``(n,)``, n >= 1)."""
    if input_tokens.shape[0] == 0:
        raise ValueError("mix_stats of an empty mix")
    pf = np.maximum(1, -(-input_tokens // chunk_tokens)).astype(np.float64)
    k = pf + np.maximum(0, output_tokens - 1)
    ctx = input_tokens + output_tokens / 2.0
    mk = float(k.mean())
    return MixStats(
        n=int(k.shape[0]),
        mean_iters=mk,
        cs2_iters=float(k.var() / (mk * mk)),
        mean_context_tokens=float((k * ctx).mean() / mk),
        mean_input_tokens=float(input_tokens.mean()),
        p99_prefill_iters=float(np.percentile(pf, 99)),
    )


def concurrency(profile: PoolProfile, max_model_len: int, mix: MixStats) -> int:
    """Sequences one saturated instance runs at once, the ``n`` of the full-batch model.

    Paper admission: ``max_num_seqs`` at ``max_model_len`` (``floor(KV / max_model_len)``, capped).
    vLLM admission: the scheduler cap, bounded by what the KV holds on demand at the mix's
    slot-time-weighted mean context, ``floor(KV / c̄)``, and by ``max_num_batched_tokens`` (each
    decoding sequence takes one token of the budget); at least 1.
    """
    n = profile.max_num_seqs(max_model_len)
    if profile.admission != "vllm":
        return n
    n = min(n, max(1, math.floor(profile.kv_capacity_tokens / max(mix.mean_context_tokens, 1.0))))
    if profile.max_num_batched_tokens is not None:
        n = min(n, profile.max_num_batched_tokens)
    return n


def full_batch_iteration_s(profile: PoolProfile, n_slots: int, mix: MixStats) -> float:
    """Iteration time with ``n_slots`` busy slots in steady state (seconds).

    ``t = W + S n + H n c̄ + P n E[input]/E[k]``: n sequences of mean context c̄, and prefill tokens
    per iteration = (requests started per iteration = n/E[k]) x E[input].
    """
    return (
        profile.w_s
        + profile.s_s_per_running_seq * n_slots
        + profile.h_s_per_kv_token * n_slots * mix.mean_context_tokens
        + profile.p_s_per_prefill_token * n_slots * mix.mean_input_tokens / mix.mean_iters
    )


def instance_throughput_req_per_s(profile: PoolProfile, max_model_len: int, mix: MixStats) -> float:
    """Saturation throughput μ of one instance: ``n / (E[k] t_iter(n))``, ``n`` = :func:`concurrency`
    (``max_num_seqs`` under the paper's admission), req/s.

    Example (hand-worked in tests): W=10 ms, H=P=0, n=4 slots, every request k=100 iterations ->
    t_iter = 10 ms, μ = 4 / (100 * 0.01) = 4 req/s.
    """
    n = concurrency(profile, max_model_len, mix)
    return n / (mix.mean_iters * full_batch_iteration_s(profile, n, mix))


def erlang_c(c: int, offered_load: float) -> float:
    """Erlang-C probability that an arrival waits, M/M/c with ``a = λ/μ`` Erlangs (log-space stable).

    Returns 1.0 when ``a >= c`` (unstable). Example: c=2, a=1 -> 1/3.
    """
    if c <= 0:
        raise ValueError("c must be >= 1")
    if offered_load <= 0:
        return 0.0
    if offered_load >= c:
        return 1.0
    log_a = math.log(offered_load)
    terms = [k * log_a - math.lgamma(k + 1) for k in range(c)]
    last = c * log_a - math.lgamma(c + 1) - math.log(1.0 - offered_load / c)
    mx = max(*terms, last)
    denom = sum(math.exp(t - mx) for t in terms) + math.exp(last - mx)
    return math.exp(last - mx) / denom


def p99_wait_mgc_s(c: int, lam: float, mu_server: float, cs2: float = 1.0, q: float = 0.99) -> float:
    """q-quantile of the M/G/c waiting time (s), Erlang-C tail with the Kimura correction.

    ``P(W > t) ≈ C(c, a) exp(−2(cμ − λ) t / (1 + C_s²))`` -> ``t_q = ln(C/(1−q)) (1+C_s²) / (2(cμ−λ))``,
    0 when ``C <= 1 − q``; ``inf`` when ``λ >= cμ``. ``mu_server`` is the per-server rate (req/s).
    """
    if lam <= 0:
        return 0.0
    if lam >= c * mu_server:
        return math.inf
    pw = erlang_c(c, lam / mu_server)
    if pw <= 1.0 - q:
        return 0.0
    return math.log(pw / (1.0 - q)) * (1.0 + cs2) / (2.0 * (c * mu_server - lam))


@dataclass(frozen=True)
class PoolSizing:
    """Analytical size of one pool: instances, GPUs, and the model's predicted P99s (seconds)."""

    instances: int
    gpus: int
    p99_ttft_s: float
    p99_tpot_s: float
    utilization: float
    mu_req_per_s: float
    n_slots: int


def size_pool_mgc(
    lam: float,
    profile: PoolProfile,
    max_model_len: int,
    mix: MixStats,
    *,
    slo_ttft_p99_s: float,
    slo_tpot_p99_s: float | None = None,
    utilization_max: float = 1.0,
    max_instances: int = 100_000,
) -> PoolSizing:
    """Smallest instance count N meeting the SLO, each instance an M/G/c queue with c = :func:`concurrency`.

    Round-robin splits λ evenly: per instance ``λ/N``, per-slot rate ``1/(E[k] t_iter(c))`` at full
    batch (conservative), ``C_s² = Var k / E[k]²``. P99 TTFT ≈ P99 wait + P99 prefill iterations x
    t_iter(c); when that prefill alone exceeds the SLO the search stops where the wait reaches 0 and the
    returned ``p99_ttft_s`` exceeds the SLO (the DES then decides). TPOT ≈ t_iter(c). If the TPOT SLO cannot be met at full batch, the SLO is reported as
    unmet in ``p99_tpot_s`` (sizing more instances does not lower a full-batch iteration).
    """
    n_slots = concurrency(profile, max_model_len, mix)
    t_iter = full_batch_iteration_s(profile, n_slots, mix)
    mu_server = 1.0 / (mix.mean_iters * t_iter)
    mu_inst = n_slots * mu_server
    prefill_s = mix.p99_prefill_iters * t_iter
    if lam <= 0:
        return PoolSizing(0, 0, 0.0, 0.0, 0.0, mu_inst, n_slots)
    n = max(1, math.ceil(lam / (mu_inst * utilization_max)))
    while n < max_instances:
        util = lam / (n * mu_inst)
        if util < utilization_max or utilization_max >= 1.0:
            w = p99_wait_mgc_s(n_slots, lam / n, mu_server, mix.cs2_iters)
            if w + prefill_s <= slo_ttft_p99_s or w == 0.0:
                break  # met, or unattainable: more instances cannot shorten the full-batch prefill
        n += 1
    w = p99_wait_mgc_s(n_slots, lam / n, mu_server, mix.cs2_iters)
    return PoolSizing(n, n * profile.tp, w + prefill_s, t_iter, lam / (n * mu_inst), mu_inst, n_slots)


def annual_cost_usd(instances: int, profile: PoolProfile) -> float:
    """``instances * tp * price_per_GPU_hour * 8760`` dollars per year."""
    return instances * profile.tp * profile.price_usd_per_gpu_h * HOURS_PER_YEAR


def ttft_floor_s(
    profile: PoolProfile, input_tokens: npt.NDArray[np.int64], output_tokens: npt.NDArray[np.int64]
) -> npt.NDArray[np.float64]:
    """Shortest possible TTFT of each request (shape ``(n,)``, seconds): alone on an instance, no queue.

    ``k = ceil(input / chunk)`` prefill iterations of ``W + S + H·(input + output/2) + P·input/k`` each
    plus the prefill attention ``A·input²/2`` —
    the DES's iteration time for a batch of one (:mod:`planner.des`), plus the profile's
    ``request_overhead_s``. No instance count can bring a pool's P99 TTFT below the P99 of this over
    the pool's requests.
    """
    inp = np.maximum(input_tokens.astype(np.float64), 1.0)
    k = np.ceil(inp / profile.chunk_tokens)
    ctx = inp + output_tokens.astype(np.float64) / 2.0
    t_iter = (
        profile.w_s
        + profile.s_s_per_running_seq
        + profile.h_s_per_kv_token * ctx
        + profile.p_s_per_prefill_token * inp / k
    )
    attention = profile.a_s_per_prefill_context_token * inp * inp / 2.0
    return np.asarray(k * t_iter + attention + profile.request_overhead_s, dtype=np.float64)
