"""The core facade: decide() routes (screening, affinity, unknown models, read decision) and learn()
learns (ratio, truncation, misroute causes) on the router's real objects, no transport involved."""

from __future__ import annotations

import json
from typing import Any

import yaml

from extproc.config import parse_config
from extproc.core.facade import CoreState, Decision, decide, fallback_pool, learn
from extproc.core.learn.misroute_cause import ESTIMATE_TOO_LOW, POOL_UNAVAILABLE, TRUNCATED
from extproc.core.learn.usage_reader import ResponseUsage
from extproc.core.request.endpoints import parse_body, spec_of
from extproc.core.response.sse import StreamError
from tests.e2e.harness import ROUTER_2MODELS

PROSE = "The committee reviewed the quarterly figures and agreed to revisit the budget next week. "
POOLS = [
    {"name": "short", "max_model_len": 8192, "header_value": "short"},
    {"name": "long", "max_model_len": 65536, "header_value": "long"},
]


def core_of(**extra: Any) -> CoreState:
    return CoreState(parse_config({"pools": POOLS, "calibration": {"warmup_samples": 2}, **extra}))


def chat(text: str, **fields: Any) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": text}], **fields}).encode()


def decide_chat(core: CoreState, body: bytes, endpoint: str = "chat", **kw: Any) -> Decision:
    spec = spec_of(endpoint)
    kw.setdefault("read", False)
    kw.setdefault("exact_estimate", False)
    return decide(core, parse_body(body, endpoint), spec, draw=lambda: 0.5, clock=lambda: 0.0, **kw)


def usage(prompt: int | None, completion: int | None = 2, *reasons: str, **kw: Any) -> ResponseUsage:
    return ResponseUsage(
        prompt, completion, kw.get("response_id"), tuple(reasons) or ("stop",), kw.get("error")
    )


def test_short_unread_request_is_routed_by_the_byte_bound_and_read_ones_exactly() -> None:
    core = core_of()
    body = chat(PROSE * 10, max_tokens=64)
    bounded = decide_chat(core, body)
    exact = decide_chat(core, body, exact_estimate=True)
    read = decide_chat(core, body, read=True)
    assert bounded.budget.screened == "bound" and bounded.category == "bounded"
    assert not exact.budget.screened and not read.budget.screened
    assert bounded.pool == exact.pool == read.pool == "short"
    assert bounded.budget.total_tokens >= exact.budget.total_tokens  # the bound is never under


def test_long_request_goes_to_the_long_pool_and_the_routed_budget_is_recorded() -> None:
    core = core_of()
    d = decide_chat(core, chat(PROSE * 600))
    assert d.pool == "long" and d.reason == "fits" and d.routed_budget is d.budget
    assert d.budget.total_tokens > 8192 and d.learn and d.read is False


def test_previous_response_id_pins_the_pool_that_stored_it_and_is_not_learned() -> None:
    core = core_of()
    core.response_pools.put("resp_1", "long")
    body = json.dumps({"model": "m", "input": "hi", "previous_response_id": "resp_1"}).encode()
    pinned = decide_chat(core, body, "responses")
    assert (pinned.pool, pinned.reason, pinned.learn) == ("long", "previous_response", False)
    assert not pinned.budget.screened  # a continuation is never screened
    lost = decide_chat(core, body.replace(b"resp_1", b"resp_2"), "responses")
    assert (lost.pool, lost.reason) == ("long", "previous_response_unknown")
    out = learn(core, pinned, usage(900), routed_pool="long", retried_to=None, retry_pending=False)
    assert out.calibration == ["previous_response"] and out.ratio_key is None


def test_unknown_model_goes_to_the_default_set_with_its_reason() -> None:
    core = CoreState(parse_config(yaml.safe_load(ROUTER_2MODELS.read_text(encoding="utf-8"))))
    body = json.dumps({"model": "mistral-7b", "messages": [{"role": "user", "content": "hi"}]}).encode()
    d = decide_chat(core, body)
    assert d.reason == "unknown_model" and d.pool.startswith("qwen-")
    known = decide_chat(core, body.replace(b"mistral-7b", b"meta-llama/Llama-3.1-8B-Instruct"))
    assert known.pool == "llama-short" and known.reason == "fits"
    assert fallback_pool(core, "meta-llama/Llama-3.1-8B-Instruct") == "llama-long"


def test_adaptive_read_decision_reads_a_cold_key_and_learns_against_the_exact_estimate() -> None:
    core = core_of(calibration={"warmup_samples": 2, "response_reads": {"mode": "adaptive"}})
    d = decide_chat(core, chat(PROSE * 10), read=None)
    assert d.read is True and d.read_reason is not None
    assert d.routed_budget.screened == "bound" and not d.budget.screened


def test_learn_teaches_the_ratio_and_reports_what_it_learned() -> None:
    core = core_of()
    d = decide_chat(core, chat(PROSE * 10, max_tokens=64), read=True)
    out = learn(core, d, usage(200, 5), routed_pool="short", retried_to=None, retry_pending=False)
    # the model was admitted by this answer: learned under its own name, same category
    assert out.calibration == ["applied"] and out.ratio_key == ("m", d.category)
    assert out.estimate_error is not None and out.estimate_error[0] == d.category
    state = core.store.get(out.ratio_key)
    assert state is not None and state.samples == 1
    assert out.prompt_tokens == 200 and out.truncated is False and out.misroute is None


def test_a_screened_budget_is_never_learned_from() -> None:
    core = core_of()
    d = decide_chat(core, chat(PROSE * 10))
    out = learn(core, d, usage(200), routed_pool="short", retried_to=None, retry_pending=False)
    assert out.calibration == ["screened"] and out.ratio_key is None and out.estimate_error is None


def test_a_length_stop_on_the_short_pool_is_a_truncation_misroute() -> None:
    core = core_of()
    d = decide_chat(core, chat(PROSE * 10), read=True)
    out = learn(
        core, d, usage(8000, 192, "length"), routed_pool="short", retried_to=None, retry_pending=False
    )
    assert out.truncated is True and out.finish_reason == "length"
    assert (out.misroute, out.misroute_cause) == ("truncated", TRUNCATED)
    assert out.misroutes == [("short", "short", "truncated", TRUNCATED)]
    # without usage the same stop is still judged (no client maximum, a larger pool exists)
    bare = learn(
        core, d, usage(None, None, "length"), routed_pool="short", retried_to=None, retry_pending=False
    )
    assert bare.calibration == ["no_usage"] and bare.truncated is True


def test_a_context_length_error_in_the_stream_is_a_misroute_and_settles_the_retry() -> None:
    core = core_of()
    d = decide_chat(core, chat(PROSE * 10), read=True)
    err = StreamError(400, "BadRequestError", "This model's maximum context length is 8192 tokens.")
    out = learn(core, d, usage(None, error=err), routed_pool="short", retried_to="long", retry_pending=True)
    assert out.calibration == ["error_in_stream"] and out.retry_cause == ESTIMATE_TOO_LOW
    assert out.misroutes == [("long", "long", "error_in_stream", ESTIMATE_TOO_LOW)]
    assert core.store.get(d.budget.key) is None


def test_a_served_retry_is_caused_by_the_estimate_only_when_the_prompt_overflowed() -> None:
    core = core_of()
    d = decide_chat(core, chat(PROSE * 10), read=True)
    over = learn(core, d, usage(9000), routed_pool="short", retried_to="long", retry_pending=True)
    assert over.retry_cause == ESTIMATE_TOO_LOW and over.recovery
    fits = learn(core, d, usage(300), routed_pool="short", retried_to="long", retry_pending=True)
    assert fits.retry_cause == POOL_UNAVAILABLE and fits.recovery == ("unconfirmed",)
    assert (
        learn(core, d, usage(300), routed_pool="short", retried_to=None, retry_pending=False).retry_cause
        is None
    )


def test_a_responses_answer_id_is_stored_for_its_continuations() -> None:
    core = core_of()
    body = json.dumps({"model": "m", "input": PROSE}).encode()
    d = decide_chat(core, body, "responses", read=True)
    learn(core, d, usage(40, response_id="resp_9"), routed_pool=d.pool, retried_to=None, retry_pending=False)
    assert core.response_pools.get("resp_9") == d.pool


def test_same_requests_same_answers_same_state() -> None:
    def replay() -> list[tuple[str, int]]:
        core = core_of(calibration={"warmup_samples": 2, "response_reads": {"mode": "adaptive"}})
        seen = []
        for i in range(40):
            d = decide_chat(core, chat(PROSE * (1 + i % 7) + str(i)), read=None)
            if d.read:
                learn(
                    core, d, usage(20 * (1 + i % 7)), routed_pool=d.pool, retried_to=None, retry_pending=False
                )
            seen.append((d.pool, d.budget.total_tokens))
        return seen

    assert replay() == replay()


def test_an_adaptive_skip_counts_as_untruncated_only_when_the_pool_cannot_cut_the_answer() -> None:
    """The truncation controller sees every request once: read answers as they come, skipped ones as
    untruncated, unless the skip was of a request its pool may cut (then nothing is known)."""
    reads = {"mode": "adaptive", "cold_samples": 0, "output_cold_samples": 0, "floor_rate": 0.0}
    core = core_of(calibration={"warmup_samples": 2, "response_reads": reads})
    learner = core.estimator.output_learner
    assert learner is not None
    start = learner.fleet_tail_share
    far = decide_chat(core, chat(PROSE), read=None)
    assert (far.read, far.read_reason) == (False, "learned")
    assert learner.fleet_tail_share > start
    # one read of budget, and a prompt that leaves the short pool less than two reserves of room
    starved = core_of(
        calibration={
            "warmup_samples": 2,
            "response_reads": reads | {"burst_reads": 1.0, "reads_per_key_per_s": 0.0},
        }
    )
    learner = starved.estimator.output_learner
    assert learner is not None
    reps = 1
    while True:
        body = chat(PROSE * reps)
        budget = starved.estimator.estimate(parse_body(body, "chat"))
        if 8192 - budget.prompt_tokens < 2 * budget.output_reserve_tokens:
            break
        reps += 1
    first = decide_chat(starved, body, read=None)
    assert first.pool == "short" and (first.read, first.read_reason) == (True, "truncation_possible")
    start = learner.fleet_tail_share
    near = decide_chat(starved, body, read=None)
    assert near.pool == "short" and (near.read, near.read_reason) == (False, "over_budget")
    assert learner.fleet_tail_share == start
