"""One simulated serving instance (one vLLM server of ``tp`` GPUs) and the per-request table.

Model (see :mod:`planner.des` for the whole simulator):

- The instance runs iterations back to back while it has running sequences. An iteration takes
  ``t_iter = W + S * n + H * Σ c_i + P * Σ chunk_i + A * Σ chunk_i * input_i / 2``
  (:mod:`planner.model.profiles`; n running sequences; the last term is prefill attention, each prefill
  chunk attending to half its prompt on average over the prefill), ``c_i = input + output/2``
  the running request's mean context and ``chunk_i = input/ceil(input/chunk)`` its prefill tokens per
  iteration while prefilling. Between two events the batch is fixed, so ``t_iter`` is constant and
  the iteration counter ``v`` advances linearly in time. Per-request milestones are kept in
  *iteration space* (:class:`Milestone`), so a request costs O(1) events, never one per token.
- KV: a request allocates its prompt at admission and one token per decode iteration. When the
  batch would exceed ``kv_capacity_tokens`` the most recently admitted request is preempted (vLLM's
  recompute policy): its KV is freed and it goes back to the head of the waiting queue with the
  tokens generated so far added to its prompt. Under vLLM's admission KV is taken in whole blocks of
  ``block_size_tokens`` as vLLM 0.32's ``KVCacheManager.allocate_slots`` counts them
  (``ceil((computed + new) / block_size)`` per request; one block of the capacity is vLLM's null
  block), preemption comes at the first scheduler step whose blocks run out, and that step admits
  nobody (``Scheduler.schedule``: no waiting request is scheduled in a step that preempted).
- Steps (vLLM admission): the engine core takes new requests between steps, so a request arriving
  while the instance is busy waits for the end of the current iteration; one arriving at an idle
  instance is scheduled at once (the step grid restarts there, ``phase_v``).
- Admission (FCFS, head of line) while running < ``max_num_seqs``, the prompt fits in the free KV
  (minus the watermark) and, when set, ``max_num_batched_tokens`` holds with the newcomer's chunk.
  Under the paper's admission (``profile.admission == "paper"``) a prefill's chunk is fixed
  (``input/ceil(input/chunk)``) and must fit the iteration's budget whole. Under vLLM's
  (``"vllm"``, the default of ``tbr plan``/``simulate``) the watermark is 0 (vLLM 0.32
  ``SchedulerConfig.watermark``), ``max_num_seqs`` is the scheduler's cap (no ``KV/max_model_len``
  bound) and, as vLLM's scheduler gives decodes their token first and a prefill what is left, a
  newcomer's chunk is ``min(chunk, budget left)``, fixed for its prefill; it is admitted when that
  is at least its whole prompt or :data:`MIN_PREFILL_CHUNK_FRACTION` of the chunk (a sliver would
  stretch its prefill over hundreds of iterations, where vLLM re-divides the budget every step).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

from planner.model.profiles import PoolProfile

__all__ = [
    "LB_POLICIES",
    "MIN_PREFILL_CHUNK_FRACTION",
    "Instance",
    "Milestone",
    "PoolSpec",
    "RequestTable",
    "SimInvariantError",
]

EPS_ITER = 1e-7
"""Iteration-space tolerance: a milestone within this many iterations of ``v`` has been reached."""

MIN_PREFILL_CHUNK_FRACTION = 0.25
"""vLLM admission: a newcomer needs at least this share of ``chunk_tokens`` (or its whole prompt)
left in the iteration's token budget (module docstring)."""

LB_POLICIES = ("round_robin", "least_loaded", "p2c")
"""Load balancing inside a pool: rotate; fewest (running + waiting) requests of all instances
(ties: lowest index); fewest of two instances drawn at random (power of two choices)."""


class SimInvariantError(AssertionError):
    """A KV or concurrency invariant failed (only checked when ``check_invariants=True``)."""


class Milestone(IntEnum):
    """Per-request events in iteration space, kept in each instance's milestone heap."""

    FIRST_TOKEN = 0
    """The last prefill iteration ended: the request's first token."""
    LAST_TOKEN = 1
    """The last decode iteration ended: the request completes and frees its KV."""


@dataclass(frozen=True)
class PoolSpec:
    """One pool of identical instances; ``lb`` is one of :data:`LB_POLICIES`.

    Raises ``ValueError`` (at construction) for an unknown ``lb``.
    """

    name: str
    profile: PoolProfile
    max_model_len: int
    instances: int
    max_num_seqs: int | None = None
    max_queue_per_instance: int = 1024
    lb: str = "round_robin"
    kv_watermark_fraction: float | None = None
    """Free KV kept back at admission, share of capacity; None = by admission: 0.0 for ``vllm``
    (vLLM 0.32's default), 0.01 for ``paper`` (vLLM V0's, the simulator's earlier value)."""

    def __post_init__(self) -> None:
        if self.lb not in LB_POLICIES:
            raise ValueError(
                f"pool {self.name}: unknown load balancing {self.lb!r}; choose from {LB_POLICIES}"
            )

    @property
    def slots(self) -> int:
        """``max_num_seqs`` (explicit, else derived from the profile's KV at ``max_model_len``)."""
        return self.max_num_seqs or self.profile.max_num_seqs(self.max_model_len)

    @property
    def watermark_fraction(self) -> float:
        """``kv_watermark_fraction``, or the admission's default (0.0 vLLM, 0.01 paper)."""
        if self.kv_watermark_fraction is not None:
            return self.kv_watermark_fraction
        return 0.0 if self.profile.admission == "vllm" else 0.01


class RequestTable:
    """Per-request state as parallel lists (struct of arrays, indexed by request number ``r``).

    ``l_in``/``l_out`` prompt and remaining output tokens (a preemption moves generated tokens into
    the prompt), ``ctx`` mean context tokens, ``pf_rate`` prefill tokens per iteration, ``pf_attn`` their
    attention's context tokens per iteration (``pf_rate * input / 2``), ``pf_v`` the
    iteration at which the prefill ends, ``epoch`` invalidates milestones of a preempted admission,
    ``admitted_s`` (first admission: the end of its wait in the queue), ``first_tok_s``/``done_s``
    simulated times (NaN until reached), ``served_pool`` (−1 = rejected),
    ``preemptions``, ``rejected``, ``misrouted``.
    """

    __slots__ = (
        "admitted_s",
        "ctx",
        "done_s",
        "epoch",
        "first_tok_s",
        "l_in",
        "l_out",
        "misrouted",
        "pf_attn",
        "pf_rate",
        "pf_v",
        "preemptions",
        "rejected",
        "served_pool",
    )

    def __init__(self, input_tokens: list[int], output_tokens: list[int]) -> None:
        n = len(input_tokens)
        self.l_in = list(input_tokens)
        self.l_out = list(output_tokens)
        self.ctx = [a + b / 2.0 for a, b in zip(input_tokens, output_tokens, strict=True)]
        self.pf_rate = [0.0] * n
        self.pf_attn = [0.0] * n
        self.pf_v = [0.0] * n
        self.epoch = [0] * n
        self.admitted_s = [math.nan] * n
        self.first_tok_s = [math.nan] * n
        self.done_s = [math.nan] * n
        self.served_pool = [-1] * n
        self.preemptions = [0] * n
        self.rejected = [False] * n
        self.misrouted = [False] * n


class Instance:
    """Continuous batching on one instance; the engine calls :meth:`advance`, :meth:`settle` and
    :meth:`schedule` at each of its events and at each arrival it receives.

    ``loads`` is the pool's shared list of (running + waiting) counts, indexed by ``slot``; it is
    kept current for the least-loaded balancer. ``on_done(pool)`` is called when a request completes.
    """

    __slots__ = (
        "a",
        "block_tokens",
        "busy_s",
        "cap",
        "chunk",
        "h",
        "kv",
        "loads",
        "max_queue",
        "max_seqs",
        "milestones",
        "min_chunk",
        "mnbt",
        "ms_seq",
        "n_active",
        "n_dec",
        "next_v",
        "on_done",
        "p",
        "partial_chunks",
        "phase_v",
        "pool",
        "q_tried",
        "queue",
        "reqs",
        "running",
        "s",
        "seq_time",
        "slot",
        "sum_ctx",
        "sum_pf",
        "sum_pf_attn",
        "t",
        "t_iter",
        "total_blocks",
        "v",
        "version",
        "w",
        "watermark",
        "watermark_blocks",
    )

    def __init__(
        self,
        pool: int,
        spec: PoolSpec,
        reqs: RequestTable,
        loads: list[int],
        slot: int,
        on_done: Callable[[int], None],
    ) -> None:
        prof = spec.profile
        self.pool = pool
        self.reqs = reqs
        self.loads = loads
        self.slot = slot
        self.on_done = on_done
        self.w, self.h, self.p = prof.w_s, prof.h_s_per_kv_token, prof.p_s_per_prefill_token
        self.s = prof.s_s_per_running_seq
        self.a = prof.a_s_per_prefill_context_token
        self.chunk = prof.chunk_tokens
        self.cap = float(prof.kv_capacity_tokens)
        self.watermark = spec.watermark_fraction * self.cap
        self.partial_chunks = prof.admission == "vllm"
        self.block_tokens = max(1, prof.block_size_tokens)
        # vLLM 0.32's BlockPool takes one block out as its null block (block_pool.py): usable blocks
        # are num_gpu_blocks - 1
        self.total_blocks = max(1, prof.kv_capacity_tokens // self.block_tokens - 1)
        self.watermark_blocks = int(spec.watermark_fraction * self.total_blocks)
        self.min_chunk = max(1.0, MIN_PREFILL_CHUNK_FRACTION * self.chunk)
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
        self.sum_pf_attn = 0.0
        self.n_active = 0
        self.n_dec = 0
        self.phase_v = 0.0
        self.q_tried = 0
        self.kv = 0.0
        self.busy_s = 0.0
        self.seq_time = 0.0
        self.version = 0
        self.ms_seq = 0
        self.milestones: list[tuple[float, int, int, int, int]] = []
        self.queue: deque[int] = deque()
        self.running: dict[int, None] = {}

    def advance(self, now: float, to_v: float | None) -> None:
        """Move the clock to ``now``: ``v`` to ``to_v`` (an own event) or by elapsed time / t_iter."""
        if self.n_active:
            dv = (to_v - self.v) if to_v is not None else (now - self.t) / self.t_iter
            self.v += dv
            self.kv += self.n_dec * dv
            dt = now - self.t
            self.busy_s += dt
            self.seq_time += self.n_active * dt
        self.t = now

    def settle(self, now: float) -> None:
        """Apply every milestone reached at iteration ``v`` (first tokens, completions)."""
        ms = self.milestones
        reqs = self.reqs
        epoch = reqs.epoch
        limit = self.v + EPS_ITER
        while ms and ms[0][0] <= limit:
            _, _, kind, r, ep = heapq.heappop(ms)
            if ep != epoch[r]:
                continue
            if kind == 0:  # Milestone.FIRST_TOKEN
                if math.isnan(reqs.first_tok_s[r]):
                    reqs.first_tok_s[r] = now
                self.sum_pf -= reqs.pf_rate[r]
                self.sum_pf_attn -= reqs.pf_attn[r]
                self.n_dec += 1
            else:  # Milestone.LAST_TOKEN
                del self.running[r]
                self.n_active -= 1
                self.n_dec -= 1
                self.sum_ctx -= reqs.ctx[r]
                self.kv -= reqs.l_in[r] + reqs.l_out[r] - 1
                reqs.done_s[r] = now
                self.loads[self.slot] -= 1
                self.on_done(self.pool)
        if self.n_active == 0:
            self.kv = 0.0
            self.sum_ctx = 0.0
            self.sum_pf = 0.0
            self.sum_pf_attn = 0.0

    def preempt_last(self) -> None:
        """Preempt the most recently admitted request (recompute): free its KV, requeue at the head."""
        reqs = self.reqs
        r = next(reversed(self.running))
        del self.running[r]
        self.n_active -= 1
        self.sum_ctx -= reqs.ctx[r]
        if self.v + EPS_ITER < reqs.pf_v[r]:
            self.sum_pf -= reqs.pf_rate[r]
            self.sum_pf_attn -= reqs.pf_attn[r]
            self.kv -= reqs.l_in[r]
        else:
            grown = self.v - reqs.pf_v[r]
            self.n_dec -= 1
            self.kv -= reqs.l_in[r] + grown
            produced = min(1 + int(grown + EPS_ITER), reqs.l_out[r] - 1)
            reqs.l_in[r] += produced
            reqs.l_out[r] -= produced
        reqs.epoch[r] += 1
        reqs.preemptions[r] += 1
        self.queue.appendleft(r)

    def schedule(self) -> float:
        """Preempt on a full KV, admit waiting requests, and return the simulated time until this
        instance's next event (``-1.0`` when idle). Bumps ``version`` (older heap entries go stale)."""
        q = self.queue
        ms = self.milestones
        wake_v = math.inf
        if self._preempt():  # vLLM admits no waiting request in a step that preempted
            wake_v = self.v + 1.0
        elif q and self.n_active < self.max_seqs:
            if not self.partial_chunks:
                self._admit(q, ms)
            elif not self.n_active:  # vLLM's engine idles on its input queue: it schedules at once
                self.phase_v = self.v
                self._admit(q, ms)
                self.q_tried = len(q)
            elif self._at_step():  # busy: a newcomer waits for the next scheduler step
                self._admit(q, ms)
                self.q_tried = len(q)
            elif len(q) > self.q_tried:  # not yet tried at a step boundary: wake at the next one
                wake_v = self.phase_v + math.ceil(self.v - self.phase_v - EPS_ITER)
        self.version += 1
        if not self.n_active:
            self.t_iter = 0.0
            return -1.0
        t_iter = (
            self.w
            + self.s * self.n_active
            + self.h * self.sum_ctx
            + self.p * self.sum_pf
            + self.a * self.sum_pf_attn
        )
        self.t_iter = t_iter
        nv = min(ms[0][0], wake_v)
        if self.n_dec:
            if self.partial_chunks:
                v_full = self._v_blocks_exhausted(nv)
            else:
                v_full = self.v + (self.cap - self.kv) / self.n_dec
            if v_full < nv:
                nv = v_full
        if nv < self.v:
            nv = self.v
        self.next_v = nv
        return (nv - self.v) * t_iter

    def _preempt(self) -> bool:
        """Preempt the last admitted requests while the KV is short (paper: tokens; vLLM: blocks, at a
        step boundary); True when some were preempted and others still run."""
        if not self.partial_chunks:
            while self.n_dec > 0 and self.kv >= self.cap - 1e-6:
                self.preempt_last()
            return False
        preempted = False
        if self.n_dec and self._at_step() and self._may_exceed(0):
            while self.n_dec > 0 and self._blocks_needed() > self.total_blocks:
                self.preempt_last()
                preempted = True
        return preempted and self.n_active > 0

    def _at_step(self) -> bool:
        """True when ``v`` is a scheduler step boundary (``phase_v`` + a whole number of iterations)."""
        frac = (self.v - self.phase_v) % 1.0
        return frac <= EPS_ITER or frac >= 1.0 - EPS_ITER

    def _may_exceed(self, extra_blocks: int) -> bool:
        """False when the running requests' blocks for the next step plus ``extra_blocks`` surely fit
        (each request wastes less than one block: an O(1) bound that spares :meth:`_blocks_needed`)."""
        upper = (self.kv + self.n_dec) / self.block_tokens + self.n_active + extra_blocks
        return upper > self.total_blocks - 1e-9

    def _blocks_needed(self) -> int:
        """KV blocks the running requests need for the next step, as vLLM 0.32's ``KVCacheManager.
        allocate_slots`` counts them: ``ceil((computed + new) / block_size)`` per request, a
        prefilling request holding its prompt's blocks, a decoding one ``ceil((kv_r + 1) / block)``
        (``kv_r`` its computed tokens, one new token this step). O(running requests)."""
        bs = self.block_tokens
        reqs = self.reqs
        l_in, pf_v = reqs.l_in, reqs.pf_v
        v = self.v
        total = 0
        for r in self.running:
            if v + EPS_ITER < pf_v[r]:
                total += -(-l_in[r] // bs)
            else:
                total += -(-(l_in[r] + int(v - pf_v[r] + EPS_ITER) + 1) // bs)
        return total

    def _v_blocks_exhausted(self, before_v: float) -> float:
        """The first step boundary at which the decoding requests need more blocks than the instance
        has (vLLM then preempts), or ``inf`` if not before ``before_v``. Exact: a decoding request with
        ``x`` slots needed takes its next block after ``ceil(x / block) * block + 1 - x`` steps, then
        every ``block`` steps; the first step at which the new blocks exceed the free ones is found by
        bisection. Computed only when the O(1) token bound says it may come before ``before_v``."""
        bs = self.block_tokens
        g0 = self.phase_v + math.floor(self.v - self.phase_v + EPS_ITER)
        n_dec = self.n_dec
        # each running request wastes < 1 block: no block can run out before this many steps
        k_lb = ((self.total_blocks - self.n_active) * bs - self.kv) / n_dec - 1.0
        if g0 + k_lb >= before_v:
            return math.inf
        reqs = self.reqs
        l_in, pf_v = reqs.l_in, reqs.pf_v
        used = 0
        first: list[int] = []
        for r in self.running:
            if g0 + EPS_ITER < pf_v[r]:
                used += -(-l_in[r] // bs)
                continue
            x = l_in[r] + int(g0 - pf_v[r] + EPS_ITER) + 1
            b = -(-x // bs)
            used += b
            first.append(b * bs + 1 - x)
        free = self.total_blocks - used
        if not first:
            return math.inf

        def new_blocks(k: int) -> int:
            return sum((k - d) // bs + 1 for d in first if k >= d)

        lo, hi = 1, bs * (max(free, 0) + 1) + bs
        while lo < hi:
            mid = (lo + hi) // 2
            if new_blocks(mid) > free:
                hi = mid
            else:
                lo = mid + 1
        return g0 + lo

    def _admit(self, q: deque[int], ms: list[tuple[float, int, int, int, int]]) -> None:
        """Admit waiting requests FCFS while a slot, the KV and the token budget allow."""
        reqs = self.reqs
        l_in, l_out, pf_rate, pf_v, epoch, ctx = (
            reqs.l_in,
            reqs.l_out,
            reqs.pf_rate,
            reqs.pf_v,
            reqs.epoch,
            reqs.ctx,
        )
        bs = self.block_tokens
        used_blocks = -1  # vLLM: blocks of the running requests for this step, computed when needed
        while q and self.n_active < self.max_seqs:
            r = q[0]
            need = l_in[r]
            if self.partial_chunks:
                # vLLM allocates this step's decode slots of the running requests first (they are
                # scheduled first); a newcomer's prompt takes whole blocks beside them
                need_blocks = -(-need // bs)
                if self.n_active and self._may_exceed(need_blocks + self.watermark_blocks):
                    if used_blocks < 0:
                        used_blocks = self._blocks_needed()
                    if used_blocks + need_blocks > self.total_blocks - self.watermark_blocks:
                        break
            elif self.n_active and self.kv + need > self.cap - self.watermark:
                break
            if self.partial_chunks:  # vLLM: the prefill takes what the budget has left
                chunk = min(float(self.chunk), self.mnbt - self.n_dec - self.sum_pf)
                if self.n_active and (chunk <= 0.0 or chunk < min(float(need), self.min_chunk) - 1e-9):
                    break
                k_pf = max(1, math.ceil(need / chunk - 1e-9))
                rate = need / k_pf
            else:
                k_pf = -(-need // self.chunk)
                rate = need / k_pf
                if self.n_active and self.n_dec + self.sum_pf + rate > self.mnbt + 1e-9:
                    break  # max_num_batched_tokens: no room for its prefill chunk this iteration
            q.popleft()
            if math.isnan(reqs.admitted_s[r]):
                reqs.admitted_s[r] = self.t
            pf_rate[r] = rate
            reqs.pf_attn[r] = rate * need / 2.0
            pv = self.v + k_pf
            pf_v[r] = pv
            ep = epoch[r]
            self.ms_seq += 2
            heapq.heappush(ms, (pv, self.ms_seq - 1, 0, r, ep))
            heapq.heappush(ms, (pv + l_out[r] - 1, self.ms_seq, 1, r, ep))
            self.running[r] = None
            self.n_active += 1
            self.sum_ctx += ctx[r]
            self.sum_pf += rate
            self.sum_pf_attn += reqs.pf_attn[r]
            self.kv += need
            if used_blocks >= 0:
                used_blocks += -(-need // bs)

    def kv_tokens_at(self, now: float) -> float:
        """KV tokens in use extrapolated to ``now`` (decoding sequences grow one token per iteration)."""
        kv = self.kv
        if self.n_active and self.t_iter > 0:
            kv += self.n_dec * (now - self.t) / self.t_iter
        return kv

    def check(self) -> None:
        """Raise :class:`SimInvariantError` if KV, concurrency or the token budget is violated."""
        if not (-1e-6 <= self.kv <= self.cap + 1e-6):
            raise SimInvariantError(f"KV tokens {self.kv} outside [0, {self.cap}]")
        if not 0 <= self.n_dec <= self.n_active <= self.max_seqs:
            raise SimInvariantError(f"running {self.n_active} / decoding {self.n_dec} / max {self.max_seqs}")
        if self.n_active != len(self.running):
            raise SimInvariantError("running set and counter disagree")
        if self.n_active == 0 and (abs(self.kv) > 1e-6 or self.queue):
            raise SimInvariantError("idle instance holds KV or has waiting requests")
        if self.n_active > 1 and self.n_dec + self.sum_pf > self.mnbt + 1e-6 and self.sum_pf > 1e-6:
            raise SimInvariantError(
                f"batched tokens {self.n_dec + self.sum_pf} over max_num_batched_tokens {self.mnbt}"
            )
        if self.partial_chunks and self._at_step() and self._blocks_needed() > self.total_blocks:
            raise SimInvariantError(f"{self._blocks_needed()} KV blocks needed of {self.total_blocks}")
        if self.loads[self.slot] != self.n_active + len(self.queue):
            raise SimInvariantError("load count disagrees with running + waiting")
