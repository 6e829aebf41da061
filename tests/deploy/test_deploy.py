"""deploy/: the rendered Kubernetes overlays reference each other consistently (issue 5, item 6).

No cluster here: this checks structure, cross-references (Services, ports, selectors, config
mounts), agreement with config/router.yaml and envoy/envoy.yaml, and parses the Envoy typed
configs embedded in the Istio EnvoyFilter with the real Envoy protobuf types.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from google.protobuf import json_format

from extproc.adapter.server import EXT_PROC_SERVICE
from extproc.config import RouterConfig, load_config, parse_config
from tests.deploy.test_kustomize import OVERLAYS, render
from tests.service.contracts import REPO, same_routing_behaviour

Key = tuple[str, str, str]  # (kind, namespace, name)


def load_docs() -> dict[Key, dict[str, Any]]:
    """Every object of every rendered overlay (deploy/overlays/*, `kubectl kustomize`); the base
    objects all overlays share must render identically."""
    docs: dict[Key, dict[str, Any]] = {}
    for overlay in OVERLAYS:
        if overlay == "two-models":
            continue  # replaces the base's pools and router config (tests/deploy/test_deploy_two_models.py)
        for doc in render(overlay):
            meta = doc["metadata"]
            key = (doc["kind"], meta.get("namespace", ""), meta["name"])
            if doc["kind"] == "NetworkPolicy":
                continue  # each overlay admits its own gateway (tests/deploy/test_kustomize.py)
            assert docs.setdefault(key, doc) == doc, f"{key} differs between overlays"
    return docs


@pytest.fixture(scope="module")
def docs() -> dict[Key, dict[str, Any]]:
    return load_docs()


@pytest.fixture(scope="module")
def router_cfg(docs: dict[Key, dict[str, Any]]) -> RouterConfig:
    cm = docs[("ConfigMap", "tbr", "tbr-router-config")]
    return parse_config(yaml.safe_load(cm["data"]["router.yaml"]))


def service_port(docs: dict[Key, dict[str, Any]], ns: str, name: str, port: int) -> dict[str, Any]:
    svc = docs.get(("Service", ns, name))
    assert svc is not None, f"no Service {ns}/{name}"
    for p in svc["spec"]["ports"]:
        if p["port"] == port:
            return dict(p)
    raise AssertionError(f"Service {ns}/{name} has no port {port}")


def pod_template(docs: dict[Key, dict[str, Any]], ns: str, name: str) -> dict[str, Any]:
    dep = docs[("Deployment", ns, name)]
    assert (
        dep["spec"]["selector"]["matchLabels"].items()
        <= dep["spec"]["template"]["metadata"]["labels"].items()
    )
    return dict(dep["spec"]["template"])


def test_services_select_pods_and_name_their_ports(docs: dict[Key, dict[str, Any]]) -> None:
    deployments = [k for k in docs if k[0] == "Deployment"]
    for kind, ns, name in docs:
        if kind != "Service":
            continue
        svc = docs[(kind, ns, name)]
        matches = [
            pod_template(docs, dns, dname)
            for _, dns, dname in deployments
            if dns == ns
            and svc["spec"]["selector"].items()
            <= pod_template(docs, dns, dname)["metadata"]["labels"].items()
        ]
        assert len(matches) == 1, f"Service {ns}/{name} selects {len(matches)} Deployments"
        port_names = {p["name"] for c in matches[0]["spec"]["containers"] for p in c.get("ports", [])}
        for p in svc["spec"]["ports"]:
            assert p["targetPort"] in port_names, f"{ns}/{name}: targetPort {p['targetPort']}"


def test_router_deployment_config_probes(docs: dict[Key, dict[str, Any]], router_cfg: RouterConfig) -> None:
    default = load_config(REPO / "config" / "router.yaml")
    assert same_routing_behaviour(router_cfg, default)
    assert router_cfg.server.grpc_host == "0.0.0.0" and router_cfg.admin.host == "0.0.0.0"
    pod = pod_template(docs, "tbr", "tbr-router")
    (c,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports == {"grpc": router_cfg.server.grpc_port, "admin": router_cfg.admin.port}
    # --config points into the mounted ConfigMap.
    cfg_path = Path(c["args"][c["args"].index("--config") + 1])
    (mount,) = c["volumeMounts"]
    (vol,) = pod["spec"]["volumes"]
    assert mount["name"] == vol["name"] and Path(mount["mountPath"]) / cfg_path.name == cfg_path
    assert vol["configMap"]["name"] == "tbr-router-config"
    # Liveness and readiness are distinct: /healthz (admin) vs gRPC health of the ext_proc service.
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "admin"}
    assert c["readinessProbe"]["grpc"] == {"port": router_cfg.server.grpc_port, "service": EXT_PROC_SERVICE}
    # The pod outlives the drain.
    drain_s = router_cfg.server.shutdown_delay_s + router_cfg.server.grace_period_s
    assert pod["spec"]["terminationGracePeriodSeconds"] > drain_s
    # Redis URL names the Redis Service.
    url = router_cfg.calibration.redis_url or ""
    host, port = url.removeprefix("redis://").split("/")[0].split(":")
    name, ns = host.split(".")[:2]
    service_port(docs, ns, name, int(port))


def test_pool_max_model_len_matches_router(docs: dict[Key, dict[str, Any]], router_cfg: RouterConfig) -> None:
    for pool in router_cfg.pools:
        (c,) = pod_template(docs, "tbr", f"pool-{pool.name}")["spec"]["containers"]
        assert int(c["args"][c["args"].index("--max-model-len") + 1]) == pool.max_model_len


def test_envoy_gateway_policy_and_route(docs: dict[Key, dict[str, Any]], router_cfg: RouterConfig) -> None:
    policy = docs[("EnvoyExtensionPolicy", "tbr", "tbr-router")]
    assert policy["apiVersion"] == "gateway.envoyproxy.io/v1alpha1"
    for ref in policy["spec"]["targetRefs"]:
        assert (ref["kind"], "tbr", ref["name"]) in docs and ref["group"] == "gateway.networking.k8s.io"
    (ext,) = policy["spec"]["extProc"]
    (backend,) = ext["backendRefs"]
    port = service_port(docs, "tbr", backend["name"], backend["port"])
    assert port["targetPort"] == "grpc" and port["appProtocol"] == "kubernetes.io/h2c"
    mode = ext["processingMode"]
    assert (
        mode["request"] == {"body": "Buffered"} and "response" in mode and mode["allowModeOverride"] is True
    )
    assert ext["failOpen"] is True

    ctp = docs[("ClientTrafficPolicy", "tbr", "llm-gateway-clients")]
    removed = ctp["spec"]["headers"]["earlyRequestHeaders"]["remove"]
    assert removed[0] == router_cfg.routing_header
    assert {"x-envoy-retry-on", "x-envoy-max-retries", "x-envoy-upstream-rq-timeout-ms"} <= set(removed)
    assert ctp["spec"]["clientIPDetection"] == {"xForwardedFor": {"numTrustedHops": 0}}  # issue 34, item 2

    route = docs[("HTTPRoute", "tbr", "llm")]
    for parent in route["spec"]["parentRefs"]:
        gw = docs[("Gateway", "tbr", parent["name"])]
        assert parent["sectionName"] in {lst["name"] for lst in gw["spec"]["listeners"]}
        assert ("GatewayClass", "", gw["spec"]["gatewayClassName"]) in docs
    by_value: dict[str | None, str] = {}
    for rule in route["spec"]["rules"]:
        (match,) = rule["matches"]
        (backend,) = rule["backendRefs"]
        service_port(docs, "tbr", backend["name"], backend["port"])
        hdrs = match.get("headers", [])
        for h in hdrs:
            assert h["name"] == router_cfg.routing_header and h["type"] == "Exact"
        by_value[hdrs[0]["value"] if hdrs else None] = backend["name"]
    values: dict[str | None, str] = {p.header_value: f"pool-{p.name}" for p in router_cfg.pools}
    assert by_value.pop(None) == f"pool-{router_cfg.fallback_pool.name}"  # catch-all → largest pool
    assert all(values[v] == svc for v, svc in by_value.items()) and by_value


def _envoy_ext_proc() -> dict[str, Any]:
    envoy = yaml.safe_load((REPO / "envoy" / "envoy.yaml").read_text())
    hcm = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    (ext,) = [f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.ext_proc"]
    return dict(ext["typed_config"])


def test_istio_envoyfilter_is_valid_envoy_config(
    docs: dict[Key, dict[str, Any]], router_cfg: RouterConfig
) -> None:
    from envoy.extensions.filters.http.ext_proc.v3 import ext_proc_pb2
    from envoy.extensions.filters.network.http_connection_manager.v3 import http_connection_manager_pb2
    from envoy.extensions.http.early_header_mutation.header_mutation.v3 import header_mutation_pb2

    ef = docs[("EnvoyFilter", "istio-system", "tbr-ext-proc")]
    patches = {p["applyTo"]: p for p in ef["spec"]["configPatches"]}
    http = patches["HTTP_FILTER"]
    assert (
        http["match"]["listener"]["filterChain"]["filter"]["subFilter"]["name"] == "envoy.filters.http.router"
    )
    assert http["patch"]["operation"] == "INSERT_BEFORE"
    typed = dict(http["patch"]["value"]["typed_config"])
    assert typed.pop("@type").endswith("envoy.extensions.filters.http.ext_proc.v3.ExternalProcessor")
    msg = json_format.ParseDict(typed, ext_proc_pb2.ExternalProcessor())  # unknown field → error
    # Same behaviour as the tested envoy/envoy.yaml in the two-message design (Istio's routes
    # match the routing header, so the router must see the request headers and answer the body
    # with it; envoy/README.md): only the header phases differ.
    tested = json_format.ParseDict(
        {
            k: v
            for k, v in _envoy_ext_proc().items()
            if k not in ("@type", "request_attributes", "metadata_options")
        },
        ext_proc_pb2.ExternalProcessor(),
    )
    mode = tested.processing_mode
    assert (mode.request_header_mode, mode.response_header_mode) == (mode.SKIP, mode.SKIP)
    mode.request_header_mode = mode.response_header_mode = mode.SEND
    assert msg.processing_mode == mode
    assert msg.allow_mode_override and msg.failure_mode_allow == tested.failure_mode_allow
    assert msg.message_timeout == tested.message_timeout
    # Istio's cluster name for the router Service and port.
    _, port, _, fqdn = msg.grpc_service.envoy_grpc.cluster_name.split("|")
    name, ns = fqdn.split(".")[:2]
    assert service_port(docs, ns, name, int(port))["targetPort"] == "grpc"

    hcm = dict(patches["NETWORK_FILTER"]["patch"]["value"]["typed_config"])
    hcm.pop("@type")
    parsed = json_format.ParseDict(hcm, http_connection_manager_pb2.HttpConnectionManager())
    (early,) = parsed.early_header_mutation_extensions
    mutation = header_mutation_pb2.HeaderMutation()
    early.typed_config.Unpack(mutation)
    removed = [m.remove for m in mutation.mutations]
    assert removed[0] == router_cfg.routing_header
    assert {"x-envoy-retry-on", "x-envoy-max-retries", "x-envoy-upstream-rq-timeout-ms"} <= set(removed)
    assert parsed.use_remote_address.value is True and parsed.xff_num_trusted_hops == 0  # issue 34, item 2
    assert "xff_num_trusted_hops" in hcm  # set explicitly, not left to the default


def test_istio_virtualservice_routes_by_router_header(
    docs: dict[Key, dict[str, Any]], router_cfg: RouterConfig
) -> None:
    vs = docs[("VirtualService", "tbr", "llm")]
    for gw in vs["spec"]["gateways"]:
        assert ("Gateway", "tbr", gw) in docs
    routes = vs["spec"]["http"]
    for r in routes:
        (dest,) = r["route"]
        name, ns = dest["destination"]["host"].split(".")[:2]
        service_port(docs, ns, name, dest["destination"]["port"]["number"])
    short = router_cfg.pools_by_size[0]
    assert routes[0]["match"][0]["headers"] == {router_cfg.routing_header: {"exact": short.header_value}}
    assert routes[0]["route"][0]["destination"]["host"].startswith(f"pool-{short.name}.")
    assert "match" not in routes[-1]
    assert routes[-1]["route"][0]["destination"]["host"].startswith(f"pool-{router_cfg.fallback_pool.name}.")
