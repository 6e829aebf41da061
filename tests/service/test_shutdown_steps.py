"""Issue 34, item 6: every shutdown step is exception-safe and counted. The decision log on a full
disk (``/dev/full``: every write fails with ENOSPC): routing goes on, drops are counted, and at
SIGTERM ``tbr serve`` still flushes OpenTelemetry and exits 0."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")


from extproc.config import parse_config
from extproc.service.app import RouterApp
from tests.pb import json_response_msgs, request_msgs, routed_pool, run_stream
from tests.service.contracts import REPO
from tests.service.otlp_collector import Collector, serve_collector
from tests.service.streams import POOLS, admin_get
from tests.waiting import until

FULL_DISK = Path("/dev/full")
pytestmark = pytest.mark.skipif(not FULL_DISK.exists(), reason="no /dev/full on this system")


@pytest.fixture
def collector() -> Iterator[tuple[Collector, str]]:
    yield from serve_collector()


def test_sigterm_with_the_decision_log_on_a_full_disk_exits_0_and_flushes_otel(
    tmp_path: Path, collector: tuple[Collector, str]
) -> None:
    sink, endpoint = collector
    cfg = tmp_path / "router.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "pools": POOLS,
                "decision_log_path": str(FULL_DISK),
                "decision_log_flush_interval_s": 0.1,
                "server": {"grpc_port": 0, "event_loop": "asyncio", "grace_period_s": 1},
                "admin": {"port": 0},
            }
        )
    )
    env = {
        **os.environ,
        "TBR_OTEL_ENABLED": "true",
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://{endpoint}",
        "OTEL_EXPORTER_OTLP_INSECURE": "true",
        "OTEL_BSP_SCHEDULE_DELAY": "600000",  # spans leave only at shutdown
        "OTEL_METRIC_EXPORT_INTERVAL": "600000",
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "tbr", "serve", "--config", str(cfg), "--no-watch"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO, env=env,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "grpc_port=" in line, line + (proc.stderr.read() if proc.stderr else "")
        grpc_port = int(line.split("grpc_port=")[1].split()[0])
        admin_port = int(line.rsplit("admin_port=", 1)[1])
        for i in range(3):
            out = asyncio.run(run_stream(grpc_port, request_msgs("hello", f"r{i}") + json_response_msgs(5)))
            assert routed_pool(out[1]) == "short"  # routing is fine

        def drops_counted() -> bool:
            metrics = asyncio.run(admin_get(admin_port, "/metrics")).text
            assert "tbr_decision_log_dropped_records_total" in metrics
            return "tbr_decision_log_dropped_records_total 0.0" not in metrics

        until(drops_counted, what="drops on the full disk counted")
        assert not sink.spans  # nothing exported before shutdown
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "cannot serve" not in err, err
    assert "shutdown step decision_log failed" in err and "No space left on device" in err, err
    assert len(sink.spans) == 3, err  # the OpenTelemetry shutdown after it ran and flushed


async def test_a_failing_step_is_counted_and_the_next_steps_run(tmp_path: Path) -> None:
    cfg = parse_config({"pools": POOLS, "decision_log_path": str(FULL_DISK)})
    app = RouterApp(cfg, grpc_port=0, admin_port=0)
    async with app:
        for i in range(2):
            await run_stream(app.grpc_port, request_msgs("hello", f"r{i}") + json_response_msgs(5))
    sample = app.metrics.registry.get_sample_value
    assert sample("tbr_shutdown_steps_total", {"step": "decision_log", "outcome": "error"}) == 1.0
    for step in ("grpc", "admin", "held_records"):
        assert sample("tbr_shutdown_steps_total", {"step": step, "outcome": "ok"}) == 1.0
