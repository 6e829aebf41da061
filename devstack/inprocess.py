"""N pools, the router and Envoy for async tests: stand-in vLLM pools (:mod:`mockpool`) and the
real :class:`extproc.service.app.RouterApp` in the caller's event loop, Envoy (an ``envoy/*.yaml``
of the repository rendered to free loopback ports) as a child process.

Pool ``<name>`` is served to Envoy's cluster ``<name>_pool`` (the naming of ``envoy/envoy.yaml``
and ``envoy/envoy-3pools.yaml``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from devstack.envoy_runner import CLUSTER_EXT_PROC, EnvoyProcess, render_envoy_clusters
from devstack.procs import LOOPBACK, free_port
from extproc.config import parse_config
from extproc.service.app import RouterApp
from mockpool.server import serve_pool
from mockpool.settings import PoolSettings

__all__ = ["InProcessStack", "inprocess_stack", "pool_cluster"]


def pool_cluster(pool: str) -> str:
    """Envoy cluster name of pool ``pool`` (``short`` → ``short_pool``)."""
    return f"{pool}_pool"


@dataclass
class InProcessStack:
    """A running stack: ``base_url`` (OpenAI ``/v1`` through Envoy), ``pools`` (name → base URL of
    the stand-in pool), ``app`` (the in-process router), ``envoy``."""

    base_url: str
    pools: dict[str, str]
    app: RouterApp
    envoy: EnvoyProcess

    async def pool_stats(self, pool: str) -> dict[str, Any]:
        """The stand-in pool's ``GET /admin/stats`` (``running``, ``waiting``, ...)."""
        async with httpx.AsyncClient() as c:
            r = await c.get(f"{self.pools[pool]}/admin/stats")
            r.raise_for_status()
            out: dict[str, Any] = r.json()
            return out

    async def pool_admin(self, pool: str, action: str) -> None:
        """``POST /admin/<action>`` on the stand-in pool (e.g. ``pause``, ``resume``)."""
        async with httpx.AsyncClient() as c:
            (await c.post(f"{self.pools[pool]}/admin/{action}")).raise_for_status()

    async def wait_pool(self, pool: str, *, running: int, waiting: int, timeout_s: float = 10.0) -> None:
        """Poll ``/admin/stats`` until the pool shows ``running`` and ``waiting`` requests.

        Raises:
            TimeoutError: not reached within ``timeout_s`` (the message holds the last stats).
        """
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            s = await self.pool_stats(pool)
            if s["running"] == running and s["waiting"] == waiting:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"pool {pool} stats {s}, wanted running={running} waiting={waiting}")
            await asyncio.sleep(0.02)


def _router_config(
    limits: Mapping[str, int], urls: Mapping[str, str], overrides: Mapping[str, Any], scrape: bool
) -> dict[str, Any]:
    pools_cfg = [
        {
            "name": name,
            "max_model_len": limit,
            "header_value": name,
            **({"metrics_url": f"{urls[name]}/metrics"} if scrape else {}),
        }
        for name, limit in limits.items()
    ]
    raw: dict[str, Any] = {"pools": pools_cfg, "admin": {"enabled": False}}
    for key, value in overrides.items():
        if key == "pools":  # per-pool extra fields by name
            for p in pools_cfg:
                p.update(value.get(p["name"], {}))
        else:
            raw[key] = value
    return raw


@contextlib.asynccontextmanager
async def inprocess_stack(
    work_dir: Path,
    *,
    pool_limits: Mapping[str, int],
    envoy_source: Path,
    router_overrides: Mapping[str, Any] | None = None,
    pool_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    scrape: bool = False,
) -> AsyncIterator[InProcessStack]:
    """Start the pools (name → ``max_model_len`` tokens), the router, then Envoy on
    ``envoy_source``; stop them in reverse order.

    Args:
        work_dir: where the rendered Envoy config and Envoy's log go.
        pool_limits: pool name → ``max_model_len``; the router's pools, in this order.
        envoy_source: the repository's Envoy config (``envoy/envoy.yaml``, ``envoy/envoy-3pools.yaml``).
        router_overrides: top-level router config keys; ``pools`` maps pool name → extra fields.
        pool_overrides: pool name → extra :class:`mockpool.settings.PoolSettings` fields.
        scrape: give each router pool its ``metrics_url`` (the pool's ``/metrics``).

    Raises:
        devstack.procs.StartupError: Envoy did not start; pydantic.ValidationError: a bad config.
    """
    async with contextlib.AsyncExitStack() as stack:
        urls: dict[str, str] = {}
        for name, limit in pool_limits.items():
            settings = PoolSettings(name=name, max_model_len=limit, **(pool_overrides or {}).get(name, {}))
            urls[name] = await stack.enter_async_context(serve_pool(settings))
        raw = _router_config(pool_limits, urls, router_overrides or {}, scrape)
        app = await stack.enter_async_context(RouterApp(parse_config(raw), grpc_port=0))
        listener, admin = free_port(), free_port()
        clusters = {CLUSTER_EXT_PROC: app.grpc_port}
        for name, url in urls.items():
            clusters[pool_cluster(name)] = int(url.rsplit(":", 1)[1])
        cfg = render_envoy_clusters(envoy_source, listener=listener, admin=admin, clusters=clusters)
        cfg_path = work_dir / envoy_source.name
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        envoy = EnvoyProcess(cfg_path, admin_port=admin, log_path=work_dir / "envoy.log")
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield InProcessStack(f"http://{LOOPBACK}:{listener}/v1", urls, app, envoy)
