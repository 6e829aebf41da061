"""Optional OpenTelemetry export (issue 16, item 5): a span per routed request joined to Envoy's
trace context and GenAI semantic-convention metrics, received by an in-process OTLP collector
(the real OTLP/gRPC exporters of opentelemetry-sdk against a gRPC server speaking the collector
protocol). Off by default."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import grpc
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from extproc.config import parse_config
from extproc.service.app import RouterApp
from extproc.service.otel import OtelRecorder, otel_enabled
from tests.pb import CHAT_HEADERS, chat_body, json_response_msgs, open_stream, req_body, req_headers
from tests.service.otlp_collector import Collector, serve_collector
from tests.service.streams import POOLS

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
ENVOY_SPAN_ID = "00f067aa0ba902b7"
TRACEPARENT = f"00-{TRACE_ID}-{ENVOY_SPAN_ID}-01"


@pytest.fixture
def collector() -> Iterator[tuple[Collector, str]]:
    yield from serve_collector()


def attrs(kvs: Any) -> dict[str, Any]:
    out = {}
    for kv in kvs:
        v = kv.value
        out[kv.key] = getattr(v, v.WhichOneof("value"))
    return out


async def route_with_trace(grpc_port: int, text: str, prompt_tokens: int) -> None:
    headers = {**CHAT_HEADERS, "x-request-id": "otel-1", "traceparent": TRACEPARENT}
    msgs = [req_headers(headers), req_body(chat_body(text)), *json_response_msgs(prompt_tokens)]
    async with grpc.aio.insecure_channel(f"127.0.0.1:{grpc_port}") as ch:
        call = open_stream(ch)
        for m in msgs:
            await call.write(m)
            await call.read()
        await call.done_writing()


async def test_routed_request_exports_a_span_in_envoys_trace_and_genai_metrics(
    collector: tuple[Collector, str],
) -> None:
    sink, endpoint = collector
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True))
    )
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=endpoint, insecure=True), export_interval_millis=3_600_000
    )
    recorder = OtelRecorder(tracer_provider, MeterProvider(metric_readers=[reader]))
    text = "Explain the difference between a process and a thread. " * 8
    async with RouterApp(parse_config({"pools": POOLS}), grpc_port=0, admin_port=0, otel=recorder) as app:
        await route_with_trace(app.grpc_port, text, prompt_tokens=97)
    # RouterApp.stop() shut the providers down, which flushed the span and the metrics.

    (span,) = sink.spans
    assert span.name == "tbr.route"
    assert span.trace_id.hex() == TRACE_ID and span.parent_span_id.hex() == ENVOY_SPAN_ID
    a = attrs(span.attributes)
    assert a["tbr.pool"] == "short" and a["tbr.reason"] == "fits" and a["tbr.request_id"] == "otel-1"
    assert (
        a["gen_ai.usage.input_tokens"] == 97
        and a["gen_ai.usage.output_tokens"] == 1
        and a["http.response.status_code"] == 200
    )
    assert a["tbr.budget_tokens"] >= a["tbr.estimated_prompt_tokens"] > 0
    assert a["tbr.truncated"] is False and "tbr.misroute" not in a  # judged: not cut by its pool
    assert text.split()[0] not in str(span)  # no prompt text in telemetry

    by_name = {m.name: m for m in sink.metrics}
    usage = by_name["gen_ai.client.token.usage"]
    assert usage.unit == "{token}"
    points = {attrs(p.attributes)["gen_ai.token.type"]: p for p in usage.histogram.data_points}
    assert {t: (p.count, p.sum) for t, p in points.items()} == {"input": (1, 97), "output": (1, 1)}
    assert attrs(points["input"].attributes)["tbr.pool"] == "short"
    (requests,) = by_name["tbr.requests"].sum.data_points
    assert requests.as_int == 1 and attrs(requests.attributes) == {"tbr.pool": "short", "tbr.reason": "fits"}
    assert by_name["tbr.prompt_estimate.relative_error"].histogram.data_points[0].count == 1


async def test_off_by_default() -> None:
    assert not otel_enabled({}) and otel_enabled({"TBR_OTEL_ENABLED": "true"})
    async with RouterApp(parse_config({"pools": POOLS}), grpc_port=0, admin_port=0) as app:
        assert app.otel is None and not app.observer.records_requests
