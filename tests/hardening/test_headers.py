"""Header edge cases over a real gRPC stream: raw_value vs value, non-ASCII values, duplicate
request ids across concurrent streams, client-supplied routing headers, unhandled methods/paths."""

from __future__ import annotations

import asyncio
import json

import orjson
import pytest
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.config import parse_config
from extproc.service.app import RouterApp
from tests.hardening.helpers import CONFIG, Counts, metrics_text, sample
from tests.pb import (
    CHAT_HEADERS,
    chat_body,
    headers,
    passed_through,
    req_body,
    req_headers,
    resp_body,
    resp_headers,
    routed_pool,
    run_stream,
)
from tests.waiting import until_async


@pytest.mark.parametrize("raw", [True, False], ids=["only_raw_value", "only_value"])
async def test_header_values_in_raw_value_or_value(app: RouterApp, raw: bool) -> None:
    """Request and response headers are read from raw_value (what Envoy sends) or value."""
    sse = b'data: {"choices":[],"usage":{"prompt_tokens":60}}\n\ndata: [DONE]\n\n'
    out = await run_stream(
        app.grpc_port,
        [
            req_headers(raw=raw),
            req_body(chat_body("hello there " * 20, max_tokens=10, stream=True)),
            pb.ProcessingRequest(
                response_headers=headers({":status": "200", "content-type": "text/event-stream"}, raw=raw)
            ),
            resp_body(sse, eos=True),
        ],
    )
    assert routed_pool(out[1]) == "short"
    assert out[2].mode_override.response_body_mode == pm.ProcessingMode.STREAMED
    text = await metrics_text(app.admin_port)
    assert sample(text, "tbr_calibration_events_total", {"outcome": "applied"}) == 1.0


async def test_mixed_raw_value_and_value_in_one_message(shared_app: RouterApp) -> None:
    app = shared_app
    msg = pb.HttpHeaders()
    msg.headers.headers.add(key=":method", value="POST")
    msg.headers.headers.add(key=":path", raw_value=b"/v1/chat/completions")
    out = await run_stream(
        app.grpc_port, [pb.ProcessingRequest(request_headers=msg), req_body(chat_body("x", max_tokens=3))]
    )
    assert routed_pool(out[1]) == "short"


@pytest.mark.parametrize(
    "request_id",
    ["requête-é-漢字", b"\xff\xfe\xfd-not-utf8", "x" * 10_000, "a\tb"],
    ids=["utf8_non_ascii", "invalid_utf8", "very_long", "tab"],
)
async def test_non_ascii_request_id_is_tolerated(tmp_path, request_id: str | bytes) -> None:
    log_path = tmp_path / "decisions.jsonl"
    cfg = parse_config({**CONFIG, "decision_log_path": str(log_path)})
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        pairs = [(":method", "POST"), (":path", "/v1/chat/completions"), ("x-request-id", request_id)]
        out = await run_stream(
            app.grpc_port,
            [pb.ProcessingRequest(request_headers=headers(pairs)), req_body(chat_body("hi", max_tokens=3))],
        )
        assert routed_pool(out[1]) == "short"
    (line,) = log_path.read_bytes().splitlines()
    rec = orjson.loads(line)  # the decision log stays valid JSON
    assert len(rec["request_id"]) <= 128


@pytest.mark.parametrize(
    "path",
    [
        "/v1/chat/completions?api-version=1",
        "/v1/chat/completions/",
        "/v1/chat/compl%C3%A9tions",
        "/v1/chat/completions/../../admin",
        "/ünïcode",
    ],
    ids=["query", "trailing_slash", "percent_encoded_non_ascii", "dot_segments", "raw_non_ascii"],
)
async def test_paths(shared_app: RouterApp, path: str) -> None:
    app = shared_app
    handled = path.split("?")[0].rstrip("/") == "/v1/chat/completions"
    out = await run_stream(
        app.grpc_port,
        [req_headers({":method": "POST", ":path": path}), req_body(chat_body("hi", max_tokens=3))],
    )
    if handled:
        assert routed_pool(out[0]) is None and routed_pool(out[1]) == "short"
    else:  # routed at headers to the long pool; the body phase is switched off
        assert routed_pool(out[0]) == "long"
        assert out[0].mode_override.request_body_mode == pm.ProcessingMode.NONE
        # The router then ends the call: a body Envoy sent anyway passes unchanged.
        assert passed_through(out, 1)


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "post", ""])
async def test_methods_we_do_not_budget(shared_app: RouterApp, method: str) -> None:
    c = Counts(shared_app)
    out = await run_stream(
        shared_app.grpc_port, [req_headers({":method": method, ":path": "/v1/chat/completions"}, eos=True)]
    )
    assert routed_pool(out[0]) == "long"
    assert c.delta("tbr_routing_decisions_total", {"pool": "long", "reason": "unsupported_path"}) == 1.0
    assert c.delta("tbr_unreadable_requests_total") == 0.0


@pytest.mark.parametrize("path", ["/v1/embeddings", "/v1/models", "/health", "/", ""])
async def test_unhandled_paths(shared_app: RouterApp, path: str) -> None:
    out = await run_stream(shared_app.grpc_port, [req_headers({":method": "POST", ":path": path})])
    assert routed_pool(out[0]) == "long"


@pytest.mark.parametrize("spoofed", ["short", "long", "short, long", "SHORT"])
async def test_client_routing_header_is_overwritten(shared_app: RouterApp, spoofed: str) -> None:
    app = shared_app
    """A client copy of x-tbr-pool (Envoy strips it; this is defence in depth) never picks the
    pool: the router's answer sets the header with OVERWRITE_IF_EXISTS_OR_ADD."""
    pairs = {**CHAT_HEADERS, "x-tbr-pool": spoofed}
    out = await run_stream(app.grpc_port, [req_headers(pairs), req_body(chat_body("word " * 20000))])
    assert routed_pool(out[1]) == "long"
    out = await run_stream(app.grpc_port, [req_headers(pairs), req_body(chat_body("hi", max_tokens=5))])
    assert routed_pool(out[1]) == "short"


async def test_duplicate_request_ids_across_concurrent_streams(tmp_path) -> None:
    """64 concurrent streams with the same x-request-id: each is routed and calibrated on its own
    state (no cross-talk), and the decision log holds all 64."""
    log_path = tmp_path / "decisions.jsonl"
    cfg = parse_config({**CONFIG, "decision_log_path": str(log_path)})
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:

        async def one(i: int) -> tuple[int, str | None]:
            long = i % 2 == 1
            text = "word " * (20000 if long else 10)
            body = chat_body(text, max_tokens=5, stream=True)
            # realistic usage (~4 bytes/token) made unique per stream by + i
            usage = {"choices": [], "usage": {"prompt_tokens": len(text) // 4 + 10 + i}}
            out = await run_stream(
                app.grpc_port,
                [
                    req_headers({**CHAT_HEADERS, "x-request-id": "same-id"}),
                    req_body(body),
                    resp_headers({":status": "200", "content-type": "text/event-stream"}),
                    resp_body(f"data: {json.dumps(usage)}\n\n".encode()),
                    resp_body(b"data: [DONE]\n\n", eos=True),
                ],
            )
            return i, routed_pool(out[1])

        results = await asyncio.gather(*(one(i) for i in range(64)))
        for i, pool in results:
            assert pool == ("long" if i % 2 else "short")

        async def all_ended() -> bool:  # the server ends each stream just after its last answer
            return sample(await metrics_text(app.admin_port), "tbr_inflight_streams") == 0.0

        await until_async(all_ended, 10, "every stream ended")
    recs = [orjson.loads(x) for x in log_path.read_bytes().splitlines()]
    assert len(recs) == 64
    assert len({r["prompt_tokens"] for r in recs}) == 64
    for r in recs:
        assert r["request_id"] == "same-id"
        long = r["prompt_tokens"] > 1000
        i = r["prompt_tokens"] - 10 - (25000 if long else 12)
        assert i % 2 == int(long)  # each stream's own usage was read on its own state
        assert r["pool"] == ("long" if long else "short")
