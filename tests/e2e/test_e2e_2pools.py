"""Misroute recovery with the shipped two-pool config (envoy/envoy.yaml): a forced underestimate
sent to the short pool (8192) is answered with vLLM's 400 there, retried by Envoy on the long pool,
and the client sees a 200 from the long pool."""

from __future__ import annotations

from pathlib import Path

import pytest
from openai import AsyncOpenAI

from tests.e2e.harness import REPO, stale_ratio_snapshot, three_pool_stack, wait_for_metric

pytestmark = pytest.mark.envoy

# ~8,300 Qwen3 tokens: over the short pool's 8,192 whatever the output reserve.
PROSE = "The quick brown fox jumps over the lazy dog while the farmer counts his sheep. " * 520


async def test_two_pool_forced_underestimate_is_served_by_long(tmp_path: Path) -> None:
    snapshot = stale_ratio_snapshot(tmp_path, PROSE)
    router = {"server": {"grace_period_s": 0.5}, "calibration": {"snapshot_path": str(snapshot)}}
    async with three_pool_stack(
        tmp_path,
        router_overrides=router,
        pool_limits={"short": 8192, "long": 65536},
        envoy_source=REPO / "envoy" / "envoy.yaml",
    ) as stack:
        c = AsyncOpenAI(base_url=stack.base_url, api_key="unused", max_retries=0, timeout=30.0)
        raw = await c.chat.completions.with_raw_response.create(
            model="Qwen/Qwen3-8B",
            messages=[{"role": "user", "content": PROSE}],
            max_tokens=16,
        )
        completion = raw.parse()
        assert completion.usage is not None and completion.usage.prompt_tokens > 8192
        assert (raw.headers["x-served-by-pool"], raw.headers.get("x-envoy-attempt-count")) == ("long", "2")
        short = await stack.pool_stats("short")
        assert short["requests"]["/v1/chat/completions"] == {"400": 1}
        labels = {
            "from_pool": "short",
            "to_pool": "long",
            "outcome": "recovered",
            "cause": "estimate_too_low",
        }
        assert await wait_for_metric(stack, "tbr_misroutes_total", labels, 1) == 1
        await c.close()
