"""Router up: real prompts through Envoy land on the right pool; spoofing is ignored; streaming calibrates."""

from __future__ import annotations

import httpx
import pytest

from devstack.stack import Gateway
from tbr.demo.workload import long_prompt, short_prompt
from tests.e2e.client import MODEL, chat
from tests.e2e.harness import RouterEndpoints, data_dir, decision_records

pytestmark = pytest.mark.envoy


def _decision(router: RouterEndpoints, request_id: str, timeout_s: float = 5.0) -> dict[str, object]:
    """The router's decision-log record for ``request_id`` (written when the ext_proc stream ends)."""
    return decision_records(router.decision_log, request_id, timeout_s=timeout_s)[0]


def _samples(router: RouterEndpoints) -> dict[tuple[str, str], int]:
    rows = httpx.get(f"{router.admin_url}/ratios", timeout=5.0).json()["ratios"]
    return {(r["model"], r["category"]): int(r["samples"]) for r in rows}


@pytest.mark.parametrize(
    ("kind", "expected_pool"),
    [
        pytest.param("short", "short", id="short-real-prompt-to-short-pool"),
        pytest.param("long", "long", id="long-document-to-long-pool"),
    ],
)
def test_prompt_reaches_the_pool_that_fits(
    gateway: Gateway, router: RouterEndpoints, kind: str, expected_pool: str
) -> None:
    _, text = (short_prompt if kind == "short" else long_prompt)(data_dir())
    rid = f"e2e-route-{kind}"
    # x-expected-pool makes the wrong pool answer 421 (mockpool), so a misroute cannot pass.
    served = chat(
        gateway.base_url, text, headers={"x-request-id": rid, "x-expected-pool": expected_pool}, max_tokens=64
    )
    assert (served.status, served.pool) == (200, expected_pool)
    rec = _decision(router, rid)
    assert rec["pool"] == expected_pool
    assert rec["prompt_tokens"] == served.prompt_tokens
    if kind == "long":
        assert served.prompt_tokens is not None and served.prompt_tokens > 8192


def test_spoofed_short_header_on_long_prompt_is_ignored(gateway: Gateway, router: RouterEndpoints) -> None:
    _, text = long_prompt(data_dir())
    served = chat(
        gateway.base_url, text, headers={"x-tbr-pool": "short", "x-request-id": "e2e-spoof"}, max_tokens=16
    )
    assert (served.status, served.pool) == (200, "long")
    assert _decision(router, "e2e-spoof")["pool"] == "long"


def test_streaming_with_include_usage_calibrates(gateway: Gateway, router: RouterEndpoints) -> None:
    """The router reads usage from the SSE stream: the decision log carries the served prompt_tokens
    and the learned-ratio table gains one sample for the request's (model, category)."""
    _, text = short_prompt(data_dir())
    rid = "e2e-stream-usage"
    before = _samples(router)
    served = chat(
        gateway.base_url, text, stream=True, include_usage=True, max_tokens=8, headers={"x-request-id": rid}
    )
    assert (served.status, served.pool, served.completion_tokens) == (200, "short", 8)
    rec = _decision(router, rid)
    assert rec["prompt_tokens"] == served.prompt_tokens
    after = _samples(router)
    key = (MODEL, str(rec["category"]))
    assert after.get(key, 0) == before.get(key, 0) + 1


def test_envoy_did_not_fail_open(gateway: Gateway, router: RouterEndpoints) -> None:
    """With the router up, no request took the fail-open path."""
    chat(gateway.base_url, short_prompt(data_dir())[1], max_tokens=4)
    stats = gateway.envoy.stats("ext_proc.tbr.")
    assert stats["http.llm_ingress.ext_proc.tbr.streams_started"] >= 1
    assert stats["http.llm_ingress.ext_proc.tbr.failure_mode_allowed"] == 0
    assert stats["http.llm_ingress.ext_proc.tbr.message_timeouts"] == 0
    # The router ends its streams itself with the answer (status OK, extproc/adapter/server.py):
    # Envoy counts them closed, never failed.
    assert stats.get("http.llm_ingress.ext_proc.tbr.streams_failed", 0) == 0
    assert stats["http.llm_ingress.ext_proc.tbr.streams_closed"] >= 1


def test_router_ends_each_calibrated_stream_itself(gateway: Gateway, router: RouterEndpoints) -> None:
    """Issue 12 item 6 in the one-message design: the routing stream ends with its one answer (the
    router sends the status with it), and each sampled response's observability stream is ended by
    the router at the last body chunk, so Envoy never has to close one at
    ``deferred_close_timeout`` (``streams_closed`` of ``tbr_calib``; no client aborts here), no stream fails, and the body
    still reaches the client unchanged."""
    text = short_prompt(data_dir())[1]
    before = {**gateway.envoy.stats("ext_proc.tbr."), **gateway.envoy.stats("ext_proc.tbr_calib.")}
    n = 6
    for i in range(n):
        served = chat(gateway.base_url, text, stream=i % 2 == 1, include_usage=True, max_tokens=4)
        assert (served.status, served.completion_tokens) == (200, 4)
    after = {**gateway.envoy.stats("ext_proc.tbr."), **gateway.envoy.stats("ext_proc.tbr_calib.")}

    def delta(name: str) -> int:
        return after.get(name, 0) - before.get(name, 0)

    routing, calib = "http.llm_ingress.ext_proc.tbr.", "http.llm_ingress.ext_proc.tbr_calib."
    # one message each way per request, every stream closed
    assert delta(routing + "streams_started") == delta(routing + "streams_closed") == n
    assert delta(routing + "stream_msgs_sent") == delta(routing + "stream_msgs_received") == n
    # sample_rate 1: an observability stream per request, answered never, closed by the router
    assert delta(calib + "streams_started") == n
    assert delta(calib + "stream_msgs_received") == 0
    assert delta(calib + "streams_closed") == 0  # deferred-close expiries (and client aborts: none here)
    for prefix in (routing, calib):
        for name in ("streams_failed", "failure_mode_allowed", "message_timeouts"):
            assert delta(prefix + name) == 0


def test_body_over_one_mebibyte_is_budgeted_not_rejected_by_envoy(
    gateway: Gateway, router: RouterEndpoints
) -> None:
    """Over Envoy's default 1 MiB buffer: the raised per-connection limit and the router's 8 MiB gRPC
    message size let the router read it (no 413, no fail-open); it exceeds every pool, so it goes to
    the long pool, whose own max_model_len check answers vLLM's 400."""
    from tbr.demo.builtin_sample import generated_long_document

    text = generated_long_document(1_100_000, seed=9)  # > 1 MiB
    before = gateway.envoy.stats("ext_proc.tbr.failure_mode_allowed")
    served = chat(gateway.base_url, text, headers={"x-request-id": "e2e-1mib"}, max_tokens=16)
    assert (served.status, served.pool) == (400, "long")
    rec = _decision(router, "e2e-1mib")
    assert (rec["pool"], rec["reason"]) == ("long", "exceeds_all_pools")
    assert gateway.envoy.stats("ext_proc.tbr.failure_mode_allowed") == before
