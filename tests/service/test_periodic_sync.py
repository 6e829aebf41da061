"""The background Redis syncs share one lifecycle (extproc/service/periodic_sync.py): one way to
build their client and replica id, one loop (with back-off only where asked, and kick), one close,
and one way to track whether Redis answers (``up``, one warning, one recovery line)."""

from __future__ import annotations

import asyncio
import logging
import re

import pytest
import redis.asyncio as aioredis

from devstack.procs import free_port
from devstack.redis import RedisServer
from extproc.config import OutputReserveConfig
from extproc.core.estimate.calibration import LearnerParams
from extproc.core.estimate.output_reserve import OutputLengthLearner
from extproc.core.route.fleet_window import FleetWindow
from extproc.core.route.response_ids import ResponsePools
from extproc.service.fleet_sync import FleetWindowSync
from extproc.service.metrics import RouterMetrics
from extproc.service.output_sync import OutputLengthSync
from extproc.service.periodic_sync import PeriodicSync
from extproc.service.redis_store import RedisRatioStore
from extproc.service.response_sync import ResponsePoolSync

PASSWORD = "s3cret"


def _syncs(url: str, password: str | None) -> list[PeriodicSync]:
    """The four background syncs of a router replica, as the service builds them."""
    common = {"url": url, "key_prefix": "t:", "timeout_s": 1.0, "password": password}
    return [
        RedisRatioStore(params=LearnerParams(), metrics=RouterMetrics(), sync_interval_s=3600.0, **common),  # type: ignore[arg-type]
        ResponsePoolSync(ResponsePools(), interval_s=3600.0, **common),  # type: ignore[arg-type]
        OutputLengthSync(OutputLengthLearner(OutputReserveConfig()), interval_s=3600.0, **common),  # type: ignore[arg-type]
        FleetWindowSync(
            FleetWindow(["short"], window_s=60.0, bucket_s=10.0, started_s=0.0),
            interval_s=3600.0,
            clock=lambda: 100.0,
            **common,  # type: ignore[arg-type]
        ),
    ]


async def _round(sync: PeriodicSync) -> bool:
    if isinstance(sync, RedisRatioStore):
        await sync.start()  # registers its scripts, then runs its first round
        return sync.up
    return await sync.sync_once()


@pytest.mark.redis
async def test_every_sync_authenticates_with_the_password_kept_out_of_the_url(
    redis_server: RedisServer,
) -> None:
    """A Redis that needs a password given apart from the URL (``TBR_REDIS_PASSWORD``): every sync
    reaches it with the password (the response-id sync did not use it before) and none without."""
    admin = aioredis.from_url(redis_server.url)
    await admin.config_set("requirepass", PASSWORD)
    await admin.aclose()
    for password, reached in ((PASSWORD, True), (None, False)):
        syncs = _syncs(redis_server.url, password)
        try:
            assert [await _round(s) for s in syncs] == [reached] * 4, password
        finally:
            for s in syncs:
                await s.close()
    ids = [s.replica_id for s in _syncs(redis_server.url, None)]
    assert len(set(ids)) == 4 and all(re.fullmatch(r"[0-9a-f]{16}", i) for i in ids)


class _Counted(ResponsePoolSync):
    """A response-id sync that reports each round (the loop under test is the shared one)."""

    def __init__(self, rounds_wanted: int, *, backoff_s: float | None) -> None:
        super().__init__(
            ResponsePools(),
            url=f"redis://127.0.0.1:{free_port()}/0",  # nobody listens: every round fails
            key_prefix="t:",
            interval_s=3600.0,
            timeout_s=0.5,
        )
        self.backoff_min_s = backoff_s
        self.rounds = 0
        self.rounds_wanted = rounds_wanted
        self.done = asyncio.Event()

    async def sync_once(self) -> bool:
        ok = await super().sync_once()
        self.rounds += 1
        if self.rounds >= self.rounds_wanted:
            self.done.set()
        return ok


async def test_a_failing_round_backs_off_only_where_asked_and_kick_runs_one_now() -> None:
    # with a back-off (as the ratio store has), failed rounds come again after 0.01, 0.02, 0.04 s
    backing_off = _Counted(4, backoff_s=0.01)
    await backing_off.start()
    try:
        await asyncio.wait_for(backing_off.done.wait(), timeout=10.0)
    finally:
        await backing_off.close()
    # without one (the other syncs), a failed round waits the period like any other: one round
    # at start, the next only when kicked
    steady = _Counted(1, backoff_s=None)
    await steady.start()
    try:
        await asyncio.wait_for(steady.done.wait(), timeout=10.0)
        steady.done.clear()
        steady.rounds_wanted = 2
        steady.kick()
        await asyncio.wait_for(steady.done.wait(), timeout=10.0)
        assert steady.rounds == 2
    finally:
        await steady.close()
    assert steady._task is None and steady._client is None  # closed: task stopped, disconnected


@pytest.mark.redis
async def test_close_pushes_what_is_queued_once_more(redis_server: RedisServer) -> None:
    """Each sync's close pushes its queue (the response-id map here) before disconnecting."""
    pools = ResponsePools()
    sync = ResponsePoolSync(pools, url=redis_server.url, key_prefix="t:", interval_s=3600.0, timeout_s=1.0)
    await sync.start()
    pools.put("resp_1", "long")
    await sync.close()
    client = aioredis.from_url(redis_server.url, decode_responses=True)
    rows = await client.xrange("t:response-pools")
    await client.aclose()
    assert rows is not None and [fields for _, fields in rows] == [{"id": "resp_1", "pool": "long"}]


OUTAGE_LINES = {
    ResponsePoolSync: ("extproc.service.response_sync", "response id sharing", "entries stay local"),
    OutputLengthSync: ("extproc.service.output_sync", "output length sharing", "answers stay local"),
    FleetWindowSync: ("extproc.service.fleet_sync", "fleet window sharing", "advice from this replica"),
}
"""Per sync: the logger of its warning and recovery line, what it shares, what happens while Redis is down."""


@pytest.mark.redis
@pytest.mark.parametrize("index", [1, 2, 3], ids=["response_ids", "output_lengths", "fleet_window"])
async def test_an_outage_is_warned_once_and_its_end_logged_once(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture, index: int
) -> None:
    """Redis killed for three rounds, then back: ``up`` follows it, the first failed round logs one
    warning, the first round that reaches Redis again logs one recovery line, the rest nothing."""
    sync = _syncs(redis_server.url, None)[index]
    logger, sharing, while_down = OUTAGE_LINES[type(sync)]
    caplog.set_level(logging.INFO, logger=logger)

    def lines() -> list[tuple[int, str]]:
        return [(r.levelno, r.getMessage()) for r in caplog.records if r.name == logger]

    try:
        assert await sync.sync_once() and sync.up and lines() == []
        redis_server.stop()
        assert [await sync.sync_once() for _ in range(3)] == [False] * 3 and not sync.up
        [(level, warning)] = lines()
        assert level == logging.WARNING
        assert warning.startswith(f"{sharing} through Redis failed ({while_down}): "), warning
        redis_server.start()  # the same port
        assert await sync.sync_once() and await sync.sync_once() and sync.up
        assert lines()[1:] == [(logging.INFO, f"{sharing} through Redis recovered")]
    finally:
        await sync.close()
