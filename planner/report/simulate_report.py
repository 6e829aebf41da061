"""`tbr simulate` guards and text: each pool's load before simulating, its verdict after.

Before simulating, each pool's arrival rate ``λ`` is taken from token-budget routing of the trace
(the request goes to the smallest pool whose ``max_model_len`` holds its routed budget, and to the
next that holds its true length when it is misrouted) and compared with ``N·μ``
(:mod:`planner.des.steady`). After simulating, a pool meets the SLO only when it is stable, the run was
at least its derived run length (at its size: it grows with the load), and the batch-means verdict
holds (:func:`planner.des.steady.verdict`: no upward drift of the batch P99s, P99 plus its bound within
the SLO).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import numpy.typing as npt

from planner.des import PoolSpec
from planner.des.sizing import Slo
from planner.des.steady import pool_load, run_length, verdict
from planner.workload.trace import Trace

__all__ = ["format_simulation", "pool_guards", "served_pool_index", "steady_verdict"]


def served_pool_index(
    trace: Trace, max_model_lens: list[int], est_budget_tokens: npt.NDArray[np.int64] | None = None
) -> npt.NDArray[np.int64]:
    """Pool index serving each request under token-budget routing (shape ``(n,)``); requests longer
    than every pool get the last index. ``max_model_lens`` ascending."""
    budget = trace.budget_tokens if est_budget_tokens is None else est_budget_tokens
    last = len(max_model_lens) - 1
    idx = np.full(len(trace), last, dtype=np.int64)
    for i in range(last, -1, -1):
        idx[np.asarray(budget <= max_model_lens[i])] = i
    total = trace.total_tokens
    for i in range(last):
        over = (idx == i) & np.asarray(total > max_model_lens[i])
        idx[over] = i + 1
    return idx


def pool_guards(
    trace: Trace, specs: list[PoolSpec], est_budget_tokens: npt.NDArray[np.int64] | None, slo: Slo
) -> list[dict[str, Any]]:
    """Per pool: λ, μ, load ``λ/(Nμ)``, ``unstable``, the smallest stable size and
    ``required_trace_requests``: trace requests whose span covers the pool's steady-state duration at
    its size (:attr:`planner.des.steady.RunLength.steady_duration_s`: it grows with the load), and the
    relaxation time ``relaxation_s`` (None when unstable)."""
    idx = served_pool_index(trace, [s.max_model_len for s in specs], est_budget_tokens)
    lam_total = trace.rate_req_per_s
    out = []
    for i, s in enumerate(specs):
        mask = idx == i
        g: dict[str, Any] = {"pool": s.name, "instances": s.instances, "requests_routed": int(mask.sum())}
        if not mask.any():
            g.update(lam_req_per_s=0.0, mu_req_per_s=None, utilization=0.0, unstable=False,
                     min_stable_instances=0, required_trace_requests=0)  # fmt: skip
            out.append(g)
            continue
        load = pool_load(trace.subset(mask), lam_total * float(mask.mean()), s.profile, s.max_model_len)
        length = run_length(load, slo.ttft_p99_s, s.instances)
        steady_s = length.steady_duration_s if math.isfinite(length.steady_duration_s) else 0.0
        g.update(
            lam_req_per_s=load.lam_req_per_s,
            mu_req_per_s=load.mu_req_per_s,
            utilization=load.utilization(s.instances),
            unstable=not load.stable(s.instances),
            min_stable_instances=load.min_stable_instances,
            relaxation_s=length.relaxation_s if math.isfinite(length.relaxation_s) else None,
            required_trace_requests=math.ceil(steady_s * lam_total),
        )
        out.append(g)
    return out


def steady_verdict(block: dict[str, Any], guard: dict[str, Any], slo: Slo) -> str:
    """``unstable`` / ``not converged (run too short)`` / :func:`planner.des.steady.verdict`."""
    if guard["unstable"]:
        return "unstable"
    v = verdict(
        block, slo.ttft_p99_s, slo_tpot_p99_s=slo.tpot_p99_s, max_rejection_rate=slo.max_rejection_rate
    )
    if (
        v == "meets"
        and block["requests"]
        and guard["required_trace_requests"] > block.get("trace_requests", 0)
    ):
        return "not converged (run too short)"
    return v


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def format_simulation(res: dict[str, Any], slo: Slo) -> list[str]:
    """Per-pool table with units, the fleet line, and what to do about a short run."""
    lines = [
        f"{'pool':<10}{'inst':>6}{'λ req/s':>11}{'load':>6}{'requests':>10}{'P50 TTFT':>10}{'P99 TTFT':>10}"
        f"{'P99 halves':>14}{'P99 TPOT':>10}{'preempt':>9}{'reject':>8}{'util':>6}  verdict",
        f"{'':<10}{'':>6}{'':>11}{'λ/Nμ':>6}{'measured':>10}{'s':>10}{'s':>10}{'s':>14}{'s':>10}{'‰':>9}"
        f"{'%':>8}{'':>6}",
    ]
    short_runs = []
    for name, b in res["pools"].items():
        g = b["load"]
        halves = f"{_s(b['p99_ttft_first_half_s'])}/{_s(b['p99_ttft_second_half_s'])}"
        lines.append(
            f"{name:<10}{b['instances']:>6}{g['lam_req_per_s']:>11.3f}{g['utilization']:>6.2f}{b['requests']:>10,}"
            f"{_s(b['p50_ttft_s']):>10}{_s(b['p99_ttft_s']):>10}{halves:>14}{_s(b['p99_tpot_s']):>10}"
            f"{b['preemptions_per_1000']:>9.2f}{100 * b['rejection_rate']:>8.3f}{b['utilization']:>6.2f}  {b['verdict']}"
        )
        if b["verdict"].startswith("not converged (run too short)"):
            short_runs.append((name, g["required_trace_requests"]))
    f = res["fleet"]
    lines.append(
        f"fleet: {f['instances']} instances, {f['gpus']} GPUs, ${f['usd_per_year']:,.0f}/yr, P99 TTFT "
        f"{_s(f['p99_ttft_s'])} s; SLO P99 TTFT <= {slo.ttft_p99_s:g} s "
        + ("met in every pool" if res["all_pools_meet_slo"] else "NOT met in every pool")
    )
    for name, need in short_runs:
        lines.append(
            f"  {name}: the run is shorter than this pool's steady-state run length; rerun with --min-requests {need}"
        )
    return lines
