"""Check at start that each pool's configured ``max_model_len`` is what its vLLM server serves.

The router routes by ``pools[].max_model_len``; a pool started with another ``--max-model-len``
makes it misroute silently: a smaller real limit turns requests into vLLM 400s (prompt over the
limit) or, since vLLM 0.32 clamps ``max_tokens`` to what is left, into 200s cut short with
``finish_reason: "length"``; a larger one wastes the pool. vLLM's ``GET /v1/models`` reports the
served limit (``data[].max_model_len``, tokens), so the router compares the two once at start,
for every pool with a ``metrics_url`` (``/v1/models`` is read from the same server).

A disagreement is logged as a warning and shown as ``tbr_pool_config_mismatch{pool} = 1``
(0 = agrees; absent = not checked yet or the server did not answer). It does not stop the router:
the configuration stays the operator's call.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import httpx
from prometheus_client import CollectorRegistry, Gauge

from extproc.config import PoolConfig

__all__ = ["PoolCheckMetrics", "PoolLimitCheck", "check_pool_limits", "models_url", "served_max_model_len"]

log = logging.getLogger(__name__)


class PoolCheckMetrics:
    """``tbr_pool_config_mismatch{pool}`` on the router's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.mismatch = Gauge(
            "tbr_pool_config_mismatch",
            "1 when the pool's configured max_model_len differs from the max_model_len its vLLM "
            "server reports on /v1/models (checked at start), 0 when they agree.",
            ["pool"],
            registry=registry,
        )


@dataclass(frozen=True)
class PoolLimitCheck:
    """Outcome for one pool: ``configured_tokens`` (router config), ``served_tokens`` (vLLM's
    ``/v1/models``; None when it never answered), ``agrees``."""

    pool: str
    configured_tokens: int
    served_tokens: int | None

    @property
    def agrees(self) -> bool | None:
        """True/False once the server answered, None otherwise."""
        return None if self.served_tokens is None else self.served_tokens == self.configured_tokens


def models_url(metrics_url: str) -> str:
    """``/v1/models`` on the server of ``metrics_url`` (``http://h:p/metrics`` → ``http://h:p/v1/models``)."""
    parts = urlsplit(metrics_url)
    return urlunsplit((parts.scheme, parts.netloc, "/v1/models", "", ""))


def served_max_model_len(models_json: object) -> int | None:
    """The largest ``max_model_len`` (tokens) in a vLLM ``/v1/models`` body (one per served name;
    LoRA adapters share the base limit); None when the body has none."""
    if not isinstance(models_json, dict) or not isinstance(models_json.get("data"), list):
        return None
    limits = [
        m["max_model_len"]
        for m in models_json["data"]
        if isinstance(m, dict) and isinstance(m.get("max_model_len"), int)
    ]
    return max(limits) if limits else None


async def _served(client: httpx.AsyncClient, url: str, attempts: int, interval_s: float) -> int | None:
    for attempt in range(attempts):
        try:
            resp = await client.get(url, timeout=2.0)
            if resp.status_code == 200:
                return served_max_model_len(resp.json())
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("pool limit check %s: %s", url, exc)
        if attempt + 1 < attempts:
            await asyncio.sleep(interval_s)
    return None


async def check_pool_limits(
    pools: list[PoolConfig] | tuple[PoolConfig, ...],
    client: httpx.AsyncClient,
    metrics: PoolCheckMetrics,
    *,
    attempts: int = 30,
    interval_s: float = 2.0,
) -> list[PoolLimitCheck]:
    """Compare every pool's ``max_model_len`` with its server's ``/v1/models`` (pools with a
    ``metrics_url``), retrying a server that is not up yet ``attempts`` times every ``interval_s``;
    sets ``tbr_pool_config_mismatch`` and logs a warning per disagreement. Never raises."""
    targets = [p for p in pools if p.metrics_url]
    served = await asyncio.gather(
        *(_served(client, models_url(p.metrics_url or ""), attempts, interval_s) for p in targets)
    )
    out = []
    for pool, tokens in zip(targets, served, strict=True):
        check = PoolLimitCheck(pool.name, pool.max_model_len, tokens)
        out.append(check)
        if check.agrees is None:
            log.warning(
                "pool %s: could not read max_model_len from %s", pool.name, models_url(pool.metrics_url or "")
            )
            continue
        metrics.mismatch.labels(pool.name).set(0 if check.agrees else 1)
        if not check.agrees:
            log.warning(
                "pool %s: configured max_model_len %d tokens but its vLLM server serves %d "
                "(/v1/models); requests routed by the configured limit will be refused or cut short",
                pool.name,
                pool.max_model_len,
                tokens,
            )
    return out
