"""Truncation misroutes through the ext_proc processor (issue 30 item 3), per API shape, JSON and SSE,
n > 1, in path and off the path: the answer passes unchanged, the cut is counted as a misroute of the
serving pool and written to the decision record."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from envoy.config.core.v3 import base_pb2 as core
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.adapter.observer import NullObserver
from extproc.adapter.off_path import CALIB_HEADER, CalibPayload, decode_payload, encode_payload
from extproc.adapter.processor import StreamProcessor
from extproc.adapter.runtime import Runtime
from extproc.config import parse_config
from extproc.core.estimate.output_reserve import ALL_BANDS
from extproc.core.route.decision import DecisionRecord

CONFIG: dict[str, Any] = {
    "pools": [
        {"name": "short", "max_model_len": 8192, "header_value": "short"},
        {"name": "long", "max_model_len": 65536, "header_value": "long"},
    ],
    "calibration": {"sample_rate": 1.0},
}
TEXT = "Explain in two sentences why the sky is blue during the day and red at sunset. " * 3
PROMPT = 3900  # what the pool reports; the cap on the short pool is 8192 - 3900 = 4292
CAP = 8192 - PROMPT


class Recorder(NullObserver):
    """Counts misroutes and keeps the decision records."""

    records_requests = True

    def __init__(self) -> None:
        self.misroutes: list[tuple[str, str, str]] = []
        self.causes: list[str] = []
        self.records: list[DecisionRecord] = []

    def misroute(self, from_pool: str, to_pool: str, outcome: str, cause: str) -> None:
        self.misroutes.append((from_pool, to_pool, outcome))
        self.causes.append(cause)

    def request_finished(self, record: DecisionRecord, traceparent: str) -> None:
        self.records.append(record)


def _map(**kv: str) -> core.HeaderMap:
    return core.HeaderMap(headers=[core.HeaderValue(key=k, raw_value=v.encode()) for k, v in kv.items()])


def _headers(**kv: str) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_headers=pb.HttpHeaders(headers=_map(**kv)))


def _request_body(endpoint: str, extra: dict[str, Any]) -> bytes:
    if endpoint == "chat":
        doc: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": TEXT}]}
    elif endpoint == "completions":
        doc = {"model": "m", "prompt": TEXT}
    elif endpoint == "responses":
        doc = {"model": "m", "input": TEXT}
    else:
        doc = {"model": "m", "max_tokens": 6000, "messages": [{"role": "user", "content": TEXT}]}
    return json.dumps({**doc, **extra}).encode()


PATHS = {
    "chat": "/v1/chat/completions",
    "completions": "/v1/completions",
    "responses": "/v1/responses",
    "messages": "/v1/messages",
}
ALL_PATHS = {**PATHS, "chat_batch": "/v1/chat/completions/batch"}


def _answer(endpoint: str, reasons: list[str], completion: int, *, stream: bool, usage: bool = True) -> bytes:
    """The pool's answer in the shape vLLM 0.32 sends (only the fields the router reads, and some
    text around them); ``usage`` False: none (a stream without ``include_usage``; chat and completions)."""
    if endpoint in ("chat", "completions", "chat_batch"):
        counts = {
            "prompt_tokens": PROMPT,
            "completion_tokens": completion,
            "total_tokens": PROMPT + completion,
        }
        if not stream:
            choices = [
                {"index": i, "message": {"role": "assistant", "content": "x"}, "finish_reason": r}
                if endpoint == "chat"
                else {"index": i, "text": "x", "finish_reason": r, "stop_reason": None}
                for i, r in enumerate(reasons)
            ]
            doc: dict[str, Any] = {"id": "c1", "object": "chat.completion", "choices": choices}
            return json.dumps({**doc, "usage": counts} if usage else doc).encode()
        events: list[Any] = []
        for i in range(len(reasons)):
            events.append(
                {"id": "c1", "choices": [{"index": i, "delta": {"content": "x"}, "finish_reason": None}]}
            )
        for i, r in enumerate(reasons):
            events.append({"id": "c1", "choices": [{"index": i, "delta": {}, "finish_reason": r}]})
        if usage:
            events.append({"id": "c1", "choices": [], "usage": counts})
        return b"".join(
            b"data: " + json.dumps(e, separators=(",", ":")).encode() + b"\n\n" for e in events
        ) + (b"data: [DONE]\n\n")
    (reason,) = reasons
    tokens = {"input_tokens": PROMPT, "output_tokens": completion}
    if endpoint == "responses":
        status = "incomplete" if reason == "max_output_tokens" else "completed"
        resp: dict[str, Any] = {
            "id": "resp_1",
            "object": "response",
            "status": status,
            "incomplete_details": {"reason": reason} if status == "incomplete" else None,
            "usage": tokens,
        }
        if not stream:
            return json.dumps(resp).encode()
        created = {**resp, "status": "in_progress", "incomplete_details": None, "usage": None}
        named = [("response.created", {"response": created}), (f"response.{status}", {"response": resp})]
    else:
        msg: dict[str, Any] = {"id": "msg_1", "type": "message", "stop_reason": reason, "usage": tokens}
        if not stream:
            return json.dumps(msg).encode()
        start = {**msg, "stop_reason": None, "usage": {"input_tokens": PROMPT, "output_tokens": 1}}
        named = [
            ("message_start", {"message": start}),
            ("message_delta", {"delta": {"stop_reason": reason}, "usage": {"output_tokens": completion}}),
            ("message_stop", {}),
        ]
    return b"".join(
        f"event: {t}\ndata: ".encode() + json.dumps({"type": t, **d}).encode() + b"\n\n" for t, d in named
    )


def _run(
    endpoint: str,
    reasons: list[str],
    completion: int,
    *,
    stream: bool,
    extra: dict[str, Any] | None = None,
    attempt: str = "1",
    config: dict[str, Any] | None = None,
    served_limits: dict[str, int] | None = None,
    usage: bool = True,
    body: bytes | None = None,
) -> tuple[Recorder, list[pb.ProcessingResponse], StreamProcessor]:
    obs = Recorder()
    runtime = Runtime(parse_config(config or CONFIG), observer=obs, served_limits=served_limits)
    proc = StreamProcessor(runtime, rng=random.Random(0))
    out = [proc.handle(_headers(**{":path": ALL_PATHS[endpoint], ":method": "POST", "x-request-id": "t1"}))]
    body = body or _request_body(endpoint, {"stream": stream, **(extra or {})})
    out.append(proc.handle(pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))))
    assert proc.pool == "short"
    ctype = "text/event-stream" if stream else "application/json"
    h = {":status": "200", "content-type": ctype, "x-envoy-attempt-count": attempt}
    out.append(proc.handle(pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=_map(**h)))))
    answer = _answer(endpoint, reasons, completion, stream=stream, usage=usage)
    for i in range(0, len(answer), 37):  # Envoy's chunks cut events anywhere
        chunk = pb.HttpBody(body=answer[i : i + 37], end_of_stream=i + 37 >= len(answer))
        out.append(proc.handle(pb.ProcessingRequest(response_body=chunk)))
    proc.finish("complete")
    return obs, out, proc


LENGTH = {
    "chat": "length",
    "completions": "length",
    "responses": "max_output_tokens",
    "messages": "max_tokens",
}
STOP = {"chat": "stop", "completions": "stop", "responses": "completed", "messages": "end_turn"}


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("endpoint", list(PATHS))
def test_an_answer_cut_at_the_short_pools_limit_is_a_truncation_misroute(endpoint: str, stream: bool) -> None:
    obs, out, _ = _run(endpoint, [LENGTH[endpoint]], CAP, stream=stream)
    assert obs.misroutes == [("short", "short", "truncated")]
    (rec,) = obs.records
    assert (rec.pool, rec.misroute, rec.truncated, rec.finish_reason) == (
        "short",
        "truncated",
        True,
        LENGTH[endpoint],
    )
    assert (rec.prompt_tokens, rec.completion_tokens) == (PROMPT, CAP)
    # the answer passes unchanged: every body message is a plain CONTINUE without mutation
    for resp in out[3:]:
        assert resp.WhichOneof("response") == "response_body"
        assert not resp.response_body.response.HasField("body_mutation")
        assert not resp.response_body.response.HasField("header_mutation")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
@pytest.mark.parametrize("endpoint", list(PATHS))
def test_a_natural_stop_is_not_a_misroute(endpoint: str, stream: bool) -> None:
    obs, _, _ = _run(endpoint, [STOP[endpoint]], 700, stream=stream)
    assert obs.misroutes == []
    (rec,) = obs.records
    # a complete Responses JSON body's status is not read (output items have a status too): only
    # incomplete_details.reason is, and its absence is judged by the counts
    reason = None if (endpoint, stream) == ("responses", False) else STOP[endpoint]
    assert (rec.misroute, rec.truncated, rec.finish_reason) == (None, False, reason)


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_the_clients_own_max_tokens_as_the_limit_is_not_a_misroute(stream: bool) -> None:
    obs, _, proc = _run("chat", ["length"], 300, stream=stream, extra={"max_tokens": 300})
    assert obs.misroutes == [] and proc.truncated is False and proc.finish_reason == "length"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
def test_n_2_with_one_choice_cut_is_one_truncation(stream: bool) -> None:
    obs, _, proc = _run("chat", ["stop", "length"], CAP + 500, stream=stream, extra={"n": 2})
    assert obs.misroutes == [("short", "short", "truncated")]
    assert proc.truncated is True and proc.finish_reason == "length"
    obs, _, proc = _run("completions", ["stop", "stop"], 900, stream=stream, extra={"n": 2})
    assert obs.misroutes == [] and proc.truncated is False


def test_a_retried_request_cut_on_the_largest_pool_is_not_a_truncation() -> None:
    # Envoy retried on long (attempt 2): long is the largest, nothing would have done better
    obs, _, proc = _run("chat", ["length"], 65536 - PROMPT, stream=False, attempt="2")
    assert obs.misroutes == [("short", "long", "recovered")]
    assert proc.truncated is False and proc.misroute == "recovered"


def test_an_off_path_stream_judges_with_the_clients_maximum_from_its_payload() -> None:
    # the one-message design: the observability stream knows the request only from the payload
    routing = StreamProcessor(Runtime(parse_config(CONFIG)))
    body = _request_body("chat", {"max_tokens": 6000})  # over the short cap: vLLM lowers it to 4292
    req = pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))
    attrs = req.attributes["envoy.filters.http.ext_proc"]
    attrs["request.path"], attrs["request.method"], attrs["request.id"] = PATHS["chat"], "POST", "o1"
    resp = routing.handle(req)
    value = resp.dynamic_metadata.fields["tbr"].struct_value.fields["calib"].string_value
    payload = decode_payload(value)
    assert payload is not None and payload.client_max_output_tokens == 6000
    obs = Recorder()
    silent = StreamProcessor(Runtime(parse_config(CONFIG), observer=obs))
    msg = _headers(**{":path": PATHS["chat"], ":method": "POST"})
    msg.metadata_context.filter_metadata["tbr"].fields["calib"].string_value = value
    silent.handle(msg)
    h = {":status": "200", "content-type": "application/json"}
    silent.handle(pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=_map(**h))))
    answer = _answer("chat", ["length"], CAP, stream=False)
    silent.handle(pb.ProcessingRequest(response_body=pb.HttpBody(body=answer, end_of_stream=True)))
    assert obs.misroutes == [("short", "short", "truncated")] and silent.truncated is True


def test_payload_keeps_the_clients_maximum_only_when_sent_and_rejects_a_bad_one() -> None:
    routing = StreamProcessor(Runtime(parse_config(CONFIG)))
    routing.handle(_headers(**{":path": PATHS["chat"], ":method": "POST"}))
    routing.handle(
        pb.ProcessingRequest(request_body=pb.HttpBody(body=_request_body("chat", {}), end_of_stream=True))
    )
    assert routing.budget is not None
    plain = CalibPayload(routing.budget, "short", "chat", True, "r")
    assert '"mx"' not in encode_payload(plain) and decode_payload(encode_payload(plain)) == plain
    with_max = CalibPayload(routing.budget, "short", "chat", True, "r", client_max_output_tokens=9)
    assert decode_payload(encode_payload(with_max)) == with_max
    doc = json.loads(encode_payload(with_max))
    for bad in (-1, "9", True, 1.5):
        assert decode_payload(json.dumps({**doc, "mx": bad})) is None
    assert CALIB_HEADER == "x-tbr-calib"


LEARNED = {**CONFIG, "estimator": {"output_reserve": {"learned": True}}}


@pytest.mark.parametrize(
    ("reasons", "completion", "extra", "want"),
    [
        # cut by the short pool: a truncation, censored at 4292
        (["length"], CAP, {}, [(1, 1, 1)]),
        # ended by itself: learned as it is
        (["stop"], 700, {}, [(1, 0, 0)]),
        # cut by the client's own max_tokens: censored, not a truncation
        (["length"], 300, {"max_tokens": 300}, [(1, 1, 0)]),
        # n = 2, one choice cut: two answers, one censored truncation
        (["stop", "length"], CAP + 500, {"n": 2}, [(2, 1, 1)]),
    ],
    ids=["truncated", "stopped", "client_capped", "n2"],
)
def test_each_answer_teaches_its_class(
    reasons: list[str], completion: int, extra: dict[str, Any], want: list[tuple[int, int, int]]
) -> None:
    _, _, proc = _run("chat", reasons, completion, stream=False, extra=extra, config=LEARNED)
    learner = proc.router.estimator.output_learner
    assert learner is not None and proc.budget is not None and proc.budget.output_class is not None
    key = proc.budget.output_class
    # the request's class and its all-bands parent learned the same answers
    assert [k for k, _ in learner.items()] == [key._replace(prompt_band=ALL_BANDS), key]
    assert [(s.samples, s.censored, s.truncated) for _, s in learner.items()] == want * 2


def test_nothing_is_learned_while_the_reserve_is_not_learned() -> None:
    fixed = {**CONFIG, "estimator": {"output_reserve": {"learned": False}}}
    _, _, proc = _run("chat", ["length"], CAP, stream=False, config=fixed)
    assert proc.router.estimator.output_learner is None and proc.truncated is True


def test_payload_carries_the_output_class() -> None:
    runtime = Runtime(parse_config(LEARNED))
    runtime.estimator.admit("m", learned=True)  # a served model holds its key (issue 34, item 4)
    routing = StreamProcessor(runtime)
    routing.handle(_headers(**{":path": PATHS["chat"], ":method": "POST"}))
    routing.handle(
        pb.ProcessingRequest(request_body=pb.HttpBody(body=_request_body("chat", {}), end_of_stream=True))
    )
    assert routing.budget is not None and routing.budget.output_class is not None
    payload = CalibPayload(routing.budget, "short", "chat", True, "r")
    assert decode_payload(encode_payload(payload)) == payload
    doc = json.loads(encode_payload(payload))
    assert doc["b"]["output_class"] == "chat|off|0|0|m"
    for bad in (["chat"], 3, "chat|off|2|0|m", "x"):
        assert decode_payload(json.dumps({**doc, "b": {**doc["b"], "output_class": bad}})) is None


def test_payload_with_the_longest_model_key_and_its_class_still_decodes() -> None:
    # a 128-character non-ASCII model name (the longest model key) is escaped twice in the payload
    runtime = Runtime(parse_config(LEARNED))
    runtime.estimator.admit("模" * 128, learned=True)  # a served model holds its key (issue 34, item 4)
    routing = StreamProcessor(runtime)
    routing.handle(_headers(**{":path": PATHS["chat"], ":method": "POST"}))
    body = json.dumps({"model": "模" * 128, "messages": [{"role": "user", "content": TEXT}], "max_tokens": 5})
    routing.handle(pb.ProcessingRequest(request_body=pb.HttpBody(body=body.encode(), end_of_stream=True)))
    assert routing.budget is not None and routing.budget.output_class is not None
    assert routing.budget.output_class.model == "模" * 128
    payload = CalibPayload(
        routing.budget, "short", "chat", True, "r" * 128, "k" * 32, client_max_output_tokens=5
    )
    assert decode_payload(encode_payload(payload)) == payload


def test_the_limit_the_pools_server_reports_is_where_it_cuts() -> None:
    """The config says short = 8,192 but its vLLM server serves 4,096 (the pool limit check read
    /v1/models): max_tokens 2000 over 4,096 − 3,900 is clamped by vLLM to 196 tokens, a truncation.
    Judged by the configured 8,192 alone, 2,000 would have fitted and the cut looks like the
    client's own maximum."""
    cut = 4096 - PROMPT
    obs, _, proc = _run(
        "chat", ["length"], cut, stream=False, extra={"max_tokens": 2000}, served_limits={"short": 4096}
    )
    assert obs.misroutes == [("short", "short", "truncated")] and proc.truncated is True
    obs, _, proc = _run("chat", ["length"], cut, stream=False, extra={"max_tokens": 2000})
    assert obs.misroutes == [] and proc.truncated is False


# -- answers the learner cannot learn from: excluded with a counted reason (issue 30) ----------


def _unjudged(proc: StreamProcessor) -> dict[str, int]:
    learner = proc.router.estimator.output_learner
    assert learner is not None
    return {k: v for k, v in learner.unjudged.items() if v}


@pytest.mark.parametrize("endpoint", ["chat", "completions"])
def test_a_stream_without_usage_is_counted_and_a_length_stop_is_still_a_truncation(endpoint: str) -> None:
    # no stream_options.include_usage: the length is unknown, but without a client maximum vLLM's
    # only limit is the pool's max_model_len, so "length" is the short pool's cut
    obs, out, proc = _run(endpoint, ["length"], CAP, stream=True, config=LEARNED, usage=False)
    assert obs.misroutes == [("short", "short", "truncated")]
    (rec,) = obs.records
    assert (rec.misroute, rec.truncated, rec.finish_reason, rec.completion_tokens) == (
        "truncated",
        True,
        "length",
        None,
    )
    assert _unjudged(proc) == {"no_usage": 1}
    assert proc.router.estimator.output_learner.items() == []  # type: ignore[union-attr]
    for resp in out[3:]:  # the answer passes unchanged
        assert not resp.response_body.response.HasField("body_mutation")
    # a natural stop, or a length stop under the client's own maximum: counted, not a misroute
    obs, _, proc = _run(endpoint, ["stop"], 700, stream=True, config=LEARNED, usage=False)
    assert obs.misroutes == [] and proc.truncated is not True and _unjudged(proc) == {"no_usage": 1}
    extra = {"max_tokens": 300}
    obs, _, proc = _run(endpoint, ["length"], 300, stream=True, config=LEARNED, usage=False, extra=extra)
    assert obs.misroutes == [] and proc.truncated is not True and _unjudged(proc) == {"no_usage": 1}


def test_a_completions_prompt_list_is_counted_not_learned() -> None:
    # two prompts: usage sums both prompts and both answers, each prompt had its own room
    body = json.dumps({"model": "m", "prompt": [TEXT, TEXT[:80]]}).encode()
    obs, _, proc = _run("completions", ["length", "stop"], CAP, stream=False, config=LEARNED, body=body)
    assert proc.batch_budgets is not None
    assert obs.misroutes == [] and proc.truncated is not True
    assert _unjudged(proc) == {"multi_prompt": 1}
    assert proc.router.estimator.output_learner.items() == []  # type: ignore[union-attr]


def test_a_chat_batch_is_counted_not_learned() -> None:
    conv = [{"role": "user", "content": TEXT}]
    body = json.dumps({"model": "m", "messages": [conv, conv]}).encode()
    obs, _, proc = _run("chat_batch", ["length", "stop"], CAP, stream=False, config=LEARNED, body=body)
    assert obs.misroutes == [] and proc.truncated is not True
    assert _unjudged(proc) == {"chat_batch": 1}
    assert proc.router.estimator.output_learner.items() == []  # type: ignore[union-attr]


def test_n_2_without_a_reason_per_choice_is_counted_not_learned() -> None:
    # a JSON body whose choices carry no finish_reason: the summed length cannot be split
    obs, _, proc = _run("chat", [None, None], 900, stream=False, config=LEARNED, extra={"n": 2})  # type: ignore[list-item]
    assert obs.misroutes == [] and _unjudged(proc) == {"no_choice_reasons": 1}
    assert proc.router.estimator.output_learner.items() == []  # type: ignore[union-attr]


def test_an_off_path_prompt_list_is_counted_not_learned() -> None:
    # the observability stream sees only the summed budget: its choices outnumber n
    routing = StreamProcessor(Runtime(parse_config(LEARNED)))
    body = json.dumps({"model": "m", "prompt": [TEXT, TEXT[:80]]}).encode()
    req = pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))
    attrs = req.attributes["envoy.filters.http.ext_proc"]
    attrs["request.path"], attrs["request.method"], attrs["request.id"] = PATHS["completions"], "POST", "o2"
    resp = routing.handle(req)
    value = resp.dynamic_metadata.fields["tbr"].struct_value.fields["calib"].string_value
    obs = Recorder()
    silent = StreamProcessor(Runtime(parse_config(LEARNED), observer=obs))
    msg = _headers(**{":path": PATHS["completions"], ":method": "POST"})
    msg.metadata_context.filter_metadata["tbr"].fields["calib"].string_value = value
    silent.handle(msg)
    h = {":status": "200", "content-type": "application/json"}
    silent.handle(pb.ProcessingRequest(response_headers=pb.HttpHeaders(headers=_map(**h))))
    answer = _answer("completions", ["length", "stop"], CAP, stream=False)
    silent.handle(pb.ProcessingRequest(response_body=pb.HttpBody(body=answer, end_of_stream=True)))
    assert obs.misroutes == [] and silent.truncated is not True
    assert _unjudged(silent) == {"multi_prompt": 1}
