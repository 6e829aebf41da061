"""The lifecycle the router's background Redis syncs share (:mod:`.redis_store`, :mod:`.response_sync`,
:mod:`.output_sync`, :mod:`.fleet_sync`): how their client and replica id are made, and one task that
calls :meth:`PeriodicSync.sync_once` every ``interval_s`` (sooner on :meth:`PeriodicSync.kick`; after a
failure, with ``backoff_min_s`` set, again after a doubling back-off instead), and whether Redis is
reached: ``up``, one warning when it is first not, one line when it is again. Closing stops it,
pushes what is queued once more and disconnects, each step bounded in time so that a Redis that
does not answer cannot hold up shutdown."""

from __future__ import annotations

import abc
import asyncio
import contextlib
import logging
import uuid
from typing import Any, ClassVar

import redis.asyncio as aioredis
from redis.exceptions import RedisError

__all__ = ["PeriodicSync", "new_replica_id", "redis_client"]

log = logging.getLogger(__name__)


def redis_client(url: str, *, password: str | None, timeout_s: float, **options: Any) -> aioredis.Redis:
    """The ``redis.asyncio`` client of one background sync: ``url`` (``calibration.redis_url``),
    ``password`` (the secret kept out of the YAML, None when the URL carries it or none is needed),
    ``timeout_s`` as the connect and per-command timeout, and any other ``from_url`` ``options``.
    Makes no connection (the pool connects on first use)."""
    client: aioredis.Redis = aioredis.from_url(
        url, password=password, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, **options
    )
    return client


def new_replica_id() -> str:
    """A random id of this router process among the replicas sharing Redis (16 hex digits)."""
    return uuid.uuid4().hex[:16]


class PeriodicSync(abc.ABC):
    """Start / stop of a periodic push-pull with Redis; subclasses say what one round does
    (:meth:`_sync_round`, :meth:`_push`) and may report or skip closing steps (:meth:`_has_queued`,
    :meth:`_close_failed`).

    :meth:`sync_once` runs a round and tracks whether Redis answered: ``up`` (True until a round
    fails), one warning on the subclass's module logger when a round first fails (``{sharing}
    through Redis failed ({while_down}): <error>``) and one info line when a round succeeds again
    (``{sharing} through Redis recovered``); the rounds in between log nothing. A subclass with its
    own failure handling (the ratio store) overrides :meth:`sync_once` instead.

    Args:
        client: the ``redis.asyncio`` client to use (tests); None = :func:`redis_client` of
            ``url``, ``password``, ``timeout_s`` and ``client_options``.
        url: Redis URL (``calibration.redis_url``), when ``client`` is None.
        password: Redis password, when ``client`` is None.
        client_options: more ``redis.asyncio.from_url`` options, when ``client`` is None.
        interval_s: period between rounds (``calibration.redis_sync_interval_s``).
        timeout_s: connect and per-command timeout; each closing step is bounded by twice it
            (at least 0.2 s).
        task_name: name of the background task (seen in task dumps).

    Class attributes: ``backoff_min_s`` (None: a failed round waits ``interval_s`` like any other;
    else the wait after a failure starts at it and doubles up to ``backoff_max_s``); ``sharing``
    (what the sync shares, e.g. ``fleet window sharing``) and ``while_down`` (what happens while
    Redis is down, e.g. ``answers stay local``) for its log lines.
    """

    backoff_min_s: float | None = None
    backoff_max_s: float = 5.0
    sharing: ClassVar[str] = "Redis sync"
    while_down: ClassVar[str] = "state stays local"

    def __init__(
        self,
        client: Any = None,
        *,
        url: str = "",
        password: str | None = None,
        client_options: dict[str, Any] | None = None,
        interval_s: float,
        timeout_s: float,
        task_name: str,
    ) -> None:
        self._client: Any = (
            client
            if client is not None
            else redis_client(url, password=password, timeout_s=timeout_s, **(client_options or {}))
        )
        self.replica_id = new_replica_id()
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._task_name = task_name
        self._task: asyncio.Task[None] | None = None
        self._stopping = False
        self._wake = asyncio.Event()
        self._log = logging.getLogger(type(self).__module__)
        self.up = True
        """Whether the last round reached Redis (True before the first)."""

    async def sync_once(self) -> bool:
        """One round (:meth:`_sync_round`: push what is queued, pull what others wrote); False when
        Redis failed (``RedisError`` or ``OSError``, not raised). Sets ``up``; logs the first failure
        after a success (a warning) and the first success after a failure (info), nothing else."""
        try:
            await self._sync_round()
        except (RedisError, OSError) as exc:
            if self.up:
                self._log.warning("%s through Redis failed (%s): %s", self.sharing, self.while_down, exc)
            self.up = False
            return False
        if not self.up:
            self._log.info("%s through Redis recovered", self.sharing)
        self.up = True
        return True

    async def _sync_round(self) -> None:
        """What one round does (raises ``RedisError`` or ``OSError`` when Redis fails); every
        subclass that keeps :meth:`sync_once` overrides it."""
        raise NotImplementedError(f"{type(self).__name__} does not define a sync round")

    @abc.abstractmethod
    async def _push(self) -> None:
        """Push what is queued (also run once more by :meth:`close`)."""

    def _has_queued(self) -> bool:
        """Whether :meth:`close` has anything to push (default: always try)."""
        return True

    def _close_failed(self, step: str, exc: BaseException) -> None:
        """A closing ``step`` (``push`` or ``disconnect``) failed or timed out (default: a debug
        log line; what was not pushed stays queued for no one, as Redis is unreachable)."""
        log.debug("closing %s: %s failed: %r", self._task_name, step, exc)

    async def start(self) -> None:
        """Start the background task (its first round runs at once)."""
        self._start_task(last_ok=None)

    def _start_task(self, *, last_ok: bool | None) -> None:
        """Start the background task: it runs a round at once (``last_ok`` None), or first waits,
        as after a round that reached Redis (True) or failed (False), when the caller just ran one."""
        self._task = asyncio.create_task(self._run(last_ok), name=self._task_name)
        self._task.add_done_callback(self._log_unexpected_end)

    def kick(self) -> None:
        """Ask the background task to sync now instead of at the next period."""
        self._wake.set()

    async def close(self) -> None:
        """Stop the task, push what is queued once more, disconnect (each step time-bounded)."""
        if self._task is not None:
            self._stopping = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self._client is None:
            return
        bound = max(self.timeout_s, 0.1) * 2
        if self._has_queued():
            try:
                await asyncio.wait_for(self._push(), timeout=bound)
            except (RedisError, OSError, TimeoutError) as exc:
                self._close_failed("push", exc)
        try:
            # Bounded: redis-py's disconnect awaits the transport's wait_closed(), which can
            # wait forever (redis/redis-py#3941); the sockets are closed before that wait.
            await asyncio.wait_for(self._client.aclose(), timeout=bound)
        except (RedisError, OSError, TimeoutError) as exc:
            self._close_failed("disconnect", exc)
        self._client = None

    async def _run(self, last_ok: bool | None) -> None:
        # The flag, not only the cancellation, ends the loop: a cancel that lands while a Redis
        # command times out can be turned into a TimeoutError (Python 3.11's asyncio.timeout /
        # wait_for) and swallowed as a Redis failure, and close() would then wait forever.
        ok = await self.sync_once() if last_ok is None else last_ok
        backoff = self.backoff_min_s
        while not self._stopping:
            delay = self.interval_s if ok or backoff is None else backoff
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), timeout=delay)
            self._wake.clear()
            if self._stopping:
                break
            ok = await self.sync_once()
            if self.backoff_min_s is not None and backoff is not None:
                backoff = self.backoff_min_s if ok else min(backoff * 2, self.backoff_max_s)

    def _log_unexpected_end(self, task: asyncio.Task[None]) -> None:
        if not task.cancelled() and task.exception() is not None:
            log.error("background Redis sync %s died", self._task_name, exc_info=task.exception())
