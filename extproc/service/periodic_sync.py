"""The lifecycle the router's background Redis syncs share (:mod:`.response_sync`,
:mod:`.output_sync`): one task calls :meth:`PeriodicSync.sync_once` every ``interval_s``; closing
stops it, pushes what is queued once more and disconnects, each step bounded in time so that a
Redis that does not answer cannot hold up shutdown."""

from __future__ import annotations

import abc
import asyncio
import contextlib
from typing import Any

from redis.exceptions import RedisError

__all__ = ["PeriodicSync"]


class PeriodicSync(abc.ABC):
    """Start / stop of a periodic push-pull with Redis; subclasses say what one round does.

    Args:
        client: the ``redis.asyncio`` client the subclass uses (closed by :meth:`close`).
        interval_s: period between rounds (``calibration.redis_sync_interval_s``).
        timeout_s: connect and per-command timeout; each closing step is bounded by twice it
            (at least 0.2 s).
        task_name: name of the background task (seen in task dumps).
    """

    def __init__(self, client: Any, *, interval_s: float, timeout_s: float, task_name: str) -> None:
        self._client = client
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self._task_name = task_name
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    @abc.abstractmethod
    async def sync_once(self) -> bool:
        """One round (push what is queued, pull what others wrote); False when Redis failed."""

    @abc.abstractmethod
    async def _push(self) -> None:
        """Push what is queued (also run once more by :meth:`close`)."""

    async def start(self) -> None:
        """Start the background task."""
        self._task = asyncio.create_task(self._run(), name=self._task_name)

    async def close(self) -> None:
        """Stop the task, push what is queued once more, disconnect (each step time-bounded)."""
        if self._task is not None:
            self._stopping = True
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        bound = max(self.timeout_s, 0.1) * 2
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            await asyncio.wait_for(self._push(), timeout=bound)
        with contextlib.suppress(RedisError, OSError, TimeoutError):
            await asyncio.wait_for(self._client.aclose(), timeout=bound)

    async def _run(self) -> None:
        # The flag, not only the cancellation, ends the loop: a cancel that lands while a Redis
        # command times out can be turned into a TimeoutError (Python 3.11's asyncio.timeout /
        # wait_for) and swallowed as a Redis failure, and close() would then wait forever.
        while not self._stopping:
            await self.sync_once()
            if not self._stopping:
                await asyncio.sleep(self.interval_s)
