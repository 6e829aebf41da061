"""Per-pool runtime state: admission queue (``max_num_seqs``), hold/release, KV usage and served counters.

Scheduling model (a stand-in for vLLM's scheduler, deliberately simple and deterministic):

* at most ``max_num_seqs`` requests *run* at once; later ones *wait* in a FIFO queue
  (``vllm:num_requests_running`` / ``vllm:num_requests_waiting``);
* while the pool is *held* (``POST /admin/hold``), admitted requests pause before their first output token
  until ``POST /admin/release``: a test can fill a pool to exactly ``max_num_seqs`` running + k waiting;
* KV usage = Σ (prompt + generated tokens) of running requests / ``kv_capacity_tokens`` (capped at 1).
* while the engine is *dead* (``POST /admin/engine-dead``; vLLM's state after its engine process died,
  kept serving with ``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1``), ``/health`` answers 503, every generation
  request 500, and requests already generating stop where they are: no further token and no end, their
  connections left open (measured on vLLM 0.32, issue 34). ``POST /admin/engine-alive`` stands for a
  restarted pool: new requests are served again; the stopped ones stay stopped.

All methods run on the event loop thread (no locking needed); one state per app.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from mockpool.natural import NaturalLengths
from mockpool.settings import PoolSettings


class PoolState:
    """Scheduler and counters of one pool (see module docstring)."""

    def __init__(self, settings: PoolSettings) -> None:
        """Fresh state for ``settings`` (held iff ``settings.hold``)."""
        self.settings = settings
        self.running = 0
        self.waiting = 0
        self.kv_tokens = 0
        self._queue: collections.deque[asyncio.Future[None]] = collections.deque()
        self._released: asyncio.Event | None = None
        self._held = settings.hold
        self.engine_dead = False
        """True from :meth:`kill_engine` until :meth:`revive_engine` (see the module docstring)."""
        self._engine_death: asyncio.Future[None] | None = None
        self.responses: dict[tuple[str, int], int] = collections.Counter()
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.finished: dict[str, int] = collections.Counter()
        self.natural = NaturalLengths(
            settings.natural_output_tokens, settings.output_tokens, settings.natural_output_seed
        )
        """The natural answer length of each request (:class:`mockpool.natural.NaturalLengths`)."""

    # -- hold / release -------------------------------------------------------------------------------
    def _event(self) -> asyncio.Event:
        if self._released is None:
            self._released = asyncio.Event()
            if not self._held:
                self._released.set()
        return self._released

    @property
    def held(self) -> bool:
        """True while admitted requests are paused before generating."""
        return self._held

    def hold(self) -> None:
        """Pause admitted requests before their first output token (until :meth:`release`)."""
        self._held = True
        self._event().clear()

    def release(self) -> None:
        """Let held requests proceed."""
        self._held = False
        self._event().set()

    async def wait_released(self) -> None:
        """Return at once when not held, else when :meth:`release` is called."""
        await self._event().wait()

    # -- engine death ---------------------------------------------------------------------------------
    def kill_engine(self) -> None:
        """The engine died: requests generating now stop for good; new ones get 500 (app)."""
        self.engine_dead = True
        if self._engine_death is None or self._engine_death.done():
            self._engine_death = asyncio.get_running_loop().create_future()

    def revive_engine(self) -> None:
        """A restarted engine: new requests are served; the requests it stopped stay stopped."""
        self.engine_dead = False
        self._engine_death = None

    async def stop_if_engine_dead(self) -> None:
        """Return at once while the engine runs; after its death, never (until the client leaves)."""
        death = self._engine_death
        if self.engine_dead and death is not None:
            await asyncio.shield(death)

    # -- admission ------------------------------------------------------------------------------------
    def _grant(self) -> None:
        while self._queue and self.running < self.settings.max_num_seqs:
            fut = self._queue.popleft()
            if fut.done():
                continue
            self.waiting -= 1
            self.running += 1
            fut.set_result(None)

    async def _acquire(self) -> None:
        if self.running < self.settings.max_num_seqs and not self._queue:
            self.running += 1
            return
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._queue.append(fut)
        self.waiting += 1
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():
                self._release_slot()  # granted just before the cancel: pass the slot on
            else:
                fut.cancel()
                self._queue.remove(fut)
                self.waiting -= 1
            raise

    def _release_slot(self) -> None:
        self.running -= 1
        self._grant()

    @asynccontextmanager
    async def slot(self, prompt_tokens: int) -> AsyncIterator[KvLease]:
        """Hold one running slot (waiting in FIFO order if the pool is full) for the block's duration.

        Yields a :class:`KvLease` to account generated tokens; KV tokens are returned on exit.
        """
        await self._acquire()
        lease = KvLease(self, prompt_tokens)
        self.kv_tokens += prompt_tokens
        try:
            yield lease
        finally:
            self.kv_tokens -= lease.tokens
            self._release_slot()

    # -- counters -------------------------------------------------------------------------------------
    def record_response(self, path: str, status: int) -> None:
        """Count one response to ``path`` with HTTP ``status``."""
        self.responses[(path, status)] += 1

    def record_finished(self, prompt_tokens: int, completion_tokens: int, finish_reasons: list[str]) -> None:
        """Account a served request's tokens and finish reasons (``vllm:request_success``)."""
        self.prompt_tokens_total += prompt_tokens
        self.generation_tokens_total += completion_tokens
        for reason in finish_reasons:
            self.finished[reason] += 1

    @property
    def kv_cache_usage(self) -> float:
        """Fraction of KV capacity in use by running requests (0..1)."""
        return min(1.0, self.kv_tokens / self.settings.kv_capacity_tokens)

    def reset_counters(self) -> None:
        """Zero the served counters (not the queue)."""
        self.responses.clear()
        self.finished.clear()
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0

    def stats(self) -> dict[str, Any]:
        """JSON-able snapshot for ``GET /admin/stats``.

        Shape: ``{"pool", "tokenizer", "max_model_len", "max_num_seqs", "running", "waiting", "held",
        "kv_cache_usage_perc", "requests": {path: {status: count}}, "requests_total",
        "prompt_tokens_total", "generation_tokens_total", "finished": {reason: count}}``.
        """
        by_path: dict[str, dict[str, int]] = {}
        for (path, status), count in sorted(self.responses.items()):
            by_path.setdefault(path, {})[str(status)] = count
        return {
            "pool": self.settings.name,
            "tokenizer": self.settings.tokenizer,
            "max_model_len": self.settings.max_model_len,
            "max_num_seqs": self.settings.max_num_seqs,
            "running": self.running,
            "waiting": self.waiting,
            "held": self.held,
            "kv_cache_usage_perc": self.kv_cache_usage,
            "requests": by_path,
            "requests_total": sum(self.responses.values()),
            "prompt_tokens_total": self.prompt_tokens_total,
            "generation_tokens_total": self.generation_tokens_total,
            "finished": dict(self.finished),
        }


class KvLease:
    """KV tokens held by one running request (prompt + generated so far)."""

    def __init__(self, state: PoolState, prompt_tokens: int) -> None:
        """Lease ``prompt_tokens`` of ``state``'s KV capacity (already added by :meth:`PoolState.slot`)."""
        self._state = state
        self.tokens = prompt_tokens

    def add(self, n: int = 1) -> None:
        """Account ``n`` more generated tokens."""
        self.tokens += n
        self._state.kv_tokens += n
