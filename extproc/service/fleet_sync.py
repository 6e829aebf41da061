"""Share the advice windows (:mod:`extproc.core.route.fleet_window`) across router replicas through Redis.

Each replica sees a share of the traffic; the fleet's arrival rate and mix are the sum. With
``advice.enabled`` and ``calibration.redis_url`` set, every replica writes its window's buckets to one
Redis hash field (its replica id) every ``calibration.redis_sync_interval_s`` and reads the others'
fields into its window (:meth:`FleetWindow.set_remote`). Buckets are aligned on wall-clock time, so the
sum is exact up to the sync interval. A field whose ``written_s`` is older than the window (a replica
that stopped) is ignored and deleted; a field that does not parse is skipped and counted. The request
path never waits for Redis.

Redis layout (``{prefix}`` = ``calibration.redis_key_prefix``): hash ``{prefix}fleet-window``, field =
replica id, value = ``{"written_s": …, "window": FleetWindow.export()}`` as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from extproc.core.route.fleet_window import FleetWindow, WindowFormatError
from extproc.service.periodic_sync import PeriodicSync

__all__ = ["FleetWindowSync"]


MAX_REPLICAS = 1024
"""Fields read from the hash at most (more: the rest are ignored)."""


class FleetWindowSync(PeriodicSync):
    """Background push of this replica's window and pull of the others'.

    Args:
        window: the process's advice window.
        url: Redis URL (``calibration.redis_url``).
        key_prefix: ``calibration.redis_key_prefix``.
        interval_s: sync period, seconds.
        timeout_s: connect and per-command timeout, seconds.
        clock: wall-clock seconds (``time.time`` in the router; a fake clock in tests).
        password: Redis password (as for the ratio store).
        on_row: called with ``applied``, ``stale`` or ``bad_row`` per other replica's field.
        client: a Redis client to use instead of one built from ``url`` (tests).
    """

    sharing = "fleet window sharing"
    while_down = "advice from this replica"

    def __init__(
        self,
        window: FleetWindow,
        *,
        url: str,
        key_prefix: str,
        interval_s: float,
        timeout_s: float,
        clock: Callable[[], float],
        password: str | None = None,
        on_row: Callable[[str], None] | None = None,
        client: Any = None,
    ) -> None:
        super().__init__(
            client,
            url=url,
            password=password,
            interval_s=interval_s,
            timeout_s=timeout_s,
            task_name="redis-fleet-window",
        )
        self.window = window
        self.hash_key = f"{key_prefix}fleet-window"
        self.clock = clock
        self._on_row = on_row or (lambda _outcome: None)

    async def _sync_round(self) -> None:
        """One push of this replica's window and one pull of the others' (when Redis fails, the
        advice sums the replicas' last windows it has, which expire with the window)."""
        await self._push()
        await self._pull()

    async def _push(self) -> None:
        now = self.clock()
        doc = {"written_s": now, "window": self.window.export(now)}
        await self._client.hset(self.hash_key, self.replica_id, json.dumps(doc, separators=(",", ":")))

    async def _pull(self) -> None:
        now = self.clock()
        raw: dict[Any, Any] = await self._client.hgetall(self.hash_key)
        keep: list[str] = []
        stale: list[Any] = []
        for field, value in list(raw.items())[:MAX_REPLICAS]:
            replica = field.decode("utf-8", "replace") if isinstance(field, bytes) else str(field)
            if replica == self.replica_id:
                continue
            try:
                doc = json.loads(value)
                written = doc["written_s"]
                if not isinstance(written, int | float) or isinstance(written, bool):
                    raise WindowFormatError("written_s is not a number")
                if now - written > self.window.window_s:
                    stale.append(field)
                    self._on_row("stale")
                    continue
                self.window.set_remote(replica, doc["window"], now)
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                self._on_row("bad_row")
                continue
            keep.append(replica)
            self._on_row("applied")
        self.window.drop_remote(keep)
        if stale:
            await self._client.hdel(self.hash_key, *stale)
