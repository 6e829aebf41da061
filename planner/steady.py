"""Stability, run length and steady-state checks: no SLO verdict before the queue has settled.

Three guards, in the order the planner applies them to a pool of ``N`` instances receiving ``λ`` req/s:

1. **Stability** (no simulation): the pool is *unstable* when ``λ >= N·μ``, ``μ`` the saturation
   throughput of one instance at the pool's own request mix (:func:`planner.costmodel.
   instance_throughput_req_per_s`: ``max_num_seqs / (E[k]·t_iter(full batch))``). Its queue grows
   without bound, so no finite simulation can pass it; the smallest stable size is ``⌊λ/μ⌋ + 1``.
2. **Run length** (:func:`run_length`), derived from the pool's service times and the P99 target, not
   a fixed count: warm-up ``2·(S99 + SLO)`` seconds, then a measured window of at least
   ``10·(S99 + SLO)`` seconds and at least 20,000 measured requests (200 samples beyond the P99),
   ``S99`` the P99 full-batch service time of the pool's requests (seconds a request holds a slot).
3. **Convergence** (:func:`verdict`): the P99 TTFT of the measured window's second half is compared
   with its first half. A queue that is still filling shows a second half well above the first; such
   a run is *not converged* and never passes (the sizer doubles the run once, then treats it as a miss).

Verdicts: ``meets``, ``misses``, ``not converged``, ``unstable``, ``unattainable`` (the P99 of the
requests' no-queue TTFT floor is above the SLO: no instance count helps).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.costmodel import full_batch_iteration_s, instance_throughput_req_per_s, mix_stats
from planner.profiles import PoolProfile
from planner.trace import Trace

__all__ = [
    "DRIFT_TOLERANCE",
    "MIN_MEASURED_REQUESTS",
    "SERVICE_MULTIPLE",
    "PoolLoad",
    "RunLength",
    "pool_load",
    "run_length",
    "verdict",
]

MIN_MEASURED_REQUESTS = 20_000
"""At least 200 samples beyond the P99 of the measured window."""
SERVICE_MULTIPLE = 10.0
"""Measured window >= this many ``(S99 + SLO)``: each slot turns over many times after warm-up."""
WARMUP_MULTIPLE = 2.0
"""Warm-up >= this many ``(S99 + SLO)`` seconds (and at least 10 % of the arrivals)."""
MIN_DRIFT_REQUESTS = 2_000
"""Below this many measured requests (10 per half beyond the P99) the halves are not compared."""
DRIFT_TOLERANCE = 0.25
"""Second-half P99 above ``(1 + tol)·first half + 2 % of the SLO`` = still drifting (not converged)."""


@dataclass(frozen=True)
class PoolLoad:
    """One pool's offered load: ``lam_req_per_s`` arrivals, ``mu_req_per_s`` per-instance saturation
    throughput at the pool's mix, ``service_p99_s`` P99 full-batch service time (seconds a request
    holds a slot), ``min_stable_instances`` = ``⌊λ/μ⌋ + 1``."""

    lam_req_per_s: float
    mu_req_per_s: float
    service_p99_s: float
    min_stable_instances: int

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
    t_iter = full_batch_iteration_s(profile, profile.max_num_seqs(max_model_len), mix)
    k = np.maximum(1, -(-trace.input_tokens // profile.chunk_tokens)) + np.maximum(0, trace.output_tokens - 1)
    s99 = float(np.percentile(k, 99)) * t_iter
    return PoolLoad(lam_req_per_s, mu, s99, math.floor(lam_req_per_s / mu) + 1)


@dataclass(frozen=True)
class RunLength:
    """How long to simulate a pool: ``duration_s`` of arrivals, of which ``warmup_s`` are not measured;
    ``requests`` expected arrivals (``λ·duration``). ``steady_duration_s`` is the part of the length
    that steady state needs (warm-up + ``10·(S99 + SLO)``), without the sample-count floor: a run
    shorter than that has not shown steady state, whatever its request count."""

    duration_s: float
    warmup_s: float
    requests: int
    steady_duration_s: float = 0.0

    @property
    def warmup_fraction(self) -> float:
        """Share of arrivals left out of the summary (at least 10 %)."""
        return max(0.1, self.warmup_s / self.duration_s) if self.duration_s > 0 else 0.1

    def doubled(self) -> RunLength:
        """Twice as long (the warm-up share is kept)."""
        return RunLength(2 * self.duration_s, 2 * self.warmup_s, 2 * self.requests, self.steady_duration_s)


def run_length(load: PoolLoad, slo_ttft_p99_s: float, *, max_requests: int = 4_000_000) -> RunLength:
    """Run length of a pool (module docstring): warm-up ``2·(S99 + SLO)``, measured window
    ``max(10·(S99 + SLO), 20,000/λ)``, capped at ``max_requests`` arrivals. Seconds; requests."""
    unit = load.service_p99_s + slo_ttft_p99_s
    lam = max(load.lam_req_per_s, 1e-12)
    warm = WARMUP_MULTIPLE * unit
    measure = max(SERVICE_MULTIPLE * unit, MIN_MEASURED_REQUESTS / lam)
    dur = warm + measure
    if lam * dur > max_requests:
        scale = max_requests / (lam * dur)
        dur, warm = dur * scale, warm * scale
    return RunLength(dur, warm, math.ceil(lam * dur), warm + SERVICE_MULTIPLE * unit)


def verdict(
    block: dict[str, Any],
    slo_ttft_p99_s: float,
    *,
    slo_tpot_p99_s: float | None = None,
    max_rejection_rate: float = 0.0,
) -> str:
    """``meets`` / ``misses`` / ``not converged`` for a pool's summary block (needs the
    ``p99_ttft_first_half_s``/``p99_ttft_second_half_s`` of :meth:`planner.des.SimResult.summary`).

    ``not converged``: the second half's P99 TTFT exceeds ``(1 + DRIFT_TOLERANCE)`` times the first
    half's plus 2 % of the SLO (the queue is still growing); judged only with at least
    ``MIN_DRIFT_REQUESTS`` measured requests. ``meets`` needs the whole window's and
    the second half's P99 within the SLO, P99 TPOT within ``slo_tpot_p99_s`` (when given) and no
    rejection beyond ``max_rejection_rate``.
    """
    if block.get("requests", 0) == 0:
        return "meets"
    if block["rejection_rate"] > max_rejection_rate:
        return "misses"
    p_all, h1, h2 = (
        block["p99_ttft_s"],
        block.get("p99_ttft_first_half_s"),
        block.get("p99_ttft_second_half_s"),
    )
    if p_all is None:
        return "misses"
    drifting = h1 is not None and h2 is not None and h2 > (1.0 + DRIFT_TOLERANCE) * h1 + 0.02 * slo_ttft_p99_s
    if drifting and block["requests"] >= MIN_DRIFT_REQUESTS:
        return "not converged"
    tpot = block.get("p99_tpot_s")
    if slo_tpot_p99_s is not None and tpot is not None and tpot > slo_tpot_p99_s:
        return "misses"
    if p_all <= slo_ttft_p99_s and (h2 is None or h2 <= slo_ttft_p99_s):
        return "meets"
    return "misses"
