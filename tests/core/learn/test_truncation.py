"""Truncation misroutes (issue 30 item 3): the judgement and the finish-reason readers, per API shape."""

from __future__ import annotations

import json

import pytest

from extproc.core.learn.truncation import judge_output
from extproc.core.response.api_usage import finish_reasons_of
from extproc.core.response.sse import JSONUsageReader, SSEUsageReader


def judge(**kw: object) -> tuple[str | None, bool, tuple[tuple[int, bool], ...]]:
    args: dict[str, object] = {
        "api": "openai",
        "finish_reasons": ("length",),
        "prompt_tokens": 3900,
        "completion_tokens": 4292,
        "n_sequences": 1,
        "served_max_model_len": 8192,
        "larger_max_model_len": 65536,
        "client_max_output_tokens": None,
    }
    args.update(kw)
    r = judge_output(**args)  # type: ignore[arg-type]
    return r.finish_reason, r.truncated, r.sequences


def test_answer_cut_at_the_short_pools_limit_without_max_tokens_is_a_truncation() -> None:
    assert judge() == ("length", True, ((4292, True),))


@pytest.mark.parametrize(
    ("api", "reason"), [("openai", "length"), ("responses", "max_output_tokens"), ("anthropic", "max_tokens")]
)
def test_each_apis_length_reason_counts(api: str, reason: str) -> None:
    assert judge(api=api, finish_reasons=(reason,)) == (reason, True, ((4292, True),))
    # the other API's word is not a length stop there
    other = "stop" if api != "openai" else "max_tokens"
    assert judge(api=api, finish_reasons=(other,))[1] is False


def test_natural_stop_is_not_a_truncation_and_is_observed_uncensored() -> None:
    assert judge(finish_reasons=("stop",), completion_tokens=700) == ("stop", False, ((700, False),))


def test_the_clients_own_maximum_as_the_limit_is_not_a_misroute() -> None:
    # max_tokens 1000 fitted the pool (3900 + 1000 <= 8192): the client cut it, censored at 1000
    assert judge(client_max_output_tokens=1000, completion_tokens=1000) == ("length", False, ((1000, True),))


def test_a_client_maximum_vllm_lowered_to_the_pool_limit_is_a_truncation() -> None:
    # vLLM 0.32 clamps max_tokens 6000 to 8192 - 3900 = 4292 and answers 200 "length"
    assert judge(client_max_output_tokens=6000) == ("length", True, ((4292, True),))


def test_the_largest_pool_cuts_nothing_that_a_larger_pool_could_have_done_better() -> None:
    assert judge(served_max_model_len=65536, larger_max_model_len=None, completion_tokens=61636)[1] is False
    assert judge(larger_max_model_len=None)[1] is False


def test_length_below_the_pool_limit_is_not_the_pools_cut() -> None:
    # "length" with fewer tokens than the pool allowed: not the pool's max_model_len
    assert judge(completion_tokens=100)[1] is False


def test_no_finish_reason_judges_one_sequence_by_its_counts() -> None:
    assert judge(finish_reasons=(), completion_tokens=4292) == (None, True, ((4292, True),))
    assert judge(finish_reasons=(), completion_tokens=10) == (None, False, ((10, False),))
    assert judge(finish_reasons=(), n_sequences=2, completion_tokens=10) == (None, False, ())


def test_a_responses_completed_status_is_judged_by_its_counts() -> None:
    # vLLM reports "completed" as its catch-all status: the counts decide
    assert judge(api="responses", finish_reasons=("completed",)) == ("completed", True, ((4292, True),))
    assert judge(api="responses", finish_reasons=("completed",), completion_tokens=9)[1:] == (
        False,
        ((9, False),),
    )


def test_n_greater_than_one_judges_per_choice() -> None:
    # n = 3: choice 1 cut at 4292, the others stopped; 9000 tokens in all
    name, cut, seqs = judge(finish_reasons=("stop", "length", "stop"), n_sequences=3, completion_tokens=9000)
    assert (name, cut) == ("length", True)
    assert seqs == ((2354, False), (4292, True), (2354, False))
    # every choice stopped: nothing cut
    assert judge(finish_reasons=("stop", "stop"), n_sequences=2, completion_tokens=900)[1:] == (
        False,
        ((450, False), (450, False)),
    )


@pytest.mark.parametrize(
    "kw",
    [
        {"prompt_tokens": None},
        {"prompt_tokens": 0},
        {"finish_reasons": ("length", "length")},  # more reasons than sequences (several prompts)
        {"completion_tokens": -1},
        {"served_max_model_len": None},
    ],
)
def test_missing_or_bad_values_decide_nothing(kw: dict[str, object]) -> None:
    assert judge(**kw)[1] is False


# -- readers ----------------------------------------------------------------------------------------


def _sse(*events: object, named: bool = False) -> bytes:
    out = b""
    for e in events:
        data = json.dumps(e, separators=(",", ":")).encode()
        if named and isinstance(e, dict):
            out += b"event: " + str(e.get("type", "")).encode() + b"\n"
        out += b"data: " + data + b"\n\n"
    return out


def _feed_sse(api: str, body: bytes, step: int) -> SSEUsageReader:
    r = SSEUsageReader(api=api)
    for i in range(0, len(body), step):
        r.feed(body[i : i + step])
    r.close()
    return r


def _feed_json(api: str, body: bytes, step: int) -> JSONUsageReader:
    r = JSONUsageReader(api=api)
    for i in range(0, len(body), step):
        r.feed(body[i : i + step])
    r.close()
    return r


CHAT_N2 = {
    "id": "c",
    "object": "chat.completion",
    "choices": [
        # the answer text quotes the key: escaped inside a JSON string, never read as one
        {"index": 0, "message": {"content": '{"finish_reason":"stop"}'}, "finish_reason": "length"},
        {"index": 1, "message": {"content": "ok"}, "finish_reason": "stop"},
    ],
    "usage": {"prompt_tokens": 3900, "completion_tokens": 4300, "total_tokens": 8200},
}


@pytest.mark.parametrize("step", [1, 5, 64, 100000])
def test_json_readers_find_each_apis_finish_reason_in_any_chunking(step: int) -> None:
    r = _feed_json("openai", json.dumps(CHAT_N2).encode(), step)
    assert (r.finish_reasons, r.prompt_tokens, r.completion_tokens) == (["length", "stop"], 3900, 4300)
    completions = {
        "choices": [{"index": 0, "text": "x", "finish_reason": "length", "stop_reason": None}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 7},
    }
    assert _feed_json("openai", json.dumps(completions).encode(), step).finish_reasons == ["length"]
    responses = {
        "id": "resp_1",
        "object": "response",
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "output": [{"type": "message", "status": "incomplete"}],
        "usage": {"input_tokens": 5, "output_tokens": 7},
    }
    r = _feed_json("responses", json.dumps(responses).encode(), step)
    assert (r.finish_reasons, r.prompt_tokens, r.completion_tokens) == (["max_output_tokens"], 5, 7)
    anthropic = {
        "type": "message",
        "stop_reason": "max_tokens",
        "usage": {"input_tokens": 5, "output_tokens": 7},
    }
    assert _feed_json("anthropic", json.dumps(anthropic).encode(), step).finish_reasons == ["max_tokens"]


@pytest.mark.parametrize("step", [1, 7, 100000])
def test_sse_readers_find_each_apis_finish_reason_in_any_chunking(step: int) -> None:
    chat = (
        _sse(
            {"choices": [{"index": 0, "delta": {"content": "a"}, "finish_reason": None}]},
            {"choices": [{"index": 1, "delta": {"content": "b"}, "finish_reason": None}]},
            {"choices": [{"index": 1, "delta": {}, "finish_reason": "length"}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
        )
        + b"data: [DONE]\n\n"
    )
    r = _feed_sse("openai", chat, step)
    assert (r.finish_reasons, r.prompt_tokens, r.completion_tokens) == (("stop", "length"), 3, 4)
    resp = {"id": "resp_1", "object": "response", "status": "incomplete"}
    responses = _sse(
        {"type": "response.created", "response": {**resp, "status": "in_progress", "usage": None}},
        {
            "type": "response.incomplete",
            "response": {
                **resp,
                "incomplete_details": {"reason": "max_output_tokens"},
                "usage": {"input_tokens": 5, "output_tokens": 9},
            },
        },
        named=True,
    )
    r = _feed_sse("responses", responses, step)
    assert (r.finish_reasons, r.prompt_tokens, r.completion_tokens) == (("max_output_tokens",), 5, 9)
    anthropic = _sse(
        {
            "type": "message_start",
            "message": {"stop_reason": None, "usage": {"input_tokens": 5, "output_tokens": 1}},
        },
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "x"}},
        {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}},
        named=True,
    )
    r = _feed_sse("anthropic", anthropic, step)
    assert (r.finish_reasons, r.prompt_tokens) == (("max_tokens",), 5)


def test_finish_reasons_of_ignores_nulls_and_foreign_shapes() -> None:
    assert finish_reasons_of({"choices": [{"index": 0, "finish_reason": None}]}, "openai") == []
    assert finish_reasons_of({"choices": "x"}, "openai") == []
    assert finish_reasons_of({"response": {"status": "in_progress"}}, "responses") == []
    assert finish_reasons_of({"status": "completed"}, "responses") == [(0, "completed")]
    assert finish_reasons_of([1, 2], "anthropic") == []
    assert finish_reasons_of({"stop_reason": "end_turn"}, "anthropic") == [(0, "end_turn")]


def test_sse_with_a_missing_choice_reports_no_reasons() -> None:
    r = _feed_sse("openai", _sse({"choices": [{"index": 1, "delta": {}, "finish_reason": "length"}]}), 1000)
    assert r.finish_reasons == ()


def test_sse_chunks_with_several_choices_or_spaced_json_are_read() -> None:
    # one chunk, two choices: the first still running (null), the second cut
    both = {
        "choices": [
            {"index": 0, "delta": {"content": "a"}, "finish_reason": None},
            {"index": 1, "delta": {}, "finish_reason": "length"},
        ]
    }
    compact = b"data: " + json.dumps(both, separators=(",", ":")).encode() + b"\n\n"
    end = b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
    assert _feed_sse("openai", compact + end, 1000).finish_reasons == ("stop", "length")
    # json.dumps' default separators (a space after each colon) are read too
    spaced = (
        b"data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}).encode()
    )
    assert _feed_sse("openai", spaced + b"\n\n", 3).finish_reasons == ("length",)
