"""DES-verified sizing: the smallest instance count per pool that meets the SLO *at steady state*.

Under token-budget routing without spillover each pool sees a fixed sub-stream (routing depends only
on the request's budget), so each pool is sized alone on its own sub-trace. The guards of
:mod:`planner.des.steady` come first: sizes below ``⌊λ/μ⌋ + 1`` are unstable and never simulated, a pool
whose no-queue TTFT floor is above the SLO is unattainable and never simulated, and every simulated
size runs for the pool's derived run length (the sub-trace tiled period by period, so the arrival
pattern is kept; or, for a length CDF, fresh requests drawn for the whole run:
:class:`planner.workload.cdf_source.CdfSource`) with the batch-means verdict. A size whose steady-state run
would pass the request cap is not simulated and fails (its steady state cannot be shown).

The search is a bisection between the largest size known to fail (at first: the largest unstable
one) and a size that meets the SLO (found from the analytical M/G/c start, growing by 10 %). Meeting
the SLO is monotone in the instance count (more instances, less load per instance), so bisection
finds the smallest passing size; because a verdict is a statistical estimate, the answer is then
verified: ``N − 1`` is simulated when the bisection stopped on a tolerance (if it passes the search
continues below), and ``N`` is re-run as an independent replication (other draws; for a trace, the
tiled stream starts at another phase of the trace). If the replication misses, ``N`` counts as
failing and the search continues above it, so a size larger than a passing one never fails in the
answer.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.des import PoolSpec, simulate
from planner.des.pool_stream import tiled_stream
from planner.des.routers import make_router
from planner.des.steady import PoolLoad, RunLength, p99_upper_s, pool_load, run_length, verdict
from planner.model.costmodel import ttft_floor_s
from planner.model.profiles import PoolProfile
from planner.workload.cdf_source import CdfSource
from planner.workload.trace import Trace, base_period_s

__all__ = ["PoolJob", "Slo", "meets_slo", "size_pool", "size_pool_des"]


@dataclass(frozen=True)
class Slo:
    """Service-level objective: P99 TTFT and (optional) P99 TPOT in seconds, max rejected fraction."""

    ttft_p99_s: float
    tpot_p99_s: float | None = None
    max_rejection_rate: float = 0.0


def meets_slo(block: dict[str, Any], slo: Slo, *, batch_bound: bool = True) -> bool:
    """True when a :meth:`SimResult.summary` block's :func:`planner.des.steady.verdict` is ``meets``."""
    return (
        verdict(
            block,
            slo.ttft_p99_s,
            slo_tpot_p99_s=slo.tpot_p99_s,
            max_rejection_rate=slo.max_rejection_rate,
            batch_bound=batch_bound,
        )
        == "meets"
    )


@dataclass(frozen=True)
class PoolJob:
    """Everything needed to size one pool (picklable: runs in a worker process).

    ``trace`` is the pool's sub-trace of a base trace whose arrival pattern repeats every
    ``period_s`` seconds; ``lam_req_per_s`` the pool's arrival rate. ``start_instances`` the
    analytical (M/G/c) size the search starts from. ``rel_tol`` > 0 stops the bisection once the
    bracket is within that fraction of the passing count. ``label`` names the pool in progress lines
    (written to stderr when ``verbose``). ``source``: the workload is a length CDF, so each run draws
    fresh requests with totals in ``range_tokens = (lo, hi]`` instead of tiling ``trace`` (which is
    then a sample of those requests, used for μ, S99 and the TTFT floor).
    """

    label: str
    trace: Trace
    period_s: float
    lam_req_per_s: float
    profile: PoolProfile
    max_model_len: int
    slo: Slo
    start_instances: int
    lb: str = "round_robin"
    seed: int = 0
    rel_tol: float = 0.0
    max_requests: int = 4_000_000
    verbose: bool = False
    source: CdfSource | None = None
    range_tokens: tuple[int, int] = (0, 2**62)
    extra: dict[str, Any] = field(default_factory=dict)


def _log(job: PoolJob, msg: str) -> None:
    if job.verbose:
        print(f"{job.label}: {msg}", file=sys.stderr, flush=True)


PHASE_STEP = 0.6180339887498949
"""Replication ``r`` of a tiled trace starts at phase ``frac(r·φ⁻¹)`` of its period (well spread)."""
TARGET_SIMULATED_REQUESTS = 150_000
"""Round robin: simulate enough of the pool's instances for about this many requests per run."""


HEAVY_TAIL_RATIO = 4.0
"""Longest service time above this many P99 service times: a heavy tail, the whole pool is simulated."""


def subsampled(job: PoolJob, load: PoolLoad) -> bool:
    """True when a run may simulate only some of the pool's instances: round robin, and no heavy
    service-time tail. With a heavy tail (longest service time > :data:`HEAVY_TAIL_RATIO` × P99; the
    LMSYS-like CDF's homogeneous pool: 158 s against 13 s) the P99 TTFT is set by rare pile-ups of
    the longest requests on one instance; a few instances see too few of them, so every instance runs."""
    return job.lb == "round_robin" and load.service_max_s <= HEAVY_TAIL_RATIO * load.service_p99_s


def simulated_instances(job: PoolJob, n: int, length: RunLength, whole: bool = False) -> int:
    """How many of ``n`` instances a run simulates: all (``whole``, or not round robin), else the
    first ``k`` (:mod:`planner.des.pool_stream`: exact for them) for about
    :data:`TARGET_SIMULATED_REQUESTS` requests over the whole steady-state duration."""
    if whole or job.lb != "round_robin":
        return n
    full = job.lam_req_per_s * length.duration_s
    return min(n, max(1, math.ceil(n * TARGET_SIMULATED_REQUESTS / max(full, 1.0))))


def pool_trace(job: PoolJob, length: RunLength, replication: int = 0, n: int = 1, kept: int = 1) -> Trace:
    """The requests one run of ``length`` simulates: fresh draws from the job's CDF source, or its
    sub-trace tiled period by period (replication ``r`` starting at another phase), over
    ``length.duration_s`` seconds of arrivals; only round robin's share of the first ``kept`` of ``n``
    instances (all by default)."""
    if job.source is not None:
        lo, hi = job.range_tokens
        return job.source.sample(length.duration_s, job.seed * 7919 + replication, lo, hi, n, kept)
    if job.period_s <= 0 or len(job.trace) < 2:
        return job.trace
    offset = (replication * PHASE_STEP % 1.0) * job.period_s
    return tiled_stream(job.trace, job.period_s, offset, length.duration_s, n, kept)


def run_pool(
    job: PoolJob, n: int, length: RunLength, replication: int = 0, whole: bool = False
) -> dict[str, Any]:
    """Simulate ``n`` instances of the job's pool for ``length`` (under round robin, unless ``whole``,
    only the first :func:`simulated_instances`); the summary block plus its verdict,
    ``p99_ttft_upper_s`` (:func:`planner.des.steady.p99_upper_s`) and ``simulated_instances``."""
    kept = simulated_instances(job, n, length, whole)
    trace = pool_trace(job, length, replication, n, kept)
    res = simulate(
        trace,
        [PoolSpec("pool", job.profile, job.max_model_len, kept, lb=job.lb)],
        make_router("homogeneous"),
        seed=job.seed + replication,
        warmup_fraction=length.warmup_fraction,
    )
    block: dict[str, Any] = res.summary()["pools"]["pool"]
    block["instances"] = n
    block["simulated_instances"] = kept
    block["verdict"] = verdict(
        block,
        job.slo.ttft_p99_s,
        slo_tpot_p99_s=job.slo.tpot_p99_s,
        max_rejection_rate=job.slo.max_rejection_rate,
    )
    block["p99_ttft_upper_s"] = p99_upper_s(block)
    block["simulated_requests"] = len(trace)
    block["simulated_s"] = float(trace.arrival_s[-1]) if len(trace) else 0.0
    block["replication"] = replication
    return block


def _not_run(n: int, length: RunLength, load: Any) -> dict[str, Any]:
    """A size whose steady-state run is longer than the request cap: failing, not simulated."""
    need = length.steady_duration_s
    return {
        "requests": 0,
        "verdict": "not converged",
        "p99_ttft_s": None,
        "p99_ttft_first_half_s": None,
        "p99_ttft_second_half_s": None,
        "p99_ttft_upper_s": None,
        "simulated_requests": 0,
        "simulated_s": 0.0,
        "rejection_rate": 0.0,
        "not_simulated": (
            f"steady state at load {load.utilization(n):.3f} needs "
            + (f"{need:,.0f} s of arrivals" if math.isfinite(need) else "an unbounded run")
            + f" (relaxation time {length.relaxation_s:,.0f} s), beyond the request cap"
        ),
    }


def size_pool(job: PoolJob) -> dict[str, Any]:  # noqa: C901 (search, verification and bookkeeping in one place)
    """Smallest stable, converged instance count meeting the SLO, verified (module docstring).

    Returns a JSON-ready dict: ``instances`` (the size, or the last size tried when none met the
    SLO), ``verdict`` (``meets``, ``unattainable``, ``misses``, ``not converged``), ``cause`` (a
    sentence when not ``meets``), ``block`` (summary of the deciding run), ``load`` (λ, μ, S99, C_s²,
    smallest stable size), ``run`` (seconds simulated, warm-up, requests, relaxation time at the
    answer) and ``steps`` (each simulated size, replications included).
    """
    t0 = time.perf_counter()
    load = pool_load(job.trace, job.lam_req_per_s, job.profile, job.max_model_len)
    out: dict[str, Any] = {
        "label": job.label,
        "load": {
            "lam_req_per_s": load.lam_req_per_s,
            "mu_req_per_s": load.mu_req_per_s,
            "service_p99_s": load.service_p99_s,
            "service_cs2": load.service_cs2,
            "min_stable_instances": load.min_stable_instances,
        },
        "fresh_draws": job.source is not None,
        "steps": [],
    }
    floor = float(
        np.percentile(ttft_floor_s(job.profile, job.trace.input_tokens, job.trace.output_tokens), 99)
    )
    out["ttft_floor_p99_s"] = floor
    if floor > job.slo.ttft_p99_s:
        length = run_length(load, job.slo.ttft_p99_s, max_requests=job.max_requests)
        out["run"] = _run_dict(length)
        out.update(
            instances=load.min_stable_instances,
            verdict="unattainable",
            block=None,
            cause=(
                f"the P99 of its requests' no-queue TTFT floor (prefill alone on an idle instance) is "
                f"{floor:.2f} s, above the {job.slo.ttft_p99_s:g} s SLO: no instance count meets it"
            ),
        )
        _log(job, out["cause"])
        return out
    cache: dict[tuple[int, int], dict[str, Any]] = {}

    def ok(n: int, replication: int = 0) -> bool:
        if (n, replication) not in cache:
            s0 = time.perf_counter()
            # round robin simulates as few as one instance: the cap bounds that instance's requests
            sub = subsampled(job, load)
            cap_n = job.max_requests * (n if sub else 1)
            length = run_length(load, job.slo.ttft_p99_s, n, max_requests=cap_n)
            block = (
                _not_run(n, length, load) if length.capped else run_pool(job, n, length, replication, not sub)
            )
            block["run"] = _run_dict(length)
            cache[(n, replication)] = block
            step = {
                "instances": n,
                "replication": replication,
                "utilization": load.utilization(n),
                "verdict": block["verdict"],
                "p99_ttft_s": block["p99_ttft_s"],
                "p99_ttft_upper_s": block["p99_ttft_upper_s"],
                "p99_ttft_first_half_s": block["p99_ttft_first_half_s"],
                "p99_ttft_second_half_s": block["p99_ttft_second_half_s"],
                "simulated_requests": block["simulated_requests"],
                "simulated_instances": block.get("simulated_instances", 0),
                "wall_s": time.perf_counter() - s0,
            }
            out["steps"].append(step)
            _log(
                job,
                f"{n} instances (load {step['utilization']:.2f}{', replication' if replication else ''}) -> "
                f"{block['verdict']}, P99 TTFT {_s(block['p99_ttft_s'])} s (upper {_s(block['p99_ttft_upper_s'])}, "
                f"halves {_s(block['p99_ttft_first_half_s'])} / {_s(block['p99_ttft_second_half_s'])}), "
                f"{block['simulated_requests']:,} requests on {block.get('simulated_instances', n)} of {n} "
                f"instances, {step['wall_s']:.1f} s"
                + (f" [{block['not_simulated']}]" if "not_simulated" in block else ""),
            )
        return bool(cache[(n, replication)]["verdict"] == "meets")

    lo = load.min_stable_instances - 1  # largest size known to fail (unstable)
    n = max(load.min_stable_instances, job.start_instances, 1)
    cap = max(4 * n + 10, 2 * load.min_stable_instances)

    def grow(lo: int, start: int) -> tuple[int, int] | None:
        """From a failing ``lo``, sizes up by 10 % until one passes: ``(lo, hi)``; None at the cap."""
        hi = start
        while not ok(hi):
            if hi >= cap:
                return None
            lo, hi = hi, min(cap, math.ceil(hi * 1.1) + 1)
        return lo, hi

    def at_cap() -> dict[str, Any]:
        last = cache[max(cache)]
        out.update(
            instances=max(cache)[0],
            verdict=last["verdict"],
            block=last,
            cause=f"still {last['verdict']} at the search cap of {cap} instances",
            run=last["run"],
            wall_s=time.perf_counter() - t0,
        )
        return out

    found = (lo, n) if ok(n) else grow(n, min(cap, math.ceil(n * 1.1) + 1))
    while True:
        if found is None:
            return at_cap()
        lo, hi = found
        while hi - lo > max(1, math.floor(job.rel_tol * hi)):
            mid = (lo + hi) // 2
            if ok(mid):
                hi = mid
            else:
                lo = mid
        if hi - 1 > lo and ok(hi - 1):  # verification at N − 1 (bisection stopped on a tolerance)
            found = (lo, hi - 1)
            continue
        if ok(hi, 1):  # verification at N: an independent replication
            break
        found = None if hi >= cap else grow(hi, hi + 1)
    out.update(instances=hi, verdict="meets", block=cache[(hi, 0)], cause=None, run=cache[(hi, 0)]["run"])
    out["wall_s"] = time.perf_counter() - t0
    return out


def _run_dict(length: RunLength) -> dict[str, Any]:
    return {
        "duration_s": length.duration_s,
        "warmup_s": length.warmup_s,
        "requests": length.requests,
        "relaxation_s": length.relaxation_s if math.isfinite(length.relaxation_s) else None,
        "capped": length.capped,
    }


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def size_pool_des(
    trace: Trace,
    profile: PoolProfile,
    max_model_len: int,
    slo: Slo,
    *,
    start_instances: int,
    seed: int = 0,
    lb: str = "round_robin",
    on_step: Callable[[int, bool], None] | None = None,
    rel_tol: float = 0.0,
    period_s: float | None = None,
    lam_req_per_s: float | None = None,
) -> tuple[int, dict[str, Any]]:
    """:func:`size_pool` for a sub-trace: returns ``(N, summary block of the deciding run)``.

    ``period_s``/``lam_req_per_s`` default to the sub-trace's own span and rate. ``on_step(n, ok)`` is
    called once per simulated size. A pool with no request returns ``(0, {"requests": 0})``.
    """
    if len(trace) == 0:
        return 0, {"requests": 0}
    job = PoolJob(
        label="pool",
        trace=trace,
        period_s=period_s if period_s is not None else base_period_s(trace),
        lam_req_per_s=lam_req_per_s if lam_req_per_s is not None else trace.rate_req_per_s,
        profile=profile,
        max_model_len=max_model_len,
        slo=slo,
        start_instances=start_instances,
        lb=lb,
        seed=seed,
        rel_tol=rel_tol,
    )
    res = size_pool(job)
    if on_step is not None:
        for st in res["steps"]:
            on_step(st["instances"], st["verdict"] == "meets")
    block = res["block"] or {"requests": len(trace), "verdict": res["verdict"], "rejection_rate": 1.0,
                             "p99_ttft_s": None}  # fmt: skip
    return int(res["instances"]), block
