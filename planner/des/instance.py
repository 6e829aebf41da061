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
  tokens generated so far added to its prompt.
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
        "phase_v",
        "q_tried",
        "next_v",
        "on_done",
        "p",
        "partial_chunks",
        "pool",
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
        "v",
        "version",
        "w",
        "watermark",
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
        while self.n_dec > 0 and self.kv >= self.cap - 1e-6:
            self.preempt_last()
        q = self.queue
        ms = self.milestones
        wake_v = math.inf
        if q and self.n_active < self.max_seqs:
            if not self.partial_chunks:
                self._admit(q, ms)
            elif not self.n_active:  # vLLM's engine idles on its input queue: it schedules at once
                self.phase_v = self.v
                self._admit(q, ms)
                self.q_tried = len(q)
            else:  # busy: a newcomer waits for the next scheduler step (the end of this iteration)
                steps = self.v - self.phase_v
                next_step_v = self.phase_v + math.ceil(steps - EPS_ITER)
                if next_step_v - self.v <= EPS_ITER:
                    self._admit(q, ms)
                    self.q_tried = len(q)
                elif len(q) > self.q_tried:  # not yet tried at a step boundary
                    wake_v = next_step_v
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
            v_full = self.v + (self.cap - self.kv) / self.n_dec
            if v_full < nv:
                nv = v_full
        if nv < self.v:
            nv = self.v
        self.next_v = nv
        return (nv - self.v) * t_iter

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
        while q and self.n_active < self.max_seqs:
            r = q[0]
            need = l_in[r]
            # vLLM allocates this step's decode tokens of the running requests before admitting
            # (they are scheduled first): a newcomer fits only beside one more iteration's growth
            growth = self.n_dec if self.partial_chunks else 0
            if self.n_active and self.kv + need + growth > self.cap - self.watermark:
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
        if self.loads[self.slot] != self.n_active + len(self.queue):
            raise SimInvariantError("load count disagrees with running + waiting")
