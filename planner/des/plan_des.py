"""The DES part of `tbr plan`: size the homogeneous baseline and both pools of every candidate
threshold at steady state, on both cores, skipping what cannot win.

Jobs are single pools (:class:`planner.des.sizing.PoolJob`) run by a process pool (``jobs`` workers).
Before a candidate threshold is simulated it must be able to win:

- a pool whose no-queue TTFT floor P99 is above the SLO makes the candidate unattainable (named);
- requests longer than the largest pool cannot be served by any fleet (named, with their share);
- when a verified candidate already needs ``C`` instances, a candidate whose smallest *stable* fleet
  (``Σ ⌊λ_p/μ_p⌋ + 1``) is larger than ``C`` is not simulated: it cannot be cheaper.

The recommendation is the cheapest candidate whose every pool met the SLO (ties: the smaller B).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from planner.des.sizing import PoolJob, Slo, size_pool
from planner.des.steady import pool_load
from planner.model.costmodel import annual_cost_usd
from planner.workload.cdf_source import CdfSource
from planner.workload.trace import Trace, base_period_s

__all__ = ["DesRequest", "PoolPlan", "run_des"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PoolPlan:
    """One pool of one fleet: name, ``max_model_len``, served mask over the base trace, M/G/c start;
    ``needed`` = the loaded trace (before sampling) has requests for this pool; ``range_tokens``
    ``(lo, hi]`` the budgets it serves (used to draw fresh requests from a CDF source)."""

    name: str
    max_model_len: int
    mask: npt.NDArray[np.bool_]
    start_instances: int
    needed: bool = True
    range_tokens: tuple[int, int] = (0, 2**62)


@dataclass(frozen=True)
class DesRequest:
    """The fleets to size: ``homogeneous`` (one pool) and ``candidates`` (threshold -> two pools).

    ``must_verify`` thresholds are simulated even when pruning would skip them (the operator's B).
    ``source``: the trace is a sample of this length CDF; each pool then draws fresh requests for its
    whole run (:class:`planner.workload.cdf_source.CdfSource`) instead of tiling its share of the sample.
    """

    trace: Trace
    profile: Any
    slo: Slo
    homogeneous: PoolPlan
    candidates: dict[int, tuple[PoolPlan, PoolPlan]]
    must_verify: tuple[int, ...]
    lb: str = "round_robin"
    seed: int = 0
    rel_tol: float = 0.0
    jobs: int = 2
    verbose: bool = False
    too_long_share: float = 0.0
    long_max_model_len: int = 65536
    source: CdfSource | None = None


STAT_SAMPLE_REQUESTS = 20_000
"""Fresh requests drawn per pool (CDF source) for its μ, S99, C_s² and TTFT floor."""


def _job(req: DesRequest, label: str, pool: PoolPlan, lb: str) -> PoolJob:
    t = req.trace
    sub, lam = t.subset(pool.mask), t.rate_req_per_s * float(pool.mask.mean())
    if req.source is not None:
        lo, hi = pool.range_tokens
        lam = req.source.rate_req_per_s * req.source.share(lo, hi)
        sub = req.source.sample(STAT_SAMPLE_REQUESTS / lam, req.seed + 104729, lo, hi)
    return PoolJob(
        label=label,
        trace=sub,
        period_s=base_period_s(t),
        lam_req_per_s=lam,
        source=req.source,
        range_tokens=pool.range_tokens,
        profile=req.profile,
        max_model_len=pool.max_model_len,
        slo=req.slo,
        start_instances=max(1, pool.start_instances),
        lb=lb,
        seed=req.seed,
        rel_tol=req.rel_tol,
        verbose=req.verbose,
    )


def _empty_pool(pool: PoolPlan, needed: bool) -> dict[str, Any]:
    """A pool that received no sampled request: one instance when the trace needs it, else none."""
    return {
        "label": pool.name,
        "instances": 1 if needed else 0,
        "verdict": "meets",
        "cause": None,
        "block": None,
        "steps": [],
        "note": (
            "no sampled request; 1 instance for the trace's requests above the threshold"
            if needed
            else "no long traffic in this trace"
        ),
    }


def _lower_bound(req: DesRequest, pools: tuple[PoolPlan, ...]) -> tuple[int, str | None]:
    """Smallest stable fleet size and the first reason the fleet cannot meet the SLO (or None)."""
    t = req.trace
    total = 0
    cause = None
    for p in pools:
        if not p.mask.any():
            continue
        sub = t.subset(p.mask)
        load = pool_load(sub, t.rate_req_per_s * float(p.mask.mean()), req.profile, p.max_model_len)
        total += load.min_stable_instances
    if req.too_long_share > 0:
        cause = (
            f"{req.too_long_share:.4%} of requests are longer than the largest pool's max_model_len "
            f"{req.long_max_model_len}: no fleet serves them (raise --long-max-model-len or clip the trace)"
        )
    return total, cause


def _fleet(req: DesRequest, threshold: int | None, pools: dict[str, dict[str, Any]]) -> dict[str, Any]:
    n = {k: int(v["instances"]) for k, v in pools.items()}
    bad = [f"{k}: {v['verdict']}" + (f" ({v['cause']})" if v.get("cause") else "") for k, v in pools.items()
           if v["verdict"] != "meets"]  # fmt: skip
    total = sum(n.values())
    out: dict[str, Any] = {
        "instances": total,
        "gpus": total * req.profile.tp,
        "usd_per_year": annual_cost_usd(total, req.profile),
        "pools": pools,
        "slo_met": not bad and req.too_long_share == 0,
        "causes": bad,
        "simulated": True,
    }
    if req.too_long_share > 0:
        out["causes"].append(_lower_bound(req, ())[1])
    if threshold is not None:
        out.update(
            threshold_tokens=threshold, short_instances=n.get("short", 0), long_instances=n.get("long", 0)
        )
    return out


def _run_jobs(
    jobs: list[tuple[str, PoolJob]], workers: int, progress: Progress | None, verbose: bool
) -> dict[str, Any]:
    """Size every job (in ``workers`` processes when > 1); results by key."""
    out: dict[str, Any] = {}

    def note(key: str, res: dict[str, Any]) -> None:
        out[key] = res
        if progress is not None and not verbose:
            progress(
                f"{key}: {res['instances']} instances, {res['verdict']} "
                f"({len(res['steps'])} runs, {res.get('wall_s', 0.0):.0f} s)"
            )

    if workers <= 1 or len(jobs) <= 1:
        for key, job in jobs:
            note(key, size_pool(job))
        return out
    with ProcessPoolExecutor(max_workers=min(workers, len(jobs))) as ex:
        futs = {ex.submit(size_pool, job): key for key, job in jobs}
        pending = set(futs)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for fut in sorted(done, key=lambda f: futs[f]):
                note(futs[fut], fut.result())
    return out


def run_des(req: DesRequest, progress: Progress | None = None, lb: str | None = None) -> dict[str, Any]:
    """Size the homogeneous fleet and the candidates (module docstring); JSON-ready dict with
    ``homogeneous``, ``candidates`` (threshold -> fleet) and ``recommended_threshold_tokens`` (or None
    with ``no_recommendation`` listing why).

    Two waves keep the answer deterministic: the homogeneous fleet and the ``must_verify``
    thresholds first; then every other threshold whose smallest stable fleet is below the cheapest
    verified one, all at once. ``lb`` overrides the request's load balancing policy.
    """
    policy = lb or req.lb
    workers = max(1, min(req.jobs, os.cpu_count() or 1))
    results: dict[str, Any] = {}

    def jobs_for(thresholds: list[int]) -> list[tuple[str, PoolJob]]:
        out: list[tuple[str, PoolJob]] = []
        for b in thresholds:
            for name, pool in zip(("short", "long"), req.candidates[b], strict=True):
                key = f"B={b} {name}"
                drawn = req.source is not None and req.source.share(*pool.range_tokens) > 0
                if pool.mask.any() or drawn:
                    out.append((key, _job(req, key, pool, policy)))
                else:
                    results[key] = _empty_pool(pool, pool.needed)
        return out

    first = [b for b in sorted(req.candidates) if b in req.must_verify]
    wave1 = [("homogeneous", _job(req, "homogeneous", req.homogeneous, policy)), *jobs_for(first)]
    results.update(_run_jobs(wave1, workers, progress, req.verbose))
    best = min(
        (f["instances"] for b in first if (f := _fleet(req, b, _pools(results, b)))["slo_met"]),
        default=None,
    )
    skipped: dict[int, dict[str, Any]] = {}
    rest = []
    for b in sorted(req.candidates):
        if b in first:
            continue
        lower, _ = _lower_bound(req, req.candidates[b])
        if best is not None and lower > best:
            skipped[b] = {
                "threshold_tokens": b,
                "simulated": False,
                "slo_met": False,
                "min_stable_instances": lower,
                "causes": [
                    f"not simulated: its smallest stable fleet ({lower} instances) costs more than a verified "
                    f"one ({best})"
                ],
            }
        else:
            rest.append(b)
    results.update(_run_jobs(jobs_for(rest), workers, progress, req.verbose))
    homog = _fleet(req, None, {"homogeneous": results["homogeneous"]})
    out: dict[str, Any] = {"lb": policy, "homogeneous": homog, "candidates": {}}
    for b in sorted(req.candidates):
        if b in skipped:
            out["candidates"][b] = skipped[b]
            continue
        f = _fleet(req, b, _pools(results, b))
        if homog["slo_met"] and f["slo_met"]:
            f["savings_vs_homogeneous"] = 1.0 - f["instances"] / homog["instances"]
        out["candidates"][b] = f
    ok = [f for f in out["candidates"].values() if f["slo_met"]]
    if ok:
        rec = min(ok, key=lambda f: (f["usd_per_year"], f["threshold_tokens"]))
        out["recommended_threshold_tokens"] = rec["threshold_tokens"]
    else:
        out["recommended_threshold_tokens"] = None
        why = [c for f in out["candidates"].values() if f.get("simulated", True) for c in f["causes"]]
        if not homog["slo_met"]:
            why += [f"homogeneous baseline: {c}" for c in homog["causes"]]
        out["no_recommendation"] = list(dict.fromkeys(why))
    return out


def _pools(results: dict[str, Any], b: int) -> dict[str, dict[str, Any]]:
    return {"short": results[f"B={b} short"], "long": results[f"B={b} long"]}
