"""deploy/two-models/ and compose/docker-compose.2models.yaml: two models, each with its own short
and long pool, consistent with config/router-2models.yaml and envoy/envoy-2models.yaml."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from extproc.config import RouterConfig, load_config, parse_config
from tests.deploy.test_compose import run_compose
from tests.service.contracts import REPO

TWO = REPO / "deploy" / "two-models"
REFERENCE = load_config(REPO / "config" / "router-2models.yaml")


def docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((TWO / name).read_text(encoding="utf-8")) if d]


def arg(args: list[str], flag: str) -> str:
    return args[args.index(flag) + 1]


def same_sets(cfg: RouterConfig) -> None:
    assert [p.model_dump() for p in cfg.pools] == [p.model_dump() for p in REFERENCE.pools]
    assert cfg.models == REFERENCE.models and cfg.default_model_set == REFERENCE.default_model_set


def served(cfg: RouterConfig) -> dict[str, str]:
    """pool → the one exact model name of its set."""
    return {pool: ms.models[0] for ms in cfg.models for pool in ms.pools}


def test_k8s_router_config_pools_and_route() -> None:
    (cm,) = docs("router.yaml")
    assert (cm["kind"], cm["metadata"]["name"]) == ("ConfigMap", "tbr-router-config")
    cfg = parse_config(yaml.safe_load(cm["data"]["router.yaml"]))
    same_sets(cfg)
    limits = {p.name: p.max_model_len for p in cfg.pools}
    deployments = {d["metadata"]["name"]: d for d in docs("pools.yaml") if d["kind"] == "Deployment"}
    services = {d["metadata"]["name"]: d for d in docs("pools.yaml") if d["kind"] == "Service"}
    assert set(deployments) == set(services) == {f"pool-{n}" for n in limits}
    for pool, model in served(cfg).items():
        (container,) = deployments[f"pool-{pool}"]["spec"]["template"]["spec"]["containers"]
        assert int(arg(container["args"], "--max-model-len")) == limits[pool]
        assert arg(container["args"], "--served-model-name") == model
    (route,) = docs("httproute.yaml")
    by_header = {}
    for rule in route["spec"]["rules"]:
        headers = rule["matches"][0].get("headers") or [{"value": None}]
        by_header[headers[0]["value"]] = rule["backendRefs"][0]["name"]
    assert by_header == {
        **{p.header_value: f"pool-{p.name}" for p in cfg.pools},
        None: f"pool-{cfg.fallback_pool.name}",
    }


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
        sock = endpoints[pool.replace("-", "_") + "_pool"]
        assert sock == {"address": f"pool-{pool}", "port_value": int(arg(cmd, "--port"))}
