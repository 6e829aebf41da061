"""Scripted ext_proc streams against the running grpc.aio server (real gRPC, no Envoy)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import grpc
import httpx
import pytest
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.config import parse_config
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.request.request_body import parse_request_body
from extproc.service.app import RouterApp
from tests.pb import chat_body, headers, open_stream, passed_through, routed_pool, run_stream
from tests.waiting import until_async

CONFIG = {
    "pools": [
        {"name": "short", "max_model_len": 8192, "header_value": "short"},
        {"name": "long", "max_model_len": 65536, "header_value": "long"},
    ],
    "calibration": {"warmup_samples": 2},
}


@pytest.fixture
async def app() -> AsyncIterator[RouterApp]:
    async with RouterApp(parse_config(CONFIG), grpc_port=0, admin_port=0) as running:
        yield running


REQ_HEADERS = {":method": "POST", ":path": "/v1/chat/completions", "x-request-id": "r1"}


@pytest.mark.parametrize("raw", [True, False], ids=["raw_value", "value"])
async def test_short_and_long_bodies_are_routed(app: RouterApp, raw: bool) -> None:
    short = await run_stream(
        app.grpc_port,
        [
            pb.ProcessingRequest(request_headers=headers(REQ_HEADERS, raw=raw)),
            pb.ProcessingRequest(
                request_body=pb.HttpBody(body=chat_body("hello", max_tokens=100), end_of_stream=True)
            ),
        ],
    )
    assert short[0].HasField("request_headers")
    assert routed_pool(short[1]) == "short"
    long = await run_stream(
        app.grpc_port,
        [
            pb.ProcessingRequest(request_headers=headers(REQ_HEADERS, raw=raw)),
            pb.ProcessingRequest(
                request_body=pb.HttpBody(body=chat_body("word " * 20000), end_of_stream=True)
            ),
        ],
    )
    assert routed_pool(long[1]) == "long"


async def test_unreadable_body_goes_long_and_is_counted(app: RouterApp) -> None:
    out = await run_stream(
        app.grpc_port,
        [
            pb.ProcessingRequest(request_headers=headers(REQ_HEADERS)),
            pb.ProcessingRequest(request_body=pb.HttpBody(body=b"{not json", end_of_stream=True)),
        ],
    )
    assert routed_pool(out[1]) == "long"
    async with httpx.AsyncClient() as c:
        text = (await c.get(f"http://127.0.0.1:{app.admin_port}/metrics")).text
    assert 'tbr_unreadable_requests_total{reason="body_not_json"} 1.0' in text


async def test_unhandled_path_routes_at_headers_and_skips_body(app: RouterApp) -> None:
    out = await run_stream(
        app.grpc_port,
        [pb.ProcessingRequest(request_headers=headers({":method": "GET", ":path": "/v1/models"}, eos=True))],
    )
    assert routed_pool(out[0]) == "long"
    assert out[0].mode_override.request_body_mode == pm.ProcessingMode.NONE


def sse(*events: dict[str, object] | str) -> bytes:
    parts = []
    for e in events:
        parts.append(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n")
    return "".join(parts).encode()


async def test_streaming_usage_calibrates_exactly_once(app: RouterApp) -> None:
    text = "The quick brown fox jumps over the lazy dog. " * 40  # 1800 bytes
    stream = sse(
        {"choices": [{"delta": {"content": "hi"}}], "usage": None},
        {"choices": [], "usage": {"prompt_tokens": 410, "completion_tokens": 2}},
        "[DONE]",
    )
    for _ in range(3):
        out = await run_stream(
            app.grpc_port,
            [
                pb.ProcessingRequest(request_headers=headers(REQ_HEADERS)),
                pb.ProcessingRequest(
                    request_body=pb.HttpBody(
                        body=chat_body(text, stream=True, stream_options={"include_usage": True}),
                        end_of_stream=True,
                    )
                ),
                pb.ProcessingRequest(
                    response_headers=headers({":status": "200", "content-type": "text/event-stream"})
                ),
                pb.ProcessingRequest(response_body=pb.HttpBody(body=stream[:37], end_of_stream=False)),
                pb.ProcessingRequest(response_body=pb.HttpBody(body=stream[37:], end_of_stream=True)),
            ],
        )
        assert out[2].mode_override.response_body_mode == pm.ProcessingMode.STREAMED
        assert list(out[2].response_headers.response.header_mutation.remove_headers) == ["content-length"]
        assert out[3].HasField("response_body") and not out[3].response_body.HasField("response")
    async with httpx.AsyncClient() as c:
        ratios = (await c.get(f"http://127.0.0.1:{app.admin_port}/ratios")).json()["ratios"]
    (row,) = ratios
    assert row["category"] == "latin" and row["samples"] == 3 and row["warm"] is True
    # exactly what the estimator learns from the three served usages, each observed once
    cfg = parse_config(CONFIG)
    est = Estimator(
        estimator=cfg.estimator,
        calibration=cfg.calibration,
        store=InMemoryRatioStore.from_config(cfg.calibration),
    )
    features = parse_request_body(
        chat_body(text, stream=True, stream_options={"include_usage": True}), "chat"
    )
    for _ in range(3):
        assert est.observe(est.estimate(features), 410) is not None
    state = est.store.get(("m", "latin"))
    assert state is not None and state.samples == 3
    assert row["mean_model_to_true_ratio"] == pytest.approx(state.mean_ratio, rel=1e-3)


async def test_json_usage_and_non_2xx(app: RouterApp) -> None:
    out = await run_stream(
        app.grpc_port,
        [
            pb.ProcessingRequest(request_headers=headers(REQ_HEADERS)),
            pb.ProcessingRequest(
                request_body=pb.HttpBody(body=chat_body("hello there " * 50), end_of_stream=True)
            ),
            pb.ProcessingRequest(
                response_headers=headers({":status": "400", "content-type": "application/json"})
            ),
        ],
    )
    assert passed_through(out, 2)  # answered by ending the call: the headers pass unchanged
    out = await run_stream(
        app.grpc_port,
        [
            pb.ProcessingRequest(request_headers=headers(REQ_HEADERS)),
            pb.ProcessingRequest(
                request_body=pb.HttpBody(body=chat_body("hello there " * 50), end_of_stream=True)
            ),
            pb.ProcessingRequest(
                response_headers=headers({":status": "200", "content-type": "application/json"})
            ),
            pb.ProcessingRequest(
                response_body=pb.HttpBody(body=b'{"usage": {"prompt_tokens": 130}}', end_of_stream=True)
            ),
        ],
    )
    assert out[2].mode_override.response_body_mode == pm.ProcessingMode.STREAMED
    async with httpx.AsyncClient() as c:
        text = (await c.get(f"http://127.0.0.1:{app.admin_port}/metrics")).text
    assert 'tbr_calibration_events_total{outcome="applied"} 1.0' in text
    assert 'tbr_calibration_events_total{outcome="non_2xx"} 1.0' in text
    assert "tbr_inflight_streams 0.0" in text


async def _reset_after(port: int, msgs: list[pb.ProcessingRequest]) -> None:
    """Send ``msgs`` in lock-step, then reset the stream as Envoy does (no half-close)."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = open_stream(ch)
        for m in msgs:
            await call.write(m)
            await call.read()
        call.cancel()


@pytest.mark.parametrize(
    ("n_msgs", "end"),
    [
        pytest.param(5, "complete", id="reset-after-last-response-body"),
        pytest.param(4, "cancelled", id="reset-mid-response"),
    ],
)
async def test_envoy_reset_after_the_exchange_counts_as_complete(
    app: RouterApp, n_msgs: int, end: str
) -> None:
    """Envoy resets the ext_proc stream (CANCELLED) once the exchange is over; that is a complete
    stream. A reset before the response ended is a real cancellation."""
    msgs = [
        pb.ProcessingRequest(request_headers=headers(REQ_HEADERS)),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=chat_body("hello " * 50), end_of_stream=True)),
        pb.ProcessingRequest(
            response_headers=headers({":status": "200", "content-type": "text/event-stream"})
        ),
        pb.ProcessingRequest(response_body=pb.HttpBody(body=b"data: {}\n\n", end_of_stream=False)),
        pb.ProcessingRequest(response_body=pb.HttpBody(body=b"data: [DONE]\n\n", end_of_stream=True)),
    ][:n_msgs]
    await _reset_after(app.grpc_port, msgs)
    registry = app.metrics.registry
    await until_async(
        lambda: registry.get_sample_value("tbr_streams_total", {"end": end}), what=f"a {end} stream"
    )
    assert registry.get_sample_value("tbr_streams_total", {"end": end}) == 1.0
