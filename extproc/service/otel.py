"""Optional OpenTelemetry export (traces and metrics over OTLP); off by default.

Enabled by ``TBR_OTEL_ENABLED=true`` for ``tbr serve`` (needs the ``otel`` extra:
``pip install 'token-budget-router[otel]'``). The exporter is configured the standard way, by the
``OTEL_*`` environment (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_INSECURE``,
``OTEL_SERVICE_NAME``, ``OTEL_RESOURCE_ATTRIBUTES``, ...).

For every routed request (when its ext_proc stream ends) :class:`OtelRecorder` emits

* one span ``tbr.route`` whose parent is Envoy's trace context (the request's W3C
  ``traceparent`` header, as Envoy's tracer propagates it), so the routing decision appears inside
  the request's trace; attributes: the decision (``tbr.pool``, ``tbr.category``, ``tbr.reason``,
  ``tbr.budget_tokens``, ``tbr.estimated_prompt_tokens``, ``tbr.retried_to_pool``, ``tbr.stream_end``,
  ``tbr.misroute``, ``tbr.misroute_cause``, ``tbr.truncated``)
  and the GenAI semantic-convention attributes the router can see (``gen_ai.request.model``,
  ``gen_ai.usage.input_tokens``, ``gen_ai.usage.output_tokens``, ``http.response.status_code``);
* GenAI semantic-convention metrics (https://opentelemetry.io/docs/specs/semconv/gen-ai/gen-ai-metrics/):
  ``gen_ai.client.token.usage`` (histogram, ``{token}``, by ``gen_ai.token.type`` =
  ``input``/``output``, ``gen_ai.request.model``, ``gen_ai.operation.name`` and ``tbr.pool``), as
  observed on the response's ``usage``; plus ``tbr.requests`` (counter by pool and reason) and
  ``tbr.prompt_estimate.relative_error`` (histogram, (estimated − actual) / actual).

No prompt or response text is ever put in a span or a metric.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from extproc.core.route.decision import DecisionRecord

__all__ = ["OtelRecorder", "otel_enabled"]

log = logging.getLogger(__name__)

_TRUE = {"1", "true", "yes", "on"}


def otel_enabled(env: Mapping[str, str]) -> bool:
    """Whether ``TBR_OTEL_ENABLED`` asks for OpenTelemetry export (default: off)."""
    return env.get("TBR_OTEL_ENABLED", "").strip().lower() in _TRUE


class OtelRecorder:
    """Turns finished requests into an OTel span and GenAI metrics.

    Args:
        tracer_provider: an ``opentelemetry.sdk.trace.TracerProvider`` (built from the ``OTEL_*``
            environment by :meth:`from_env`; tests pass one exporting to an in-process collector).
        meter_provider: an ``opentelemetry.sdk.metrics.MeterProvider``.

    Raises:
        ImportError: the ``otel`` extra (opentelemetry-sdk) is not installed.
    """

    def __init__(self, tracer_provider: Any, meter_provider: Any) -> None:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        self.tracer_provider = tracer_provider
        self.meter_provider = meter_provider
        self._propagator = TraceContextTextMapPropagator()
        self._tracer = tracer_provider.get_tracer("token-budget-router")
        meter = meter_provider.get_meter("token-budget-router")
        self._token_usage = meter.create_histogram(
            "gen_ai.client.token.usage",
            unit="{token}",
            description="Tokens used per request as reported in the response's usage (input = prompt).",
            explicit_bucket_boundaries_advisory=[
                1,
                4,
                16,
                64,
                256,
                1024,
                4096,
                16384,
                65536,
                262144,
                1048576,
                4194304,
                16777216,
                67108864,
            ],
        )
        self._requests = meter.create_counter(
            "tbr.requests", unit="{request}", description="Routed requests by pool and reason."
        )
        self._rel_error = meter.create_histogram(
            "tbr.prompt_estimate.relative_error",
            unit="1",
            description="Signed relative error of the prompt estimate, (estimated - actual) / actual.",
        )

    @classmethod
    def from_env(cls) -> OtelRecorder:
        """Providers with OTLP/gRPC exporters configured by the standard ``OTEL_*`` environment.

        Raises:
            ImportError: the ``otel`` extra is not installed.
        """
        from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import SERVICE_NAME, Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({SERVICE_NAME: os.environ.get("OTEL_SERVICE_NAME", "token-budget-router")})
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
        meter_provider = MeterProvider(
            resource=resource, metric_readers=[PeriodicExportingMetricReader(OTLPMetricExporter())]
        )
        return cls(tracer_provider, meter_provider)

    def request_finished(self, record: DecisionRecord, traceparent: str) -> None:
        """Emit the span and metrics of one finished request (never raises)."""
        try:
            self._record(record, traceparent)
        except Exception:  # telemetry must never affect routing
            log.exception("OpenTelemetry export of a request failed")

    def _record(self, record: DecisionRecord, traceparent: str) -> None:
        parent = self._propagator.extract({"traceparent": traceparent}) if traceparent else None
        attrs: dict[str, Any] = {
            "tbr.pool": record.pool,
            "tbr.category": record.category,
            "tbr.reason": record.reason,
            "tbr.stream_end": record.end,
            "tbr.request_id": record.request_id,
            "gen_ai.operation.name": "chat",
        }
        optional = {
            "gen_ai.request.model": record.model or None,
            "tbr.budget_tokens": record.budget_tokens,
            "tbr.estimated_prompt_tokens": record.estimated_prompt_tokens,
            "gen_ai.usage.input_tokens": record.prompt_tokens,
            "gen_ai.usage.output_tokens": record.completion_tokens,
            "http.response.status_code": record.status,
            "tbr.retried_to_pool": record.retried_to_pool,
            "tbr.misroute": record.misroute,
            "tbr.misroute_cause": record.misroute_cause,
            "tbr.truncated": record.truncated,
            "gen_ai.response.finish_reasons": [record.finish_reason] if record.finish_reason else None,
        }
        attrs.update({k: v for k, v in optional.items() if v is not None})
        start_ns = int(record.ts_s * 1e9)
        span = self._tracer.start_span("tbr.route", context=parent, attributes=attrs, start_time=start_ns)
        span.end(end_time=max(start_ns, time.time_ns()))

        metric_attrs = {"gen_ai.operation.name": "chat", "tbr.pool": record.pool}
        if record.model:
            metric_attrs["gen_ai.request.model"] = record.model
        self._requests.add(1, {"tbr.pool": record.pool, "tbr.reason": record.reason})
        if record.prompt_tokens is not None:
            self._token_usage.record(record.prompt_tokens, {**metric_attrs, "gen_ai.token.type": "input"})
            if record.estimated_prompt_tokens is not None and record.prompt_tokens > 0:
                err = (record.estimated_prompt_tokens - record.prompt_tokens) / record.prompt_tokens
                self._rel_error.record(err, {"tbr.category": record.category})
        if record.completion_tokens is not None:
            self._token_usage.record(
                record.completion_tokens, {**metric_attrs, "gen_ai.token.type": "output"}
            )

    def shutdown(self) -> None:
        """Flush and stop both providers (at the end of ``tbr serve``)."""
        for provider in (self.tracer_provider, self.meter_provider):
            try:
                provider.shutdown()
            except Exception:
                log.exception("OpenTelemetry shutdown failed")
