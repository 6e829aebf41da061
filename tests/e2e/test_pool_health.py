"""Issue 34, items 1 and 8, through Envoy (envoy/envoy.yaml), the router (``tbr serve``) and
stand-in pools as processes: a short pool whose engine died (as vLLM 0.32: 500 to every request,
503 on ``/health``, a stream in flight ended with the error), whose engine stopped (SIGSTOP: its
streams get nothing more, ``/health`` stays 200), and a short pool killed mid-run.

Two routers share the pools: one checks pool health (``pools[].health_url``), one does not, so
Envoy's layer (retry of a 5xx on the next larger pool) is shown alone, then with the router's (a
pool that is down is skipped). A third Envoy carries the pre-issue retry policy (400, connect
failure, reset before request; no health checks): the control, where the issue's 30 requests all
got 500. A fourth has the streaming routes' idle timeout at 3 s (shipped: 60 s).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from devstack.envoy_runner import DEFAULT_ENVOY_CONFIG
from devstack.procs import free_port
from devstack.stack import Gateway, Stack, StackOptions, router_process
from tests.e2e.harness import fast_stream_envoy, routes_of
from tests.stacks import running
from tests.waiting import until

pytestmark = pytest.mark.envoy

STREAM_IDLE_S = 3
"""The streaming routes' idle timeout in the test's copy of envoy/envoy.yaml (shipped: 60 s,
checked by tests/e2e/test_envoy_timeouts.py), so the test waits seconds, not a minute."""

CHECK_INTERVAL_S = 0.25
"""The health-checking router's ``pool_health.check_interval_s``."""


def pre_issue_envoy(path: Path) -> Path:
    """envoy/envoy.yaml as it was before issue 34: the short route retries 400, connect failure and
    reset before request only, and the pool clusters have no health checks or outlier detection."""
    cfg: dict[str, Any] = yaml.safe_load(DEFAULT_ENVOY_CONFIG.read_text(encoding="utf-8"))
    routes = routes_of(cfg)
    routes[:] = [r for r in routes if not r["name"].endswith("_streaming")]
    for route in routes:
        if route["name"] == "to_short_pool":
            route["route"]["retry_policy"]["retry_on"] = (
                "retriable-status-codes,connect-failure,reset-before-request"
            )
    for cluster in cfg["static_resources"]["clusters"]:
        if cluster["name"].endswith("_pool"):
            for key in ("health_checks", "outlier_detection", "close_connections_on_host_health_failure"):
                cluster.pop(key)
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path


class Fleet:
    """The stack (health-checking router behind ``stack.gateway``) plus an Envoy whose router does
    not check health (``unaware``) and the pre-issue Envoy in front of that router (``pre_issue``)."""

    def __init__(self, stack: Stack, unaware: Gateway, pre_issue: Gateway, fast_stream: Gateway) -> None:
        self.stack = stack
        self.aware = stack.gateway
        self.unaware = unaware
        self.pre_issue = pre_issue
        self.fast_stream = fast_stream

    def pool_admin(self, pool: str, action: str) -> None:
        httpx.post(f"{self.stack.pool_url(pool)}/admin/{action}", timeout=5).raise_for_status()

    def wait_pool_up(self, pool: str, up: float, timeout_s: float = 10.0) -> None:
        """Wait until the health-checking router's ``tbr_pool_up{pool}`` is ``up``."""
        until(
            lambda: self.stack.router_metric("tbr_pool_up", {"pool": pool}) == up,
            timeout_s=timeout_s,
            what=f"tbr_pool_up{{pool={pool}}} at {up}",
        )


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("pool-health")
    options = StackOptions(
        pool_health=True,
        router_overrides={"pool_health": {"check_interval_s": CHECK_INTERVAL_S, "check_timeout_s": 0.5}},
        pool_args=("--inter-token-latency-s", "0.02"),
    )
    for stack in running(Stack(work, options)):
        raw = yaml.safe_load(stack.router_config_path.read_text(encoding="utf-8"))
        for pool in raw["pools"]:
            pool.pop("health_url")
        grpc, admin = free_port(), free_port()
        raw["server"]["grpc_port"], raw["admin"]["port"] = grpc, admin
        path = work / "router-unaware.yaml"
        path.write_text(yaml.safe_dump(raw, sort_keys=False), encoding="utf-8")
        unaware_router = router_process(path, grpc, admin, log_dir=work)
        unaware_router.log_path = work / "router-unaware.log"
        with unaware_router:
            stack.processes.append(unaware_router)
            unaware = stack.add_envoy(router_grpc=grpc, tag="envoy-unaware")
            pre = stack.add_envoy(
                router_grpc=grpc, tag="envoy-pre-issue", source=pre_issue_envoy(work / "pre.yaml")
            )
            fast = stack.add_envoy(
                router_grpc=stack.ports.router_grpc,
                tag="envoy-fast-stream",
                source=fast_stream_envoy(work / "fast.yaml", STREAM_IDLE_S),
            )
            yield Fleet(stack, unaware, pre, fast)


def small(gw: Gateway, i: int) -> httpx.Response:
    body = {
        "model": "Qwen/Qwen3-8B",
        "messages": [{"role": "user", "content": f"Say hello, number {i}."}],
        "max_tokens": 4,
    }
    return httpx.post(f"{gw.base_url}/chat/completions", json=body, timeout=30)


def thirty(gw: Gateway) -> Counter[tuple[int, str | None, str | None]]:
    """The issue's run: 30 small requests; (status, serving pool, Envoy attempt count) → count."""
    out: Counter[tuple[int, str | None, str | None]] = Counter()
    for i in range(30):
        r = small(gw, i)
        out[(r.status_code, r.headers.get("x-served-by-pool"), r.headers.get("x-envoy-attempt-count"))] += 1
    return out


def test_dead_engine_short_pool_is_retried_on_long_then_skipped_and_comes_back(fleet: Fleet) -> None:
    assert thirty(fleet.aware) == {(200, "short", "1"): 30}  # all healthy: short
    fleet.pool_admin("short", "engine-dead")
    try:
        # Envoy alone (the router does not check health, routes short): each 500 is retried once
        # on the long pool before any byte reached the client.
        assert thirty(fleet.unaware) == {(200, "long", "2"): 30}
        # The pre-issue configuration: every request is the short pool's 500 (the issue's run).
        assert thirty(fleet.pre_issue) == {(500, "short", "1"): 30}
        # The health-checking router: the short pool is down, requests go long directly.
        fleet.wait_pool_up("short", 0)
        before = fleet.stack.router_metric("tbr_routing_decisions_total", {"reason": "pool_unavailable"})
        assert thirty(fleet.aware) == {(200, "long", "1"): 30}
        after = fleet.stack.router_metric("tbr_routing_decisions_total", {"reason": "pool_unavailable"})
        assert after - before == 30
        assert (
            fleet.stack.router_metric("tbr_pool_health_reason", {"pool": "short", "reason": "http_503"}) == 1
        )
        assert (
            fleet.stack.router_metric("tbr_spillover_total", {"from_pool": "short", "signal": "unavailable"})
            >= 30
        )
    finally:
        fleet.pool_admin("short", "engine-alive")
    fleet.wait_pool_up("short", 1)  # recovers by itself
    assert thirty(fleet.aware) == {(200, "short", "1"): 30}


def stream_then(gw: Gateway, action: Any, lines: list[str] | None = None) -> tuple[int, bool, float]:
    """Stream a long generation from the short pool; after its first chunks run ``action``; return
    (chunks received, whether the stream ended with ``[DONE]``, seconds from ``action`` to the end)."""
    body = {
        "model": "Qwen/Qwen3-8B",
        "messages": [{"role": "user", "content": "Tell a very long story."}],
        "max_tokens": 4000,
        "stream": True,
    }
    chunks, done, acted_at = 0, False, 0.0
    with httpx.Client(timeout=httpx.Timeout(60.0)) as client:
        try:
            with client.stream("POST", f"{gw.base_url}/chat/completions", json=body) as resp:
                assert (resp.status_code, resp.headers["x-served-by-pool"]) == (200, "short")
                for line in resp.iter_lines():
                    if line.startswith("data: "):
                        chunks += 1
                        if lines is not None:
                            lines.append(line)
                        done = done or line == "data: [DONE]"
                    if chunks == 10 and not acted_at:
                        action()
                        acted_at = time.monotonic()
        except httpx.HTTPError:
            pass  # the connection was closed under the stream: the end we want
    return chunks, done, time.monotonic() - acted_at


def test_stream_on_a_pool_whose_engine_stopped_ends_within_the_streaming_bound(fleet: Fleet) -> None:
    try:
        chunks, done, ended_after_s = stream_then(
            fleet.fast_stream, lambda: fleet.pool_admin("short", "engine-stop")
        )
        # vLLM's server keeps the connection open and sends nothing more, and its /health still
        # answers 200: nothing marks the pool down. The streaming route's idle timeout ends the
        # stream with an error, not a 1,380 s hang.
        assert fleet.stack.router_metric("tbr_pool_up", {"pool": "short"}) == 1
    finally:
        fleet.pool_admin("short", "engine-resume")
    assert not done and 10 <= chunks < 4000
    assert STREAM_IDLE_S - 0.5 < ended_after_s < STREAM_IDLE_S + 3.0, ended_after_s


def test_stream_on_a_pool_whose_engine_died_ends_with_its_error(fleet: Fleet) -> None:
    """vLLM ends a stream whose engine died with the error as its last event and ``[DONE]`` (measured
    on vLLM 0.32): the client gets an end at once, through Envoy unchanged."""
    lines: list[str] = []
    try:
        chunks, done, ended_after_s = stream_then(
            fleet.aware, lambda: fleet.pool_admin("short", "engine-dead"), lines
        )
    finally:
        fleet.pool_admin("short", "engine-alive")
    assert done and chunks >= 10 and ended_after_s < 2.0
    error = json.loads(lines[-2].removeprefix("data: "))["error"]
    assert (error["code"], error["type"]) == (500, "InternalServerError")
    fleet.wait_pool_up("short", 1)


def test_short_pool_killed_mid_run(fleet: Fleet) -> None:
    short = fleet.stack.pools["short"]
    proc = short.proc
    assert proc is not None
    chunks, done, ended_after_s = stream_then(fleet.aware, proc.kill)  # SIGKILL mid-stream
    assert not done and chunks >= 10 and ended_after_s < 2.0  # the connection dies with the process
    try:
        # Requests keep working: a refused connection is retried on long, then the router skips it.
        assert {k[:2] for k in thirty(fleet.aware)} == {(200, "long")}
        fleet.wait_pool_up("short", 0)
        assert (
            fleet.stack.router_metric("tbr_pool_health_reason", {"pool": "short", "reason": "unreachable"})
            == 1
        )
        assert thirty(fleet.aware) == {(200, "long", "1"): 30}
    finally:
        short.restart()
    fleet.wait_pool_up("short", 1)
    assert thirty(fleet.aware) == {(200, "short", "1"): 30}
