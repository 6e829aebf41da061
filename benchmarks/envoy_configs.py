"""Envoy bootstraps for the benchmarks, rendered as JSON on loopback with given ports.

* :func:`front_bootstrap`: one front Envoy with one listener per variant. Every listener has
  the HCM, early header mutation and routes of ``envoy/envoy.yaml`` (``x-tbr-pool: short`` →
  ``short_pool``, anything else → ``long_pool``); a variant either has no ext_proc filter (the
  bare-Envoy baseline) or the ext_proc filter with ``envoy/envoy.yaml``'s settings
  (``failure_mode_allow``, ``message_timeout: 2s``, ``allow_mode_override``, request headers
  SEND, request body BUFFERED, response headers SEND, response body NONE) pointing at its own
  ext_proc cluster (one or several router processes).
* :func:`upstream_bootstrap`: the fast fixed upstream, a second Envoy answering every request
  with a ``direct_response`` OpenAI-style JSON body carrying ``usage.prompt_tokens``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["BODY_HEADER", "ListenerSpec", "front_bootstrap", "upstream_bootstrap"]

ROUTING_HEADER = "x-tbr-pool"
BUFFER_LIMIT_BYTES = 8_388_608

_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
_EXT_PROC = "type.googleapis.com/envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor"
_EARLY = "type.googleapis.com/envoy.extensions.http.early_header_mutation.header_mutation.v3.HeaderMutation"
_H2_OPTS = "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions"


@dataclass
class ListenerSpec:
    """One front listener.

    Attributes:
        name: variant name (also the HCM stat prefix and the ext_proc cluster suffix).
        port: listener port.
        ext_proc_ports: router ports of its ext_proc cluster; empty = no ext_proc filter.
        allow_mode_override: as in envoy/envoy.yaml (True); False shows the cost of the
            response-headers message that the override turns off.
        processing_mode: overrides of the filter's processing_mode fields.
        one_message: the one-message design (docs/design/004-one-message.md): request headers
            SKIP, ``request_attributes`` for the request line, the decision in dynamic metadata
            (namespace ``tbr``) with an ``envoy.filters.http.buffer`` filter after ext_proc, and
            the short route matching that metadata instead of the routing header.
    """

    name: str
    port: int
    ext_proc_ports: list[int] = field(default_factory=list)
    allow_mode_override: bool = True
    processing_mode: dict[str, str] = field(default_factory=dict)
    one_message: bool = False


_BUFFER = "type.googleapis.com/envoy.extensions.filters.http.buffer.v3.Buffer"
ONE_MESSAGE_ATTRIBUTES = ["request.path", "request.method", "request.id"]


def _addr(port: int) -> dict[str, Any]:
    return {"socket_address": {"address": "127.0.0.1", "port_value": port}}


def _cluster(name: str, ports: list[int], *, http2: bool) -> dict[str, Any]:
    c: dict[str, Any] = {
        "name": name,
        "type": "STATIC",
        "connect_timeout": "1s",
        "lb_policy": "ROUND_ROBIN",
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT_BYTES,
        "circuit_breakers": {
            "thresholds": [
                {
                    "priority": "DEFAULT",
                    "max_connections": 100000,
                    "max_pending_requests": 100000,
                    "max_requests": 100000,
                    "max_retries": 3,
                }
            ]
        },
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [{"lb_endpoints": [{"endpoint": {"address": _addr(p)}} for p in ports]}],
        },
    }
    if http2:
        c["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": _H2_OPTS,
                "explicit_http_config": {"http2_protocol_options": {"max_concurrent_streams": 10000}},
            }
        }
    return c


def _ext_proc_filter(spec: ListenerSpec) -> dict[str, Any]:
    mode = {
        "request_header_mode": "SEND",
        "request_body_mode": "BUFFERED",
        "request_trailer_mode": "SKIP",
        "response_header_mode": "SEND",
        "response_body_mode": "NONE",
        "response_trailer_mode": "SKIP",
        **({"request_header_mode": "SKIP", "response_header_mode": "SKIP"} if spec.one_message else {}),
        **spec.processing_mode,
    }
    extra: dict[str, Any] = {}
    if spec.one_message:
        extra = {
            "request_attributes": ONE_MESSAGE_ATTRIBUTES,
            "metadata_options": {"receiving_namespaces": {"untyped": ["tbr"]}},
        }
    return {
        "name": "envoy.filters.http.ext_proc",
        "typed_config": {
            "@type": _EXT_PROC,
            "stat_prefix": "tbr",
            "grpc_service": {"envoy_grpc": {"cluster_name": f"ext_proc_{spec.name}"}, "timeout": "5s"},
            "failure_mode_allow": True,
            "message_timeout": "2s",
            "allow_mode_override": spec.allow_mode_override,
            "processing_mode": mode,
            **extra,
        },
    }


def _listener(spec: ListenerSpec) -> dict[str, Any]:
    filters = [_ext_proc_filter(spec)] if spec.ext_proc_ports else []
    if spec.one_message:
        # Holds the request headers until the body is complete, so the route is picked after the
        # ext_proc body answer set the metadata (and raises the stream's buffer limit to this).
        filters.append(
            {
                "name": "envoy.filters.http.buffer",
                "typed_config": {"@type": _BUFFER, "max_request_bytes": BUFFER_LIMIT_BYTES},
            }
        )
    short_match: dict[str, Any] = {
        "prefix": "/",
        "headers": [{"name": ROUTING_HEADER, "string_match": {"exact": "short"}}],
    }
    if spec.one_message:
        short_match = {
            "prefix": "/",
            "dynamic_metadata": [
                {"filter": "tbr", "path": [{"key": "pool"}], "value": {"string_match": {"exact": "short"}}}
            ],
        }
    filters.append({"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER}})
    route_opts = {"timeout": "0s", "idle_timeout": "300s"}
    hcm = {
        "@type": _HCM,
        "stat_prefix": spec.name,
        "codec_type": "AUTO",
        "request_timeout": "0s",
        "stream_idle_timeout": "300s",
        "generate_request_id": True,
        "preserve_external_request_id": True,
        "early_header_mutation_extensions": [
            {
                "name": "envoy.http.early_header_mutation.header_mutation",
                "typed_config": {"@type": _EARLY, "mutations": [{"remove": ROUTING_HEADER}]},
            }
        ],
        "route_config": {
            "name": "llm_routes",
            "virtual_hosts": [
                {
                    "name": "llm",
                    "domains": ["*"],
                    "routes": [
                        {
                            "name": "to_short_pool",
                            "match": short_match,
                            "route": {"cluster": "short_pool", **route_opts},
                        },
                        {
                            "name": "to_long_pool",
                            "match": {"prefix": "/"},
                            "route": {"cluster": "long_pool", **route_opts},
                        },
                    ],
                }
            ],
        },
        "http_filters": filters,
    }
    return {
        "name": spec.name,
        "address": _addr(spec.port),
        "per_connection_buffer_limit_bytes": BUFFER_LIMIT_BYTES,
        "filter_chains": [
            {"filters": [{"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}]}
        ],
    }


def front_bootstrap(
    admin_port: int, listeners: list[ListenerSpec], short_ports: list[int], long_ports: list[int]
) -> dict[str, Any]:
    """The front Envoy: ``listeners`` + one ext_proc cluster per filtered listener + the pools."""
    clusters = [
        _cluster(f"ext_proc_{s.name}", s.ext_proc_ports, http2=True) for s in listeners if s.ext_proc_ports
    ]
    clusters.append(_cluster("short_pool", short_ports, http2=False))
    clusters.append(_cluster("long_pool", long_ports, http2=False))
    return {
        "admin": {"address": _addr(admin_port)},
        "static_resources": {"listeners": [_listener(s) for s in listeners], "clusters": clusters},
    }


BODY_HEADER = "x-bench-body"


def upstream_bootstrap(admin_port: int, port: int, bodies: dict[str, str]) -> dict[str, Any]:
    """The fixed upstream: ``200 application/json`` with ``bodies[label]`` for a request carrying
    ``x-bench-body: label`` (so each benchmark body gets its own true ``usage``)."""
    routes: list[dict[str, Any]] = [
        {
            "match": {"prefix": "/", "headers": [{"name": BODY_HEADER, "string_match": {"exact": label}}]},
            "direct_response": {"status": 200, "body": {"inline_string": body}},
            "response_headers_to_add": [{"header": {"key": "content-type", "value": "application/json"}}],
        }
        for label, body in bodies.items()
    ]
    routes.append({"match": {"prefix": "/"}, "direct_response": {"status": 404}})
    hcm = {
        "@type": _HCM,
        "stat_prefix": "upstream",
        "codec_type": "AUTO",
        "route_config": {
            "name": "fixed",
            "virtual_hosts": [
                {
                    "name": "fixed",
                    "domains": ["*"],
                    "routes": routes,
                }
            ],
        },
        "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER}}],
    }
    return {
        "admin": {"address": _addr(admin_port)},
        "static_resources": {
            "listeners": [
                {
                    "name": "upstream",
                    "address": _addr(port),
                    "per_connection_buffer_limit_bytes": BUFFER_LIMIT_BYTES,
                    "filter_chains": [
                        {
                            "filters": [
                                {"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}
                            ]
                        }
                    ],
                }
            ]
        },
    }
