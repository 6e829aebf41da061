"""End to end through the real Envoy (envoy/envoy-3pools.yaml), the real router and three stand-in
vLLM pools, with the openai client: spillover starts while the short pool is held saturated and
stops after release; a forced underestimate is recovered on the next larger pool (client sees 200)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from tests.e2e.harness import Stack, content_kind, stale_ratio_snapshot, three_pool_stack, wait_for_metric
from tests.waiting import until_async

pytestmark = pytest.mark.envoy

SMALL = [{"role": "user", "content": "Say hello."}]
ROUTER_BASE: dict[str, Any] = {"server": {"grace_period_s": 0.5}}


def client(stack: Stack) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=stack.base_url, api_key="unused", max_retries=0, timeout=20.0)


async def served_by(c: AsyncOpenAI, messages: list[dict[str, str]], max_tokens: int = 8) -> tuple[str, str]:
    """(x-served-by-pool, x-envoy-attempt-count) of one chat completion that must succeed."""
    raw = await c.chat.completions.with_raw_response.create(
        model="Qwen/Qwen3-8B",
        messages=messages,  # type: ignore[arg-type]
        max_tokens=max_tokens,
    )
    raw.parse()
    return raw.headers["x-served-by-pool"], raw.headers.get("x-envoy-attempt-count", "")


def waiting_seen(stack: Stack, pool: str) -> float:
    """The waiting-request count of ``pool`` the router last scraped (-1 before its first scrape)."""
    signals = stack.app.load.signals(pool)
    return -1.0 if signals is None or signals.waiting is None else signals.waiting


def metric(stack: Stack, name: str, labels: dict[str, str]) -> float:
    value = stack.app.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


@pytest.mark.parametrize(
    ("signal", "router", "pool_settings", "scrape", "busy"),
    [
        pytest.param(
            "inflight",
            {"spillover": {"enabled": True}, "pools": {"short": {"max_inflight": 2}}},
            {},
            False,
            (2, 0),
            id="router_inflight_count",
        ),
        pytest.param(
            "waiting",
            {"spillover": {"enabled": True, "max_waiting": 1, "scrape_interval_s": 0.05}},
            {"short": {"max_num_seqs": 1}},
            True,
            (1, 1),
            id="vllm_num_requests_waiting",
        ),
    ],
)
async def test_spillover_starts_when_short_pool_saturated_and_stops_after_release(
    tmp_path: Path,
    signal: str,
    router: dict[str, Any],
    pool_settings: dict[str, dict[str, Any]],
    scrape: bool,
    busy: tuple[int, int],
) -> None:
    async with three_pool_stack(
        tmp_path, router_overrides={**ROUTER_BASE, **router}, pool_overrides=pool_settings, scrape=scrape
    ) as stack:
        c = client(stack)
        assert (await served_by(c, SMALL))[0] == "short"  # not saturated: shortest fit

        await stack.pool_admin("short", "hold")
        held = [asyncio.create_task(served_by(c, SMALL)) for _ in range(2)]
        await stack.wait_pool("short", running=busy[0], waiting=busy[1])
        if scrape:  # the router's scrape has seen the queue (an event, not a few scrape intervals)
            await until_async(lambda: waiting_seen(stack, "short") >= busy[1], what="the queue scraped")
        spilled = [await served_by(c, SMALL) for _ in range(3)]
        assert [s for s, _ in spilled] == ["medium"] * 3  # next larger, never the long pool
        assert (
            metric(
                stack, "tbr_spillover_total", {"from_pool": "short", "to_pool": "medium", "signal": signal}
            )
            == 3
        )

        await stack.pool_admin("short", "release")
        assert [s for s, _ in await asyncio.gather(*held)] == ["short", "short"]
        if scrape:
            await until_async(lambda: waiting_seen(stack, "short") == 0, what="the empty queue scraped")
        assert (await served_by(c, SMALL))[0] == "short"  # spillover stopped
        assert (
            metric(
                stack, "tbr_spillover_total", {"from_pool": "short", "to_pool": "medium", "signal": signal}
            )
            == 3
        )
        await c.close()
        await until_async(lambda: stack.app.load.total_inflight() == 0, what="in-flight counts at zero")


PROSE = "The quick brown fox jumps over the lazy dog while the farmer counts his sheep. " * 260


async def test_forced_underestimate_is_recovered_on_the_next_larger_pool(tmp_path: Path) -> None:
    """A stale snapshot claims 40 (modelled/true tokens) for this key: routed at the plausibility
    ceiling 2.0, the 4,169-token prompt (Qwen3) is budgeted at about half its size and sent to short
    (4,096). The short pool answers vLLM's context-length 400, Envoy retries once on medium, the
    client gets medium's 200; each such misroute lowers the key's routing value by one bounded step
    (÷ 1.1, issue 34), until the same request goes straight to medium."""
    key = ("Qwen/Qwen3-8B", content_kind(PROSE))
    snapshot = stale_ratio_snapshot(tmp_path, PROSE)
    router = {**ROUTER_BASE, "calibration": {"snapshot_path": str(snapshot)}}
    async with three_pool_stack(tmp_path, router_overrides=router) as stack:
        c = client(stack)
        messages = [{"role": "user", "content": PROSE}]
        estimator = stack.app.current_router().estimator
        assert estimator.routing_ratio(key)[0] == 2.0  # 40 is outside the plausible band
        misroutes = 0
        for _ in range(12):
            before = estimator.routing_ratio(key)[0]
            pool, attempts = await served_by(c, messages, max_tokens=16)
            if attempts == "1":
                break
            assert (pool, attempts) == ("medium", "2")
            misroutes += 1
            ratcheted = {"pool": "short", "outcome": "ratcheted"}
            await wait_for_metric(stack, "tbr_misroute_calibration_total", ratcheted, misroutes)
            after = estimator.routing_ratio(key)[0]
            assert before / 1.1 - 1e-9 <= after < before  # one bounded step per misroute
        assert pool == "medium" and 3 <= misroutes <= 10, misroutes  # routed right the first time now
        short = await stack.pool_stats("short")
        assert short["requests"]["/v1/chat/completions"] == {"400": misroutes}  # the rejected first attempts
        labels = {
            "from_pool": "short",
            "to_pool": "medium",
            "outcome": "recovered",
            "cause": "estimate_too_low",
        }
        assert metric(stack, "tbr_misroutes_total", labels) == misroutes
        # the key's routing value is held by the estimator for the next observations, not written to
        # the store (same with Redis)
        assert estimator.routing_ratio(key)[0] <= 1.1
        await c.close()
        await until_async(lambda: stack.app.load.total_inflight() == 0, what="in-flight counts at zero")
