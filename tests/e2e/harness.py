"""What the end-to-end tests share: the repository paths, the real-prompt data dir, and the
three-pool stack (devstack's in-process stack on envoy/envoy-3pools.yaml)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import yaml

from devstack.envoy_runner import EnvoyProcess
from devstack.inprocess import InProcessStack, inprocess_stack
from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.request.request_body import parse_request_body
from extproc.service.app import RouterApp
from tests.shared_data import SHARED_DATA
from tests.waiting import until, until_async

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = SHARED_DATA
ENVOY_3POOLS = REPO / "envoy" / "envoy-3pools.yaml"
POOL_LIMITS = {"short": 4096, "medium": 16384, "long": 65536}

Stack = InProcessStack


def content_kind(text: str, model: str = "Qwen/Qwen3-8B") -> str:
    """The content kind of the key a one-message chat request of ``text`` to ``model`` learns under
    (the router's shipped estimator)."""
    cal = CalibrationConfig()
    est = Estimator(estimator=EstimatorConfig(), calibration=cal, store=InMemoryRatioStore.from_config(cal))
    body = orjson.dumps({"model": model, "messages": [{"role": "user", "content": text}]})
    return est.estimate(parse_request_body(body, "chat")).key[1]


def stale_ratio_snapshot(
    work_dir: Path, text: str, *, mean_ratio: float = 40.0, model: str = "Qwen/Qwen3-8B"
) -> Path:
    """Write ``work_dir/ratios.json``: a ratio snapshot claiming a model-to-true ratio of
    ``mean_ratio`` (warm, 50 samples, no deviation; the router routes it at its plausibility ceiling)
    for ``text``'s content kind under ``model``, so a restored router budgets that text far too low. The tests use it to force an underestimate; returns the file's path."""
    entry = {
        "model": model,
        "category": content_kind(text, model),
        "mean_ratio": mean_ratio,
        "dev_ratio": 0.0,
    }
    path = work_dir / "ratios.json"
    path.write_bytes(orjson.dumps({"version": 2, "ratios": [{**entry, "samples": 50}]}))
    return path


def data_dir() -> Path | None:
    """``../shared/data`` when present (tests then use real prompts), else None (built-in text)."""
    return DATA_DIR if (DATA_DIR / "text").is_dir() else None


@contextlib.asynccontextmanager
async def three_pool_stack(
    work_dir: Path,
    *,
    router_overrides: dict[str, Any],
    pool_overrides: dict[str, dict[str, Any]] | None = None,
    scrape: bool = False,
    pool_limits: dict[str, int] | None = None,
    envoy_source: Path = ENVOY_3POOLS,
) -> AsyncIterator[InProcessStack]:
    """Pools short 4096, medium 16384, long 65536 tokens (or ``pool_limits``), the router, and
    Envoy on envoy/envoy-3pools.yaml (or ``envoy_source``); see
    :func:`devstack.inprocess.inprocess_stack` for the arguments."""
    async with inprocess_stack(
        work_dir,
        pool_limits=POOL_LIMITS if pool_limits is None else pool_limits,
        envoy_source=envoy_source,
        router_overrides=router_overrides,
        pool_overrides=pool_overrides,
        scrape=scrape,
    ) as stack:
        yield stack


@dataclass(frozen=True)
class RouterEndpoints:
    """Where the e2e router listens and logs: its gRPC port, admin URL, decision log."""

    grpc_port: int
    admin_url: str
    decision_log: Path


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
    work_dir: Path, *, pool_overrides: dict[str, dict[str, Any]] | None = None
) -> AsyncIterator[InProcessStack]:
    """The two-model stack: config/router-2models.yaml (its pools, model sets and estimator) with
    strict stand-in pools, the router in this loop, and envoy/envoy-2models.yaml."""
    raw: dict[str, Any] = yaml.safe_load(await asyncio.to_thread(ROUTER_2MODELS.read_text, encoding="utf-8"))
    limits = {p["name"]: p["max_model_len"] for p in raw.pop("pools")}
    for key in ("server", "admin"):
        raw.pop(key, None)
    raw["server"] = {"grace_period_s": 0.5}
    pools = {
        name: {**MODEL_POOLS[name], "strict_model": True, **(pool_overrides or {}).get(name, {})}
        for name in limits
    }
    async with inprocess_stack(
        work_dir, pool_limits=limits, envoy_source=ENVOY_2MODELS, router_overrides=raw, pool_overrides=pools
    ) as stack:
        yield stack


async def wait_for_metric(
    stack: InProcessStack, name: str, labels: dict[str, str], want: float, timeout_s: float = 5.0
) -> float | None:
    """The router's metric ``name{labels}`` once it reaches ``want``.

    Responses are read off the request path (envoy/envoy.yaml's observability filter): the client
    can have its whole answer a moment before the router has read the end of it.

    Raises:
        AssertionError: ``want`` not reached within ``timeout_s``.
    """

    def value() -> float | None:
        return stack.app.metrics.registry.get_sample_value(name, labels)

    await until_async(lambda: (value() or 0.0) >= want, timeout_s=timeout_s, what=f"{name}{labels} >= {want}")
    return value()


def decision_records(
    log_path: Path | None,
    request_id: str,
    *,
    complete: Callable[[list[dict[str, Any]]], bool] = bool,
    timeout_s: float = 10.0,
) -> list[dict[str, Any]]:
    """The router's decision-log records of ``request_id`` (in log order) once ``complete(records)``
    holds (default: there is one). A record is written when its stream ends and the log is flushed
    every ``decision_log_flush_interval_s``; a last line still being written is not read.

    Raises:
        AssertionError: no decision log (``StackOptions(decision_log=True)``), or not complete
            within ``timeout_s``.
    """
    assert log_path is not None, "the stack writes no decision log"
    found: list[dict[str, Any]] = []

    def written() -> bool:
        data = log_path.read_bytes() if log_path.exists() else b""
        lines = data.splitlines() if data.endswith(b"\n") else data.splitlines()[:-1]
        found[:] = [r for r in map(orjson.loads, lines) if r.get("request_id") == request_id]
        return complete(found)

    until(written, timeout_s=timeout_s, what=f"the decision record of {request_id}")
    return found


def envoy_streams_started(envoy: EnvoyProcess) -> int:
    """How many ext_proc streams Envoy has opened to the router, over all its ext_proc filters
    (routing, off-path observability, unrouted): ``*.ext_proc.*.streams_started`` summed."""
    stats = envoy.stats(".streams_started")
    return sum(v for name, v in stats.items() if ".ext_proc." in name and name.endswith(".streams_started"))


def router_streams_ended(app: RouterApp) -> float:
    """How many ext_proc streams the router has ended and counted (``tbr_streams_total``, every end)."""
    return sum(
        s.value
        for family in app.metrics.registry.collect()
        if family.name == "tbr_streams"
        for s in family.samples
        if s.name == "tbr_streams_total"
    )


async def router_caught_up(stack: InProcessStack, timeout_s: float = 20.0) -> None:
    """Wait until the router has ended and counted every ext_proc stream Envoy opened to it.

    Answers are read off the request path (envoy/envoy.yaml's observability filter): the client
    can have its whole answer before the router has read it. Once the two counts agree, every
    answer so far has been read, learned from and counted, and no more learning is on its way:
    the event to wait for instead of an interval.

    Raises:
        AssertionError: the counts did not agree within ``timeout_s``.
    """

    async def agree() -> bool:
        started = await asyncio.to_thread(envoy_streams_started, stack.envoy)
        return router_streams_ended(stack.app) >= started

    await until_async(agree, timeout_s=timeout_s, what="the router ending every stream Envoy opened")


STREAM_MATCH = {"filter": "tbr", "path": [{"key": "stream"}], "value": {"bool_match": True}}
"""The route matcher of a request the router marked as streaming (``tbr.stream: true``)."""


def plain_routes(routes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``routes`` without their streaming twins (issue 34, item 8), after checking each twin: the
    route ``<name>_streaming`` is ``<name>`` with :data:`STREAM_MATCH` added to its match and the
    streaming idle timeout (60 s); everything else (clusters, retries) the same."""
    by_name = {r["name"]: r for r in routes}
    plain = [r for r in routes if not r["name"].endswith("_streaming")]
    for twin in routes:
        if not twin["name"].endswith("_streaming"):
            continue
        base = by_name[twin["name"].removesuffix("_streaming")]
        assert routes.index(twin) < routes.index(base), twin["name"]  # matched first
        want_md = [*base["match"].get("dynamic_metadata", []), STREAM_MATCH]
        assert twin["match"] == {**base["match"], "dynamic_metadata": want_md}, twin["name"]
        assert twin["route"] == {**base["route"], "idle_timeout": "60s"}, twin["name"]
    return plain


def routes_of(cfg: dict[str, Any]) -> list[dict[str, Any]]:
    """The route list of an Envoy bootstrap of this repository (one listener, one virtual host)."""
    hcm = cfg["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    routes: list[dict[str, Any]] = hcm["route_config"]["virtual_hosts"][0]["routes"]
    return routes


def fast_stream_envoy(path: Path, idle_s: int) -> Path:
    """envoy/envoy.yaml with its streaming routes' idle timeout at ``idle_s`` seconds (shipped: 60 s),
    written to ``path`` (for tests that end a stopped stream in seconds); returns ``path``."""
    cfg: dict[str, Any] = yaml.safe_load((REPO / "envoy" / "envoy.yaml").read_text(encoding="utf-8"))
    streaming = [r for r in routes_of(cfg) if r["name"].endswith("_streaming")]
    assert [r["route"]["idle_timeout"] for r in streaming] == ["60s", "60s"]
    for r in streaming:
        r["route"]["idle_timeout"] = f"{idle_s}s"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    return path
