"""Issue 12 item 2 in the Kubernetes gateway overlays: Envoy Gateway and Istio get the same
per-pool generation timeouts as envoy/envoy.yaml.

The rule (envoy/README.md, "Timeouts"; :func:`tests.e2e.test_envoy_timeouts.generation_idle_timeout_s`):
a route's idle timeout covers the longest legitimate non-streaming generation of the largest pool
it can reach (a misroute retry reaches the next larger pool), and the stream idle timeout of the
connection manager (the default for routes that set none) covers the largest. Pool sizes come
from the router config the overlay renders. The Envoy pieces are parsed with the real Envoy
protobuf types; the custom resources themselves are schema-checked by tests/deploy/test_kustomize.py.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from google.protobuf import duration_pb2, json_format

from tests.deploy.test_kustomize import render
from tests.e2e.test_envoy_timeouts import generation_idle_timeout_s

_DURATION_PART = re.compile(r"([0-9]+)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def duration_s(value: str) -> float:
    """A Gateway API / Envoy JSON duration (``1380s``, ``23m``, ``1h30m``) in seconds."""
    parts = _DURATION_PART.findall(value)
    assert parts and "".join(n + u for n, u in parts) == value, value
    return sum(int(n) * _UNIT_S[u] for n, u in parts)


def envoy_duration_s(value: str) -> float:
    """An Envoy JSON ``google.protobuf.Duration`` (``1380s``) in seconds, parsed as protobuf does."""
    d = duration_pb2.Duration()
    d.FromJsonString(value)
    return d.ToTimedelta().total_seconds()


def pool_limits(objs: tuple[dict[str, Any], ...]) -> dict[str, int]:
    """``pools[].max_model_len`` by pool name, from the router config the overlay ships."""
    (cm,) = [o for o in objs if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "tbr-router-config"]
    router = yaml.safe_load(cm["data"]["router.yaml"])
    return {p["name"]: int(p["max_model_len"]) for p in router["pools"]}


def _by_kind_name(objs: tuple[dict[str, Any], ...], kind: str, name: str) -> dict[str, Any]:
    (obj,) = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return obj


def test_envoy_gateway_routes_get_their_pools_generation_timeouts() -> None:
    objs = render("envoy-gateway")
    limits = pool_limits(objs)
    route = _by_kind_name(objs, "HTTPRoute", "llm")
    rule_pool = {
        f"httproute/tbr/llm/rule/{i}": r["backendRefs"][0]["name"].removeprefix("pool-")
        for i, r in enumerate(route["spec"]["rules"])
    }
    # What each rule's route reaches: its own pool, plus the misroute retry's (recovery.yaml).
    reachable = {name: {pool} for name, pool in rule_pool.items()}
    recovery = _by_kind_name(objs, "EnvoyPatchPolicy", "tbr-misroute-recovery")
    for patch in recovery["spec"]["jsonPatches"]:
        op = patch["operation"]
        if op["path"] == "/inline_cluster_specifier_plugin":
            rule = re.search(r"'(httproute/[^']+)/match/", op["jsonPath"])
            assert rule is not None
            groups = op["value"]["extension"]["typed_config"]["priority_groups"]
            reachable[rule.group(1)] |= {rule_pool[c["cluster_name"]] for g in groups for c in g["clusters"]}
    # No overall cap on a generation (a long stream is legitimate).
    assert all(duration_s(r["timeouts"]["request"]) == 0.0 for r in route["spec"]["rules"])

    idle = {}
    timeouts = _by_kind_name(objs, "EnvoyPatchPolicy", "tbr-generation-timeouts")
    for patch in timeouts["spec"]["jsonPatches"]:
        op = patch["operation"]
        assert patch["name"] == "tbr/llm-gateway/http" and op["op"] == "add" and op["path"] == "/idle_timeout"
        rule = re.search(r"'(httproute/[^']+)/match/0/\*'\)\]\.route$", op["jsonPath"])
        assert rule is not None, op["jsonPath"]
        idle[rule.group(1)] = envoy_duration_s(op["value"])
    assert idle.keys() == reachable.keys()
    for name, pools in reachable.items():
        assert idle[name] >= max(generation_idle_timeout_s(limits[p]) for p in pools), name

    ctp = _by_kind_name(objs, "ClientTrafficPolicy", "llm-gateway-clients")
    stream_idle_s = duration_s(ctp["spec"]["timeout"]["http"]["streamIdleTimeout"])
    assert stream_idle_s >= max(generation_idle_timeout_s(n) for n in limits.values())


def test_istio_routes_get_their_pools_generation_timeouts() -> None:
    from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2

    objs = render("istio")
    limits = pool_limits(objs)
    vs = _by_kind_name(objs, "VirtualService", "llm")

    def pool_of(host: str) -> str:
        return host.split(".")[0].removeprefix("pool-")

    reachable = {r["name"]: {pool_of(r["route"][0]["destination"]["host"])} for r in vs["spec"]["http"]}
    assert all("timeout" not in r for r in vs["spec"]["http"])  # no overall cap on a generation

    ef = _by_kind_name(objs, "EnvoyFilter", "tbr-ext-proc")
    idle = {}
    hcm = None
    for patch in ef["spec"]["configPatches"]:
        if patch["applyTo"] == "NETWORK_FILTER":
            typed = {k: v for k, v in patch["patch"]["value"]["typed_config"].items() if k != "@type"}
            hcm = json_format.ParseDict(typed, http_connection_manager_pb2.HttpConnectionManager())
        if patch["applyTo"] != "HTTP_ROUTE":
            continue
        name = patch["match"]["routeConfiguration"]["vhost"]["route"]["name"]
        assert patch["patch"]["operation"] == "MERGE"
        route = patch["patch"]["value"]["route"]
        if "inline_cluster_specifier_plugin" in route:  # misroute recovery: next larger pool
            plugin = route["inline_cluster_specifier_plugin"]["extension"]["typed_config"]
            for g in plugin["priority_groups"]:
                reachable[name] |= {pool_of(c["cluster_name"].split("|")[3]) for c in g["clusters"]}
        if "idle_timeout" in route:
            idle[name] = envoy_duration_s(route["idle_timeout"])
    assert idle.keys() == reachable.keys()
    for name, pools in reachable.items():
        assert idle[name] >= max(generation_idle_timeout_s(limits[p]) for p in pools), name
    assert hcm is not None and hcm.HasField("stream_idle_timeout")
    stream_idle_s = hcm.stream_idle_timeout.ToTimedelta().total_seconds()
    assert stream_idle_s >= max(generation_idle_timeout_s(n) for n in limits.values())
