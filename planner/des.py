"""Discrete-event fleet simulator: per-instance continuous batching with KV accounting.

Model (one instance = one vLLM server of ``tp`` GPUs):

- Each instance runs iterations back to back while it has running sequences. An iteration takes
  ``t_iter = W + H * Σ c_i + P * Σ chunk_i`` (profiles.py), where ``c_i = input + output/2`` is a
  running request's mean context and ``chunk_i = input/ceil(input/chunk)`` its prefill tokens per
  iteration while it is prefilling. Between two events on an instance the batch is fixed, so
  ``t_iter`` is constant and the instance's iteration counter ``v`` advances linearly in time.
  Per-request milestones are kept in *iteration space* (``v`` at which the prefill ends -> first
  token; ``v`` at which the last token is produced), so the simulator processes O(1) events per
  request, never one per token, while remaining exact at iteration granularity.
- Chunked prefill: ``ceil(input/chunk)`` iterations; the first token comes at the end of the last
  prefill iteration; then ``output − 1`` decode iterations.
- KV: a request allocates its prompt tokens at admission and one token per decode iteration. The
  instance holds ``kv_capacity_tokens`` (num_gpu_blocks x block_size). When the running batch would
  exceed it, the most recently admitted request is preempted (vLLM recompute policy): its KV is
  freed and it goes back to the head of the waiting queue; on re-admission its prompt includes the
  tokens generated so far.
- Admission (FCFS, head of line): while running < ``max_num_seqs``, the prompt fits in the free KV
  and, when the profile sets ``max_num_batched_tokens`` (vLLM's per-iteration token budget under
  chunked prefill), the iteration's tokens — one per decoding sequence plus each prefilling
  sequence's chunk — stay within it with the newcomer's chunk added. A request that does not fit
  waits for a prefill to finish (vLLM V1 schedules decodes first, then prefill chunks into the
  remaining budget; here a prefill keeps its fixed chunk size rather than taking a partial one).
  A waiting queue longer than ``max_queue_per_instance`` rejects the request (the gateway's 503); a
  request with ``input + output > max_model_len`` is rejected by the pool (vLLM's 400) and, when a
  larger pool exists, retried there (counted as a mis-route).

Event order is explicit: the heap key is ``(time_s, priority, seq)`` with instance events
(priority 0) before an arrival at the same instant (priority 1), ``seq`` a per-run counter. Same
trace, config and seed -> byte-identical :meth:`SimResult.to_json`.
"""

from __future__ import annotations

import heapq
import json
import math
import random
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from planner.profiles import PoolProfile
from planner.routers import Router
from planner.trace import Trace

__all__ = ["PoolSpec", "SimInvariantError", "SimResult", "simulate"]

_EPS_ITER = 1e-7


class SimInvariantError(AssertionError):
    """A KV or concurrency invariant failed (only checked when ``check_invariants=True``)."""


@dataclass(frozen=True)
class PoolSpec:
    """One pool of identical instances. ``lb`` is ``round_robin`` or ``p2c`` (least in-flight of two)."""

    name: str
    profile: PoolProfile
    max_model_len: int
    instances: int
    max_num_seqs: int | None = None
    max_queue_per_instance: int = 1024
    lb: str = "round_robin"
    kv_watermark_fraction: float = 0.01

    @property
    def slots(self) -> int:
        """``max_num_seqs`` (explicit, else derived from the profile's KV at ``max_model_len``)."""
        return self.max_num_seqs or self.profile.max_num_seqs(self.max_model_len)


class _Inst:
    __slots__ = (
        "busy_s",
        "cap",
        "chunk",
        "h",
        "kv",
        "max_queue",
        "max_seqs",
        "milestones",
        "mnbt",
        "n_active",
        "n_dec",
        "next_v",
        "p",
        "pool",
        "queue",
        "running",
        "seq_time",
        "sum_ctx",
        "sum_pf",
        "t",
        "t_iter",
        "v",
        "version",
        "w",
        "watermark",
    )

    def __init__(self, pool: int, spec: PoolSpec) -> None:
        prof = spec.profile
        self.pool = pool
        self.w, self.h, self.p = prof.w_s, prof.h_s_per_kv_token, prof.p_s_per_prefill_token
        self.chunk = prof.chunk_tokens
        self.cap = float(prof.kv_capacity_tokens)
        self.watermark = spec.kv_watermark_fraction * self.cap
        self.max_seqs = spec.slots
        mnbt = prof.max_num_batched_tokens
        self.mnbt = math.inf if mnbt is None else float(mnbt)
        self.max_queue = spec.max_queue_per_instance
        self.v = 0.0
        self.t = 0.0
        self.t_iter = 0.0
        self.next_v = 0.0
        self.sum_ctx = 0.0
        self.sum_pf = 0.0
        self.n_active = 0
        self.n_dec = 0
        self.kv = 0.0
        self.busy_s = 0.0
        self.seq_time = 0.0
        self.version = 0
        self.milestones: list[tuple[float, int, int, int, int]] = []
        self.queue: deque[int] = deque()
        self.running: dict[int, None] = {}


@dataclass(frozen=True)
class SimResult:
    """Per-request outcomes (arrays shape ``(n,)``) and per-pool totals of one run.

    ``ttft_s``/``tpot_s`` are NaN for rejected requests (and ``tpot_s`` for 1-token outputs);
    ``pool`` is the pool that served the request (−1 if rejected); ``preemptions`` per request.
    """

    pool_names: tuple[str, ...]
    instances: tuple[int, ...]
    gpus: tuple[int, ...]
    price_usd_per_h: tuple[float, ...]
    arrival_s: npt.NDArray[np.float64]
    ttft_s: npt.NDArray[np.float64]
    tpot_s: npt.NDArray[np.float64]
    pool: npt.NDArray[np.int64]
    preemptions: npt.NDArray[np.int64]
    rejected: npt.NDArray[np.bool_]
    misrouted: npt.NDArray[np.bool_]
    busy_s: tuple[float, ...]
    mean_running: tuple[float, ...]
    makespan_s: float
    warmup_fraction: float
    events: int

    def summary(self) -> dict[str, Any]:
        """Fleet and per-pool metrics after excluding the first ``warmup_fraction`` of arrivals.

        Latencies in seconds (P50/P99, numpy linear percentiles); ``preemptions_per_1000`` = preemption
        events per 1,000 measured requests (the paper's ‰); rates are fractions of measured requests.
        """
        n = self.arrival_s.shape[0]
        m = np.arange(n) >= int(n * self.warmup_fraction)

        def block(sel: npt.NDArray[np.bool_]) -> dict[str, Any]:
            cnt = int(sel.sum())
            ttft = self.ttft_s[sel & ~np.isnan(self.ttft_s)]
            tpot = self.tpot_s[sel & ~np.isnan(self.tpot_s)]

            def pct(a: npt.NDArray[np.float64], q: float) -> float | None:
                return float(np.percentile(a, q)) if a.size else None

            return {
                "requests": cnt,
                "p50_ttft_s": pct(ttft, 50),
                "p99_ttft_s": pct(ttft, 99),
                "p50_tpot_s": pct(tpot, 50),
                "p99_tpot_s": pct(tpot, 99),
                "preemptions_per_1000": 1000.0 * float(self.preemptions[sel].sum()) / cnt if cnt else 0.0,
                "rejection_rate": float(self.rejected[sel].sum()) / cnt if cnt else 0.0,
                "misroute_rate": float(self.misrouted[sel].sum()) / cnt if cnt else 0.0,
            }

        out: dict[str, Any] = {"fleet": block(m), "pools": {}}
        out["fleet"]["instances"] = int(sum(self.instances))
        out["fleet"]["gpus"] = int(sum(self.gpus))
        out["fleet"]["usd_per_year"] = float(sum(self.price_usd_per_h)) * 8760.0
        for i, name in enumerate(self.pool_names):
            b = block(m & (self.pool == i))
            b["instances"] = self.instances[i]
            b["gpus"] = self.gpus[i]
            denom = self.instances[i] * self.makespan_s
            b["utilization"] = self.busy_s[i] / denom if denom > 0 else 0.0
            b["mean_running_per_instance"] = self.mean_running[i] / denom if denom > 0 else 0.0
            out["pools"][name] = b
        out["events"] = self.events
        out["makespan_s"] = self.makespan_s
        return out

    def to_json(self) -> str:
        """Canonical JSON of :meth:`summary` (sorted keys) — the determinism contract."""
        return json.dumps(self.summary(), sort_keys=True)


def simulate(
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
    Pools must be ordered by ``max_model_len``. Raises ``ValueError`` on an empty pool list or a pool
    whose ``max_model_len`` exceeds its KV capacity; :class:`SimInvariantError` if a checked invariant
    fails.
    """
    if not pools:
        raise ValueError("at least one pool is required")
    for ps in pools:
        if ps.max_model_len > ps.profile.kv_capacity_tokens:
            raise ValueError(f"pool {ps.name}: max_model_len exceeds KV capacity")
        if ps.instances < 1:
            raise ValueError(f"pool {ps.name}: needs at least one instance")
    rng = random.Random(seed)
    n = len(trace)
    arrival = trace.arrival_s.tolist()
    l_in0 = trace.input_tokens.tolist()
    l_out0 = trace.output_tokens.tolist()
    budget = (trace.budget_tokens if est_budget_tokens is None else est_budget_tokens).tolist()
    l_in = list(l_in0)
    l_out = list(l_out0)
    ctx = [a + b / 2.0 for a, b in zip(l_in0, l_out0, strict=True)]
    pf_rate = [0.0] * n
    pf_v = [0.0] * n
    epoch = [0] * n
    first_tok = [math.nan] * n
    done_t = [math.nan] * n
    served_pool = [-1] * n
    preempts = [0] * n
    rejected = [False] * n
    misrouted = [False] * n

    insts: list[_Inst] = []
    pool_insts: list[list[int]] = []
    for pi, ps in enumerate(pools):
        ids = []
        for _ in range(ps.instances):
            ids.append(len(insts))
            insts.append(_Inst(pi, ps))
        pool_insts.append(ids)
    n_pools = len(pools)
    mml = [ps.max_model_len for ps in pools]
    use_p2c = [ps.lb == "p2c" for ps in pools]
    rr = [0] * n_pools
    heap: list[tuple[float, int, int, int, int]] = []
    seq = 0
    events = 0
    heappush, heappop = heapq.heappush, heapq.heappop

    release = router.release

    class _View:
        """:class:`FleetView` over the live instances (read-only; KV extrapolated to ``now``)."""

        now = 0.0

        def waiting(self, i: int) -> float:
            return float(sum(len(insts[g].queue) for g in pool_insts[i]))

        def kv_cache_usage(self, i: int) -> float:
            tot = 0.0
            for g in pool_insts[i]:
                inst = insts[g]
                kv = inst.kv
                if inst.n_active and inst.t_iter > 0:
                    kv += inst.n_dec * (self.now - inst.t) / inst.t_iter
                tot += min(1.0, max(0.0, kv / inst.cap))
            return tot / len(pool_insts[i])

    view = _View()

    def check(inst: _Inst) -> None:
        if not (-1e-6 <= inst.kv <= inst.cap + 1e-6):
            raise SimInvariantError(f"KV tokens {inst.kv} outside [0, {inst.cap}]")
        if not 0 <= inst.n_dec <= inst.n_active <= inst.max_seqs:
            raise SimInvariantError(f"running {inst.n_active} / decoding {inst.n_dec} / max {inst.max_seqs}")
        if inst.n_active != len(inst.running):
            raise SimInvariantError("running set and counter disagree")
        if inst.n_active == 0 and (abs(inst.kv) > 1e-6 or inst.queue):
            raise SimInvariantError("idle instance holds KV or has waiting requests")
        if inst.n_active > 1 and inst.n_dec + inst.sum_pf > inst.mnbt + 1e-6 and inst.sum_pf > 1e-6:
            raise SimInvariantError(
                f"batched tokens {inst.n_dec + inst.sum_pf} over max_num_batched_tokens {inst.mnbt}"
            )

    def milestones(inst: _Inst, now: float) -> None:
        ms = inst.milestones
        limit = inst.v + _EPS_ITER
        while ms and ms[0][0] <= limit:
            _, _, kind, r, ep = heappop(ms)
            if ep != epoch[r]:
                continue
            if kind == 0:  # prefill finished: first token
                if math.isnan(first_tok[r]):
                    first_tok[r] = now
                inst.sum_pf -= pf_rate[r]
                inst.n_dec += 1
            else:  # last token
                del inst.running[r]
                inst.n_active -= 1
                inst.n_dec -= 1
                inst.sum_ctx -= ctx[r]
                inst.kv -= l_in[r] + l_out[r] - 1
                done_t[r] = now
                release(inst.pool)
        if inst.n_active == 0:
            inst.kv = 0.0
            inst.sum_ctx = 0.0
            inst.sum_pf = 0.0

    def preempt_one(inst: _Inst) -> None:
        r = next(reversed(inst.running))
        del inst.running[r]
        inst.n_active -= 1
        inst.sum_ctx -= ctx[r]
        if inst.v + _EPS_ITER < pf_v[r]:
            inst.sum_pf -= pf_rate[r]
            inst.kv -= l_in[r]
        else:
            grown = inst.v - pf_v[r]
            inst.n_dec -= 1
            inst.kv -= l_in[r] + grown
            produced = min(1 + int(grown + _EPS_ITER), l_out[r] - 1)
            l_in[r] += produced
            l_out[r] -= produced
        epoch[r] += 1
        preempts[r] += 1
        inst.queue.appendleft(r)

    def admit_and_schedule(inst: _Inst, now: float, gid: int) -> None:
        nonlocal seq
        while inst.n_dec > 0 and inst.kv >= inst.cap - 1e-6:
            preempt_one(inst)
        q = inst.queue
        ms = inst.milestones
        while q and inst.n_active < inst.max_seqs:
            r = q[0]
            need = l_in[r]
            if inst.n_active and inst.kv + need > inst.cap - inst.watermark:
                break
            k_pf = -(-need // inst.chunk)
            rate = need / k_pf
            if inst.n_active and inst.n_dec + inst.sum_pf + rate > inst.mnbt + 1e-9:
                break  # max_num_batched_tokens: no room for its prefill chunk this iteration
            q.popleft()
            pf_rate[r] = rate
            pv = inst.v + k_pf
            pf_v[r] = pv
            ep = epoch[r]
            seq += 1
            heappush(ms, (pv, seq, 0, r, ep))
            seq += 1
            heappush(ms, (pv + l_out[r] - 1, seq, 1, r, ep))
            inst.running[r] = None
            inst.n_active += 1
            inst.sum_ctx += ctx[r]
            inst.sum_pf += rate
            inst.kv += need
        inst.version += 1
        if inst.n_active:
            t_iter = inst.w + inst.h * inst.sum_ctx + inst.p * inst.sum_pf
            inst.t_iter = t_iter
            nv = ms[0][0]
            if inst.n_dec:
                v_full = inst.v + (inst.cap - inst.kv) / inst.n_dec
                if v_full < nv:
                    nv = v_full
            if nv < inst.v:
                nv = inst.v
            inst.next_v = nv
            seq += 1
            heappush(heap, (now + (nv - inst.v) * t_iter, 0, seq, gid, inst.version))
        else:
            inst.t_iter = 0.0
        if check_invariants:
            check(inst)

    def advance(inst: _Inst, now: float, to_v: float | None) -> None:
        if inst.n_active:
            dv = (to_v - inst.v) if to_v is not None else (now - inst.t) / inst.t_iter
            inst.v += dv
            inst.kv += inst.n_dec * dv
            dt = now - inst.t
            inst.busy_s += dt
            inst.seq_time += inst.n_active * dt
        inst.t = now

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
            advance(inst, now, inst.next_v)
            milestones(inst, now)
            admit_and_schedule(inst, now, gid)
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
        ids = pool_insts[pi]
        if use_p2c[pi] and len(ids) > 1:
            ga = ids[rng.randrange(len(ids))]
            gb = ids[rng.randrange(len(ids))]
            ia, ib = insts[ga], insts[gb]
            gid = ga if ia.n_active + len(ia.queue) <= ib.n_active + len(ib.queue) else gb
            inst = insts[gid]
        else:
            gid = ids[rr[pi] % len(ids)]
            rr[pi] += 1
            inst = insts[gid]
        if len(inst.queue) >= inst.max_queue:
            rejected[r] = True
            release(pi)
            continue
        served_pool[r] = pi
        advance(inst, t_arr, None)
        milestones(inst, t_arr)
        inst.queue.append(r)
        admit_and_schedule(inst, t_arr, gid)
    if bar is not None:
        bar.update(n - bar.n)
        bar.close()

    arr = np.asarray(arrival, dtype=np.float64)
    ft = np.asarray(first_tok, dtype=np.float64)
    dt = np.asarray(done_t, dtype=np.float64)
    lo = np.asarray(l_out0, dtype=np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(lo > 1, (dt - ft) / (lo - 1), np.nan)
    makespan = float(np.nanmax(dt)) if np.any(~np.isnan(dt)) else 0.0
    busy = [0.0] * n_pools
    running_time = [0.0] * n_pools
    for inst in insts:
        busy[inst.pool] += inst.busy_s
        running_time[inst.pool] += inst.seq_time
    return SimResult(
        pool_names=tuple(ps.name for ps in pools),
        instances=tuple(ps.instances for ps in pools),
        gpus=tuple(ps.instances * ps.profile.tp for ps in pools),
        price_usd_per_h=tuple(ps.instances * ps.profile.price_usd_per_instance_h for ps in pools),
        arrival_s=arr,
        ttft_s=ft - arr,
        tpot_s=tpot,
        pool=np.asarray(served_pool, dtype=np.int64),
        preemptions=np.asarray(preempts, dtype=np.int64),
        rejected=np.asarray(rejected, dtype=np.bool_),
        misrouted=np.asarray(misrouted, dtype=np.bool_),
        busy_s=tuple(busy),
        mean_running=tuple(running_time),
        makespan_s=makespan,
        warmup_fraction=warmup_fraction,
        events=events,
    )
