"""The closed-loop comparison of issue 33: static peak sizing, queue-length / KV-usage scaling and
advice-driven scaling on one workload, at the same SLO (``tbr autoscale``; docs/results.md).

Steps: the short pool's ``capacity_correction`` is measured on its own requests at the workload's
peak short-pool rate (:func:`planner.des.advice_calibration.capacity_correction`; the long pool keeps
1.0 when it has too few requests to simulate); the advice over the whole workload, every 5 minutes,
gives the static policy's peak size (its maximum) and every policy's starting size (its first
value); then each policy runs in :func:`planner.des.closed_loop.run_closed_loop`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from planner.des.advice_calibration import capacity_correction
from planner.des.autoscale import AutoscalerSpec
from planner.des.closed_loop import ClosedLoopResult, LoopPool, advice_sizes, run_closed_loop
from planner.des.sizing import Slo
from planner.model.advice import AdviceRule
from planner.model.profiles import PoolProfile
from planner.workload.trace import Trace

__all__ = ["Experiment", "ExperimentResult", "run_experiment"]

MIN_CALIBRATION_REQUESTS = 200
"""A pool's sample needs this many requests for its correction to be measured (else 1.0)."""


@dataclass(frozen=True)
class Experiment:
    """One comparison: the workload, the two pools' ``max_model_len`` and profile, the SLO, the
    advice's headroom and window, the autoscaler's common settings and the policies to run."""

    workload: Trace
    base: Trace
    profile: PoolProfile
    short_max_model_len: int = 8192
    long_max_model_len: int = 65536
    slo_ttft_p99_s: float = 2.0
    headroom: float = 0.1
    window_s: float = 300.0
    cold_start_s: float = 300.0
    interval_s: float = 30.0
    scale_down_window_s: float = 1800.0
    queue_target: float = 4.0
    kv_target: float = 0.7
    max_instances_factor: float = 2.0
    policies: Sequence[str] = ("static", "queue", "kv", "advice")


@dataclass
class ExperimentResult:
    """Per policy its :class:`ClosedLoopResult` and summary; the pools as run; the corrections."""

    pools: list[LoopPool]
    corrections: dict[str, dict[str, Any]]
    runs: dict[str, ClosedLoopResult]
    summaries: dict[str, dict[str, Any]]


def _peak_rate(trace: Trace, mask: np.ndarray[Any, Any], window_s: float) -> float:
    arr = trace.arrival_s[mask]
    if arr.size == 0:
        return 0.0
    counts = np.bincount(np.floor(arr / window_s).astype(np.int64))
    return float(counts.max()) / window_s


def run_experiment(exp: Experiment) -> ExperimentResult:
    """Calibrate, size and run every policy of ``exp`` (module docstring)."""
    b = exp.short_max_model_len
    corrections: dict[str, dict[str, Any]] = {}
    factors = []
    for name, lo, hi in (("short", 0, b), ("long", b, exp.long_max_model_len)):
        mask = (exp.base.budget_tokens > lo) & (exp.base.budget_tokens <= hi)
        wmask = (exp.workload.budget_tokens > lo) & (exp.workload.budget_tokens <= hi)
        peak = _peak_rate(exp.workload, wmask, exp.window_s)
        if int(mask.sum()) >= MIN_CALIBRATION_REQUESTS and peak > 0:
            c = capacity_correction(exp.base.subset(mask), exp.profile, hi, Slo(exp.slo_ttft_p99_s), peak)
            corrections[name] = {"ratio": c.ratio, "des_instances": c.des_instances,
                                 "mgc_instances": c.mgc_instances, "rate_req_per_s": c.rate_req_per_s}  # fmt: skip
            factors.append(c.ratio)
        else:
            corrections[name] = {"ratio": 1.0, "reason": f"{int(mask.sum())} requests: too few to simulate"}
            factors.append(1.0)
    rule = AdviceRule(slo_ttft_p99_s=exp.slo_ttft_p99_s, headroom=exp.headroom)
    pools0 = [
        LoopPool("short", exp.profile, b, 1, 1, factors[0]),
        LoopPool("long", exp.profile, exp.long_max_model_len, 1, 1, factors[1]),
    ]
    sizes = advice_sizes(exp.workload, pools0, rule, window_s=exp.window_s)
    pools = [
        LoopPool(
            p.name, p.profile, p.max_model_len, sizes[p.name][0], max(sizes[p.name]), p.capacity_correction
        )
        for p in pools0
    ]
    max_instances = max(2, int(exp.max_instances_factor * max(p.static_instances for p in pools)))
    runs: dict[str, ClosedLoopResult] = {}
    summaries: dict[str, dict[str, Any]] = {}
    for policy in exp.policies:
        spec = AutoscalerSpec(
            policy,
            cold_start_s=exp.cold_start_s,
            max_instances=max_instances,
            interval_s=exp.interval_s,
            scale_down_window_s=exp.scale_down_window_s,
            queue_target=exp.queue_target,
            kv_target=exp.kv_target,
        )
        res = run_closed_loop(exp.workload, pools, spec, advice_rule=rule, window_s=exp.window_s)
        runs[policy] = res
        summaries[policy] = res.summary(exp.slo_ttft_p99_s)
    return ExperimentResult(pools, corrections, runs, summaries)
