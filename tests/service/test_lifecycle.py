"""`tbr serve` as a real subprocess: readiness vs liveness, SIGTERM drain, snapshot, JSON logs."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
import httpx
import pytest
import yaml
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from extproc.adapter.server import EXT_PROC_SERVICE
from tests.pb import json_response_msgs, request_msgs
from tests.service.streams import POOLS
from tests.waiting import until

SECRET = "zebra-quartz-prompt-marker " * 20  # must never appear in logs


def health(port: int, service: str) -> str:
    with grpc.insecure_channel(f"127.0.0.1:{port}") as ch:
        resp = health_pb2_grpc.HealthStub(ch).Check(
            health_pb2.HealthCheckRequest(service=service), timeout=2.0
        )
        return str(health_pb2.HealthCheckResponse.ServingStatus.Name(resp.status))


@pytest.fixture(params=["asyncio", "uvloop"])
def served(tmp_path: Path, request: pytest.FixtureRequest):
    cfg = {
        "pools": POOLS,
        "calibration": {"snapshot_path": str(tmp_path / "ratios.json")},
        "server": {"grace_period_s": 10.0, "shutdown_delay_s": 1.0, "event_loop": request.param},
    }
    cfg_path = tmp_path / "router.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg))
    stderr_path = tmp_path / "stderr.log"
    with open(stderr_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tbr", "serve", "--config", str(cfg_path), "--grpc-port", "0",
             "--admin-port", "0", "--log-level", "debug", "--log-format", "json", "--no-watch"],
            stdout=subprocess.PIPE,
            stderr=err,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline().decode()
        assert line.startswith("tbr serve:"), (line, stderr_path.read_text())
        ports = dict(kv.split("=") for kv in line.split()[2:])
        yield proc, int(ports["grpc_port"]), int(ports["admin_port"]), tmp_path, stderr_path
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def _answers(grpc_port: int) -> bool:
    """Whether the gRPC listener still answers a health check."""
    try:
        health(grpc_port, "")
    except grpc.RpcError:
        return False
    return True


def test_sigterm_drains_inflight_stream_and_writes_snapshot(served) -> None:
    proc, grpc_port, admin_port, tmp_path, stderr_path = served
    admin = f"http://127.0.0.1:{admin_port}"
    assert httpx.get(f"{admin}/readyz").status_code == 200
    assert health(grpc_port, "") == "SERVING"
    assert health(grpc_port, EXT_PROC_SERVICE) == "SERVING"

    # SIGHUP reloads the file (the watcher is off: --no-watch).
    cfg_path = tmp_path / "router.yaml"
    cfg = yaml.safe_load(cfg_path.read_text())
    cfg["pools"][0]["max_model_len"] = 4096
    cfg_path.write_text(yaml.safe_dump(cfg))
    proc.send_signal(signal.SIGHUP)
    until(
        lambda: 'tbr_config_reloads_total{outcome="applied"} 1.0' in httpx.get(f"{admin}/metrics").text,
        5,
        "the SIGHUP reload",
    )
    assert "tbr_config_generation 2.0" in httpx.get(f"{admin}/metrics").text

    text = SECRET + ("The quick brown fox jumps over the lazy dog. " * 40)
    with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
        stub = pb_grpc.ExternalProcessorStub(ch)
        msgs = request_msgs(text, request_id="drain-me") + json_response_msgs(460)
        import queue

        q: queue.Queue[pb.ProcessingRequest | None] = queue.Queue()
        responses = iter(stub.Process(iter(q.get, None)))
        q.put(msgs[0])
        next(responses)
        q.put(msgs[1])
        routed = next(responses)
        assert routed.request_body.response.clear_route_cache

        t_term = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        until(lambda: health(grpc_port, EXT_PROC_SERVICE) == "NOT_SERVING", 5, "draining")
        # Draining: not ready (gRPC health of the ext_proc service, /readyz) but alive.
        assert health(grpc_port, EXT_PROC_SERVICE) == "NOT_SERVING"
        assert health(grpc_port, "") == "SERVING"
        assert httpx.get(f"{admin}/readyz").status_code == 503
        assert httpx.get(f"{admin}/healthz").status_code == 200
        assert "tbr_ready 0.0" in httpx.get(f"{admin}/metrics").text

        until(lambda: not _answers(grpc_port), 10, "the listener closing after shutdown_delay_s")
        with pytest.raises(grpc.RpcError):  # the listener is closed, the stream still open
            health(grpc_port, "")
        assert proc.poll() is None
        q.put(msgs[2])
        assert next(responses).HasField("response_headers")
        q.put(msgs[3])
        # The exchange is over: the router ends the call (status OK) instead of answering the
        # body it passes through unchanged.
        with pytest.raises(StopIteration):
            next(responses)
        q.put(None)

    assert proc.wait(timeout=8) == 0
    drain_s = time.monotonic() - t_term
    assert drain_s < 5.0
    snap = json.loads((tmp_path / "ratios.json").read_text())
    (row,) = snap["ratios"]
    assert row["model"] == "m" and row["category"] == "latin" and row["samples"] == 1

    logs = stderr_path.read_text()
    assert SECRET.strip() not in logs and "zebra-quartz" not in logs
    records = [json.loads(line) for line in logs.splitlines() if line.strip()]
    assert all({"ts", "level", "logger", "msg"} <= r.keys() for r in records)
    ended = [r for r in records if r["msg"] == "stream ended" and r.get("request_id") == "drain-me"]
    assert ended and ended[0]["end"] == "complete" and ended[0]["pool"] == "short"
    assert any("SIGTERM" in r["msg"] for r in records)
    (serving,) = [r for r in records if r["msg"] == "serving"]
    assert (
        serving["event_loop"]
        == yaml.safe_load((tmp_path / "router.yaml").read_text())["server"]["event_loop"]
    )


async def test_snapshot_round_trip_across_restarts(tmp_path: Path) -> None:
    """Ratios learned by one process are saved at stop and served by the next one."""
    from extproc.config import parse_config
    from extproc.service.app import RouterApp
    from tests.service.streams import TEXT_8000, admin_get, calibrate, ratios

    cfg = parse_config(
        {
            "pools": POOLS,
            "calibration": {"snapshot_path": str(tmp_path / "r.json"), "warmup_samples": 3},
        }
    )
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as first:
        await calibrate(first.grpc_port, TEXT_8000, prompt_tokens=1800, times=3)
        learned = await ratios(first.admin_port)
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as second:
        assert await ratios(second.admin_port) == learned
        text = (await admin_get(second.admin_port, "/metrics")).text
        assert 'tbr_ratio_samples{category="latin",model_name="m"} 3.0' in text


async def test_invalid_snapshot_is_kept_aside_not_overwritten(tmp_path: Path) -> None:
    from extproc.config import parse_config
    from extproc.service.app import RouterApp

    snap = tmp_path / "r.json"
    snap.write_text("{not json")
    cfg = parse_config({"pools": POOLS, "calibration": {"snapshot_path": str(snap)}})
    async with RouterApp(cfg, grpc_port=0, admin_port=0):
        pass
    assert (tmp_path / "r.json.invalid").read_text() == "{not json"
    assert json.loads(snap.read_text())["ratios"] == []


def test_serve_rejects_invalid_config_with_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    from tbr.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: []\nserver: {grpc_port: 70000}\n")
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        assert main(["serve", "--config", str(bad)]) == 2
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
    err = capsys.readouterr().err
    assert "pools" in err and "server.grpc_port" in err


async def test_busy_admin_port_fails_start_and_releases_grpc(tmp_path: Path) -> None:
    import socket

    from extproc.config import parse_config
    from extproc.service.app import RouterApp

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        cfg = parse_config({"pools": POOLS})
        app = RouterApp(cfg, grpc_port=0, admin_port=busy.getsockname()[1])
        with pytest.raises(OSError):
            async with app:
                pass
    assert app.grpc is not None
    with pytest.raises(grpc.RpcError):  # the gRPC listener was closed again
        health(app.grpc_port, "")
