"""Share the Responses API ``id`` → pool map (:mod:`extproc.core.route.response_ids`) across router replicas.

With ``calibration.redis_url`` set, every replica appends the entries it learns to one Redis
stream and reads the others' entries from it, every ``redis_sync_interval_s`` (the same cadence and
consistency model as the shared ratios, docs/operations.md): a follow-up request that reaches
another replica more than about one interval after the first answer finds its pool. The request
path never waits for Redis; when Redis is down, entries stay local (the queue keeps the newest
``10,000``) and the failure is logged once.

Redis layout: stream ``{prefix}response-pools`` (``XADD … MAXLEN ~ 100000``), fields ``id`` and
``pool``. A replica starts reading at the stream's current end.
"""

from __future__ import annotations

from typing import Any

from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from extproc.core.route.response_ids import ResponsePools
from extproc.service.periodic_sync import PeriodicSync

__all__ = ["ResponsePoolSync"]


STREAM_MAXLEN = 100_000
READ_COUNT = 10_000


class ResponsePoolSync(PeriodicSync):
    """Background push/pull of :class:`ResponsePools` entries through a Redis stream.

    Args:
        pools: the process-wide map.
        url: Redis URL.
        key_prefix: ``calibration.redis_key_prefix``.
        interval_s: sync period (``calibration.redis_sync_interval_s``).
        timeout_s: connect and per-command timeout.
        password: Redis password (as for the ratio store).
    """

    sharing = "response id sharing"
    while_down = "entries stay local"

    def __init__(
        self,
        pools: ResponsePools,
        *,
        url: str,
        key_prefix: str,
        interval_s: float,
        timeout_s: float,
        password: str | None = None,
    ) -> None:
        super().__init__(
            url=url,
            password=password,
            client_options={"retry": Retry(NoBackoff(), 0)},
            interval_s=interval_s,
            timeout_s=timeout_s,
            task_name="redis-response-pools",
        )
        self.pools = pools
        self.key = f"{key_prefix}response-pools"
        self._last_id = "$"

    async def _sync_round(self) -> None:
        """One push of queued entries and one pull of new ones."""
        if self._last_id == "$":
            info = await self._client.xinfo_stream(self.key) if await self._client.exists(self.key) else None
            self._last_id = info["last-generated-id"] if info else "0-0"
        await self._push()
        await self._pull()

    async def _push(self) -> None:
        entries = self.pools.drain()
        if not entries:
            return
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for response_id, pool in entries:
                    pipe.xadd(
                        self.key, {"id": response_id, "pool": pool}, maxlen=STREAM_MAXLEN, approximate=True
                    )
                await pipe.execute()
        except BaseException:
            for response_id, pool in entries:  # keep them for the next attempt
                self.pools.requeue(response_id, pool)
            raise

    async def _pull(self) -> None:
        while True:
            got: Any = await self._client.xread({self.key: self._last_id}, count=READ_COUNT)
            if not got:
                return
            rows: list[Any] = got[0][1]
            merged: list[tuple[str, str]] = []
            for entry_id, fields in rows:
                self._last_id = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                rid, pool = fields.get(b"id"), fields.get(b"pool")
                if isinstance(rid, bytes) and isinstance(pool, bytes):
                    merged.append((rid.decode("utf-8", "replace"), pool.decode("utf-8", "replace")))
            self.pools.merge(merged)
            if len(rows) < READ_COUNT:
                return
