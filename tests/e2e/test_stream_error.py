"""Issue 12 item 3: a context-length error inside a 2xx SSE stream is a misroute, never learned.

The short pool (8192) answers a streamed request that does not fit with ``200 text/event-stream``
and one ``data: {"error": {…, "code": 400}}`` event, as SGLang does (``tbr mock-pool
--context-error-in-stream``). The router's estimate is forced low by a restored snapshot (a
model-to-true ratio of 40) so it sends ~8,300 tokens there. Through the real Envoy (envoy/envoy.yaml) the client
gets the pool's bytes unchanged; the router counts a misroute of the short pool in the same metric
and decision-log field as the 400 case and learns nothing from the stream.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pytest

from tests.e2e.harness import REPO, stale_ratio_snapshot, three_pool_stack, wait_for_metric

pytestmark = pytest.mark.envoy

PROSE = "The quick brown fox jumps over the lazy dog while the farmer counts his sheep. " * 520


async def test_context_length_error_inside_a_200_stream_is_a_misroute(tmp_path: Path) -> None:
    snapshot = stale_ratio_snapshot(tmp_path, PROSE)
    log_path = tmp_path / "decisions.jsonl"
    router = {
        "server": {"grace_period_s": 0.5},
        "calibration": {"snapshot_path": str(snapshot)},
        "decision_log_path": str(log_path),
    }
    body = {
        "model": "Qwen/Qwen3-8B",
        "messages": [{"role": "user", "content": PROSE}],
        "max_tokens": 16,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with three_pool_stack(
        tmp_path,
        router_overrides=router,
        pool_limits={"short": 8192, "long": 65536},
        pool_overrides={"short": {"context_error_in_stream": True}},
        envoy_source=REPO / "envoy" / "envoy.yaml",
    ) as stack:
        samples_before = {k: s.samples for k, s in stack.app.store.items()}
        async with httpx.AsyncClient(timeout=30.0) as c:
            routed = await c.post(
                f"{stack.base_url}/chat/completions", json=body, headers={"x-request-id": "in-stream-error"}
            )
            direct = await c.post(f"{stack.pools['short']}/v1/chat/completions", json=body)
        assert routed.status_code == direct.status_code == 200
        assert routed.headers["x-served-by-pool"] == "short"
        assert routed.content == direct.content  # the error event passes unchanged
        event = orjson.loads(routed.content.split(b"\n\n")[0].removeprefix(b"data: "))
        assert event["error"]["code"] == 400 and "context length" in event["error"]["message"]
        reg = stack.app.metrics.registry
        labels = {
            "from_pool": "short",
            "to_pool": "short",
            "outcome": "error_in_stream",
            "cause": "estimate_too_low",
        }
        assert await wait_for_metric(stack, "tbr_misroutes_total", labels, 1) == 1
        assert reg.get_sample_value("tbr_calibration_events_total", {"outcome": "error_in_stream"}) == 1
        assert reg.get_sample_value("tbr_calibration_events_total", {"outcome": "applied"}) is None
        assert {k: s.samples for k, s in stack.app.store.items()} == samples_before  # nothing learned
    (rec,) = [
        r
        for r in map(orjson.loads, log_path.read_bytes().splitlines())
        if r["request_id"] == "in-stream-error"
    ]
    assert (rec["pool"], rec["status"], rec["misroute"], rec["prompt_tokens"]) == (
        "short",
        200,
        "error_in_stream",
        None,
    )
