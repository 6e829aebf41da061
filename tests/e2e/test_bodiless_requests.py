"""Issue 34, items 6 and 8, through the shipped Envoy configuration (envoy/envoy.yaml, one ext_proc
message per request), ``tbr serve`` and the stand-in pools: a request without a body is counted
by the router with a reason and gets a decision record.

In the one-message design Envoy opens no routing stream for a request whose headers end it (the
routing filter SKIPs request headers), so before this an empty POST reached the long pool through
the catch-all route unseen. Now the composite filter runs an observability ext_proc
(``tbr_unrouted``) for any request without the router's ``tbr.pool`` metadata; its request headers
reach the router marked by gRPC metadata, and the router counts them as the two-message design
does: ``body_empty`` (a POST to a budgeted path) or ``unsupported_path``. Routed requests never
open it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator

import httpx
import pytest

from devstack.stack import Stack, StackOptions
from tests.stacks import running
from tests.waiting import until

pytestmark = pytest.mark.envoy


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    options = StackOptions(decision_log=True, router_overrides={"decision_log_flush_interval_s": 0.1})
    yield from running(Stack(tmp_path_factory.mktemp("bodiless"), options))


def wait_for(pred: Callable[[], bool], timeout_s: float = 15.0) -> None:
    until(pred, timeout_s=timeout_s, poll_s=0.05)


def unrouted_streams(stack: Stack) -> int:
    assert stack.envoy is not None
    return sum(
        v
        for k, v in stack.envoy.stats("tbr_unrouted.streams_started").items()
        if k.endswith("streams_started")
    )


def records(stack: Stack) -> dict[str, dict[str, object]]:
    assert stack.decision_log_path is not None
    if not stack.decision_log_path.exists():
        return {}
    return {r["request_id"]: r for r in map(json.loads, stack.decision_log_path.read_text().splitlines())}


def test_bodiless_requests_are_counted_with_a_reason_and_routed_ones_are_not_counted_twice(
    stack: Stack,
) -> None:
    url = f"{stack.base_url}/chat/completions"
    body = {"model": "Qwen/Qwen3-8B", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 4}
    for i in range(3):  # routed requests: their decision is the routing stream's, no second stream
        r = httpx.post(url, json=body, headers={"x-request-id": f"routed-{i}"}, timeout=30.0)
        assert (r.status_code, r.headers["x-served-by-pool"]) == (200, "short")
    assert unrouted_streams(stack) == 0

    empty = httpx.post(url, content=b"", headers={"x-request-id": "empty-post"}, timeout=30.0)
    # unchanged: the catch-all route to the largest pool, whose own 400 the client gets
    assert (empty.status_code, empty.headers["x-served-by-pool"]) == (400, "long")
    models = httpx.get(f"{stack.base_url}/models", headers={"x-request-id": "get-models"}, timeout=30.0)
    assert (models.status_code, models.headers["x-served-by-pool"]) == (200, "long")

    wait_for(lambda: stack.router_metric("tbr_routing_decisions_total", {"reason": "unsupported_path"}) == 1)
    decisions = {"pool": "long", "category": "unknown", "reason": "body_empty"}
    assert stack.router_metric("tbr_routing_decisions_total", decisions) == 1
    assert stack.router_metric("tbr_unreadable_requests_total", {"reason": "body_empty"}) == 1
    assert stack.router_metric("tbr_routing_decisions_total") == 3 + 2  # each request counted once
    assert unrouted_streams(stack) == 2
    wait_for(lambda: {"empty-post", "get-models"} <= records(stack).keys())
    rec = records(stack)
    assert (rec["empty-post"]["pool"], rec["empty-post"]["reason"]) == ("long", "body_empty")
    assert (rec["get-models"]["pool"], rec["get-models"]["reason"]) == ("long", "unsupported_path")
    assert stack.router_metric("tbr_processing_errors_total") == 0
    wait_for(lambda: stack.router_metric("tbr_inflight_streams") == 0)
