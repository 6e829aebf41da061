"""Benchmark of the shared ratio store against a real local redis-server.

Run: ``.venv/bin/python benchmarks/redis_store.py``. Starts ``redis-server`` on a free loopback
port (killed at the end) and prints JSON:

* ``observe_us``: request-path cost of one ``observe`` (local EMA + enqueue), in-memory vs Redis
  store (best of 5 × 100,000);
* ``push_obs_per_s``: observations applied per second by one ``sync_once`` (batched Lua EMA);
* ``pull_ms``: one pull of N keys into the local cache, and one when nothing changed (a GET);
* ``propagation_ms``: time from ``observe`` on replica A to visibility on replica B, for a sync
  interval (median of 20).
"""

from __future__ import annotations

import asyncio
import json
import statistics
import sys
import tempfile
import time
import timeit
from pathlib import Path

from devstack.redis import RedisServer, redis_binary
from extproc.core.estimate.calibration import InMemoryRatioStore, LearnerParams
from extproc.service.metrics import RouterMetrics
from extproc.service.redis_store import RedisRatioStore

T0 = time.perf_counter()


def progress(what: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f} s] {what}", file=sys.stderr, flush=True)


async def main(url: str) -> dict[str, object]:
    out: dict[str, object] = {}
    mem = InMemoryRatioStore(beta=0.9)
    red = RedisRatioStore(url=url, params=LearnerParams(), metrics=RouterMetrics(), queue_max=10_000_000)
    keys = [(f"model-{i % 32}", f"cat-{i // 32}") for i in range(384)]  # 32 models x 12 categories

    def obs(store: InMemoryRatioStore | RedisRatioStore) -> None:
        for k in keys:
            store.observe(k, 3.7)

    n = 100_000 // len(keys) + 1
    out["observe_us"] = {
        "memory": round(min(timeit.repeat(lambda: obs(mem), number=n, repeat=5)) / (n * len(keys)) * 1e6, 3),
        "redis": round(min(timeit.repeat(lambda: obs(red), number=n, repeat=5)) / (n * len(keys)) * 1e6, 3),
    }
    red._queue.clear()
    progress("observe timed")
    await red.start()
    for _ in range(20_000 // len(keys)):
        obs(red)
    queued = red.queue_length
    t0 = time.perf_counter()
    assert await red.sync_once()
    out["push_obs_per_s"] = round(queued / (time.perf_counter() - t0))
    full, unchanged = [], []
    for _ in range(20):
        t0 = time.perf_counter()
        await red._pull()  # version unchanged: one GET
        unchanged.append(time.perf_counter() - t0)
        red._version = None  # force a full HGETALL
        t0 = time.perf_counter()
        await red._pull()
        full.append(time.perf_counter() - t0)
    out["pull_ms_median"] = {
        f"full_{len(red.items())}_keys": round(statistics.median(full) * 1e3, 2),
        "unchanged_version": round(statistics.median(unchanged) * 1e3, 2),
    }
    await red.close()
    progress("push/pull timed")

    prop: dict[str, float] = {}
    for interval in (0.05, 0.2, 1.0):
        a = RedisRatioStore(
            url=url, params=LearnerParams(), metrics=RouterMetrics(), sync_interval_s=interval
        )
        b = RedisRatioStore(
            url=url, params=LearnerParams(), metrics=RouterMetrics(), sync_interval_s=interval
        )
        await a.start()
        await b.start()
        samples = []
        for i in range(20 if interval < 1 else 6):
            key = (f"prop-{interval}", f"k{i}")
            seen = asyncio.Event()
            b.on_update = lambda k, key=key, seen=seen: seen.set() if k == key else None
            t0 = time.perf_counter()
            a.observe(key, 4.0)
            await asyncio.wait_for(seen.wait(), timeout=30)
            samples.append(time.perf_counter() - t0)
        progress(f"propagation at {interval}s timed")
        prop[f"interval_{interval}s"] = round(statistics.median(samples) * 1e3, 1)
        await a.close()
        await b.close()
    out["propagation_ms_median"] = prop
    return out


if __name__ == "__main__":
    if redis_binary() is None:
        sys.exit("redis-server not installed")
    with tempfile.TemporaryDirectory() as tmp, RedisServer(Path(tmp)) as redis:
        print(json.dumps(asyncio.run(main(redis.url)), indent=1))
