"""Closed-loop simulation: the DES with an autoscaler that adds and removes instances while the
trace plays (issue 33, item 3).

The instances are the DES's own (:class:`planner.des.instance.Instance`: continuous batching, KV,
preemption); this module only runs its own event loop around them so that a pool's instance count
can change. Requests are routed by budget to the shortest pool that fits (the token-budget router;
a request whose true length exceeds its pool is retried on the next larger one, as in
:func:`planner.des.simulate`), round robin over the pool's *ready* instances. Every routing decision
is also counted in a :class:`extproc.core.route.fleet_window.FleetWindow` on the simulated clock — the
router's own window — from which the ``advice`` policy gets :func:`planner.model.advice.advise`'s
``desired_instances``, the value the live router exports as ``tbr_pool_desired_instances``.

Every ``interval_s`` the autoscaler (:mod:`planner.des.autoscale`) observes each pool and sets its
count: a new instance costs GPU time from that moment and serves after ``cold_start_s``; removing
one cancels a starting instance first, else drains the least-loaded ready one (no new requests; it
serves what it holds, then stops). GPU-hours count every instance from its start to its stop.

Outputs (:class:`ClosedLoopResult`): per request TTFT (``inf`` when rejected), per pool a timeline
of (time, instances, ready instances), scale events, GPU-hours, and the SLO attainment per 5-minute
window (every pool's P99 TTFT of the requests arriving in the window within the SLO).
Deterministic: same inputs, same result (no random draw).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from extproc.core.route.fleet_window import FleetWindow
from planner.des.autoscale import AutoscalerSpec, PoolObservation, Stabilizer, recommend
from planner.des.instance import Instance, PoolSpec, RequestTable
from planner.model.advice import AdvicePool, AdviceRule, advise
from planner.model.profiles import PoolProfile
from planner.workload.trace import Trace

__all__ = ["ClosedLoopResult", "LoopPool", "advice_sizes", "run_closed_loop"]

STARTING, READY, DRAINING, GONE = 0, 1, 2, 3


@dataclass(frozen=True)
class LoopPool:
    """One pool of the closed loop: its profile and ``max_model_len``, the instances it starts
    with, its fixed count under the ``static`` policy, and the advice's ``capacity_correction``
    for it (:class:`planner.model.advice.AdvicePool`)."""

    name: str
    profile: PoolProfile
    max_model_len: int
    initial_instances: int
    static_instances: int
    capacity_correction: float = 1.0

    def advice_pool(self) -> AdvicePool:
        """The pool as :func:`planner.model.advice.advise` sees it."""
        return AdvicePool(self.name, self.profile, self.max_model_len, self.capacity_correction)


@dataclass
class ClosedLoopResult:
    """What one closed-loop run produced (module docstring). Arrays have shape ``(n,)``;
    ``timeline[pool]`` lists ``(t_s, instances, ready_instances)`` at every decision."""

    policy: str
    pool_names: tuple[str, ...]
    arrival_s: npt.NDArray[np.float64]
    ttft_s: npt.NDArray[np.float64]
    pool: npt.NDArray[np.int64]
    end_s: float
    gpu_hours: dict[str, float]
    scale_events: dict[str, int]
    timeline: dict[str, list[tuple[float, int, int]]] = field(default_factory=dict)

    def window_attainment(self, slo_ttft_p99_s: float, window_s: float = 300.0) -> dict[str, Any]:
        """SLO attainment per ``window_s`` window of arrivals: per pool and for the fleet (every
        pool with traffic in the window meets), as ``{"fleet": fraction, "pools": {...},
        "windows": count, "worst_p99_ttft_s": {...}}``; a rejected request has TTFT ``inf``."""
        w = np.floor(self.arrival_s / window_s).astype(np.int64)
        n_w = int(w.max()) + 1 if w.size else 0
        ok_fleet = np.ones(n_w, dtype=bool)
        seen = np.zeros(n_w, dtype=bool)
        pools: dict[str, float] = {}
        worst: dict[str, float] = {}
        for i, name in enumerate(self.pool_names):
            sel = self.pool == i
            ok = np.ones(n_w, dtype=bool)
            has = np.zeros(n_w, dtype=bool)
            worst_p99 = 0.0
            for k in np.unique(w[sel]):
                t = self.ttft_s[sel & (w == k)]
                p99 = float(np.percentile(t, 99)) if np.all(np.isfinite(t)) else math.inf
                has[k] = True
                ok[k] = p99 <= slo_ttft_p99_s
                worst_p99 = max(worst_p99, p99)
            pools[name] = float(ok[has].mean()) if has.any() else 1.0
            worst[name] = worst_p99
            ok_fleet &= ok | ~has
            seen |= has
        return {
            "fleet": float(ok_fleet[seen].mean()) if seen.any() else 1.0,
            "pools": pools,
            "windows": int(seen.sum()),
            "worst_p99_ttft_s": worst,
        }

    def summary(self, slo_ttft_p99_s: float) -> dict[str, Any]:
        """A JSON-ready summary: GPU-hours (per pool and total), scale events, SLO attainment per
        5-minute window, overall P99 TTFT per pool, rejected requests."""
        att = self.window_attainment(slo_ttft_p99_s)
        p99 = {}
        for i, name in enumerate(self.pool_names):
            t = self.ttft_s[self.pool == i]
            p99[name] = float(np.percentile(t, 99)) if t.size and np.all(np.isfinite(t)) else None
        return {
            "policy": self.policy,
            "gpu_hours": round(sum(self.gpu_hours.values()), 2),
            "gpu_hours_by_pool": {k: round(v, 2) for k, v in self.gpu_hours.items()},
            "scale_events": dict(self.scale_events),
            "slo_windows_met": round(att["fleet"], 4),
            "slo_windows_met_by_pool": {k: round(v, 4) for k, v in att["pools"].items()},
            "windows": att["windows"],
            "worst_window_p99_ttft_s": {
                k: (round(v, 3) if math.isfinite(v) else None) for k, v in att["worst_p99_ttft_s"].items()
            },
            "p99_ttft_s": {k: (round(v, 3) if v is not None else None) for k, v in p99.items()},
            "rejected": int(np.count_nonzero(~np.isfinite(self.ttft_s))),
            "requests": int(self.ttft_s.size),
            "peak_instances": {k: max(c for _, c, _ in v) for k, v in self.timeline.items()},
        }


def _route(budget: int, mml: list[int]) -> int:
    for i, m in enumerate(mml):
        if budget <= m:
            return i
    return len(mml) - 1


def advice_sizes(
    trace: Trace, pools: Sequence[LoopPool], rule: AdviceRule, *, window_s: float = 300.0, bucket_s: float = 10.0,
    step_s: float = 300.0,
) -> dict[str, list[int]]:  # fmt: skip
    """The advice's ``desired_instances`` per pool every ``step_s`` over the trace (the router's
    window fed with the trace's decisions): used for the static policy's peak size (the maximum)
    and for the instances every policy starts with (the first value)."""
    names = [p.name for p in pools]
    mml = [p.max_model_len for p in pools]
    apools = [p.advice_pool() for p in pools]
    window = FleetWindow(names, window_s=window_s, bucket_s=bucket_s, started_s=0.0)
    out: dict[str, list[int]] = {n: [] for n in names}
    budgets = trace.budget_tokens.tolist()
    arrivals = trace.arrival_s.tolist()
    next_t = min(step_s, window_s)
    for a, b in zip(arrivals, budgets, strict=True):
        while a >= next_t:
            adv = advise(window.snapshot(next_t), apools, rule, threshold_sweep=False)
            for p in adv.pools:
                out[p.pool].append(p.desired_instances)
            next_t += step_s
        window.add(names[_route(b, mml)], b, a)
    adv = advise(window.snapshot(next_t), apools, rule, threshold_sweep=False)
    for p in adv.pools:
        out[p.pool].append(p.desired_instances)
    return out


def run_closed_loop(  # noqa: C901 (one event loop, as planner.des.engine: dispatch stays inline)
    trace: Trace,
    pools: Sequence[LoopPool],
    spec: AutoscalerSpec,
    *,
    advice_rule: AdviceRule,
    window_s: float = 300.0,
    bucket_s: float = 10.0,
    max_queue_per_instance: int = 1024,
) -> ClosedLoopResult:
    """Replay ``trace`` through ``pools`` (ordered by ``max_model_len``) under autoscaler ``spec``
    (module docstring). Raises ``ValueError`` for no pool or pools out of order."""
    if not pools or any(a.max_model_len >= b.max_model_len for a, b in itertools.pairwise(pools)):
        raise ValueError("need at least one pool, ordered by strictly increasing max_model_len")
    names = [p.name for p in pools]
    mml = [p.max_model_len for p in pools]
    specs = [
        PoolSpec(p.name, p.profile, p.max_model_len, 1, max_queue_per_instance=max_queue_per_instance)
        for p in pools
    ]
    apools = [p.advice_pool() for p in pools]
    window = FleetWindow(names, window_s=window_s, bucket_s=bucket_s, started_s=0.0)
    n = len(trace)
    arrival = trace.arrival_s.tolist()
    l_in0 = trace.input_tokens.tolist()
    l_out0 = trace.output_tokens.tolist()
    budget = trace.budget_tokens.tolist()
    reqs = RequestTable(l_in0, l_out0)
    rejected, served_pool = reqs.rejected, reqs.served_pool
    n_pools = len(pools)

    insts: list[Instance] = []  # global id -> instance
    state: list[int] = []
    born: list[float] = []
    died: list[float] = []
    local: list[list[int]] = [[] for _ in pools]  # pool -> its global ids
    ready: list[list[int]] = [[] for _ in pools]  # pool -> global ids serving new requests
    loads: list[list[int]] = [[] for _ in pools]
    starting: list[deque[tuple[float, int]]] = [deque() for _ in pools]
    rr = [0] * n_pools
    heap: list[tuple[float, int, int, int]] = []
    seq = 0
    stabilizers = [
        Stabilizer(spec.scale_down_window_s, spec.min_instances, spec.max_instances) for _ in pools
    ]
    timeline: dict[str, list[tuple[float, int, int]]] = {p.name: [] for p in pools}
    events = dict.fromkeys(names, 0)

    def _noop(_pool: int) -> None:
        return None

    def add_instance(pi: int, now: float, ready_now: bool) -> None:
        gid = len(insts)
        lo = loads[pi]
        lo.append(0)
        insts.append(Instance(pi, specs[pi], reqs, lo, len(lo) - 1, _noop))
        state.append(READY if ready_now else STARTING)
        born.append(now)
        died.append(math.nan)
        local[pi].append(gid)
        if ready_now:
            ready[pi].append(gid)
        else:
            starting[pi].append((now + spec.cold_start_s, gid))

    def retire(gid: int, now: float) -> None:
        state[gid] = GONE
        died[gid] = now

    def idle(inst: Instance) -> bool:
        return inst.n_active == 0 and not inst.queue

    def count(pi: int) -> tuple[int, int]:
        ids = local[pi]
        return sum(1 for g in ids if state[g] in (STARTING, READY)), len(ready[pi])

    for pi, p in enumerate(pools):
        for _ in range(p.initial_instances if spec.policy != "static" else p.static_instances):
            add_instance(pi, 0.0, True)
        c, r = count(pi)
        timeline[p.name].append((0.0, c, r))
        stabilizers[pi].apply(c, 0.0)  # the starting count is the first recommendation

    def tick(now: float) -> None:
        adv = None
        if spec.policy == "advice":
            adv = advise(window.snapshot(now), apools, advice_rule, threshold_sweep=False)
        for pi, p in enumerate(pools):
            current, n_ready = count(pi)
            waiting = 0.0
            kv = 0.0
            for g in local[pi]:
                if state[g] in (READY, DRAINING):
                    waiting += len(insts[g].queue)
            for g in ready[pi]:
                x = insts[g]
                kv += min(1.0, max(0.0, x.kv_tokens_at(now) / x.cap))
            pa = adv.pool(p.name) if adv is not None else None
            obs = PoolObservation(
                current=current,
                ready=n_ready,
                waiting=waiting,
                kv_usage=kv / n_ready if n_ready else 0.0,
                advice=pa.desired_instances if pa is not None else None,
            )
            target = stabilizers[pi].apply(recommend(spec, obs, p.static_instances), now)
            if spec.policy == "static":
                target = p.static_instances
            if target != current:
                events[p.name] += 1
            for _ in range(target - current):
                add_instance(pi, now, spec.cold_start_s <= 0)
            excess = current - target
            while excess > 0 and starting[pi]:  # cancel the newest starting instance first
                _, g = starting[pi].pop()
                retire(g, now)
                excess -= 1
            if excess > 0:
                for g in sorted(ready[pi], key=lambda g: (insts[g].loads[insts[g].slot], -g))[:excess]:
                    ready[pi].remove(g)
                    state[g] = DRAINING
                    if idle(insts[g]):
                        retire(g, now)
            c, r = count(pi)
            timeline[p.name].append((now, c, r))

    idx = 0
    next_tick = spec.interval_s
    inf = math.inf
    while idx < n or heap:
        t_arr = arrival[idx] if idx < n else inf
        t_ready = min((s[0][0] for s in starting if s), default=inf)
        t_heap = heap[0][0] if heap else inf
        t_next = min(t_arr, t_ready, t_heap, next_tick)
        if t_next == t_heap and heap:
            now, _, gid, ver = heapq.heappop(heap)
            inst = insts[gid]
            if ver != inst.version:
                continue
            inst.advance(now, inst.next_v)
            inst.settle(now)
            dt = inst.schedule()
            if dt >= 0.0:
                seq += 1
                heapq.heappush(heap, (now + dt, seq, gid, inst.version))
            elif state[gid] == DRAINING and idle(inst):
                retire(gid, now)
            continue
        if t_next == t_ready:
            for pi in range(n_pools):
                while starting[pi] and starting[pi][0][0] <= t_ready:
                    _, g = starting[pi].popleft()
                    if state[g] == STARTING:
                        state[g] = READY
                        ready[pi].append(g)
            continue
        if t_next == next_tick and next_tick <= t_arr:
            tick(next_tick)
            next_tick += spec.interval_s
            continue
        r = idx
        idx += 1
        pi = _route(budget[r], mml)
        window.add(names[pi], budget[r], t_arr)
        total = l_in0[r] + l_out0[r]
        if total > mml[pi]:
            bigger = [j for j in range(pi + 1, n_pools) if total <= mml[j]]
            if not bigger:
                rejected[r] = True
                continue
            reqs.misrouted[r] = True
            pi = bigger[0]
        ids = ready[pi]
        if not ids:
            rejected[r] = True
            continue
        k = rr[pi] % len(ids)
        rr[pi] += 1
        gid = ids[k]
        inst = insts[gid]
        if len(inst.queue) >= inst.max_queue:
            rejected[r] = True
            continue
        served_pool[r] = pi
        inst.advance(t_arr, None)
        inst.settle(t_arr)
        inst.queue.append(r)
        inst.loads[inst.slot] += 1
        dt = inst.schedule()
        if dt >= 0.0:
            seq += 1
            heapq.heappush(heap, (t_arr + dt, seq, gid, inst.version))
        if idx == n:
            next_tick = inf  # no arrival left: the autoscaler's work is done

    done = np.asarray(reqs.done_s, dtype=np.float64)
    end = float(max(np.nanmax(done) if np.any(~np.isnan(done)) else 0.0, arrival[-1] if n else 0.0))
    gpu_h = dict.fromkeys(names, 0.0)
    for gid, inst in enumerate(insts):
        stop = died[gid] if not math.isnan(died[gid]) else end
        gpu_h[names[inst.pool]] += (stop - born[gid]) * specs[inst.pool].profile.tp / 3600.0
    arr = trace.arrival_s.astype(np.float64)
    ft = np.asarray(reqs.first_tok_s, dtype=np.float64)
    ttft = np.where(np.asarray(rejected, dtype=bool), math.inf, ft - arr)
    pool_of = np.asarray(
        [_route(b, mml) if sp < 0 else sp for b, sp in zip(budget, served_pool, strict=True)]
    )
    return ClosedLoopResult(
        policy=spec.policy,
        pool_names=tuple(names),
        arrival_s=arr,
        ttft_s=ttft,
        pool=pool_of.astype(np.int64),
        end_s=end,
        gpu_hours=gpu_h,
        scale_events=events,
        timeline=timeline,
    )
