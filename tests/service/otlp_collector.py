"""An in-process OTLP/gRPC collector for tests: the real collector service protocol
(opentelemetry-proto) on a loopback gRPC server, keeping every span and metric it is sent."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc
import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")

from opentelemetry.proto.collector.metrics.v1 import (
    metrics_service_pb2,
    metrics_service_pb2_grpc,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

__all__ = ["Collector", "serve_collector"]


class Collector(trace_service_pb2_grpc.TraceServiceServicer, metrics_service_pb2_grpc.MetricsServiceServicer):
    """An OTLP/gRPC receiver that keeps what it is sent."""

    def __init__(self) -> None:
        self.spans: list[Any] = []
        self.metrics: list[Any] = []
        self.lock = threading.Lock()

    def Export(self, request: Any, context: Any) -> Any:
        with self.lock:
            if isinstance(request, trace_service_pb2.ExportTraceServiceRequest):
                self.spans += [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
                return trace_service_pb2.ExportTraceServiceResponse()
            self.metrics += [
                m for rm in request.resource_metrics for sm in rm.scope_metrics for m in sm.metrics
            ]
            return metrics_service_pb2.ExportMetricsServiceResponse()


def serve_collector() -> Iterator[tuple[Collector, str]]:
    """Yield once a running :class:`Collector` and its ``host:port`` (the OTLP endpoint), then stop
    it: ``yield from serve_collector()`` in a fixture."""
    c = Collector()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(c, server)  # type: ignore[no-untyped-call]
    metrics_service_pb2_grpc.add_MetricsServiceServicer_to_server(c, server)  # type: ignore[no-untyped-call]
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        yield c, f"127.0.0.1:{port}"
    finally:
        server.stop(0)
