"""Stability, run length and steady-state checks: no SLO verdict before the queue has settled.

Three guards, in the order the planner applies them to a pool of ``N`` instances receiving ``λ`` req/s:

1. **Stability** (no simulation): the pool is *unstable* when ``λ >= N·μ``, ``μ`` the saturation
   throughput of one instance at the pool's own request mix (:func:`planner.model.costmodel.
   instance_throughput_req_per_s`: ``max_num_seqs / (E[k]·t_iter(full batch))``). Its queue grows
   without bound, so no finite simulation can pass it; the smallest stable size is ``⌊λ/μ⌋ + 1``.
2. **Run length** (:func:`run_length`), from the pool's service times *and its utilisation*: a queue
   forgets its initial state on the time scale of its relaxation time, which grows like
   ``1/(1−ρ)²`` (:func:`relaxation_time_s`). With ``S_tail`` the longest service time of the pool's
   requests (a heavy tail holds slots for minutes: on vllm-sr-sim's LMSYS CDF the homogeneous pool's
   P99 service time is 13 s, its longest 158 s), the warm-up is ``2·(S_tail + SLO) + 5·τ`` (slots
   filled with long requests, initial transient down to e⁻⁵), then :data:`planner.des.result.BATCHES`
   batches each of at least ``max(S_tail + SLO, 2·τ)`` seconds and 1,000 requests. A size whose run would exceed the
   request cap is not simulated: its steady state cannot be shown, so it is *not converged*.
3. **Convergence and the verdict** (:func:`verdict`), by batch means (Law & Kelton, *Simulation
   Modeling and Analysis*, §9.5.3) on the batch P99s (Seila 1982, "A batching approach to quantile
   estimation in regenerative simulations", Management Science 28(5)): the mean batch P99 of the
   second half of the window above the first half's by more than t₀.₉₇₅ standard errors (and 2 % of the
   SLO) is a queue still filling (*not converged*); a pool *meets* the SLO only when the P99 of the
   whole window plus ``t₀.₉₅·s/√K`` (``s`` the standard deviation of the ``K`` batch P99s) is within
   it, so a re-run with other random draws meets it too.

Verdicts: ``meets``, ``misses``, ``not converged``, ``unstable``, ``unattainable`` (the P99 of the
requests' no-queue TTFT floor is above the SLO: no instance count helps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.des.result import BATCHES
from planner.model.costmodel import (
    concurrency,
    full_batch_iteration_s,
    instance_throughput_req_per_s,
    mix_stats,
)
from planner.model.profiles import PoolProfile
from planner.workload.trace import Trace

__all__ = [
    "DRIFT_TOLERANCE",
    "MIN_MEASURED_REQUESTS",
    "MIN_P99_REQUESTS",
    "SERVICE_MULTIPLE",
    "PoolLoad",
    "RunLength",
    "p99_upper_s",
    "pool_load",
    "relaxation_time_s",
    "run_length",
    "verdict",
]

BATCH_MIN_REQUESTS = 1_000
"""Requests per batch at least: 10 beyond each batch's P99."""
MIN_MEASURED_REQUESTS = BATCHES * BATCH_MIN_REQUESTS
"""At least 100 samples beyond the P99 of the measured window."""
SERVICE_MULTIPLE = 1.0
"""A batch lasts at least this many ``(S_tail + SLO)``: every slot turns over within a batch."""
RELAXATION_MULTIPLE = 2.0
"""A batch lasts at least this many relaxation times: successive batch P99s nearly independent."""
WARMUP_MULTIPLE = 2.0
"""Warm-up >= this many ``(S_tail + SLO)`` seconds plus :data:`WARMUP_RELAXATIONS` relaxation times."""
WARMUP_RELAXATIONS = 5.0
"""Relaxation times of warm-up: the initial (empty) state's bias decays to e⁻⁵ < 1 %."""
T95_ONE_SIDED = 1.833
"""Student's t 0.95 quantile with ``BATCHES − 1 = 9`` degrees of freedom (one-sided 95 % bound)."""
DRIFT_SE = 2.306
"""Second-half mean batch P99 above the first's by this many standard errors = still drifting
(Student's t 0.975 quantile with 8 degrees of freedom: two halves of 5 batches)."""
MIN_P99_REQUESTS = 100
"""Below this many measured requests a P99 is the maximum of the sample: no verdict can be "meets"
(``too few requests``)."""
MIN_DRIFT_REQUESTS = 2_000
"""Below this many measured requests (10 per half beyond the P99) the halves are not compared."""
DRIFT_TOLERANCE = 0.25
"""Second-half P99 above ``(1 + tol)·first half + 2 % of the SLO`` = still drifting (not converged)."""


@dataclass(frozen=True)
class PoolLoad:
    """One pool's offered load: ``lam_req_per_s`` arrivals, ``mu_req_per_s`` per-instance saturation
    throughput at the pool's mix, ``service_p99_s`` P99 full-batch service time (seconds a request
    holds a slot), ``min_stable_instances`` = ``⌊λ/μ⌋ + 1``, ``service_cs2`` the squared
    coefficient of variation of the service times (dimensionless), ``service_max_s`` the longest
    full-batch service time of the pool's requests (the tail: how long one request can hold a slot)."""

    lam_req_per_s: float
    mu_req_per_s: float
    service_p99_s: float
    min_stable_instances: int
    service_cs2: float = 1.0
    service_max_s: float = 0.0

    def utilization(self, instances: int) -> float:
        """``λ / (N μ)``; >= 1 means unstable."""
        return self.lam_req_per_s / (instances * self.mu_req_per_s) if instances > 0 else math.inf

    def stable(self, instances: int) -> bool:
        """``λ < N μ``."""
        return self.utilization(instances) < 1.0


def pool_load(trace: Trace, lam_req_per_s: float, profile: PoolProfile, max_model_len: int) -> PoolLoad:
    """Offered load of the requests in ``trace`` (the pool's sub-trace) at ``lam_req_per_s``.

    Raises ``ValueError`` on an empty trace.
    """
    mix = mix_stats(trace.input_tokens, trace.output_tokens, profile.chunk_tokens)
    mu = instance_throughput_req_per_s(profile, max_model_len, mix)
    t_iter = full_batch_iteration_s(profile, concurrency(profile, max_model_len, mix), mix)
    k = np.maximum(1, -(-trace.input_tokens // profile.chunk_tokens)) + np.maximum(0, trace.output_tokens - 1)
    s99 = float(np.percentile(k, 99)) * t_iter
    cs2 = float(np.var(k) / np.mean(k) ** 2)
    smax = float(np.max(k)) * t_iter
    return PoolLoad(lam_req_per_s, mu, s99, math.floor(lam_req_per_s / mu) + 1, cs2, smax)


def relaxation_time_s(load: PoolLoad, instances: int) -> float:
    """Relaxation time of one instance's queue, seconds: ``τ = ((1 + C_s²)/2) / (μ·(1 − √ρ)²)``.

    ``1/(μ(1−√ρ)²)`` is the relaxation time of M/M/1 (Morse 1955, "Stochastic properties of waiting
    lines", J. Oper. Res. Soc. Am. 3(3)); an instance with ``c`` slots near saturation behaves like one
    server of rate ``μ`` (its full-batch throughput), and the heavy-traffic factor ``(c_a² + C_s²)/2``
    with Poisson arrivals (``c_a² = 1``) carries it to general service times (Whitt 1989, "Planning
    queueing simulations", Management Science 35(11)). ``ρ = λ/(Nμ)``; ``inf`` when unstable.
    """
    rho = load.utilization(instances)
    if rho >= 1.0:
        return math.inf
    return (1.0 + load.service_cs2) / 2.0 / (load.mu_req_per_s * (1.0 - math.sqrt(rho)) ** 2)


@dataclass(frozen=True)
class RunLength:
    """How long to simulate a pool: ``duration_s`` of arrivals, of which ``warmup_s`` are not measured;
    ``requests`` expected arrivals (``λ·duration``). ``steady_duration_s`` is the length steady state
    needs (warm-up + batches, without the 1,000-requests-per-batch floor, which is about precision);
    a run shorter than that (:attr:`capped`: the request cap cut it) cannot show steady state.
    ``relaxation_s`` is τ."""

    duration_s: float
    warmup_s: float
    requests: int
    steady_duration_s: float = 0.0
    relaxation_s: float = 0.0

    @property
    def warmup_fraction(self) -> float:
        """Share of arrivals left out of the summary (at least 10 %)."""
        return max(0.1, self.warmup_s / self.duration_s) if self.duration_s > 0 else 0.1

    @property
    def capped(self) -> bool:
        """True when the request cap made the run shorter than steady state needs."""
        return self.duration_s < self.steady_duration_s * (1 - 1e-9)


def run_length(
    load: PoolLoad, slo_ttft_p99_s: float, instances: int | None = None, *, max_requests: int = 4_000_000
) -> RunLength:
    """Run length of a pool of ``instances`` (module docstring; default the smallest stable size):
    warm-up ``2·(S_tail + SLO) + 5τ``, then ``BATCHES`` batches of ``max(S_tail + SLO, 2τ, 1,000/λ)``
    seconds; capped at ``max_requests`` arrivals (then :attr:`RunLength.capped`). Seconds; requests.
    An unstable size gets an infinite steady duration (always capped)."""
    n = load.min_stable_instances if instances is None else instances
    tau = relaxation_time_s(load, n)
    unit = max(load.service_p99_s, load.service_max_s) + slo_ttft_p99_s
    lam = max(load.lam_req_per_s, 1e-12)
    warm = WARMUP_MULTIPLE * unit + WARMUP_RELAXATIONS * tau
    steady = warm + BATCHES * max(SERVICE_MULTIPLE * unit, RELAXATION_MULTIPLE * tau)
    dur = warm + BATCHES * max(SERVICE_MULTIPLE * unit, RELAXATION_MULTIPLE * tau, BATCH_MIN_REQUESTS / lam)
    if lam * dur > max_requests:
        scale = max_requests / (lam * dur)
        dur = max_requests / lam
        warm = warm * scale if math.isfinite(warm) else 0.1 * dur
    return RunLength(dur, warm, math.ceil(lam * dur), steady, tau)


def p99_upper_s(block: dict[str, Any]) -> float | None:
    """One-sided 95 % upper bound of a summary block's P99 TTFT, seconds: the window's P99 plus
    ``t₀.₉₅·s/√K`` over its ``K`` batch P99s (module docstring); the P99 alone without batches."""
    p_all = block.get("p99_ttft_s")
    if p_all is None:
        return None
    batches = [x for x in block.get("p99_ttft_batches_s") or [] if x is not None]
    if len(batches) < BATCHES:
        return float(p_all)
    return float(p_all) + T95_ONE_SIDED * float(np.std(batches, ddof=1)) / math.sqrt(len(batches))


def _drifting(block: dict[str, Any], slo_ttft_p99_s: float) -> bool:
    """Batch P99s of the second half above the first's by ``DRIFT_SE`` standard errors (+ 2 % SLO);
    without batches, the halves rule (second half above ``(1 + DRIFT_TOLERANCE)``·first + 2 % SLO)."""
    batches = [x for x in block.get("p99_ttft_batches_s") or [] if x is not None]
    if len(batches) >= BATCHES:
        h = len(batches) // 2
        first, second = np.asarray(batches[:h]), np.asarray(batches[-h:])
        se = math.sqrt(float(np.var(first, ddof=1) + np.var(second, ddof=1)) / h)
        return bool(second.mean() - first.mean() > DRIFT_SE * se + 0.02 * slo_ttft_p99_s)
    h1, h2 = block.get("p99_ttft_first_half_s"), block.get("p99_ttft_second_half_s")
    if h1 is None or h2 is None or block.get("requests", 0) < MIN_DRIFT_REQUESTS:
        return False
    return bool(h2 > (1.0 + DRIFT_TOLERANCE) * h1 + 0.02 * slo_ttft_p99_s)


def verdict(
    block: dict[str, Any],
    slo_ttft_p99_s: float,
    *,
    slo_tpot_p99_s: float | None = None,
    max_rejection_rate: float = 0.0,
    batch_bound: bool = True,
) -> str:
    """``meets`` / ``misses`` / ``not converged`` / ``too few requests`` (fewer than
    :data:`MIN_P99_REQUESTS` measured) for a pool's summary block
    (:meth:`planner.des.SimResult.summary`).

    ``not converged``: the batch P99s drift upward (:func:`_drifting`: the second half's mean batch
    P99 above the first's by ``DRIFT_SE`` standard errors plus 2 % of the SLO; with fewer than ``BATCHES``
    batches, the halves rule). ``meets`` needs the upper bound :func:`p99_upper_s` (and, without
    batches, the second half's P99) within the SLO, P99 TPOT within ``slo_tpot_p99_s`` (when given)
    and no rejection beyond ``max_rejection_rate``. ``batch_bound=False`` judges the window's P99
    and the halves alone (the fleet section's joint replays of the base trace, which are not
    steady-state runs: docs/planner.md, known limitations).
    """
    if block.get("requests", 0) == 0:
        return "meets"
    if block["requests"] < MIN_P99_REQUESTS:
        return "too few requests"
    if block["rejection_rate"] > max_rejection_rate:
        return "misses"
    p_all = block["p99_ttft_s"]
    if p_all is None:
        return "misses"
    if not batch_bound:
        block = {k: v for k, v in block.items() if k != "p99_ttft_batches_s"}
    if _drifting(block, slo_ttft_p99_s):
        return "not converged"
    tpot = block.get("p99_tpot_s")
    if slo_tpot_p99_s is not None and tpot is not None and tpot > slo_tpot_p99_s:
        return "misses"
    upper = p99_upper_s(block)
    h2 = block.get("p99_ttft_second_half_s")
    if upper is not None and upper <= slo_ttft_p99_s and (h2 is None or h2 <= slo_ttft_p99_s):
        return "meets"
    return "misses"
