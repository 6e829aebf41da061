"""envoy/envoy.yaml: Envoy accepts it (as written and as rendered for loopback) and it keeps the contract
with the router (config/router.yaml) that routing and fail-open depend on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from devstack.envoy_runner import (
    DEFAULT_ENVOY_CONFIG,
    EnvoyPorts,
    render_envoy_config,
    validate_envoy_config,
    write_envoy_config,
)
from devstack.stack import DEFAULT_ROUTER_CONFIG
from extproc.adapter.responses import ROUTING_METADATA_KEY, ROUTING_METADATA_NAMESPACE
from tests.e2e.harness import plain_routes

pytestmark = pytest.mark.envoy

PORTS = EnvoyPorts(listener=20000, admin=20001, router_grpc=20002, short_pool=20003, long_pool=20004)


def _cfg() -> dict[str, Any]:
    return yaml.safe_load(DEFAULT_ENVOY_CONFIG.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _hcm(cfg: dict[str, Any]) -> dict[str, Any]:
    return cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]  # type: ignore[no-any-return]


def _ext_proc(cfg: dict[str, Any]) -> dict[str, Any]:
    (f,) = [f for f in _hcm(cfg)["http_filters"] if f["name"] == "envoy.filters.http.ext_proc"]
    return f["typed_config"]  # type: ignore[no-any-return]


def _cluster(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    (c,) = [c for c in cfg["static_resources"]["clusters"] if c["name"] == name]
    cluster: dict[str, Any] = c
    return cluster


def test_repo_config_passes_envoy_validate() -> None:
    res = validate_envoy_config(DEFAULT_ENVOY_CONFIG)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "OK" in res.stdout


def test_rendered_config_passes_envoy_validate(tmp_path: Path) -> None:
    path = write_envoy_config(tmp_path / "envoy.yaml", ports=PORTS)
    res = validate_envoy_config(path)
    assert res.returncode == 0, res.stdout + res.stderr


def test_validate_rejects_a_semantically_wrong_config(tmp_path: Path) -> None:
    """The validate step is a real check: FULL_DUPLEX_STREAMED needs request trailers SEND (Envoy rule)."""
    cfg = _cfg()
    _ext_proc(cfg)["processing_mode"]["request_body_mode"] = "FULL_DUPLEX_STREAMED"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(cfg), encoding="utf-8")
    res = validate_envoy_config(path)
    assert res.returncode != 0
    assert "request_trailer_mode" in res.stdout + res.stderr


def test_render_rewrites_only_addresses() -> None:
    original, rendered = _cfg(), render_envoy_config(DEFAULT_ENVOY_CONFIG, ports=PORTS)
    assert rendered["admin"]["address"]["socket_address"] == {
        "address": "127.0.0.1",
        "port_value": PORTS.admin,
    }
    listener = rendered["static_resources"]["listeners"][0]["address"]["socket_address"]
    assert listener == {"address": "127.0.0.1", "port_value": PORTS.listener}
    for name, port in (
        ("ext_proc", PORTS.router_grpc),
        ("short_pool", PORTS.short_pool),
        ("long_pool", PORTS.long_pool),
    ):
        c = _cluster(rendered, name)
        sock = c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
            "socket_address"
        ]
        assert sock == {"address": "127.0.0.1", "port_value": port}
        assert c["type"] == "STATIC"
    # Everything except addresses and cluster types is untouched.
    assert _hcm(rendered) == _hcm(original)
    for c in original["static_resources"]["clusters"]:
        r = _cluster(rendered, c["name"])
        strip = ("load_assignment", "type", "dns_lookup_family")
        assert {k: v for k, v in r.items() if k not in strip} == {
            k: v for k, v in c.items() if k not in strip
        }


def test_render_rejects_missing_cluster() -> None:
    cfg = _cfg()
    cfg["static_resources"]["clusters"] = [
        c for c in cfg["static_resources"]["clusters"] if c["name"] != "short_pool"
    ]
    with pytest.raises(ValueError, match="short_pool"):
        render_envoy_config(cfg, ports=PORTS)


def test_contract_with_router_config() -> None:
    """Header name/values, buffer size and pool limits agree between envoy.yaml and config/router.yaml."""
    cfg, router = _cfg(), yaml.safe_load(DEFAULT_ROUTER_CONFIG.read_text(encoding="utf-8"))
    header = router["routing_header"]
    hcm = _hcm(cfg)
    # The client's copy of the routing header is removed before route selection (not by an http filter).
    (early,) = hcm["early_header_mutation_extensions"]
    assert early["name"] == "envoy.http.early_header_mutation.header_mutation"
    assert {"remove": header} in early["typed_config"]["mutations"]
    assert all(f["name"] != "envoy.filters.http.header_mutation" for f in hcm["http_filters"])
    # short → short_pool on an exact match of the router's dynamic metadata (one message per
    # request: the value is the pool's header_value); everything else → long_pool.
    routes = plain_routes(hcm["route_config"]["virtual_hosts"][0]["routes"])
    short_value = next(p["header_value"] for p in router["pools"] if p["name"] == "short")
    assert "headers" not in routes[0]["match"]
    assert routes[0]["match"]["dynamic_metadata"] == [
        {
            "filter": ROUTING_METADATA_NAMESPACE,
            "path": [{"key": ROUTING_METADATA_KEY}],
            "value": {"string_match": {"exact": short_value}},
        }
    ]
    # The filter accepts the router's namespace; a buffer filter right after it holds the request
    # until the answer (else the route is picked with the headers: the catch-all, silently).
    ext_proc = _ext_proc(cfg)
    assert ext_proc["metadata_options"] == {"receiving_namespaces": {"untyped": [ROUTING_METADATA_NAMESPACE]}}
    names = [f["name"] for f in hcm["http_filters"]]
    assert names[names.index("envoy.filters.http.ext_proc") + 1] == "envoy.filters.http.buffer"
    (buffer,) = [f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.buffer"]
    groups = routes[0]["route"]["inline_cluster_specifier_plugin"]["extension"]["typed_config"][
        "priority_groups"
    ]
    assert [[c["cluster_name"] for c in g["clusters"]] for g in groups] == [["short_pool"], ["long_pool"]]
    assert routes[-1]["match"] == {"prefix": "/"} and routes[-1]["route"]["cluster"] == "long_pool"
    assert all(r["route"]["timeout"] == "0s" for r in routes)  # long LLM streams
    # The whole BUFFERED body fits one gRPC message of the router.
    limit = cfg["static_resources"]["listeners"][0]["per_connection_buffer_limit_bytes"]
    assert limit == router["server"]["max_message_bytes"] == buffer["typed_config"]["max_request_bytes"]


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        pytest.param("failure_mode_allow", True, id="fail-open"),
        pytest.param(
            "request_attributes", ["request.path", "request.method", "request.id"], id="request-line"
        ),
        pytest.param("message_timeout", "2s", id="message-timeout"),
        pytest.param("stat_prefix", "tbr", id="stat-prefix"),
        pytest.param(
            "processing_mode",
            {
                "request_header_mode": "SKIP",  # one message: the body (docs/design/004-one-message.md)
                "request_body_mode": "BUFFERED",
                "request_trailer_mode": "SKIP",
                "response_header_mode": "SKIP",  # sampled responses: the off-path filter
                "response_body_mode": "NONE",
                "response_trailer_mode": "SKIP",
            },
            id="processing-mode",
        ),
    ],
)
def test_ext_proc_filter_fields(field: str, expected: object) -> None:
    assert _ext_proc(_cfg())[field] == expected


def test_ext_proc_cluster_is_http2_with_raised_circuit_breakers() -> None:
    c = _cluster(_cfg(), "ext_proc")
    opts = c["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    assert "http2_protocol_options" in opts["explicit_http_config"]
    assert c["circuit_breakers"]["thresholds"][0]["max_requests"] > 1024  # Envoy's default


@pytest.mark.parametrize("cluster", ["short_pool", "long_pool"])
def test_pool_connections_close_before_the_pool_does(cluster: str) -> None:
    """vLLM's uvicorn closes idle keep-alive connections after 5 s. Without a shorter idle timeout
    on our side, a request written onto a closing connection gets a 503 (measured: 1-2 per 500-request
    demo, stat upstream_cx_destroy_remote_with_active_rq; 0 in 3 runs with 4 s)."""
    c = _cluster(_cfg(), cluster)
    opts = c["typed_extension_protocol_options"]["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]
    idle = opts["common_http_protocol_options"]["idle_timeout"]
    assert idle.endswith("s") and float(idle[:-1]) < 5.0


def test_pool_routes_retry_only_when_safe() -> None:
    """The long pool is retried only when nothing reached it (no duplicate generation); the short
    pool's route also retries vLLM's 400 once, on the next larger pool (misroute recovery)."""
    vhost = _hcm(_cfg())["route_config"]["virtual_hosts"][0]
    assert vhost["include_attempt_count_in_response"] is True
    routes = plain_routes(vhost["routes"])
    short, long = routes[0]["route"]["retry_policy"], routes[-1]["route"]["retry_policy"]
    assert set(long["retry_on"].split(",")) == {"connect-failure", "reset-before-request"}
    # the short pool's 5xx (a dead engine's 500) before its first byte: also the next larger pool (issue 34)
    assert set(short["retry_on"].split(",")) == {
        "5xx",
        "retriable-status-codes",
        "connect-failure",
        "reset-before-request",
    }
    assert short["retriable_status_codes"] == [400]
    assert short["num_retries"] == 1 and short["refresh_cluster_on_retry"] is True
