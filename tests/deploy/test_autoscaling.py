"""deploy/components/autoscaling-{keda,hpa} (issue 33, item 2): each overlay with a pool-short and a
pool-long builds with either component added, every object validates (KEDA's ScaledObject against
its vendored CRD schema, the HPA with kubernetes-validate), and the targets are the router's advice."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from extproc.config import parse_config
from tests.deploy.test_kustomize import OVERLAYS, kubectl, render, validation_errors
from tests.service.contracts import REPO

COMPONENTS = ("autoscaling-keda", "autoscaling-hpa")
POOL_OVERLAYS = [o for o in OVERLAYS if {"pool-short", "pool-long"} <= {x["metadata"]["name"] for x in render(o) if x["kind"] == "Deployment"}]  # fmt: skip


def render_with(overlay: str, component: str, tmp: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize`` of a kustomization that adds ``component`` to ``overlay``."""
    root = tmp / f"{overlay}-{component}"
    root.mkdir()
    (root / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                # kustomize refuses absolute paths: relative to the temporary root
                "resources": [os.path.relpath(REPO / "deploy" / "overlays" / overlay, root)],
                "components": [os.path.relpath(REPO / "deploy" / "components" / component, root)],
            }
        )
    )
    proc = subprocess.run([kubectl(), "kustomize", str(root)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return [d for d in yaml.safe_load_all(proc.stdout) if d]


def test_overlays_with_pools_to_scale() -> None:
    assert POOL_OVERLAYS == ["envoy-gateway", "istio", "standalone-envoy"]


@pytest.mark.parametrize("component", COMPONENTS)
@pytest.mark.parametrize("overlay", POOL_OVERLAYS)
def test_component_builds_and_validates(overlay: str, component: str, tmp_path: Path) -> None:
    objs = render_with(overlay, component, tmp_path)
    errors = [err for o in objs for err in validation_errors(o)]
    assert not errors, "\n".join(errors)
    deployments = {o["metadata"]["name"] for o in objs if o["kind"] == "Deployment"}
    kind = "ScaledObject" if component == "autoscaling-keda" else "HorizontalPodAutoscaler"
    scalers = [o for o in objs if o["kind"] == kind]
    assert (
        {s["spec"]["scaleTargetRef"]["name"] for s in scalers} == {"pool-short", "pool-long"} <= deployments
    )
    for s in scalers:
        pool = s["spec"]["scaleTargetRef"]["name"].removeprefix("pool-")
        if kind == "ScaledObject":
            (trig,) = s["spec"]["triggers"]
            assert trig["type"] == "prometheus" and trig["metricType"] == "AverageValue"
            assert trig["metadata"]["threshold"] == "1"
            assert f'tbr_pool_desired_instances{{namespace="tbr",pool="{pool}"}}' in trig["metadata"]["query"]
            behavior = s["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
        else:
            (m,) = s["spec"]["metrics"]
            assert m["external"]["metric"] == {
                "name": "tbr_pool_desired_instances",
                "selector": {"matchLabels": {"pool": pool}},
            }
            assert m["external"]["target"] == {"type": "AverageValue", "averageValue": "1"}
            behavior = s["spec"]["behavior"]
        assert behavior["scaleDown"]["stabilizationWindowSeconds"] >= 300  # no flapping after a dip


def test_the_deployed_router_exports_the_advice_the_scalers_read() -> None:
    """base/router.yaml turns the advice on, for the pools the scalers name."""
    (cm,) = [
        o
        for o in render("standalone-envoy")
        if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "tbr-router-config"
    ]
    cfg = parse_config(yaml.safe_load(cm["data"]["router.yaml"]))
    assert cfg.advice.enabled
    assert {p.name for p in cfg.pools} == {"short", "long"}


def test_a_bad_scaled_object_is_caught(tmp_path: Path) -> None:
    objs = render_with("standalone-envoy", "autoscaling-keda", tmp_path)
    so = json.loads(json.dumps(next(o for o in objs if o["kind"] == "ScaledObject")))
    so["spec"]["minReplicaCount"] = "one"
    assert validation_errors(so)
    so = json.loads(json.dumps(next(o for o in objs if o["kind"] == "ScaledObject")))
    so["spec"]["triggers"][0]["metadta"] = so["spec"]["triggers"][0].pop("metadata")
    assert validation_errors(so)
