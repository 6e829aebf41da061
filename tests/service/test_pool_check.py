"""The start-up check of each pool's max_model_len against its server's /v1/models, on real
stand-in pool servers (the same field real vLLM reports; tests/vllm runs it on vLLM)."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client import CollectorRegistry

from devstack.procs import free_port
from extproc.config import PoolConfig, parse_config
from extproc.service.app import RouterApp
from extproc.service.pool_check import (
    PoolCheckMetrics,
    check_pool_limits,
    models_url,
    served_max_model_len,
)
from mockpool.server import serve_pool
from mockpool.settings import PoolSettings
from tests.waiting import until_async


def test_models_url_and_served_limit() -> None:
    assert models_url("http://10.0.0.1:8000/metrics") == "http://10.0.0.1:8000/v1/models"
    assert served_max_model_len({"data": [{"id": "a", "max_model_len": 4096}]}) == 4096
    assert served_max_model_len({"data": [{"id": "a"}]}) is None
    assert served_max_model_len(["not", "a", "model", "list"]) is None


async def test_agreeing_lying_and_absent_pools(caplog: pytest.LogCaptureFixture) -> None:
    registry = CollectorRegistry()
    metrics = PoolCheckMetrics(registry)
    async with serve_pool(PoolSettings(name="short", max_model_len=2048)) as base:
        pools = [
            PoolConfig(name="short", max_model_len=2048, header_value="short", metrics_url=f"{base}/metrics"),
            PoolConfig(name="lying", max_model_len=8192, header_value="lying", metrics_url=f"{base}/metrics"),
            PoolConfig(
                name="down",
                max_model_len=65536,
                header_value="down",
                metrics_url=f"http://127.0.0.1:{free_port()}/metrics",
            ),
            PoolConfig(name="unscraped", max_model_len=65536, header_value="unscraped"),
        ]
        async with httpx.AsyncClient() as client:
            checks = await check_pool_limits(pools, client, metrics, attempts=2, interval_s=0.01)
    assert [(c.pool, c.served_tokens, c.agrees) for c in checks] == [
        ("short", 2048, True),
        ("lying", 2048, False),
        ("down", None, None),
    ]
    value = registry.get_sample_value
    assert value("tbr_pool_config_mismatch", {"pool": "short"}) == 0
    assert value("tbr_pool_config_mismatch", {"pool": "lying"}) == 1
    assert value("tbr_pool_config_mismatch", {"pool": "down"}) is None
    assert "pool lying: configured max_model_len 8192 tokens but its vLLM server serves 2048" in caplog.text


async def test_the_router_keeps_the_served_limits_for_the_truncation_judgement() -> None:
    """What the check reads becomes the limit answers are judged against (issue 30: vLLM cuts an
    answer at the limit it serves, not at the configured one)."""
    async with serve_pool(PoolSettings(name="short", max_model_len=4096)) as base:
        cfg = parse_config(
            {
                "pools": [
                    {
                        "name": "short",
                        "max_model_len": 8192,
                        "header_value": "short",
                        "metrics_url": f"{base}/metrics",
                    },
                    {"name": "long", "max_model_len": 65536, "header_value": "long"},
                ]
            }
        )
        async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
            await until_async(lambda: app.served_limits, what="the served max_model_len read")
            assert app.served_limits == {"short": 4096}
            assert app.current_router().served_limits is app.served_limits  # seen by every stream
