"""A stand-in pool that costs (almost) nothing: an Envoy answering every request with a fixed
OpenAI JSON body (``direct_response``), so the benchmarks and the soak measure the router, not a
Python upstream.

Each listener is one pool; its answers carry ``x-served-by-pool: <listener name>`` (as
:mod:`mockpool` does). With ``select_header`` a request picks its body by that header's value (a
body per benchmark request size, each with its own true ``usage``); otherwise every request gets
the one body.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from devstack.procs import LOOPBACK

__all__ = ["SERVED_BY_HEADER", "fixed_upstream_config"]

SERVED_BY_HEADER = "x-served-by-pool"
_HCM = "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager"
_ROUTER = "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
_BUFFER_LIMIT_BYTES = 8_388_608  # as envoy/envoy.yaml's listener


def _answer(body: str, pool: str) -> dict[str, Any]:
    return {
        "direct_response": {"status": 200, "body": {"inline_string": body}},
        "response_headers_to_add": [
            {"header": {"key": "content-type", "value": "application/json"}},
            {"header": {"key": SERVED_BY_HEADER, "value": pool}},
        ],
    }


def _routes(pool: str, bodies: Mapping[str, str], select_header: str | None) -> list[dict[str, Any]]:
    if select_header is None:
        (body,) = bodies.values()
        return [{"match": {"prefix": "/"}, **_answer(body, pool)}]
    routes: list[dict[str, Any]] = [
        {
            "match": {"prefix": "/", "headers": [{"name": select_header, "string_match": {"exact": label}}]},
            **_answer(body, pool),
        }
        for label, body in bodies.items()
    ]
    routes.append({"match": {"prefix": "/"}, "direct_response": {"status": 404}})
    return routes


def fixed_upstream_config(
    admin_port: int,
    listeners: Mapping[str, int],
    bodies: Mapping[str, str],
    *,
    select_header: str | None = None,
) -> dict[str, Any]:
    """Envoy bootstrap of the fixed-response stand-in pools on loopback.

    Args:
        admin_port: Envoy's admin port.
        listeners: pool name → port (one listener per pool).
        bodies: label → response body (JSON text); exactly one unless ``select_header``.
        select_header: request header whose value picks the body by label (no match: 404).

    Raises:
        ValueError: several bodies without ``select_header``.
    """
    if select_header is None and len(bodies) != 1:
        raise ValueError(f"{len(bodies)} bodies need a select_header")
    out = []
    for pool, port in listeners.items():
        hcm = {
            "@type": _HCM,
            "stat_prefix": pool,
            "codec_type": "AUTO",
            "route_config": {
                "name": pool,
                "virtual_hosts": [
                    {"name": pool, "domains": ["*"], "routes": _routes(pool, bodies, select_header)}
                ],
            },
            "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {"@type": _ROUTER}}],
        }
        out.append(
            {
                "name": pool,
                "address": {"socket_address": {"address": LOOPBACK, "port_value": port}},
                "per_connection_buffer_limit_bytes": _BUFFER_LIMIT_BYTES,
                "filter_chains": [
                    {
                        "filters": [
                            {"name": "envoy.filters.network.http_connection_manager", "typed_config": hcm}
                        ]
                    }
                ],
            }
        )
    return {
        "admin": {"address": {"socket_address": {"address": LOOPBACK, "port_value": admin_port}}},
        "static_resources": {"listeners": out},
    }
