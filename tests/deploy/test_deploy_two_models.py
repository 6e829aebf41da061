"""deploy/overlays/two-models and compose/docker-compose.2models.yaml: two models, each with its own short
and long pool, consistent with config/router-2models.yaml and envoy/envoy-2models.yaml."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from extproc.config import RouterConfig, load_config, parse_config
from tests.deploy.test_compose import run_compose
from tests.deploy.test_kustomize import render
from tests.service.contracts import REPO

OVERLAY = REPO / "deploy" / "overlays" / "two-models"
REFERENCE = load_config(REPO / "config" / "router-2models.yaml")


def arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def same_sets(cfg: RouterConfig) -> None:
    assert [p.model_dump() for p in cfg.pools] == [p.model_dump() for p in REFERENCE.pools]
    assert cfg.models == REFERENCE.models and cfg.default_model_set == REFERENCE.default_model_set


def served(cfg: RouterConfig) -> dict[str, str]:
    """pool → the one exact model name of its set."""
    return {pool: ms.models[0] for ms in cfg.models for pool in ms.pools}


def test_k8s_overlay_router_config_pools_and_envoy() -> None:
    objs = render("two-models")
    by = {(d["kind"], d["metadata"]["name"]): d for d in objs}
    cfg = parse_config(yaml.safe_load(by[("ConfigMap", "tbr-router-config")]["data"]["router.yaml"]))
    same_sets(cfg)
    assert cfg.calibration.redis_url is not None  # the base's shared store is kept
    limits = {p.name: p.max_model_len for p in cfg.pools}
    pools = {name for kind, name in by if kind == "Deployment" and name.startswith("pool-")}
    assert pools == {f"pool-{n}" for n in limits}  # the base's pool-short/pool-long are gone
    (envoy_cm,) = [
        d for (kind, name), d in by.items() if kind == "ConfigMap" and name.startswith("envoy-config")
    ]
    envoy_text = envoy_cm["data"]["envoy.yaml"]
    assert envoy_text == (REPO / "envoy" / "envoy-2models.yaml").read_text(encoding="utf-8")
    envoy = yaml.safe_load(envoy_text)
    endpoints = {
        c["name"]: c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
            "socket_address"
        ]
        for c in envoy["static_resources"]["clusters"]
    }
    for pool, model in served(cfg).items():
        (container,) = by[("Deployment", f"pool-{pool}")]["spec"]["template"]["spec"]["containers"]
        assert int(arg(container["args"], "--max-model-len")) == limits[pool]
        assert arg(container["args"], "--served-model-name") == model
        (port,) = by[("Service", f"pool-{pool}")]["spec"]["ports"]
        assert endpoints[f"{pool}_pool"] == {"address": f"pool-{pool}", "port_value": port["port"]}
    selector = by[("NetworkPolicy", "tbr-pools")]["spec"]["podSelector"]["matchExpressions"][0]["values"]
    assert set(selector) == pools


def test_compose_two_models(tmp_path: Path) -> None:
    file = REPO / "compose" / "docker-compose.2models.yaml"
    proc = run_compose("config", "--format", "json", file=file)
    assert proc.returncode == 0, proc.stderr
    services: dict[str, Any] = json.loads(proc.stdout)["services"]
    cfg = load_config(REPO / "compose" / "router-2models.yaml")
    same_sets(cfg)
    assert cfg.calibration.redis_url == "redis://redis:6379/0"
    (vol,) = services["envoy"]["volumes"]
    assert Path(vol["source"]) == REPO / "envoy" / "envoy-2models.yaml"
    envoy = yaml.safe_load((REPO / "envoy" / "envoy-2models.yaml").read_text(encoding="utf-8"))
    endpoints = {
        c["name"]: c["load_assignment"]["endpoints"][0]["lb_endpoints"][0]["endpoint"]["address"][
            "socket_address"
        ]
        for c in envoy["static_resources"]["clusters"]
    }
    limits = {p.name: p.max_model_len for p in cfg.pools}
    for pool, model in served(cfg).items():
        cmd = services[f"pool-{pool}"]["command"]
        assert int(arg(cmd, "--max-model-len")) == limits[pool]
        assert arg(cmd, "--served-model-name") == model and "--strict-model" in cmd
        sock = endpoints[f"{pool}_pool"]
        assert sock == {"address": f"pool-{pool}", "port_value": int(arg(cmd, "--port"))}
