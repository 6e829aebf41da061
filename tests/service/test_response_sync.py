"""The Responses API id → pool map is shared by router replicas through Redis."""

from __future__ import annotations

import asyncio

import pytest

from devstack.redis import RedisServer
from extproc.config import parse_config
from extproc.core.route.response_ids import ResponsePools
from extproc.service.app import RouterApp
from extproc.service.response_sync import ResponsePoolSync
from tests.service.streams import POOLS
from tests.waiting import until_async

pytestmark = pytest.mark.redis


async def test_entry_learned_on_one_replica_is_known_to_the_other(redis_server: RedisServer) -> None:
    cfg = parse_config(
        {"pools": POOLS, "calibration": {"redis_url": redis_server.url, "redis_sync_interval_s": 0.05}}
    )
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as a, RouterApp(cfg, grpc_port=0, admin_port=0) as b:
        a.response_pools.put("resp_abc", "long")
        await until_async(lambda: b.response_pools.get("resp_abc") is not None, what="the entry on replica b")
        assert b.response_pools.get("resp_abc") == "long"


async def test_a_replica_starting_later_reads_only_new_entries_and_failures_keep_entries(
    redis_server: RedisServer,
) -> None:
    first, late = ResponsePools(), ResponsePools()
    sync_first = ResponsePoolSync(first, url=redis_server.url, key_prefix="t:", interval_s=60, timeout_s=1)
    sync_late = ResponsePoolSync(late, url=redis_server.url, key_prefix="t:", interval_s=60, timeout_s=1)
    try:
        first.put("resp_old", "short")
        assert await sync_first.sync_once()
        assert await sync_late.sync_once()  # starts at the stream's end
        assert late.get("resp_old") is None
        first.put("resp_new", "long")
        assert await sync_first.sync_once() and await sync_late.sync_once()
        assert late.get("resp_new") == "long"
    finally:
        await sync_first.close()
        await sync_late.close()
    down = ResponsePools()
    broken = ResponsePoolSync(
        down, url="redis://127.0.0.1:1/0", key_prefix="t:", interval_s=60, timeout_s=0.2
    )
    down.put("resp_x", "long")
    assert not await broken.sync_once()
    assert down.drain() == [("resp_x", "long")]  # kept for the next attempt
    await broken.close()


async def test_close_returns_when_a_sync_swallows_the_cancellation(redis_server: RedisServer) -> None:
    """A cancel that lands while a Redis command times out can surface as a TimeoutError (Python
    3.11's asyncio.timeout / wait_for race) and be handled as a Redis failure; close() must still
    return. Here every sync swallows the cancellation, as that race does."""
    pools = ResponsePools()
    sync = ResponsePoolSync(pools, url=redis_server.url, key_prefix="t:", interval_s=0.001, timeout_s=1)

    started = asyncio.Event()

    async def swallowing_sync() -> bool:
        started.set()
        try:
            await asyncio.Event().wait()  # a Redis command that answers only by being cancelled
        except asyncio.CancelledError:
            return False
        return True

    sync.sync_once = swallowing_sync  # type: ignore[method-assign]
    await sync.start()
    await asyncio.wait_for(started.wait(), 5.0)  # a sync is under way (an event, not an interval)
    closing = asyncio.create_task(sync.close())
    done, _ = await asyncio.wait({closing}, timeout=5.0)
    assert closing in done, "close() did not return: the sync loop outlived its cancellation"
