"""Issue 34, item 10, through the shipped Envoy configuration (envoy/envoy.yaml: one ext_proc
message per request, responses read off the request path), ``tbr serve`` and two stand-in vLLM
pools (short 4,096, long 8,192 tokens): every misroute is counted in
``tbr_misroutes_total{from_pool,to_pool,outcome,cause}`` and the decision record's
``misroute_cause`` by why it happened, and only an estimate that was too low teaches the router.

Measured before (issue 34, real vLLM 0.32): ``temperature: -1`` was counted
``outcome="retry_failed"`` like an estimator error, and a short pool refusing connections added 13
``recovered`` misroutes for 13 requests. The truncated cause is tested in
``e2e/test_output_truncation.py``.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from devstack.stack import Stack, StackOptions
from tests.e2e.harness import decision_records
from tests.stacks import running
from tests.waiting import until

pytestmark = pytest.mark.envoy

MODEL = "Qwen/Qwen3-8B"
SHORT_TEXT = "Please summarise the plot of a short story about a lighthouse keeper and a storm. " * 3
CAUSES = ("estimate_too_low", "truncated", "pool_unavailable", "client_error", "unknown")


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("causes")
    options = StackOptions(
        short_max_model_len=4096,
        long_max_model_len=8192,
        decision_log=True,
        router_overrides={"decision_log_flush_interval_s": 0.1},
    )
    yield from running(Stack(work, options))


def post(stack: Stack, text: str, request_id: str, **extra: Any) -> httpx.Response:
    body = {"model": MODEL, "messages": [{"role": "user", "content": text}], "max_tokens": 8, **extra}
    return httpx.post(
        f"{stack.base_url}/chat/completions", json=body, headers={"x-request-id": request_id}, timeout=60.0
    )


def wait_for(pred: Callable[[], bool], timeout_s: float = 15.0) -> None:
    until(pred, timeout_s=timeout_s, poll_s=0.05)


def misroutes(stack: Stack, **labels: str) -> float:
    return stack.router_metric("tbr_misroutes_total", labels)


def record(stack: Stack, request_id: str) -> dict[str, Any]:
    """The decision record of ``request_id`` once its response half is in."""
    found = decision_records(
        stack.decision_log_path, request_id, complete=lambda rs: bool(rs) and rs[0]["status"] is not None
    )
    return found[0]


def random_text(alphabet: str, n_chars: int, seed: int) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice(alphabet) for _ in range(n_chars))


def test_an_estimate_too_low_is_its_own_cause_recovered_or_not(stack: Stack) -> None:
    # random letters: ~2,000 tokens estimated, ~4,200 true: refused by short, served by long
    letters = random_text(string.ascii_letters + "  ", 6500, 34)
    r = post(stack, letters, "letters")
    assert (r.status_code, r.headers["x-served-by-pool"], r.headers["x-envoy-attempt-count"]) == (
        200,
        "long",
        "2",
    )
    wait_for(lambda: misroutes(stack, outcome="recovered") == 1)
    assert misroutes(stack, outcome="recovered", cause="estimate_too_low") == 1
    assert stack.router_metric("tbr_misroute_calibration_total", {"outcome": "confirmed"}) == 1
    rec = record(stack, "letters")
    assert (rec["misroute"], rec["misroute_cause"], rec["retried_to_pool"]) == (
        "recovered",
        "estimate_too_low",
        "long",
    )

    # random punctuation: ~200 tokens estimated, ~8,600 true: refused by both pools for length
    punctuation = random_text(string.punctuation, 13000, 34)
    r = post(stack, punctuation, "punctuation")
    assert (r.status_code, r.headers["x-envoy-attempt-count"]) == (400, "2")
    assert "maximum context length is 8192" in r.json()["error"]["message"]  # long's own answer, unchanged
    wait_for(lambda: misroutes(stack, outcome="retry_failed") == 1)
    assert misroutes(stack, outcome="retry_failed", cause="estimate_too_low") == 1
    rec = record(stack, "punctuation")
    assert (rec["misroute"], rec["misroute_cause"], rec["status"]) == (
        "retry_failed",
        "estimate_too_low",
        400,
    )
    # nothing to learn from a request no pool served
    assert stack.router_metric("tbr_misroute_calibration_total", {"outcome": "confirmed"}) == 1


def test_a_client_error_refused_again_by_the_larger_pool_is_a_client_error(stack: Stack) -> None:
    before = {c: misroutes(stack, cause=c) for c in CAUSES}
    calibrations = stack.router_metric("tbr_misroute_calibration_total")
    r = post(stack, SHORT_TEXT, "temperature", temperature=-1)
    # vLLM's answer from long passes unchanged (two rejections: Envoy retries any 400 from short)
    assert (r.status_code, r.headers["x-served-by-pool"], r.headers["x-envoy-attempt-count"]) == (
        400,
        "long",
        "2",
    )
    assert r.json()["error"]["message"].startswith("temperature must be non-negative, got -1.0.")
    wait_for(lambda: misroutes(stack, cause="client_error") == before["client_error"] + 1)
    assert misroutes(stack, outcome="retry_failed", cause="client_error") == 1
    assert {c: misroutes(stack, cause=c) - before[c] for c in CAUSES} == {
        c: (1.0 if c == "client_error" else 0.0) for c in CAUSES
    }
    rec = record(stack, "temperature")
    assert (rec["misroute"], rec["misroute_cause"]) == ("retry_failed", "client_error")
    assert stack.router_metric("tbr_misroute_calibration_total") == calibrations  # nothing learned


def test_a_pool_that_refuses_connections_is_pool_unavailable_not_an_estimate(stack: Stack) -> None:
    before = {c: misroutes(stack, cause=c) for c in CAUSES}
    ratcheted = stack.router_metric("tbr_misroute_calibration_total", {"outcome": "ratcheted"})
    stack.pools["short"].stop()
    try:
        for i in range(13):
            r = post(stack, SHORT_TEXT, f"down-{i}")
            assert (r.status_code, r.headers["x-served-by-pool"], r.headers["x-envoy-attempt-count"]) == (
                200,
                "long",
                "2",
            )
        wait_for(lambda: misroutes(stack, cause="pool_unavailable") == before["pool_unavailable"] + 13)
    finally:
        stack.pools["short"].restart()
    assert misroutes(stack, outcome="recovered", cause="pool_unavailable") == 13
    assert {c: misroutes(stack, cause=c) - before[c] for c in CAUSES} == {
        c: (13.0 if c == "pool_unavailable" else 0.0) for c in CAUSES
    }
    assert record(stack, "down-12")["misroute_cause"] == "pool_unavailable"
    # usage fitted short: nothing ratcheted (the estimator was right)
    assert stack.router_metric("tbr_misroute_calibration_total", {"outcome": "ratcheted"}) == ratcheted
    assert stack.router_metric("tbr_misroute_calibration_total", {"outcome": "unconfirmed"}) == 13
    wait_for(lambda: post(stack, SHORT_TEXT, "back").headers["x-served-by-pool"] == "short", timeout_s=20)
