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
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import timeit

from extproc.core.calibration import InMemoryRatioStore, LearnerParams
from extproc.service.metrics import RouterMetrics
from extproc.service.redis_store import RedisRatioStore

T0 = time.perf_counter()


def progress(what: str) -> None:
    print(f"[{time.perf_counter() - T0:6.1f} s] {what}", file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_redis(port: int, tmp: str) -> subprocess.Popen[bytes]:
    binary = shutil.which("redis-server")
    if binary is None:
        sys.exit("redis-server not installed")
    proc = subprocess.Popen(
        [
            binary,
            "--port",
            str(port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            tmp,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(250):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2) as s:
                s.sendall(b"PING\r\n")
                if s.recv(16).startswith(b"+PONG"):
                    return proc
        except OSError:
            time.sleep(0.02)
    proc.kill()
    sys.exit("redis-server did not start")


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
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        proc = start_redis(port, tmp)
        try:
            print(json.dumps(asyncio.run(main(f"redis://127.0.0.1:{port}/0")), indent=1))
        finally:
            proc.kill()
            proc.wait()
