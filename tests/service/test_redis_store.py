"""Shared calibration across replicas through a real redis-server (issue 5, item 4)."""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from devstack.redis import RedisServer
from extproc.config import parse_config
from extproc.core.estimate.calibration import InMemoryRatioStore, LearnerParams
from extproc.service.app import RouterApp
from extproc.service.metrics import RouterMetrics
from extproc.service.redis_store import RedisRatioStore
from tests.service.streams import FAST_LEARNING, POOLS, TEXT_LONG, calibrate, ratios, route_of, usage_at
from tests.waiting import until_async

pytestmark = pytest.mark.redis


def redis_config(url: str) -> dict[str, object]:
    return {
        "pools": POOLS,
        "estimator": FAST_LEARNING,
        "calibration": {"warmup_samples": 3, "redis_url": url, "redis_sync_interval_s": 0.05},
    }


async def test_calibration_learned_on_one_replica_routes_the_other(redis_server: RedisServer) -> None:
    cfg = parse_config(redis_config(redis_server.url))
    async with (
        RouterApp(cfg, grpc_port=0, admin_port=0) as a,
        RouterApp(cfg, grpc_port=0, admin_port=0) as b,
    ):
        # Both start at the cold prior: the text fits the short pool.
        assert await route_of(b.grpc_port, TEXT_LONG) == "short"
        # Replica A sees the pool count twice the modelled tokens, three times (warm-up 3).
        await calibrate(a.grpc_port, TEXT_LONG, prompt_tokens=usage_at(TEXT_LONG, 0.5), times=3)
        assert await route_of(a.grpc_port, TEXT_LONG) == "long"

        async def b_learned() -> bool:
            return any(r["samples"] == 3 for r in await ratios(b.admin_port))

        await until_async(b_learned, timeout_s=5.0, what="replica b learned")
        (row_a,) = await ratios(a.admin_port)
        (row_b,) = await ratios(b.admin_port)
        assert row_b == row_a
        assert row_b["warm"] is True
        assert float(row_b["mean_model_to_true_ratio"]) == pytest.approx(0.5, abs=0.01)  # type: ignore[arg-type]
        # B never saw a response, yet routes by A's calibration.
        assert await route_of(b.grpc_port, TEXT_LONG) == "long"
        metrics_b = await _metrics(b.admin_port)
        assert "tbr_ratio_store_up 1.0" in metrics_b
        assert 'tbr_model_to_true_ratio{category="latin",model_name="m"}' in metrics_b


async def _metrics(port: int) -> str:
    from tests.service.streams import admin_get

    return (await admin_get(port, "/metrics")).text


async def test_server_side_ema_matches_local_formula(redis_server: RedisServer) -> None:
    """The Lua script and calibration.ema_update agree, observation by observation."""
    metrics = RouterMetrics()
    params = LearnerParams(beta=0.8, quantile=0.2, quantile_step=0.05, initial_margin=0.1)
    store = RedisRatioStore(url=redis_server.url, params=params, metrics=metrics, sync_interval_s=60)
    reference = InMemoryRatioStore(beta=0.8, params=params)
    await store.start()
    try:
        for c, w in ((3.1, 1.0), (4.7, 0.5), (2.2, 1.0), (5.0, 0.25), (3.3, 1.0), (1.9, 1.0)):
            store.observe(("m", "code"), c, w)
            reference.observe(("m", "code"), c, w)
        assert await store.sync_once()
        client = aioredis.from_url(redis_server.url, decode_responses=True)
        mean, dev, samples, low = (await client.hget("tbr:ratios", "code:m") or "").split()
        version = await client.get("tbr:ratios-version")
        await client.aclose()
        ref = reference.get(("m", "code"))
        assert ref is not None
        assert float(mean) == pytest.approx(ref.mean_ratio, rel=1e-12)
        assert float(dev) == pytest.approx(ref.dev_ratio, rel=1e-12)
        assert float(low) == pytest.approx(ref.low_ratio, rel=1e-12) and 0 < ref.low_ratio < ref.mean_ratio
        assert int(samples) == 6  # one batch
        assert isinstance(version, str) and version.startswith("tbr:batch:")  # its unique id
        assert store.get(("m", "code")) == pytest.approx(ref)  # local cache pulled back
    finally:
        await store.close()


async def test_redis_down_keeps_routing_counts_and_recovers(redis_server: RedisServer) -> None:
    cfg = parse_config(redis_config(redis_server.url))
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        assert app.redis is not None and app.redis.up
        redis_server.stop()
        # Routing and local learning continue while Redis is down.
        await calibrate(app.grpc_port, TEXT_LONG, prompt_tokens=usage_at(TEXT_LONG, 0.5), times=3)
        assert await route_of(app.grpc_port, TEXT_LONG) == "long"

        async def down_counted() -> bool:
            text = await _metrics(app.admin_port)
            return "tbr_ratio_store_up 0.0" in text and "tbr_ratio_store_errors_total{" in text

        await until_async(down_counted, timeout_s=5.0, what="Redis down counted")
        assert app.redis.queue_length == 3
        redis_server.start()  # same port, empty data set: the queued observations are replayed

        async def recovered() -> bool:
            return app.redis is not None and app.redis.up and app.redis.queue_length == 0

        await until_async(recovered, timeout_s=8.0, what="Redis back")
        client = aioredis.from_url(redis_server.url, decode_responses=True)
        value = await client.hget("tbr:ratios", "latin:m")
        await client.aclose()
        assert isinstance(value, str)
        assert int(value.split()[2]) == 3
        assert "tbr_ratio_store_up 1.0" in await _metrics(app.admin_port)


async def test_unreachable_redis_at_start_still_serves() -> None:
    from devstack.procs import free_port

    cfg = parse_config(redis_config(f"redis://127.0.0.1:{free_port()}/0"))
    t0 = time.monotonic()
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        assert time.monotonic() - t0 < 3.0
        assert app.redis is not None and not app.redis.up
        assert await route_of(app.grpc_port, "hello") == "short"


async def test_retried_batch_is_applied_once(redis_server: RedisServer) -> None:
    """A batch whose reply was lost is retried with the same id and not applied twice."""
    store = RedisRatioStore(
        url=redis_server.url, params=LearnerParams(), metrics=RouterMetrics(), sync_interval_s=60
    )
    await store.start()
    try:
        store.observe(("m", "latin"), 4.0)
        store._batch = [store._queue.popleft()]
        store._batch_id = "fixed-id"
        assert await store.sync_once()  # applied; pretend the reply was lost:
        store._batch = [(("m", "latin"), 4.0, 1.0)]
        store._batch_id = "fixed-id"
        assert await store.sync_once()
        assert store.queue_length == 0
        client = aioredis.from_url(redis_server.url, decode_responses=True)
        value = await client.hget("tbr:ratios", "latin:m")
        await client.aclose()
        assert isinstance(value, str)
        assert int(value.split()[2]) == 1
    finally:
        await store.close()


def test_queue_is_bounded_drop_oldest() -> None:
    metrics = RouterMetrics()
    store = RedisRatioStore(url="redis://127.0.0.1:1/0", params=LearnerParams(), metrics=metrics, queue_max=4)
    for i in range(10):
        store.observe(("m", "latin"), 1.0 + i)
    assert store.queue_length == 4
    assert [c for _, c, _ in store._queue] == [7.0, 8.0, 9.0, 10.0]
    assert metrics.store_dropped._value.get() == 6
