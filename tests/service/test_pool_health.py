"""Pool health checks (issue 34): vLLM's GET /health of a real stand-in pool server, up, engine
dead, stopped and gone, and what the tracker and the metrics show."""

from __future__ import annotations

import asyncio
import json
import socket

import httpx
from prometheus_client import CollectorRegistry

from devstack.procs import free_port
from extproc.config import PoolConfig, PoolHealthConfig
from extproc.core.route.load import LoadTracker
from extproc.service.load_metrics import LoadCollector
from extproc.service.pool_health import PoolHealthChecker, PoolHealthMetrics, classify_status, health_url_of
from mockpool.server import serve_pool
from mockpool.settings import PoolSettings
from mockpool.state import ENGINE_DEAD_MESSAGE
from tests.waiting import until_async

CHAT = {"model": "Qwen/Qwen3-8B", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def test_health_url_and_status_classes() -> None:
    pool = PoolConfig(name="s", max_model_len=8, header_value="s", metrics_url="https://h:8101/metrics?x=1")
    assert health_url_of(pool) == "https://h:8101/health"
    own = pool.model_copy(update={"health_url": "http://h:9/healthz"})
    assert health_url_of(own) == "http://h:9/healthz"
    assert health_url_of(PoolConfig(name="s", max_model_len=8, header_value="s")) is None
    assert [classify_status(s) for s in (200, 503, 500, 404)] == [
        "healthy",
        "http_503",
        "http_500",
        "http_other",
    ]


async def test_engine_dead_pool_is_down_until_it_answers_200_again() -> None:
    reg = CollectorRegistry()
    tracker = LoadTracker()
    reg.register(LoadCollector(tracker))
    metrics = PoolHealthMetrics(reg)
    cfg = PoolHealthConfig(check_interval_s=0.05, check_timeout_s=0.5)
    settings = PoolSettings(name="short", max_model_len=4096, output_tokens=50, inter_token_latency_s=0.01)
    async with serve_pool(settings) as base, httpx.AsyncClient() as client:
        pool = PoolConfig(
            name="short", max_model_len=4096, header_value="short", metrics_url=f"{base}/metrics"
        )
        checker = PoolHealthChecker([pool], cfg, tracker, client, metrics)
        assert (await checker.check_once("short", f"{base}/health")).up
        assert reg.get_sample_value("tbr_pool_up", {"pool": "short"}) == 1

        # A stream in flight when the engine dies ends with the error as its last event (vLLM 0.32).
        stream_req = {**CHAT, "stream": True, "max_tokens": 50}
        async with client.stream("POST", f"{base}/v1/chat/completions", json=stream_req, timeout=30) as resp:
            assert resp.status_code == 200
            lines = resp.aiter_lines()
            first = await anext(lines)
            assert first.startswith("data: ")
            await client.post(f"{base}/admin/engine-dead")
            rest = [line async for line in lines if line]
        assert (
            rest[-1] == "data: [DONE]" and json.loads(rest[-2].removeprefix("data: "))["error"]["code"] == 500
        )
        verdict = await checker.check_once("short", f"{base}/health")
        assert (verdict.up, verdict.reason) == (False, "http_503")
        assert tracker.unavailable("short", cfg.max_staleness_s) == "http_503"
        dead = await client.post(f"{base}/v1/chat/completions", json=CHAT, timeout=5)
        assert dead.status_code == 500
        assert dead.json()["error"] == {
            "message": ENGINE_DEAD_MESSAGE,
            "type": "InternalServerError",
            "param": None,
            "code": 500,
        }
        assert reg.get_sample_value("tbr_pool_up", {"pool": "short"}) == 0
        assert reg.get_sample_value("tbr_pool_health_reason", {"pool": "short", "reason": "http_503"}) == 1

        # restarted: the periodic checks bring it back by themselves
        await client.post(f"{base}/admin/engine-alive")
        checker.start()
        await until_async(
            lambda: tracker.unavailable("short", cfg.max_staleness_s) is None, what="pool back up"
        )
        await checker.stop()
        assert tracker.health("short").up  # type: ignore[union-attr]
        ok = await client.post(f"{base}/v1/chat/completions", json=CHAT, timeout=5)
        assert ok.status_code == 200
        checks = reg.get_sample_value("tbr_pool_health_checks_total", {"pool": "short", "outcome": "healthy"})
        assert checks is not None and checks >= 2


async def test_a_stopped_engine_stops_streams_and_keeps_health_200() -> None:
    """vLLM's EngineCore SIGSTOPped: nothing more is generated and ``/health`` still says 200."""
    settings = PoolSettings(name="short", max_model_len=4096, output_tokens=50, inter_token_latency_s=0.01)
    async with serve_pool(settings) as base, httpx.AsyncClient() as client:
        stream_req = {**CHAT, "stream": True, "max_tokens": 50}
        async with client.stream("POST", f"{base}/v1/chat/completions", json=stream_req, timeout=30) as resp:
            lines = resp.aiter_lines()
            assert (await anext(lines)).startswith("data: ")
            await client.post(f"{base}/admin/engine-stop")
            assert (await client.get(f"{base}/health")).status_code == 200
            rest: list[str] = []

            async def drain() -> None:
                async for line in lines:
                    rest.append(line)

            drained = asyncio.create_task(drain())
            # the behaviour under test is that nothing comes: a bounded look (0.5 s, 25 tokens'
            # worth at 0.01 s each), the one interval wait left here; the resume below is an event
            done, _ = await asyncio.wait({drained}, timeout=0.5)
            assert not done and "data: [DONE]" not in rest
            await client.post(f"{base}/admin/engine-resume")
            await asyncio.wait_for(drained, timeout=10)
        assert [line for line in rest if line][-1] == "data: [DONE]"


async def test_refused_and_silent_pools_are_down() -> None:
    tracker = LoadTracker()
    metrics = PoolHealthMetrics(CollectorRegistry())
    cfg = PoolHealthConfig(check_timeout_s=0.2)
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)  # accepts connections (backlog) and never answers: a stopped server
    try:
        port = silent.getsockname()[1]
        async with httpx.AsyncClient() as client:
            checker = PoolHealthChecker([], cfg, tracker, client, metrics)
            gone = await checker.check_once("gone", f"http://127.0.0.1:{free_port()}/health")
            stopped = await checker.check_once("stopped", f"http://127.0.0.1:{port}/health")
    finally:
        silent.close()
    assert (gone.up, gone.reason) == (False, "unreachable")
    assert (stopped.up, stopped.reason) == (False, "timeout")
