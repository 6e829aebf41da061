"""Listeners: the ext_proc gRPC server and the admin HTTP server."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from extproc.config.base import Strict


class ServerConfig(Strict):
    """gRPC listener of the ext_proc service."""

    grpc_host: str = "127.0.0.1"
    grpc_port: Annotated[int, Field(ge=0, le=65535)] = 50051
    max_message_bytes: Annotated[int, Field(ge=65_536, le=1_073_741_824)] = 8_388_608
    """gRPC max receive/send message size; must be ≥ Envoy's per_connection_buffer_limit_bytes
    (the request body arrives in one BUFFERED message). Default matches envoy/envoy.yaml (8 MiB)."""
    grace_period_s: Annotated[float, Field(ge=0.0, le=3600.0)] = 10.0
    """How long in-flight streams may run on after SIGTERM."""
    shutdown_delay_s: Annotated[float, Field(ge=0.0, le=600.0)] = 0.0
    """After SIGTERM, time spent reporting not-ready (gRPC health, /readyz) while still accepting
    new streams, so load balancers stop sending before the listener closes (like a preStop sleep)."""
    event_loop: Literal["asyncio", "uvloop"] = "uvloop"
    """Event loop of ``tbr serve``: uvloop (make bench: −13 % router CPU per request and +10 %
    req/s against asyncio in the same run, docs/performance.md "Event loop"), or the standard
    library's. grpc.aio runs on both."""
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    tls_client_ca_path: str | None = None
    """When set (with cert and key), clients must present a certificate signed by this CA (mTLS)."""

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerConfig:
        if (self.tls_cert_path is None) != (self.tls_key_path is None):
            raise ValueError("tls_cert_path and tls_key_path must be set together")
        if self.tls_client_ca_path is not None and self.tls_cert_path is None:
            raise ValueError("tls_client_ca_path needs tls_cert_path and tls_key_path")
        return self


class AdminConfig(Strict):
    """Admin HTTP listener (metrics, health, learned ratios). Loopback by default."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 9190
    enabled: bool = True
