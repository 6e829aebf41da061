"""Request bodies the router cannot (fully) read: each is routed to the long pool with a counted
reason, over a real gRPC stream, and the answer is always for the phase that was sent."""

from __future__ import annotations

import base64
import json
import time

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from extproc.service.app import RouterApp
from tests.hardening.helpers import Counts, metrics_text, sample
from tests.pb import (
    COMPLETIONS_HEADERS,
    chat_body,
    headers,
    phase_of,
    req_body,
    req_headers,
    routed_pool,
    run_stream,
)


def _obj(**fields: object) -> bytes:
    return json.dumps({"model": "m", **fields}).encode()


MSGS = [{"role": "user", "content": "hello"}]

# (id, body, expected pool, expected unreadable reason or None when the body is readable)
UNREADABLE_CHAT = [
    ("empty_body_message", b"", "body_empty"),
    ("not_json", b"hello there", "body_not_json"),
    ("truncated_json", chat_body("hello")[:-7], "body_not_json"),
    ("json_array", b"[1, 2, 3]", "body_not_object"),
    ("json_string", b'"just a string"', "body_not_object"),
    ("json_null", b"null", "body_not_object"),
    ("json_number", b"42", "body_not_object"),
    (
        "non_utf8_bytes",
        b'{"model": "m", "messages": [{"role": "user", "content": "\xff\xfe caf\xe9"}]}',
        "body_not_utf8",
    ),
    ("messages_string", _obj(messages="hello"), "bad_field_type"),
    ("messages_empty", _obj(messages=[]), "empty_prompt"),
    ("messages_missing", _obj(), "bad_field_type"),
    ("message_not_object", _obj(messages=["hello"]), "bad_field_type"),
    ("content_number", _obj(messages=[{"role": "user", "content": 7}]), "bad_field_type"),
    ("model_number", json.dumps({"model": 3, "messages": MSGS}).encode(), "bad_field_type"),
    ("max_tokens_string", _obj(messages=MSGS, max_tokens="100"), "bad_field_type"),
    ("max_tokens_negative", _obj(messages=MSGS, max_tokens=-5), "bad_field_value"),
    ("max_tokens_huge", _obj(messages=MSGS, max_tokens=2**40), "bad_field_value"),
    (
        "max_tokens_beyond_int64",
        b'{"model":"m","messages":[{"role":"user","content":"x"}],"max_tokens":1' + b"0" * 30 + b"}",
        None,
    ),
    ("max_tokens_fractional", _obj(messages=MSGS, max_tokens=10.5), "bad_field_type"),
    ("max_tokens_bool", _obj(messages=MSGS, max_tokens=True), "bad_field_type"),
    (
        "max_completion_tokens_float_exp",
        b'{"messages":[{"role":"user","content":"x"}],"max_completion_tokens":1e300}',
        "bad_field_value",
    ),
    ("n_string", _obj(messages=MSGS, n="2"), "bad_field_type"),
    (
        "unknown_content_part",
        _obj(messages=[{"role": "user", "content": [{"type": "hologram"}]}]),
        "unknown_content_part",
    ),
    ("tools_not_list", _obj(messages=MSGS, tools={"type": "function"}), "bad_field_type"),
    ("deep_nesting", b'{"messages":' + b"[" * 5000 + b"]" * 5000 + b"}", "body_not_json"),
]


@pytest.mark.parametrize(
    ("body", "reason"), [(b, r) for _, b, r in UNREADABLE_CHAT], ids=[c[0] for c in UNREADABLE_CHAT]
)
async def test_unreadable_chat_body_goes_long_with_reason(
    shared_app: RouterApp, body: bytes, reason: str | None
) -> None:
    c = Counts(shared_app)
    out = await run_stream(shared_app.grpc_port, [req_headers(), req_body(body)])
    assert [phase_of(r) for r in out] == ["request_headers", "request_body"]
    assert routed_pool(out[0]) is None
    assert routed_pool(out[1]) == "long"
    assert c.delta("tbr_unreadable_requests_total") == 1.0
    if reason is not None:
        assert c.delta("tbr_unreadable_requests_total", {"reason": reason}) == 1.0
        assert c.delta("tbr_routing_decisions_total", {"pool": "long", "reason": reason}) == 1.0
    assert c.delta("tbr_processing_errors_total") == 0.0


@pytest.mark.parametrize(
    ("prompt", "reason"),
    [
        (5, "bad_field_type"),
        ("", None),
        ([], "empty_prompt"),
        ([1, "a"], "bad_field_type"),
        ([[1, 2], "x"], "bad_field_type"),
        ([None], "bad_field_type"),
    ],
    ids=["number", "empty_string", "empty_list", "mixed_ids", "mixed_batch", "null_item"],
)
async def test_completions_prompt_wrong_types(
    shared_app: RouterApp, prompt: object, reason: str | None
) -> None:
    c = Counts(shared_app)
    out = await run_stream(
        shared_app.grpc_port, [req_headers(COMPLETIONS_HEADERS), req_body(_obj(prompt=prompt, max_tokens=10))]
    )
    if reason is None:  # an empty prompt string is readable: it is tiny and fits the short pool
        assert routed_pool(out[1]) == "short"
    else:
        assert routed_pool(out[1]) == "long"
        assert c.delta("tbr_unreadable_requests_total", {"reason": reason}) == 1.0


async def test_completions_missing_prompt(app: RouterApp) -> None:
    out = await run_stream(app.grpc_port, [req_headers(COMPLETIONS_HEADERS), req_body(_obj(max_tokens=10))])
    assert routed_pool(out[1]) == "long"
    text = await metrics_text(app.admin_port)
    assert sample(text, "tbr_unreadable_requests_total", {"reason": "empty_prompt"}) == 1.0


async def test_empty_body_on_headers_routes_at_headers(app: RouterApp) -> None:
    """POST with no body at all: Envoy marks end_of_stream on the headers; routed there (long)."""
    out = await run_stream(app.grpc_port, [req_headers(eos=True)])
    assert routed_pool(out[0]) == "long"
    text = await metrics_text(app.admin_port)
    assert sample(text, "tbr_unreadable_requests_total", {"reason": "body_empty"}) == 1.0


@pytest.mark.parametrize(
    ("method", "eos", "reason"),
    [("POST", True, "body_empty"), ("GET", True, "unsupported_path"), ("POST", False, None)],
    ids=["empty_post", "get", "post_with_body_failed_open"],
)
async def test_unrouted_observability_stream_counts_bodiless_requests(
    app: RouterApp, method: str, eos: bool, reason: str | None
) -> None:
    """A stream of Envoy's ``tbr_unrouted`` filter (gRPC metadata ``x-tbr-stream: unrouted``,
    observability mode): the router answers nothing and counts a bodiless request with its reason;
    a request with a body (the routing filter failed open on it) is not counted again."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as ch:
        call = pb_grpc.ExternalProcessorStub(ch).Process(metadata=(("x-tbr-stream", "unrouted"),))  # type: ignore[call-arg]
        pairs = {":method": method, ":path": "/v1/chat/completions", "x-request-id": "bodiless"}
        await call.write(pb.ProcessingRequest(request_headers=headers(pairs, eos=eos)))
        await call.done_writing()
        assert await call.read() is grpc.aio.EOF  # type: ignore[attr-defined]  # no answer: Envoy awaits none
    deadline = time.monotonic() + 5  # the stream's end is processed off the call's path
    text = await metrics_text(app.admin_port)
    while sample(text, "tbr_streams_total") < 1.0:
        assert time.monotonic() < deadline
        text = await metrics_text(app.admin_port)
    decisions = sample(
        text,
        "tbr_routing_decisions_total",
        {"reason": reason or "body_missing", "pool": "long", "category": "unknown"},
    )
    assert decisions == (1.0 if reason else 0.0)
    unreadable = sample(text, "tbr_unreadable_requests_total", {"reason": "body_empty"})
    assert unreadable == (1.0 if reason == "body_empty" else 0.0)
    assert sample(text, "tbr_processing_errors_total") == 0.0


# Readable bodies with non-text parts: routed by budget, not rejected.
_PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8).decode()
READABLE = [
    (
        "content_parts_text",
        _obj(
            messages=[
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "hi"}, {"type": "text", "text": "there"}],
                }
            ],
            max_tokens=10,
        ),
        "short",
    ),
    (
        "image_url",
        _obj(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is it"},
                        {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}},
                    ],
                }
            ],
            max_tokens=10,
        ),
        "short",
    ),
    (
        "large_data_uri_image",  # 3 MB of base64 is not prompt text: one image budget, short pool
        _obj(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64," + _PNG * 1000}}
                    ],
                }
            ],
            max_tokens=10,
        ),
        "short",
    ),
    (
        "audio",
        _obj(
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
                    ],
                }
            ],
            max_tokens=10,
        ),
        "short",
    ),
    (
        "two_images_over_short",  # 2 × 4096 image tokens + reserve exceeds 8192
        _obj(
            messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "u"}}] * 2}],
            max_tokens=100,
        ),
        "long",
    ),
    (
        "tools_and_tool_results",
        _obj(
            messages=[
                {"role": "user", "content": "weather?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "sunny, 21 C"},
            ],
            tools=[
                {
                    "type": "function",
                    "function": {
                        "name": "get_weather",
                        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
                    },
                }
            ],
            max_tokens=50,
        ),
        "short",
    ),
    ("n_4_small", _obj(messages=MSGS, n=4, max_tokens=1000), "short"),
    ("n_8_reserve_exceeds_short", _obj(messages=MSGS, n=8, max_tokens=1500), "long"),
    ("max_tokens_float_integral", _obj(messages=MSGS, max_tokens=100.0), "short"),
    ("max_tokens_over_short", _obj(messages=MSGS, max_tokens=9000), "long"),
    ("max_tokens_over_all_pools", _obj(messages=MSGS, max_tokens=10**6), "long"),
]


@pytest.mark.parametrize(("body", "pool"), [(b, p) for _, b, p in READABLE], ids=[c[0] for c in READABLE])
async def test_readable_bodies_with_parts_tools_and_n(shared_app: RouterApp, body: bytes, pool: str) -> None:
    c = Counts(shared_app)
    out = await run_stream(shared_app.grpc_port, [req_headers(), req_body(body)])
    assert routed_pool(out[1]) == pool
    assert c.delta("tbr_routing_decisions_total", {"pool": pool}) == 1.0
    assert c.delta("tbr_unreadable_requests_total") == 0.0
    assert c.delta("tbr_processing_errors_total") == 0.0


async def test_body_at_the_grpc_message_limit_is_read(app: RouterApp) -> None:
    """A body of exactly ``server.max_message_bytes`` (= Envoy's buffer limit) arrives in one
    ProcessingRequest that is a few bytes larger; the router must still receive it."""
    limit = app.config.server.max_message_bytes
    head = b'{"model":"m","max_tokens":10,"messages":[{"role":"user","content":"'
    tail = b'"}]}'
    body = head + b"a" * (limit - len(head) - len(tail)) + tail
    assert len(body) == limit
    out = await run_stream(
        app.grpc_port, [req_headers(), req_body(body)], options=[("grpc.max_send_message_length", -1)]
    )
    assert routed_pool(out[1]) == "long"
    text = await metrics_text(app.admin_port)
    assert sample(text, "tbr_routing_decisions_total", {"pool": "long", "reason": "exceeds_all_pools"}) == 1.0


async def test_body_that_is_slow_to_parse_is_answered_well_within_message_timeout(app: RouterApp) -> None:
    """The costliest body under the 8 MiB limit for our parser: ~600k one-character messages
    (a Python-level walk per message). It must be answered far inside Envoy's 2 s message_timeout."""
    one = b'{"role":"user","content":"a"},'
    n = (app.config.server.max_message_bytes - 100) // len(one)
    body = b'{"model":"m","max_tokens":1,"messages":[' + one * n + b'{"role":"user","content":"a"}]}'
    cpu0 = time.process_time()  # the router runs in this process: its CPU time, not wall time
    out = await run_stream(
        app.grpc_port, [req_headers(), req_body(body)], options=[("grpc.max_send_message_length", -1)]
    )
    cpu_s = time.process_time() - cpu0
    assert routed_pool(out[1]) == "long"  # 5 framing tokens per message alone exceed the short pool
    assert cpu_s < 1.0, cpu_s  # Envoy's message_timeout is 2 s (envoy/envoy.yaml)


async def test_streamed_request_body_chunks_route_once(app: RouterApp) -> None:
    """If Envoy streams the body (STREAMED mode), the first chunk does not parse: routed long
    once (reason body_incomplete), later chunks pass unchanged, the decision is counted once."""
    body = chat_body("hello " * 200, max_tokens=10)
    parts = [body[:100], body[100:500], body[500:]]
    out = await run_stream(
        app.grpc_port,
        [
            req_headers(),
            req_body(parts[0], eos=False),
            req_body(parts[1], eos=False),
            req_body(parts[2], eos=True),
        ],
    )
    assert [phase_of(r) for r in out] == ["request_headers", "request_body", "request_body", "request_body"]
    assert routed_pool(out[1]) == "long"
    assert routed_pool(out[2]) is None and routed_pool(out[3]) is None
    text = await metrics_text(app.admin_port)
    assert sample(text, "tbr_unreadable_requests_total", {"reason": "body_incomplete"}) == 1.0
    assert sum(sample(text, "tbr_routing_decisions_total", {"pool": p}) for p in ("short", "long")) == 1.0


async def test_complete_body_without_end_of_stream_is_routed_normally(app: RouterApp) -> None:
    """BUFFERED with request trailers: the whole body arrives with end_of_stream false."""
    out = await run_stream(app.grpc_port, [req_headers(), req_body(chat_body("hi", max_tokens=5), eos=False)])
    assert routed_pool(out[1]) == "short"


async def test_duplicate_request_body_message_is_counted_once(app: RouterApp) -> None:
    body = chat_body("hi", max_tokens=5)
    out = await run_stream(app.grpc_port, [req_headers(), req_body(body), req_body(body)])
    assert routed_pool(out[1]) == "short" and routed_pool(out[2]) is None
    text = await metrics_text(app.admin_port)
    assert sample(text, "tbr_routing_decisions_total", {"pool": "short"}) == 1.0
