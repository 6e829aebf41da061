"""Issue 34, point 10: what a new user hit by hand from the README, each through the public surface
(the ``tbr`` CLI as a process, the config file, the admin HTTP API): a clear error, never a
traceback, and the counters that say what happened."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from extproc.config import load_config
from extproc.service.app import RouterApp
from tests.service.contracts import REPO
from tests.service.streams import POOLS, admin_get, route_of
from tests.waiting import until, until_async

NOT_UTF8 = b"pools:\n  - {name: short, max_model_len: 8192, header_value: short}\n# caf\xe9 \xff\n"


def tbr(
    *args: str, timeout: float = 120, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tbr", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def no_traceback(proc: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stdout, proc.stdout


def write_pools(path: Path, *, short_len: int = 8192, **extra: Any) -> None:
    pools = [dict(POOLS[0], max_model_len=short_len), POOLS[1]]
    path.write_text(yaml.safe_dump({"pools": pools, **extra}))


async def reloads(admin_port: int, outcome: str) -> float:
    metrics = (await admin_get(admin_port, "/metrics")).text
    for line in metrics.splitlines():
        if line.startswith(f'tbr_config_reloads_total{{outcome="{outcome}"}} '):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


# --- the watched config file with bytes that are not UTF-8 --------------------------------------


def test_config_check_on_non_utf8_file_is_one_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "router.yaml"
    bad.write_bytes(NOT_UTF8)
    proc = tbr("config", "check", str(bad))
    assert proc.returncode == 2
    no_traceback(proc)
    assert "not UTF-8 text: byte 0xe9 at offset" in proc.stderr and "(line 3)" in proc.stderr, proc.stderr


async def test_non_utf8_config_is_counted_invalid_and_the_watcher_survives(tmp_path: Path) -> None:
    cfg_path = tmp_path / "router.yaml"
    write_pools(cfg_path)
    app = RouterApp(load_config(cfg_path), grpc_port=0, admin_port=0, config_path=cfg_path, watch_config=True)
    async with app:

        async def invalid_counted() -> bool:
            if await reloads(app.admin_port, "invalid"):
                return True
            cfg_path.write_bytes(NOT_UTF8)  # again until the watcher (started just now) sees it
            return False

        # poll_s above the watcher's 200 ms debounce: each write is seen as its own change
        await until_async(invalid_counted, poll_s=0.3, what="the watcher counted the invalid file")
        invalid = await reloads(app.admin_port, "invalid")
        assert app.request_reload() == "invalid"  # SIGHUP's path: no exception
        assert await reloads(app.admin_port, "invalid") == invalid + 1
        assert await route_of(app.grpc_port, "hello") == "short"  # the running config still routes
        write_pools(cfg_path, short_len=4)  # the watcher is still alive: a good file is applied

        async def routed_long() -> bool:
            return await route_of(app.grpc_port, "hello") == "long"

        await until_async(routed_long, timeout_s=5.0, what="the good file applied after the invalid one")


def test_sighup_on_non_utf8_config_does_not_raise(tmp_path: Path) -> None:
    cfg_path = tmp_path / "router.yaml"
    write_pools(cfg_path, admin={"port": 0}, server={"grpc_port": 0, "event_loop": "asyncio"})
    proc = subprocess.Popen(
        [sys.executable, "-m", "tbr", "serve", "--config", str(cfg_path), "--no-watch"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert "admin_port=" in line, line
        admin = int(line.rsplit("admin_port=", 1)[1])
        cfg_path.write_bytes(NOT_UTF8)
        proc.send_signal(signal.SIGHUP)
        import httpx

        def reload_counted() -> bool:
            assert proc.poll() is None, "the router exited on SIGHUP"
            metrics = httpx.get(f"http://127.0.0.1:{admin}/metrics", timeout=5).text
            return 'tbr_config_reloads_total{outcome="invalid"} 1.0' in metrics

        until(reload_counted, what="the SIGHUP reload counted invalid")
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert "Traceback" not in err and "UnicodeDecodeError" not in err, err
    assert "not UTF-8 text" in err


# --- tbr config check rejects what tbr serve rejects -------------------------------------------


@pytest.mark.parametrize(
    ("extra", "env", "message"),
    [
        (
            {"calibration": {"redis_url": "redis://:s3cret@redis:6379/0"}},
            {},
            "calibration.redis_url contains a password",
        ),
        ({"server": {"grpc_port": 9190}, "admin": {"port": 9190}}, {}, "both 9190"),
        ({}, {"TBR_ADMIN_PORT": "50051"}, "both 50051"),  # the environment serve applies
        ({}, {"TBR_REDIS_PASSWORD": "a", "TBR_REDIS_PASSWORD_FILE": "/x"}, "not both"),
    ],
    ids=["password_in_yaml_url", "grpc_port_is_admin_port", "env_override_collides", "two_passwords"],
)
def test_config_check_rejects_what_serve_rejects(
    tmp_path: Path, extra: dict[str, Any], env: dict[str, str], message: str
) -> None:
    path = tmp_path / "router.yaml"
    write_pools(path, **extra)
    check = tbr("config", "check", str(path), env=env)
    assert check.returncode == 2 and message in check.stderr, check.stderr
    no_traceback(check)
    serve = tbr("serve", "--config", str(path), env=env, timeout=60)
    assert serve.returncode == 2 and message in serve.stderr, serve.stderr
    no_traceback(serve)


# --- listener errors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "--config", "config/router.yaml", "--grpc-port", "70000"], "--grpc-port: port 70000 is not in 0..65535"),
        (["serve", "--config", "config/router.yaml", "--admin-port", "-1"], "--admin-port: port -1 is not in 0..65535"),
        (["mock-pool", "--name", "p", "--port", "99999"], "--port: port 99999 is not in 0..65535"),
        (["mock-pool", "--name", "p", "--port", "http"], "--port: not a port number: 'http'"),
    ],
    ids=["serve_grpc_port", "serve_admin_port", "mock_pool_port", "mock_pool_port_word"],
)  # fmt: skip
def test_bad_port_flags_are_usage_errors(argv: list[str], message: str) -> None:
    proc = tbr(*argv, timeout=60)
    assert proc.returncode == 2
    no_traceback(proc)
    assert message in proc.stderr, proc.stderr
    assert "config/router.yaml:" not in proc.stderr  # not blamed on the YAML file


@pytest.mark.parametrize("which", ["admin", "grpc"])
def test_address_in_use_names_the_address(tmp_path: Path, which: str) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        path = tmp_path / "router.yaml"
        ports: dict[str, Any] = {
            "admin": {"port": port if which == "admin" else 0},
            "server": {"grpc_port": port if which == "grpc" else 0},
        }
        write_pools(path, **ports)
        proc = tbr("serve", "--config", str(path), "--log-format", "text", timeout=60)
    assert proc.returncode == 1
    no_traceback(proc)
    assert f"127.0.0.1:{port}" in proc.stderr and "cannot serve" in proc.stderr, proc.stderr


# --- the ratio snapshot --------------------------------------------------------------------------


async def test_unwritable_snapshot_path_is_reported_at_start(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where a directory should be")
    path = tmp_path / "router.yaml"
    write_pools(path, calibration={"snapshot_path": str(blocker / "ratios.json")})
    async with RouterApp(load_config(path), grpc_port=0, admin_port=0) as app:
        metrics = (await admin_get(app.admin_port, "/metrics")).text  # before any periodic save
        assert 'tbr_ratio_snapshots_total{operation="save",outcome="error"} 1.0' in metrics
        assert "is not writable" in caplog.text and str(blocker / "ratios.json") in caplog.text
        assert await route_of(app.grpc_port, "hello") == "short"  # still serving


async def test_missing_snapshot_is_not_reported_as_a_restore(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "router.yaml"
    snap = tmp_path / "state" / "ratios.json"
    write_pools(path, calibration={"snapshot_path": str(snap)})
    caplog.set_level("INFO")
    async with RouterApp(load_config(path), grpc_port=0, admin_port=0) as app:
        metrics = (await admin_get(app.admin_port, "/metrics")).text
    assert "restored" not in caplog.text
    assert f"no ratio snapshot at {snap} yet" in caplog.text
    assert 'operation="load"' not in metrics and 'outcome="error"' not in metrics
    assert snap.exists()  # written at shutdown


def test_shipped_config_keeps_its_state_outside_the_checkout() -> None:
    cfg = load_config(REPO / "config" / "router.yaml")
    snap = cfg.calibration.snapshot_path
    assert snap is not None and Path(snap).is_absolute()
    assert not Path(snap).resolve().is_relative_to(REPO.resolve())
    assert snap == str(Path.home() / ".local" / "state" / "tbr" / "ratios.json")


# --- tbr plan ------------------------------------------------------------------------------------


def _cdf(tmp_path: Path) -> Path:
    path = tmp_path / "cdf.json"
    path.write_text(json.dumps([[512, 0.5], [2048, 0.8], [8192, 0.97], [32768, 1.0]]))
    return path


def _one_timestamp_trace(tmp_path: Path) -> Path:
    path = tmp_path / "one.csv"
    rows = [f"2023-11-16 18:15:46.6805900,{100 + 37 * i},200" for i in range(50)]
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    return path


PLAN_BAD = [
    (["--rate", "inf"], "--rate: must be a finite number: inf"),
    (["--rate", "nan"], "--rate: must be a finite number: nan"),
    (["--rate", "0"], "--rate: must be > 0"),
    (["--short-max-tokens", "-100"], "--short-max-tokens: must be positive: -100"),
    (["--sweep", "-5", "0"], "--sweep: must be positive: -5"),
    (["--slo-ttft-p99-s", "-1"], "--slo-ttft-p99-s: must be > 0"),
    (["--min-requests", "-1"], "--min-requests: must be positive: -1"),
    (["--size-tolerance", "-3"], "--size-tolerance: must be >= 0"),
    (["--jobs", "0"], "--jobs: must be positive: 0"),
]


@pytest.mark.parametrize(
    ("argv", "message"), PLAN_BAD, ids=[a[0].lstrip("-") + "_" + a[1] for a, _ in PLAN_BAD]
)
def test_plan_rejects_bad_numbers_with_one_clear_line(tmp_path: Path, argv: list[str], message: str) -> None:
    proc = tbr("plan", "--trace", str(_cdf(tmp_path)), *argv, timeout=60)
    assert proc.returncode == 2
    no_traceback(proc)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and message in errors[0], proc.stderr


def test_plan_rejects_a_trace_on_one_timestamp(tmp_path: Path) -> None:
    trace = _one_timestamp_trace(tmp_path)
    for extra in ([], ["--rate", "5"]):
        proc = tbr(
            "plan", "--trace", str(trace), "--format", "azure", "--min-requests", "200", "--no-des", *extra
        )
        assert proc.returncode == 2
        no_traceback(proc)
        assert "share one timestamp" in proc.stderr, proc.stderr


def test_plan_where_no_threshold_meets_the_slo_exits_nonzero(tmp_path: Path) -> None:
    proc = tbr(
        "plan", "--trace", str(_cdf(tmp_path)), "--rate", "20", "--min-requests", "2000",
        "--profile", "a100-simcompat", "--sweep", "2048", "--jobs", "1", "--slo-ttft-p99-s", "0.0001",
        timeout=600,
    )  # fmt: skip
    no_traceback(proc)
    assert "no threshold meets the SLO" in proc.stdout, proc.stdout
    assert proc.returncode == 1, proc.stderr[-2000:]


def test_no_meets_verdict_for_a_pool_with_too_few_requests(tmp_path: Path) -> None:
    path = tmp_path / "small.csv"
    rows = [f"2023-11-16 18:15:{i:02d}.000000,{300 + 11 * i},50" for i in range(30)]
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(rows) + "\n")
    proc = tbr(
        "simulate", "--trace", str(path), "--format", "azure", "--min-requests", "1", "--json",
        "--pool", "short:8192:2", "--pool", "long:65536:1", "--router", "token-budget", "--allow-unstable",
    )  # fmt: skip
    no_traceback(proc)
    res = json.loads(proc.stdout)
    short = res["pools"]["short"]
    assert 0 < short["requests"] < 100
    assert short["verdict"] == "too few requests"
    assert res["all_pools_meet_slo"] is False


# --- tbr mock-pool logs JSON like the router -----------------------------------------------------


def test_mock_pool_and_its_web_server_log_json(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tbr", "mock-pool", "--name", "p", "--port", "0", "--log-level", "debug"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        assert proc.stderr is not None
        lines: list[str] = []
        while not any("serving" in line for line in lines):
            assert time.monotonic() < deadline and proc.poll() is None, lines
            lines.append(proc.stderr.readline())
        url = json.loads(next(line for line in lines if "serving" in line))["msg"].rsplit(" on ", 1)[1]
        import httpx

        assert httpx.get(f"{url}/health", timeout=5).status_code == 200
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=30)[1], None
        lines += rest.splitlines()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    records = [json.loads(line) for line in lines if line.strip()]
    assert {"ts", "level", "logger", "msg"} <= set(records[0])
    loggers = {r["logger"] for r in records}
    assert "mockpool" in loggers and any(name.startswith("uvicorn") for name in loggers), loggers
    assert any("GET /health" in r["msg"] for r in records if r["logger"] == "uvicorn.access"), records
