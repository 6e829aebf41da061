"""Responses: content encodings, SSE shapes, non-2xx bodies, duplicate end-of-stream, trailers.

Driven over a real gRPC stream. In every case the response body passes through unchanged (the
router's ``response_body`` answers carry no mutation) and the outcome is counted in
``tbr_calibration_events_total``.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable
from pathlib import Path

import brotli
import pytest
import zstandard
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.config import parse_config
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.request.request_body import parse_request_body
from extproc.service.app import RouterApp
from tests.hardening.helpers import CONFIG, Counts
from tests.pb import (
    chat_body,
    passed_through,
    phase_of,
    req_body,
    req_headers,
    resp_body,
    resp_headers,
    run_stream,
)

TEXT = "hello there, general kenobi. " * 30  # 870 bytes, latin
SSE = (Path(__file__).parent / "captures" / "openai_usage_null_then_final.sse").read_bytes()
SSE_TOKENS = 321
JSON_BODY = json.dumps(
    {"id": "x", "choices": [], "usage": {"prompt_tokens": 230, "completion_tokens": 4}}
).encode()


def _compress(data: bytes, enc: str) -> bytes:
    compressors: dict[str, Callable[[bytes], bytes]] = {
        "gzip": lambda d: gzip.compress(d, mtime=0),
        "x-gzip": lambda d: gzip.compress(d, mtime=0),
        "br": brotli.compress,
        "deflate": zlib.compress,
        "raw-deflate": lambda d: zlib.compress(d)[2:-4],
        "zstd": lambda d: zstandard.ZstdCompressor().compress(d),
        "identity": lambda d: d,
    }
    return compressors[enc](data)


def _unchanged(out: list[pb.ProcessingResponse], i: int) -> bool:
    """Response body message ``i`` passes unchanged: an empty answer, or none (the router ended
    the call instead, tests/pb.py: passed_through)."""
    return passed_through(out, i) and (i >= len(out) or phase_of(out[i]) == "response_body")


def _exchange(
    content_type: str,
    body_chunks: list[bytes],
    *,
    status: str = "200",
    extra: list[tuple[str, str]] | None = None,
    text: str = TEXT,
) -> list[pb.ProcessingRequest]:
    hdrs = [(":status", status), ("content-type", content_type), *(extra or [])]
    msgs = [req_headers(), req_body(chat_body(text, max_tokens=20, stream=True)), resp_headers(hdrs)]
    for i, chunk in enumerate(body_chunks):
        msgs.append(resp_body(chunk, eos=i == len(body_chunks) - 1))
    return msgs


ENCODINGS = [
    ("gzip", "gzip", "gzip"),
    ("x-gzip", "x-gzip", "x-gzip"),
    ("br", "br", "br"),
    ("deflate_zlib", "deflate", "deflate"),
    ("deflate_raw", "deflate", "raw-deflate"),
    ("zstd", "zstd", "zstd"),
    ("upper_case", "GZIP", "gzip"),
    ("identity", "identity", "identity"),
]


@pytest.mark.parametrize(
    ("header", "codec"), [(h, c) for _, h, c in ENCODINGS], ids=[e[0] for e in ENCODINGS]
)
@pytest.mark.parametrize("kind", ["sse", "json"])
async def test_encoded_responses_are_read_and_pass_unchanged(
    shared_app: RouterApp, header: str, codec: str, kind: str
) -> None:
    c = Counts(shared_app)
    plain = SSE if kind == "sse" else JSON_BODY
    data = _compress(plain, codec)
    chunks = [data[: len(data) // 3], data[len(data) // 3 : 2 * len(data) // 3], data[2 * len(data) // 3 :]]
    ctype = "text/event-stream; charset=utf-8" if kind == "sse" else "application/json"
    msgs = _exchange(ctype, chunks, extra=[("content-encoding", header)])
    out = await run_stream(shared_app.grpc_port, msgs)
    # Both streamed (JSON too: a BUFFERED body above Envoy's buffer limit would fail with 500).
    assert out[2].mode_override.response_body_mode == pm.ProcessingMode.STREAMED
    assert all(_unchanged(out, i) for i in range(3, len(msgs)))
    assert c.delta("tbr_calibration_events_total", {"outcome": "applied"}) == 1.0
    assert c.delta("tbr_processing_errors_total") == 0.0


@pytest.mark.parametrize(
    "encodings",
    [[("content-encoding", "gzip, br")], [("content-encoding", "gzip"), ("content-encoding", "br")]],
    ids=["one_list_value", "two_header_fields"],
)
async def test_multi_valued_content_encoding(shared_app: RouterApp, encodings: list[tuple[str, str]]) -> None:
    """gzip applied first, then br: decoded br first, then gzip (RFC 9110 §8.4)."""
    c = Counts(shared_app)
    data = brotli.compress(gzip.compress(SSE, mtime=0))
    msgs = _exchange("text/event-stream", [data[:50], data[50:]], extra=encodings)
    out = await run_stream(shared_app.grpc_port, msgs)
    assert all(_unchanged(out, i) for i in range(3, len(msgs)))
    assert c.delta("tbr_calibration_events_total", {"outcome": "applied"}) == 1.0


@pytest.mark.parametrize("header", ["compress", "gzip, snappy", "x-custom"])
async def test_unknown_encoding_is_not_read_and_counted(shared_app: RouterApp, header: str) -> None:
    c = Counts(shared_app)
    out = await run_stream(
        shared_app.grpc_port,
        [
            req_headers(),
            req_body(chat_body(TEXT)),
            resp_headers({":status": "200", "content-type": "text/event-stream", "content-encoding": header}),
        ],
    )
    # body left in the configured mode (NONE): nothing is asked, nothing altered (the router
    # ends the call instead of answering)
    assert passed_through(out, 2)
    assert c.delta("tbr_calibration_events_total", {"outcome": "unsupported_encoding"}) == 1.0


@pytest.mark.parametrize("codec", ["gzip", "br", "deflate", "zstd"])
async def test_empty_compressed_bodies(shared_app: RouterApp, codec: str) -> None:
    """Content-encoding set but the body is empty (zero bytes) or compresses nothing."""
    for data in (b"", _compress(b"", codec)):
        c = Counts(shared_app)
        out = await run_stream(
            shared_app.grpc_port, _exchange("application/json", [data], extra=[("content-encoding", codec)])
        )
        assert _unchanged(out, 3)
        assert c.delta("tbr_calibration_events_total", {"outcome": "no_usage"}) == 1.0
        assert c.delta("tbr_processing_errors_total") == 0.0


async def test_corrupt_compressed_body_is_counted_and_passes(shared_app: RouterApp) -> None:
    c = Counts(shared_app)
    msgs = _exchange(
        "text/event-stream", [b"\x1f\x8b\x08garbage", b"more"], extra=[("content-encoding", "gzip")]
    )
    out = await run_stream(shared_app.grpc_port, msgs)
    assert all(_unchanged(out, i) for i in range(3, len(msgs)))
    assert c.delta("tbr_calibration_events_total", {"outcome": "decode_error"}) == 1.0
    assert c.delta("tbr_processing_errors_total") == 0.0


async def test_compression_bomb_is_bounded(shared_app: RouterApp) -> None:
    """100 MiB of zeros gzipped to ~100 KB: decoding stops at the 64 MiB bound (decode_error)."""
    from tests.hardening.test_encoding_bombs import gzip_bomb

    bomb = gzip_bomb(100)
    c = Counts(shared_app)
    out = await run_stream(
        shared_app.grpc_port, _exchange("application/json", [bomb], extra=[("content-encoding", "gzip")])
    )
    assert _unchanged(out, 3)
    assert c.delta("tbr_calibration_events_total", {"outcome": "decode_error"}) == 1.0


NON_2XX = [
    (
        "vllm_400_json",
        "400",
        "application/json",
        json.dumps(
            {
                "object": "error",
                "message": "This model's maximum context length is 8192 tokens.",
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            }
        ).encode(),
    ),
    (
        "envoy_local_reply_503",
        "503",
        "text/plain",
        b"upstream connect error or disconnect/reset before headers. reset reason: connection failure",
    ),
    ("null_500", "500", "application/json", b"null"),
    ("empty_502", "502", "text/plain", b""),
    ("rate_limited_429_with_usage", "429", "application/json", JSON_BODY),
]


@pytest.mark.parametrize(
    ("status", "ctype", "body"), [(s, t, b) for _, s, t, b in NON_2XX], ids=[n[0] for n in NON_2XX]
)
async def test_non_2xx_bodies_are_not_read_and_pass(
    shared_app: RouterApp, status: str, ctype: str, body: bytes
) -> None:
    c = Counts(shared_app)
    # Envoy sends the body only if asked; send it anyway (a config with BUFFERED default would).
    out = await run_stream(shared_app.grpc_port, _exchange(ctype, [body], status=status))
    assert passed_through(out, 2) and _unchanged(out, 3)
    assert c.delta("tbr_calibration_events_total", {"outcome": "non_2xx"}) == 1.0
    assert c.delta("tbr_calibration_events_total", {"outcome": "applied"}) == 0.0


@pytest.mark.parametrize(
    "body",
    [
        b"null",
        b"",
        b"not json at all",
        b'{"usage": null}',
        b'{"usage": {"prompt_tokens": "12"}}',
        b"[]",
        b'{"usage": {"prompt_tokens": 1e999}}',
    ],
    ids=["null", "empty", "not_json", "usage_null", "usage_string", "array", "usage_inf"],
)
async def test_2xx_json_without_usable_usage(shared_app: RouterApp, body: bytes) -> None:
    c = Counts(shared_app)
    out = await run_stream(shared_app.grpc_port, _exchange("application/json", [body]))
    assert _unchanged(out, 3)
    assert c.delta("tbr_calibration_events_total", {"outcome": "no_usage"}) == 1.0
    assert c.delta("tbr_processing_errors_total") == 0.0


async def test_sse_without_done_then_trailers(shared_app: RouterApp) -> None:
    """No [DONE] and no end_of_stream on the body: the response trailers end it (usage read once)."""
    c = Counts(shared_app)
    data = SSE.replace(b"data: [DONE]\n\n", b"")
    msgs = [*_exchange("text/event-stream", [data])[:-1], resp_body(data, eos=False)]
    msgs.append(pb.ProcessingRequest(response_trailers=pb.HttpTrailers()))
    out = await run_stream(shared_app.grpc_port, msgs)
    # The trailers end the exchange: the router ends the call instead of answering them.
    assert len(out) == len(msgs) - 1 and passed_through(out, len(msgs) - 1)
    assert c.delta("tbr_calibration_events_total", {"outcome": "applied"}) == 1.0


async def test_duplicate_end_of_stream_messages_calibrate_once(shared_app: RouterApp) -> None:
    c = Counts(shared_app)
    msgs = _exchange("text/event-stream", [SSE])
    msgs += [
        resp_body(b"", eos=True),
        resp_body(SSE, eos=True),
        pb.ProcessingRequest(response_trailers=pb.HttpTrailers()),
    ]
    out = await run_stream(shared_app.grpc_port, msgs)
    # The first end of stream ends the exchange and the call (unanswered, passed through):
    # the duplicates never reach the router on this stream.
    assert len(out) == 3 and _unchanged(out, 3)
    assert c.delta("tbr_calibration_events_total") == 1.0
    assert c.delta("tbr_calibration_events_total", {"outcome": "applied"}) == 1.0


async def test_usage_in_every_chunk_cumulative_last_wins(app: RouterApp) -> None:
    data = (Path(__file__).parent / "captures" / "cumulative_usage_every_chunk.sse").read_bytes()
    text = "hello there general kenobi " * 10  # ~91 modelled tokens: 77 served tokens are plausible
    await run_stream(
        app.grpc_port,
        _exchange("text/event-stream", [data[i : i + 17] for i in range(0, len(data), 17)], text=text),
    )
    (row,) = app.store.items()
    _key, state = row
    assert state.samples == 1
    # The learned value is the one a fresh estimator learns from the LAST cumulative usage (77
    # prompt tokens), observed once.
    cfg = parse_config(CONFIG)
    est = Estimator(
        estimator=cfg.estimator,
        calibration=cfg.calibration,
        store=InMemoryRatioStore.from_config(cfg.calibration),
    )
    features = parse_request_body(chat_body(text, max_tokens=20, stream=True), "chat")
    obs = est.observe(est.estimate(features), 77)
    assert obs is not None and obs.key == _key
    assert state == obs.state


async def test_response_headers_with_end_of_stream(shared_app: RouterApp) -> None:
    """204 / HEAD-like: headers end the response; counted as no_body, nothing else asked."""
    c = Counts(shared_app)
    out = await run_stream(
        shared_app.grpc_port,
        [
            req_headers(),
            req_body(chat_body(TEXT)),
            resp_headers({":status": "200", "content-type": "application/json"}, eos=True),
        ],
    )
    assert passed_through(out, 2)
    assert c.delta("tbr_calibration_events_total", {"outcome": "no_body"}) == 1.0


@pytest.mark.parametrize("status", ["", "abc", "99999999999999999999", "2OO", "-200"])
async def test_garbage_status_is_treated_as_non_2xx(shared_app: RouterApp, status: str) -> None:
    out = await run_stream(shared_app.grpc_port, _exchange("application/json", [JSON_BODY], status=status))
    assert passed_through(out, 2) and _unchanged(out, 3)


async def test_unsupported_content_type(shared_app: RouterApp) -> None:
    c = Counts(shared_app)
    out = await run_stream(shared_app.grpc_port, _exchange("text/html", [b"<html>"]))
    assert passed_through(out, 2) and _unchanged(out, 3)
    assert c.delta("tbr_calibration_events_total", {"outcome": "unsupported_content_type"}) == 1.0
