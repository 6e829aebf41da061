"""Three-pool loopback stack for the pool-aware tests: mock vLLM pools and the router in this event
loop, the real Envoy (envoy/envoy-3pools.yaml rendered to free ports) as a child process."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from devstack.envoy_runner import EnvoyProcess, render_envoy_clusters
from devstack.procs import free_port
from extproc.config import parse_config
from extproc.service.app import RouterApp
from mockpool.server import serve_pool
from mockpool.settings import PoolSettings

REPO = Path(__file__).resolve().parents[2]
ENVOY_3POOLS = REPO / "envoy" / "envoy-3pools.yaml"
POOL_CLUSTERS = {"short": "short_pool", "medium": "medium_pool", "long": "long_pool"}


def render_envoy(source: Path, *, listener: int, admin: int, clusters: dict[str, int]) -> dict[str, Any]:
    """The bootstrap with admin, the listener and each named cluster's single endpoint on loopback
    (clusters become STATIC); the demo's renderer, for any number of pools."""
    return render_envoy_clusters(source, listener=listener, admin=admin, clusters=clusters)


@dataclass
class Stack:
    """A running stack: ``base_url`` (OpenAI ``/v1`` through Envoy), ``pools`` (name → base URL of
    the mock pool), ``app`` (the in-process router), ``envoy``."""

    base_url: str
    pools: dict[str, str]
    app: RouterApp
    envoy: EnvoyProcess

    async def pool_stats(self, pool: str) -> dict[str, Any]:
        async with httpx.AsyncClient() as c:
            r = await c.get(f"{self.pools[pool]}/admin/stats")
            r.raise_for_status()
            out: dict[str, Any] = r.json()
            return out

    async def pool_admin(self, pool: str, action: str) -> None:
        async with httpx.AsyncClient() as c:
            (await c.post(f"{self.pools[pool]}/admin/{action}")).raise_for_status()

    async def wait_pool(self, pool: str, *, running: int, waiting: int, timeout_s: float = 10.0) -> None:
        """Poll /admin/stats until the pool shows ``running`` and ``waiting`` requests."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        while True:
            s = await self.pool_stats(pool)
            if s["running"] == running and s["waiting"] == waiting:
                return
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"pool {pool} stats {s}, wanted running={running} waiting={waiting}")
            await asyncio.sleep(0.02)


POOL_LIMITS = {"short": 4096, "medium": 16384, "long": 65536}


@contextlib.asynccontextmanager
async def three_pool_stack(
    work_dir: Path,
    *,
    router_overrides: dict[str, Any],
    pool_overrides: dict[str, dict[str, Any]] | None = None,
    scrape: bool = False,
    pool_limits: dict[str, int] | None = None,
    envoy_source: Path = ENVOY_3POOLS,
) -> AsyncIterator[Stack]:
    """Start pools (short 4096, medium 16384, long 65536 tokens by default), the router, then Envoy.

    ``pool_limits`` / ``envoy_source`` select another pool set and Envoy config (e.g. the two-pool
    ``envoy/envoy.yaml`` with short 8192 and long 65536).

    ``router_overrides`` are merged into the router config (top-level keys); with ``scrape`` each
    pool gets its ``metrics_url``. ``pool_overrides[name]`` are extra :class:`PoolSettings` fields.
    """
    pool_overrides = pool_overrides or {}
    limits = POOL_LIMITS if pool_limits is None else pool_limits
    async with contextlib.AsyncExitStack() as stack:
        urls: dict[str, str] = {}
        for name, limit in limits.items():
            settings = PoolSettings(name=name, max_model_len=limit, **pool_overrides.get(name, {}))
            urls[name] = await stack.enter_async_context(serve_pool(settings))
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
        for key, value in router_overrides.items():
            if key == "pools":  # per-pool extra fields by name
                for p in pools_cfg:
                    p.update(value.get(p["name"], {}))
            else:
                raw[key] = value
        app = await stack.enter_async_context(RouterApp(parse_config(raw), grpc_port=0))
        listener, admin = free_port(), free_port()
        clusters = {"ext_proc": app.grpc_port}
        for name, url in urls.items():
            clusters[POOL_CLUSTERS[name]] = int(url.rsplit(":", 1)[1])
        cfg = render_envoy(envoy_source, listener=listener, admin=admin, clusters=clusters)
        cfg_path = work_dir / envoy_source.name
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        envoy = EnvoyProcess(cfg_path, admin_port=admin, log_path=work_dir / "envoy.log")
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield Stack(f"http://127.0.0.1:{listener}/v1", urls, app, envoy)


ROUTER_2MODELS = REPO / "config" / "router-2models.yaml"
ENVOY_2MODELS = REPO / "envoy" / "envoy-2models.yaml"
MODEL_POOLS: dict[str, dict[str, Any]] = {
    # pool name → stand-in pool settings: the Qwen3 pair and the Llama-3 pair, each serving only its
    # model (strict: another model's request gets vLLM's 404, so a cross-model misroute fails loudly)
    "qwen-short": {"tokenizer": "qwen3", "served_model_names": ("Qwen/Qwen3-8B",)},
    "qwen-long": {"tokenizer": "qwen3", "served_model_names": ("Qwen/Qwen3-8B",)},
    "llama-short": {"tokenizer": "llama3", "served_model_names": ("meta-llama/Llama-3.1-8B-Instruct",)},
    "llama-long": {"tokenizer": "llama3", "served_model_names": ("meta-llama/Llama-3.1-8B-Instruct",)},
}


@contextlib.asynccontextmanager
async def model_sets_stack(
    work_dir: Path,
    *,
    router_config: Path = ROUTER_2MODELS,
    envoy_source: Path = ENVOY_2MODELS,
    pool_overrides: dict[str, dict[str, Any]] | None = None,
    router_overrides: dict[str, Any] | None = None,
) -> AsyncIterator[Stack]:
    """The two-model stack: config/router-2models.yaml's four pools (limits from the file) as strict
    stand-in pools, the router in this loop, and envoy/envoy-2models.yaml (pool ``a-b`` ↔ cluster
    ``a_b_pool``)."""
    raw: dict[str, Any] = yaml.safe_load(await asyncio.to_thread(router_config.read_text, encoding="utf-8"))
    raw["admin"] = {"enabled": False}
    raw["server"] = {"grace_period_s": 0.5}
    raw.update(router_overrides or {})
    async with contextlib.AsyncExitStack() as stack:
        urls: dict[str, str] = {}
        for pool in raw["pools"]:
            extra = {
                **MODEL_POOLS[pool["name"]],
                "strict_model": True,
                **(pool_overrides or {}).get(pool["name"], {}),
            }
            settings = PoolSettings(name=pool["name"], max_model_len=pool["max_model_len"], **extra)
            urls[pool["name"]] = await stack.enter_async_context(serve_pool(settings))
        app = await stack.enter_async_context(RouterApp(parse_config(raw), grpc_port=0))
        listener, admin = free_port(), free_port()
        clusters = {"ext_proc": app.grpc_port}
        for name, url in urls.items():
            clusters[name.replace("-", "_") + "_pool"] = int(url.rsplit(":", 1)[1])
        cfg = render_envoy(envoy_source, listener=listener, admin=admin, clusters=clusters)
        cfg_path = work_dir / envoy_source.name
        cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        envoy = EnvoyProcess(cfg_path, admin_port=admin, log_path=work_dir / "envoy.log")
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield Stack(f"http://127.0.0.1:{listener}/v1", urls, app, envoy)
