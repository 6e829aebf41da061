"""Per-pool runtime state: admission queue (``max_num_seqs``), hold/release, KV usage and served counters.

Scheduling model (a stand-in for vLLM's scheduler, deliberately simple and deterministic):

* at most ``max_num_seqs`` requests *run* at once; later ones *wait* in a FIFO queue
  (``vllm:num_requests_running`` / ``vllm:num_requests_waiting``);
* while the pool is *held* (``POST /admin/hold``), admitted requests pause before their first output token
  until ``POST /admin/release``: a test can fill a pool to exactly ``max_num_seqs`` running + k waiting;
* KV usage = Σ (prompt + generated tokens) of running requests / ``kv_capacity_tokens`` (capped at 1).
* while the engine is *dead* (``POST /admin/engine-dead``), as measured on vLLM 0.32 after its
  ``EngineCore`` process was killed: ``/health`` answers 503, every generation request 500 with
  ``EngineDeadError``'s message, and a request generating at that moment ends at once: a stream with
  that error as its last event before ``[DONE]``, a non-streaming request with the 500 (vLLM's
  default then shuts the server down; ``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1`` keeps it answering so).
  ``POST /admin/engine-alive`` stands for a restarted pool;
* while the engine is *stopped* (``POST /admin/engine-stop``; vLLM's ``EngineCore`` process
  SIGSTOPped), requests stop where they are: no further token and no end, connections left open;
  ``/health`` still answers 200 (vLLM's health check does not reach the engine).
  ``POST /admin/engine-resume`` lets them go on.
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

ENGINE_DEAD_MESSAGE = "EngineCore encountered an issue. See stack trace (above) for the root cause."
"""vllm.v1.engine.exceptions.EngineDeadError's message (vLLM 0.32)."""


class EngineDeadError(RuntimeError):
    """The engine died while a request was generating (vLLM's ``EngineDeadError``)."""


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
        self._engine_running: asyncio.Event | None = None
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

    # -- engine death and stop ------------------------------------------------------------------------
    def kill_engine(self) -> None:
        """The engine died: requests generating now end with :class:`EngineDeadError`; new ones get 500."""
        self.engine_dead = True
        self._running().set()  # a stopped request wakes up to find the engine dead

    def revive_engine(self) -> None:
        """A restarted engine: new requests are served again."""
        self.engine_dead = False

    def _running(self) -> asyncio.Event:
        if self._engine_running is None:
            self._engine_running = asyncio.Event()
            self._engine_running.set()
        return self._engine_running

    def stop_engine(self) -> None:
        """The engine is stopped (SIGSTOP): requests wait before their next token until :meth:`resume_engine`."""
        self._running().clear()

    def resume_engine(self) -> None:
        """The stopped engine goes on (SIGCONT)."""
        self._running().set()

    async def engine_step(self) -> None:
        """Before each token: wait while the engine is stopped; raise :class:`EngineDeadError` once it died."""
        await self._running().wait()
        if self.engine_dead:
            raise EngineDeadError(ENGINE_DEAD_MESSAGE)

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
