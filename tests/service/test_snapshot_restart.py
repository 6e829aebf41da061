"""Issue 12 item 5: learned ratios survive restarts and crashes.

``tbr serve`` (a real subprocess) writes its snapshot every ``snapshot_interval_s``; after
SIGKILL (no shutdown code runs) the next process serves what the last periodic snapshot held,
so a crash loses at most one interval. A corrupt or foreign snapshot is reported and ignored.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import yaml

from extproc.config import parse_config
from extproc.service.app import RouterApp
from tests.service.streams import POOLS, TEXT_8000, admin_get, calibrate, ratios
from tests.waiting import until_async

INTERVAL_S = 0.5


@contextmanager
def _serve(cfg_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], int, int]]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tbr", "serve", "--config", str(cfg_path), "--grpc-port", "0",
         "--admin-port", "0", "--log-level", "warning", "--no-watch"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("tbr serve:"), line
        ports = dict(kv.split("=") for kv in line.split()[2:])
        yield proc, int(ports["grpc_port"]), int(ports["admin_port"])
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


async def test_sigkill_loses_at_most_one_snapshot_interval(tmp_path: Path) -> None:
    snap = tmp_path / "state" / "ratios.json"  # the directory is created by the first write
    cfg = {
        "pools": POOLS,
        "calibration": {"snapshot_path": str(snap), "snapshot_interval_s": INTERVAL_S, "warmup_samples": 3},
    }
    cfg_path = tmp_path / "router.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    with _serve(cfg_path) as (proc, grpc_port, admin_port):
        await calibrate(grpc_port, TEXT_8000, prompt_tokens=1800, times=5)
        learned = await ratios(admin_port)
        assert learned and learned[0]["samples"] == 5

        def last_sample_written() -> bool:
            rows = json.loads(snap.read_text())["ratios"] if snap.exists() else []
            return bool(rows) and rows[0]["samples"] == 5

        # wait for the event, a periodic write holding the last sample (not for a number of intervals)
        await until_async(
            last_sample_written, timeout_s=30.0, what="a periodic snapshot write after the last sample"
        )
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)
    assert snap.exists()
    with _serve(cfg_path) as (_, _, admin_port):
        assert await ratios(admin_port) == learned
        metrics = (await admin_get(admin_port, "/metrics")).text
        assert 'tbr_ratio_snapshots_total{operation="load",outcome="ok"} 1.0' in metrics


@pytest.mark.parametrize(
    "content",
    [
        pytest.param("{not json", id="corrupt"),
        pytest.param(json.dumps({"apiVersion": "v1", "kind": "ConfigMap"}), id="foreign_json"),
        pytest.param(
            json.dumps({"version": 1, "ratios": [{"model": "m", "category": "latin"}]}), id="bad_rows"
        ),
        pytest.param("", id="empty"),
    ],
)
async def test_corrupt_or_foreign_snapshot_is_reported_and_ignored(tmp_path: Path, content: str) -> None:
    snap = tmp_path / "r.json"
    snap.write_text(content)
    cfg = parse_config({"pools": POOLS, "calibration": {"snapshot_path": str(snap)}})
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        assert app.ready and await ratios(app.admin_port) == []
        metrics = (await admin_get(app.admin_port, "/metrics")).text
        assert 'tbr_ratio_snapshots_total{operation="load",outcome="invalid"} 1.0' in metrics
        await calibrate(app.grpc_port, TEXT_8000, prompt_tokens=1800)
    assert (tmp_path / "r.json.invalid").read_text() == content  # kept for inspection
    assert len(json.loads(snap.read_text())["ratios"]) == 1  # a fresh snapshot replaced it
