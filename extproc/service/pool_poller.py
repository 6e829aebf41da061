"""One asyncio task that polls every pool's HTTP endpoint at a fixed interval: the loop shared by
the load scraper (:mod:`extproc.service.scrape`, vLLM ``/metrics``) and the health checker
(:mod:`extproc.service.pool_health`, vLLM ``/health``)."""

from __future__ import annotations

import asyncio
import contextlib

__all__ = ["PoolPoller"]


class PoolPoller:
    """Polls ``targets`` (``(pool name, url)`` pairs) every :attr:`interval_s` seconds, all pools
    concurrently, in one task named ``task_name``. Subclasses implement :meth:`poll_once`, which
    must never raise, and may narrow :meth:`enabled`."""

    task_name = "tbr-pool-poller"

    def __init__(self, targets: list[tuple[str, str]], interval_s: float) -> None:
        self.targets = targets
        self.interval_s = interval_s
        self._task: asyncio.Task[None] | None = None

    async def poll_once(self, pool: str, url: str) -> object:
        """Poll one pool; record and count the result. Never raises."""
        raise NotImplementedError

    def enabled(self) -> bool:
        """Whether :meth:`start` starts the task (by default: when there is a target)."""
        return bool(self.targets)

    async def poll_all(self) -> None:
        """Poll every target concurrently."""
        await asyncio.gather(*(self.poll_once(name, url) for name, url in self.targets))

    async def run(self) -> None:
        """Poll every :attr:`interval_s` until cancelled."""
        while True:
            await self.poll_all()
            await asyncio.sleep(self.interval_s)

    def start(self) -> None:
        """Start :meth:`run` as a task (no-op when not :meth:`enabled` or already started)."""
        if self.enabled() and self._task is None:
            self._task = asyncio.create_task(self.run(), name=self.task_name)

    async def stop(self) -> None:
        """Cancel the task and wait for it."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
