"""Scraping vLLM-shaped /metrics from a real stand-in pool server, and failure handling."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from prometheus_client import CollectorRegistry

from devstack.procs import free_port
from extproc.config import PoolConfig, SpilloverConfig
from extproc.core.route.load import LoadTracker, Thresholds
from extproc.service.load_metrics import LoadCollector, LoadMetrics
from extproc.service.scrape import MetricsParseError, PoolScraper, parse_vllm_metrics
from mockpool.server import serve_pool
from mockpool.settings import PoolSettings
from tests.waiting import until_async


def test_parse_sums_waiting_over_engines_and_reads_legacy_kv_name() -> None:
    text = (
        "# TYPE vllm:num_requests_waiting gauge\n"
        'vllm:num_requests_waiting{engine="0",model_name="a"} 3.0\n'
        'vllm:num_requests_waiting{engine="1",model_name="a"} 2.0\n'
        "# TYPE vllm:gpu_cache_usage_perc gauge\n"
        'vllm:gpu_cache_usage_perc{model_name="a"} 0.5\n'
        'vllm:gpu_cache_usage_perc{model_name="b"} 0.7\n'
    )
    waiting, kv = parse_vllm_metrics(text)
    assert waiting == 5.0
    assert kv == pytest.approx(0.6)


def test_parse_prefers_current_kv_name_and_handles_absence() -> None:
    both = (
        "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc 0.25\n"
        "# TYPE vllm:gpu_cache_usage_perc gauge\nvllm:gpu_cache_usage_perc 0.9\n"
    )
    assert parse_vllm_metrics(both) == (None, 0.25)
    assert parse_vllm_metrics("# TYPE other gauge\nother 1\n") == (None, None)
    with pytest.raises(MetricsParseError):
        parse_vllm_metrics('vllm:num_requests_waiting{engine="0" 1\n')


async def test_scrape_real_pool_while_held_then_failures_go_stale() -> None:
    settings = PoolSettings(name="short", max_model_len=4096, max_num_seqs=1, hold=True)
    reg = CollectorRegistry()
    now = [0.0]  # a fake clock for the signals' age: staleness is tested by moving it, not by waiting
    tracker = LoadTracker(clock=lambda: now[0])
    reg.register(LoadCollector(tracker))
    metrics = LoadMetrics(reg)
    sp = SpilloverConfig(enabled=True, max_waiting=1, scrape_interval_s=0.05, max_staleness_s=0.3)
    async with serve_pool(settings) as base, httpx.AsyncClient() as client:
        pools = [
            PoolConfig(name="short", max_model_len=4096, header_value="short", metrics_url=f"{base}/metrics"),
            PoolConfig(
                name="gone",
                max_model_len=8192,
                header_value="gone",
                metrics_url=f"http://127.0.0.1:{free_port()}/metrics",
            ),
            PoolConfig(
                name="nometrics", max_model_len=16384, header_value="n", metrics_url=f"{base}/v1/models"
            ),
        ]
        scraper = PoolScraper(pools, sp, tracker, client, metrics)
        req = {"model": "Qwen/Qwen3-8B", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        sent = [
            asyncio.create_task(client.post(f"{base}/v1/chat/completions", json=req, timeout=20))
            for _ in range(3)
        ]

        async def two_queued() -> bool:
            return bool((await client.get(f"{base}/admin/stats")).json()["waiting"] == 2)

        await until_async(two_queued, what="two requests queued behind the held one")
        await scraper.poll_all()
        sig = tracker.signals("short")
        assert sig is not None and sig.waiting == 2.0  # 1 running (held), 2 queued
        assert sig.kv_cache_usage is not None and sig.kv_cache_usage > 0
        assert tracker.saturated("short", Thresholds.of(pools[0], sp), sp.max_staleness_s) == "waiting"

        def scrapes(pool: str, outcome: str) -> float:
            return reg.get_sample_value("tbr_pool_scrapes_total", {"pool": pool, "outcome": outcome}) or 0.0

        assert scrapes("short", "ok") == 1
        assert scrapes("gone", "transport_error") == 1
        # /v1/models is JSON, not Prometheus text: a parse error or no signal, never a crash
        assert scrapes("nometrics", "parse_error") + scrapes("nometrics", "no_signal") == 1

        await client.post(f"{base}/admin/release")
        done = await asyncio.gather(*sent)
        assert [r.status_code for r in done] == [200, 200, 200]
        assert json.loads(done[0].content)["usage"]["prompt_tokens"] > 0
        await scraper.poll_all()
        assert tracker.signals("short").waiting == 0.0  # type: ignore[union-attr]
        assert tracker.saturated("short", Thresholds.of(pools[0], sp), sp.max_staleness_s) is None

        # the periodic task runs: wait for its scrapes (an event), not for an interval
        scraper.start()
        await until_async(lambda: scrapes("short", "ok") >= 4, what="two scrapes by the periodic task")
        await scraper.stop()
        assert scrapes("short", "ok") >= 4  # two by hand above, at least two by the task
    now[0] += sp.max_staleness_s + 0.01  # pool gone: its last values age past max_staleness_s
    assert tracker.saturated("short", Thresholds.of(pools[0], sp), sp.max_staleness_s) is None
    assert reg.get_sample_value("tbr_pool_stale_signal_checks_total", {"pool": "short"}) == 1
