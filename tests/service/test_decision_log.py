"""Issue 12 item 7: the decision log is written off the request path.

The log file is a FIFO whose reader never reads: once the pipe buffer (64 KiB) is full every
write blocks, like a stalled disk. Requests must still be answered at once; records beyond the
bounded queue are dropped and counted; at shutdown what is queued is written.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import orjson

from extproc.config import parse_config
from extproc.service.app import RouterApp
from tests.service.streams import POOLS, admin_get, calibrate
from tests.waiting import until_async


def _metric(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} not exposed")


async def test_stalled_decision_log_never_delays_requests_and_drops_are_counted(tmp_path: Path) -> None:
    fifo = tmp_path / "decisions.fifo"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # opened, never read: writes stall
    cfg = parse_config(
        {
            "pools": POOLS,
            "decision_log_path": str(fifo),
            "decision_log_flush_interval_s": 0.05,
            "decision_log_queue_max": 200,
        }
    )
    app = RouterApp(cfg, grpc_port=0, admin_port=0)
    await app.start()
    try:
        # ~300 B per record: the 64 KiB pipe holds ~200, then the writer thread blocks.
        slowest_s = 0.0
        for _ in range(800):
            t0 = time.perf_counter()
            await calibrate(app.grpc_port, "hello there " * 40, prompt_tokens=130)
            slowest_s = max(slowest_s, time.perf_counter() - t0)
        metrics = (await admin_get(app.admin_port, "/metrics")).text
        dropped = _metric(metrics, "tbr_decision_log_dropped_records_total")
        written = _metric(metrics, "tbr_decision_log_written_records_total")
        assert dropped > 0  # the queue filled while the "disk" was stalled
        assert slowest_s < 1.0, f"a request waited {slowest_s:.2f} s on the decision log"
        # Unstall: read everything so far; shutdown then writes the queue.
        got = bytearray()
        stop = asyncio.create_task(app.stop())
        while not stop.done():  # read what the writer thread writes until shutdown has written all
            try:
                got += os.read(reader, 1 << 16)
            except BlockingIOError:
                await asyncio.sleep(0.01)
        await stop
    finally:
        if app.ready:
            await app.stop()
    while True:
        try:
            chunk = os.read(reader, 1 << 16)
        except BlockingIOError:
            break
        if not chunk:
            break
        got += chunk
    os.close(reader)
    records = [orjson.loads(line) for line in bytes(got).splitlines()]
    assert all(r["pool"] == "short" and "prompt_tokens" in r for r in records)
    assert len(records) + dropped == 800
    assert written <= len(records)


async def test_decision_log_is_flushed_periodically(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    cfg = parse_config({"pools": POOLS, "decision_log_path": str(path), "decision_log_flush_interval_s": 0.2})
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        await calibrate(app.grpc_port, "hello there " * 40, prompt_tokens=130, times=3)
        await until_async(lambda: len(path.read_bytes().splitlines()) >= 3, what="three flushed records")
        lines = path.read_bytes().splitlines()  # read while the router is still running
    assert [orjson.loads(line)["prompt_tokens"] for line in lines] == [130] * 3


async def test_decision_log_queue_is_written_at_shutdown(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    cfg = parse_config({"pools": POOLS, "decision_log_path": str(path), "decision_log_flush_interval_s": 60})
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        await calibrate(app.grpc_port, "hello there " * 40, prompt_tokens=130, times=3)
        assert path.read_bytes() == b""  # nothing written on the request path
    assert [orjson.loads(line)["prompt_tokens"] for line in path.read_bytes().splitlines()] == [130] * 3
