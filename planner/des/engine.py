"""The event loop: arrivals, routing, load balancing inside a pool, instance events.

Event order is explicit. The heap key is ``(time_s, kind, seq, instance, version)`` with
:class:`EventKind` ``INSTANCE_STEP`` (an instance reaches its next milestone or fills its KV) before
an ``ARRIVAL`` at the same instant (arrivals are not on the heap: the loop compares the next arrival
time with the heap head, instance events first on a tie). ``seq`` is a per-run counter; an entry
whose ``version`` is older than the instance's was superseded by a later :meth:`Instance.schedule`.
A request with ``input + output > max_model_len`` is rejected by its pool (vLLM's 400) and, when a
larger pool exists, retried there (counted as a mis-route); a waiting queue at
``max_queue_per_instance`` rejects (the gateway's 503). Same trace, pools, router and seed ->
byte-identical :meth:`SimResult.to_json`.
"""

from __future__ import annotations

import heapq
import math
import random
from enum import IntEnum

import numpy as np
import numpy.typing as npt

from planner.des.instance import Instance, PoolSpec, RequestTable
from planner.des.result import SimResult
from planner.des.routers import Router
from planner.workload.trace import Trace

__all__ = ["EventKind", "simulate"]


class EventKind(IntEnum):
    """Second field of a heap key: what happens at that instant, in this order on a tie."""

    INSTANCE_STEP = 0
    """An instance reaches its next milestone (first/last token) or its KV capacity."""
    ARRIVAL = 1
    """The next trace request arrives and is routed (never on the heap; ordered after steps)."""


class _PoolView:
    """:class:`planner.des.routers.FleetView` over the live instances (read-only; KV extrapolated to ``now``)."""

    def __init__(self, pools: list[list[Instance]]) -> None:
        self.pools = pools
        self.now = 0.0

    def waiting(self, i: int) -> float:
        return float(sum(len(inst.queue) for inst in self.pools[i]))

    def kv_cache_usage(self, i: int) -> float:
        insts = self.pools[i]
        return sum(min(1.0, max(0.0, x.kv_tokens_at(self.now) / x.cap)) for x in insts) / len(insts)


def _check_pools(pools: list[PoolSpec]) -> None:
    if not pools:
        raise ValueError("at least one pool is required")
    for ps in pools:
        if ps.max_model_len > ps.profile.kv_capacity_tokens:
            raise ValueError(f"pool {ps.name}: max_model_len exceeds KV capacity")
        if ps.instances < 1:
            raise ValueError(f"pool {ps.name}: needs at least one instance")


def simulate(  # noqa: C901 (one event loop over struct-of-arrays state: its dispatch stays inline, a call per event costs the DES throughput BENCHMARKS.md tracks)
    trace: Trace,
    pools: list[PoolSpec],
    router: Router,
    *,
    est_budget_tokens: npt.NDArray[np.int64] | None = None,
    seed: int = 0,
    warmup_fraction: float = 0.1,
    retry_misrouted: bool = True,
    check_invariants: bool = False,
    progress: bool = False,
) -> SimResult:
    """Replay ``trace`` through ``pools`` with ``router``; return per-request outcomes.

    ``est_budget_tokens`` (shape ``(n,)``) is what the router sees; default the true ``budget_tokens``.
    Pools must be ordered by ``max_model_len``. ``warmup_fraction`` of the first arrivals is left out
    of :meth:`SimResult.summary`. Raises ``ValueError`` on an empty pool list or a pool whose
    ``max_model_len`` exceeds its KV capacity; :class:`SimInvariantError` if a checked invariant fails.
    """
    _check_pools(pools)
    rng = random.Random(seed)
    n = len(trace)
    arrival = trace.arrival_s.tolist()
    l_in0 = trace.input_tokens.tolist()
    l_out0 = trace.output_tokens.tolist()
    budget = (trace.budget_tokens if est_budget_tokens is None else est_budget_tokens).tolist()
    reqs = RequestTable(l_in0, l_out0)
    release = router.release
    by_pool: list[list[Instance]] = []
    loads: list[list[int]] = []
    for pi, ps in enumerate(pools):
        lo = [0] * ps.instances
        loads.append(lo)
        by_pool.append([Instance(pi, ps, reqs, lo, k, release) for k in range(ps.instances)])
    insts = [x for group in by_pool for x in group]
    gid_of = {id(x): g for g, x in enumerate(insts)}
    gids = [[gid_of[id(x)] for x in group] for group in by_pool]
    n_pools = len(pools)
    mml = [ps.max_model_len for ps in pools]
    lb = [ps.lb for ps in pools]
    rr = [0] * n_pools
    heap: list[tuple[float, int, int, int, int]] = []
    heappush, heappop = heapq.heappush, heapq.heappop
    step = int(EventKind.INSTANCE_STEP)
    seq = 0
    events = 0
    view = _PoolView(by_pool)
    rejected, misrouted, served_pool = reqs.rejected, reqs.misrouted, reqs.served_pool

    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, unit="req", desc="simulate", mininterval=0.5)
    idx = 0
    inf = math.inf
    while idx < n or heap:
        t_arr = arrival[idx] if idx < n else inf
        if heap and heap[0][0] <= t_arr:
            now, _, _, gid, ver = heappop(heap)
            inst = insts[gid]
            if ver != inst.version:
                continue
            events += 1
            inst.advance(now, inst.next_v)
            inst.settle(now)
            dt = inst.schedule()
            if dt >= 0.0:
                seq += 1
                heappush(heap, (now + dt, step, seq, gid, inst.version))
            if check_invariants:
                inst.check()
            continue
        r = idx
        idx += 1
        events += 1
        if bar is not None and idx % 10000 == 0:
            bar.update(10000)
        view.now = t_arr
        pi = router.route(budget[r], t_arr, view)
        total = l_in0[r] + l_out0[r]
        if total > mml[pi]:
            bigger = [j for j in range(pi + 1, n_pools) if total <= mml[j]]
            if not (retry_misrouted and bigger):
                rejected[r] = True
                release(pi)
                continue
            misrouted[r] = True
            router.move(pi, bigger[0])
            pi = bigger[0]
        ids = gids[pi]
        policy = lb[pi]
        if policy == "round_robin" or len(ids) == 1:
            k = rr[pi] % len(ids)
            rr[pi] += 1
        elif policy == "p2c":
            lo = loads[pi]
            ka = rng.randrange(len(ids))
            kb = rng.randrange(len(ids))
            k = ka if lo[ka] <= lo[kb] else kb
        else:  # least_loaded
            lo = loads[pi]
            k = lo.index(min(lo))
        gid = ids[k]
        inst = insts[gid]
        if len(inst.queue) >= inst.max_queue:
            rejected[r] = True
            release(pi)
            continue
        served_pool[r] = pi
        inst.advance(t_arr, None)
        inst.settle(t_arr)
        inst.queue.append(r)
        loads[pi][k] += 1
        dt = inst.schedule()
        if dt >= 0.0:
            seq += 1
            heappush(heap, (t_arr + dt, step, seq, gid, inst.version))
        if check_invariants:
            inst.check()
    if bar is not None:
        bar.update(n - bar.n)
        bar.close()
    return _result(trace, pools, insts, reqs, warmup_fraction, events)


def _result(
    trace: Trace,
    pools: list[PoolSpec],
    insts: list[Instance],
    reqs: RequestTable,
    warmup_fraction: float,
    events: int,
) -> SimResult:
    arr = trace.arrival_s.astype(np.float64)
    ft = np.asarray(reqs.first_tok_s, dtype=np.float64)
    done = np.asarray(reqs.done_s, dtype=np.float64)
    lo = trace.output_tokens.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(lo > 1, (done - ft) / (lo - 1), np.nan)
    makespan = float(np.nanmax(done)) if np.any(~np.isnan(done)) else 0.0
    # the server's fixed per-request time (HTTP, tokenising, streaming) is the same for every request
    # of a pool, so it shifts that pool's arrivals and first tokens alike: it adds to each TTFT
    overhead = np.asarray([ps.profile.request_overhead_s for ps in pools] + [0.0], dtype=np.float64)
    served = np.asarray(reqs.served_pool, dtype=np.int64)
    busy = [0.0] * len(pools)
    running_time = [0.0] * len(pools)
    for inst in insts:
        busy[inst.pool] += inst.busy_s
        running_time[inst.pool] += inst.seq_time
    return SimResult(
        pool_names=tuple(ps.name for ps in pools),
        instances=tuple(ps.instances for ps in pools),
        gpus=tuple(ps.instances * ps.profile.tp for ps in pools),
        price_usd_per_h=tuple(ps.instances * ps.profile.price_usd_per_instance_h for ps in pools),
        arrival_s=arr,
        ttft_s=ft - arr + overhead[served],
        tpot_s=tpot,
        pool=served,
        preemptions=np.asarray(reqs.preemptions, dtype=np.int64),
        rejected=np.asarray(reqs.rejected, dtype=np.bool_),
        misrouted=np.asarray(reqs.misrouted, dtype=np.bool_),
        busy_s=tuple(busy),
        mean_running=tuple(running_time),
        makespan_s=makespan,
        warmup_fraction=warmup_fraction,
        events=events,
        queue_s=np.asarray(reqs.admitted_s, dtype=np.float64) - arr,
    )
