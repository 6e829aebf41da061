"""DES-verified sizing: the smallest instance count per pool that meets the SLO *at steady state*.

Under token-budget routing without spillover each pool sees a fixed sub-stream (routing depends only
on the request's budget), so each pool is sized alone on its own sub-trace. The guards of
:mod:`planner.steady` come first: sizes below ``⌊λ/μ⌋ + 1`` are unstable and never simulated, a pool
whose no-queue TTFT floor is above the SLO is unattainable and never simulated, and every simulated
size runs for the pool's derived run length (the sub-trace tiled period by period, so the arrival
pattern is kept) with the convergence check. The search is a bisection between the largest size
known to fail (at first: the largest unstable one) and a size that meets the SLO (found from the
analytical M/G/c start, growing by 10 %); it assumes the SLO is monotone in the instance count.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from planner.costmodel import ttft_floor_s
from planner.des import PoolSpec, simulate
from planner.profiles import PoolProfile
from planner.routers import make_router
from planner.steady import RunLength, pool_load, run_length, verdict
from planner.trace import Trace, tile_periods

__all__ = ["PoolJob", "Slo", "meets_slo", "size_pool", "size_pool_des"]


@dataclass(frozen=True)
class Slo:
    """Service-level objective: P99 TTFT and (optional) P99 TPOT in seconds, max rejected fraction."""

    ttft_p99_s: float
    tpot_p99_s: float | None = None
    max_rejection_rate: float = 0.0


def meets_slo(block: dict[str, Any], slo: Slo) -> bool:
    """True when a :meth:`SimResult.summary` block's :func:`planner.steady.verdict` is ``meets``."""
    return (
        verdict(
            block,
            slo.ttft_p99_s,
            slo_tpot_p99_s=slo.tpot_p99_s,
            max_rejection_rate=slo.max_rejection_rate,
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
    (written to stderr when ``verbose``).
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
    extra: dict[str, Any] = field(default_factory=dict)


def _log(job: PoolJob, msg: str) -> None:
    if job.verbose:
        print(f"{job.label}: {msg}", file=sys.stderr, flush=True)


def run_pool(job: PoolJob, n: int, length: RunLength) -> dict[str, Any]:
    """Simulate ``n`` instances of the job's pool for ``length``; the summary block plus its verdict."""
    copies = max(1, math.ceil(length.duration_s / job.period_s)) if job.period_s > 0 else 1
    trace = tile_periods(job.trace, job.period_s, copies) if copies > 1 else job.trace
    res = simulate(
        trace,
        [PoolSpec("pool", job.profile, job.max_model_len, n, lb=job.lb)],
        make_router("homogeneous"),
        seed=job.seed,
        warmup_fraction=length.warmup_fraction,
    )
    block: dict[str, Any] = res.summary()["pools"]["pool"]
    block["verdict"] = verdict(
        block,
        job.slo.ttft_p99_s,
        slo_tpot_p99_s=job.slo.tpot_p99_s,
        max_rejection_rate=job.slo.max_rejection_rate,
    )
    block["simulated_requests"] = len(trace)
    block["simulated_s"] = float(trace.arrival_s[-1]) if len(trace) else 0.0
    return block


def size_pool(job: PoolJob) -> dict[str, Any]:
    """Smallest stable, converged instance count meeting the SLO (module docstring).

    Returns a JSON-ready dict: ``instances`` (the size, or the last size tried when none met the
    SLO), ``verdict`` (``meets``, ``unattainable``, ``misses``, ``not converged``), ``cause`` (a
    sentence when not ``meets``), ``block`` (summary of the deciding run), ``load`` (λ, μ, S99,
    smallest stable size), ``run`` (seconds simulated, requests) and ``steps`` (each simulated size).
    """
    t0 = time.perf_counter()
    load = pool_load(job.trace, job.lam_req_per_s, job.profile, job.max_model_len)
    length = run_length(load, job.slo.ttft_p99_s, max_requests=job.max_requests)
    out: dict[str, Any] = {
        "label": job.label,
        "load": {
            "lam_req_per_s": load.lam_req_per_s,
            "mu_req_per_s": load.mu_req_per_s,
            "service_p99_s": load.service_p99_s,
            "min_stable_instances": load.min_stable_instances,
        },
        "run": {"duration_s": length.duration_s, "warmup_s": length.warmup_s, "requests": length.requests},
        "steps": [],
    }
    floor = float(
        np.percentile(ttft_floor_s(job.profile, job.trace.input_tokens, job.trace.output_tokens), 99)
    )
    out["ttft_floor_p99_s"] = floor
    if floor > job.slo.ttft_p99_s:
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
    cache: dict[int, dict[str, Any]] = {}

    def ok(n: int) -> bool:
        if n not in cache:
            s0 = time.perf_counter()
            block = run_pool(job, n, length)
            if block["verdict"] == "not converged":
                block = run_pool(job, n, length.doubled())
            cache[n] = block
            step = {
                "instances": n,
                "utilization": load.utilization(n),
                "verdict": block["verdict"],
                "p99_ttft_s": block["p99_ttft_s"],
                "p99_ttft_first_half_s": block["p99_ttft_first_half_s"],
                "p99_ttft_second_half_s": block["p99_ttft_second_half_s"],
                "simulated_requests": block["simulated_requests"],
                "wall_s": time.perf_counter() - s0,
            }
            out["steps"].append(step)
            _log(
                job,
                f"{n} instances (load {step['utilization']:.2f}) -> {block['verdict']}, P99 TTFT "
                f"{_s(block['p99_ttft_first_half_s'])} / {_s(block['p99_ttft_second_half_s'])} s (halves), "
                f"{block['simulated_requests']:,} requests, {step['wall_s']:.1f} s",
            )
        return bool(cache[n]["verdict"] == "meets")

    lo = load.min_stable_instances - 1  # largest size known to fail (unstable)
    n = max(load.min_stable_instances, job.start_instances, 1)
    cap = max(4 * n + 10, 2 * load.min_stable_instances)
    if ok(n):
        hi = n
    else:
        lo, hi = n, min(cap, math.ceil(n * 1.1) + 1)
        while not ok(hi):
            if hi >= cap:
                last = cache[hi]
                out.update(
                    instances=hi,
                    verdict=last["verdict"],
                    block=last,
                    cause=f"still {last['verdict']} at the search cap of {cap} instances",
                )
                out["wall_s"] = time.perf_counter() - t0
                return out
            lo, hi = hi, min(cap, math.ceil(hi * 1.1) + 1)
    while hi - lo > max(1, math.floor(job.rel_tol * hi)):
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    out.update(instances=hi, verdict="meets", block=cache[hi], cause=None)
    out["wall_s"] = time.perf_counter() - t0
    return out


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def base_period_s(trace: Trace) -> float:
    """Repeat period of a base trace when tiled back to back: its span plus one mean gap, seconds."""
    n = len(trace)
    if n < 2:
        return 1.0
    return trace.duration_s + trace.duration_s / (n - 1)


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
