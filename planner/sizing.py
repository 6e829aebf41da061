"""DES-verified sizing: the smallest instance count per pool whose simulated P99s meet the SLO.

Under token-budget routing without spillover each pool sees a fixed sub-stream (routing depends only
on the request's budget), so pools are sized independently on their own sub-trace and the fleet is
then verified in one joint run. The search starts from the analytical M/G/c size
(:func:`planner.costmodel.size_pool_mgc`), walks down/up geometrically and finishes with a
bisection; it assumes the SLO is monotone in the instance count.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from planner.des import PoolSpec, simulate
from planner.profiles import PoolProfile
from planner.routers import make_router
from planner.trace import Trace

__all__ = ["Slo", "meets_slo", "size_pool_des"]


@dataclass(frozen=True)
class Slo:
    """Service-level objective: P99 TTFT and (optional) P99 TPOT in seconds, max rejected fraction."""

    ttft_p99_s: float
    tpot_p99_s: float | None = None
    max_rejection_rate: float = 0.0


def meets_slo(block: dict[str, Any], slo: Slo) -> bool:
    """True when a :meth:`SimResult.summary` block satisfies ``slo`` (empty blocks trivially do)."""
    if block["requests"] == 0:
        return True
    if block["rejection_rate"] > slo.max_rejection_rate:
        return False
    if block["p99_ttft_s"] is None or block["p99_ttft_s"] > slo.ttft_p99_s:
        return False
    return not (
        slo.tpot_p99_s is not None
        and block["p99_tpot_s"] is not None
        and block["p99_tpot_s"] > slo.tpot_p99_s
    )


def size_pool_des(
    trace: Trace,
    profile: PoolProfile,
    max_model_len: int,
    slo: Slo,
    *,
    start_instances: int,
    seed: int = 0,
    lb: str = "round_robin",
    max_instances: int = 20_000,
    on_step: Callable[[int, bool], None] | None = None,
    rel_tol: float = 0.0,
) -> tuple[int, dict[str, Any]]:
    """Smallest N in ``[1, max_instances]`` whose single-pool DES run on ``trace`` meets ``slo``.

    Returns ``(N, summary block of that run)``. The search stops at ``min(max_instances, 4 * start + 10)``;
    if that fails too (e.g. a single prefill longer than the TTFT SLO), it is returned with its failing
    block, so callers must check :func:`meets_slo` on the block. ``on_step(n, ok)`` is called after each simulation (progress reporting).
    ``rel_tol`` > 0 stops the bisection once the bracket is within ``rel_tol`` of the passing count and
    returns that passing count (at most ``rel_tol`` over the exact minimum; saves the last simulations).
    """
    cache: dict[int, tuple[bool, dict[str, Any]]] = {}

    def ok(n: int) -> bool:
        if n not in cache:
            res = simulate(
                trace,
                [PoolSpec("pool", profile, max_model_len, n, lb=lb)],
                make_router("homogeneous"),
                seed=seed,
            )
            block = res.summary()["pools"]["pool"]
            cache[n] = (meets_slo(block, slo), block)
            if on_step is not None:
                on_step(n, cache[n][0])
        return cache[n][0]

    if len(trace) == 0:
        return 0, {"requests": 0}
    n = max(1, min(start_instances, max_instances))
    max_instances = min(max_instances, 4 * n + 10)  # beyond 4x the analytical size the SLO is unattainable
    if ok(n):
        hi = n
        lo = max(0, math.floor(n * 0.85))
        while lo >= 1 and ok(lo):
            hi = lo
            lo = math.floor(lo * 0.85)
    else:
        lo = n
        hi = min(max_instances, math.ceil(n * 1.15) + 1)
        while not ok(hi):
            if hi >= max_instances:
                return hi, cache[hi][1]
            lo = hi
            hi = min(max_instances, math.ceil(hi * 1.15) + 1)
    while hi - lo > max(1, math.floor(rel_tol * hi)):
        mid = (lo + hi) // 2
        if ok(mid):
            hi = mid
        else:
            lo = mid
    return hi, cache[hi][1]
