"""Router memory: RSS at idle and while 1,000 long-lived streaming requests are in flight.

A front Envoy (envoy/envoy.yaml, benchmarks.envoy_configs) sends every request to
:mod:`benchmarks.slow_upstream`, which streams SSE for ``hold_s`` seconds. The router reads
every response (``calibration.sample_rate: 1``: STREAMED SSE bodies, the most state per
stream). The client opens ``concurrency`` HTTP/1.1 connections at once, each POSTing one
``stream: true`` chat request and reading the whole stream. Router RSS is sampled every 0.25 s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from benchmarks.envoy_configs import ListenerSpec, front_bootstrap
from benchmarks.procs import rss_bytes
from benchmarks.stack import envoy_proc, router_proc
from devstack.procs import ManagedProcess, free_port, tcp_open

__all__ = ["run_memory"]


async def _one(port: int, body: bytes) -> bool:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            b"POST /v1/chat/completions HTTP/1.1\r\nhost: bench\r\ncontent-type: application/json\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        data = await reader.read()
        return data.startswith(b"HTTP/1.1 200") and b"[DONE]" in data
    finally:
        writer.close()


def _active_streams(admin: int) -> int:
    """ext_proc streams Envoy holds open to the router right now (cluster gauge)."""
    import httpx

    text = httpx.get(
        f"http://127.0.0.1:{admin}/stats?filter=ext_proc_mem.upstream_rq_active", timeout=2.0
    ).text
    for line in text.splitlines():
        name, _, value = line.partition(": ")
        if name.endswith("upstream_rq_active") and value.isdigit():
            return int(value)
    return 0


async def _load(
    port: int,
    body: bytes,
    concurrency: int,
    pid: int,
    samples: list[tuple[float, int]],
    admin: int = 0,
    active: list[int] | None = None,
) -> int:
    stop = asyncio.Event()

    async def sample() -> None:
        while not stop.is_set():
            samples.append((time.monotonic(), rss_bytes(pid)))
            if admin and active is not None:
                active.append(await asyncio.to_thread(_active_streams, admin))
            await asyncio.sleep(0.25)

    sampler = asyncio.create_task(sample())
    results = await asyncio.gather(*(_one(port, body) for _ in range(concurrency)), return_exceptions=True)
    stop.set()
    await sampler
    return sum(1 for r in results if r is True)


def run_memory(
    workdir: Path,
    *,
    concurrency: int,
    hold_s: float,
    rounds: int = 2,
    sample_rate: float = 1.0,
    skip_unsampled: bool = True,
    log: Any = print,
) -> dict[str, Any]:
    """Run the memory benchmark (``rounds`` waves of ``concurrency`` streams); returns RSS
    figures (bytes) and the completed stream counts. Growth between waves = growth per request."""
    body = json.dumps(
        {
            "model": "bench-model",
            "messages": [{"role": "user", "content": "Tell me a long story about a router. " * 25}],
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    ).encode()
    with contextlib.ExitStack() as stack:
        up = free_port()
        upstream = ManagedProcess(
            "slow_upstream",
            [sys.executable, "-m", "benchmarks.slow_upstream", "--port", str(up), "--hold-s", str(hold_s)],
            log_path=workdir / "slow_upstream.log",
            ready=lambda: tcp_open(up),
        )
        router, rport = router_proc(
            "router_mem", workdir, sample_rate=sample_rate, skip_unsampled=skip_unsampled
        )
        admin, port = free_port(), free_port()
        front = envoy_proc(
            "front_mem",
            workdir,
            front_bootstrap(admin, [ListenerSpec("mem", port, [rport])], [up], [up]),
            admin,
        )
        for proc in (upstream, router, front):
            stack.callback(proc.stop)
            proc.start()
        assert router.pid is not None
        # warm-up: a few requests so lazily-initialised state exists before "idle" is read
        asyncio.run(_load(port, body, 8, router.pid, []))
        time.sleep(0.5)
        idle = rss_bytes(router.pid)
        waves = []
        for _ in range(rounds):
            samples: list[tuple[float, int]] = []
            active: list[int] = []
            t0 = time.monotonic()
            ok = asyncio.run(_load(port, body, concurrency, router.pid, samples, admin, active))
            elapsed = time.monotonic() - t0
            time.sleep(1.0)
            after = rss_bytes(router.pid)
            peak = max((r for _, r in samples), default=idle)
            waves.append(
                {
                    "completed_streams": ok,
                    "elapsed_s": elapsed,
                    "peak_rss": peak,
                    "after_rss": after,
                    "peak_open_ext_proc_streams": max(active, default=0),
                }
            )
            log(
                f"  memory: idle {idle / 2**20:.1f} MiB, peak {peak / 2**20:.1f} MiB with {concurrency} streams,"
                f" after {after / 2**20:.1f} MiB, ok {ok}, open ext_proc streams {max(active, default=0)}"
            )
        return {
            "sample_rate": sample_rate,
            "skip_unsampled": skip_unsampled,
            "concurrency": concurrency,
            "hold_s": hold_s,
            "idle_rss": idle,
            "waves": waves,
            "per_stream_bytes": (waves[0]["peak_rss"] - idle) / max(concurrency, 1),
            "growth_per_request_bytes": (waves[-1]["after_rss"] - waves[0]["after_rss"])
            / max(concurrency * (rounds - 1), 1),
        }
