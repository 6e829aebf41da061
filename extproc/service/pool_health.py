"""Check each pool's vLLM ``GET /health`` and feed :class:`~extproc.core.route.load.LoadTracker` (issue 34).

vLLM's API server answers ``/health`` with 200 while its engine runs. When the engine process dies
the API server stays up, answers 500 to every request and 503 on ``/health`` (vllm-project/vllm
issues 42362 and 39863); a stopped server answers nothing, a killed one refuses connections. (An
engine that is stopped while its API server runs leaves ``/health`` at 200: Envoy's streaming
idle timeout, not this check, ends its streams; envoy/README.md, "Timeouts".) Each
check becomes a :class:`~extproc.core.route.load.PoolHealth` verdict: ``healthy`` (200, up), or down with
the reason ``http_503``, ``http_500``, ``http_other`` (another status), ``timeout`` (no answer in
``pool_health.check_timeout_s``) or ``unreachable`` (refused, reset, DNS). The routing policy treats
a pool that is down as saturated (:mod:`extproc.core.route.policy`); the next 200 brings it back.

Targets: every pool with a ``health_url``, else ``/health`` on its ``metrics_url`` server; pools with
neither are never checked (always up). Read at start, like the ``/metrics`` scrape.

Metrics: ``tbr_pool_health_checks_total{pool,outcome}`` here; ``tbr_pool_up{pool}`` and
``tbr_pool_health_reason{pool,reason}`` are exported from the tracker at scrape time
(:class:`extproc.service.load_metrics.LoadCollector`).
"""

from __future__ import annotations

import logging
from urllib.parse import urlsplit, urlunsplit

import httpx
from prometheus_client import CollectorRegistry, Counter

from extproc.config import PoolConfig, PoolHealthConfig
from extproc.core.route.load import LoadTracker, PoolHealth
from extproc.service.pool_poller import PoolPoller

__all__ = ["PoolHealthChecker", "PoolHealthMetrics", "classify_status", "health_url_of"]

log = logging.getLogger(__name__)


class PoolHealthMetrics:
    """``tbr_pool_health_checks_total{pool,outcome}`` on the router's registry."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.checks = Counter(
            "tbr_pool_health_checks",
            "Health checks of pool GET /health by outcome (healthy, http_503, http_500, http_other, "
            "timeout, unreachable).",
            ["pool", "outcome"],
            registry=registry,
        )


def health_url_of(pool: PoolConfig) -> str | None:
    """The URL checked for ``pool``: its ``health_url``, else ``/health`` on the ``metrics_url``
    server (scheme and host:port kept), else None (not checked)."""
    if pool.health_url:
        return pool.health_url
    if not pool.metrics_url:
        return None
    parts = urlsplit(pool.metrics_url)
    return urlunsplit((parts.scheme, parts.netloc, "/health", "", ""))


def classify_status(status_code: int) -> str:
    """The verdict label of an HTTP answer to ``GET /health``: ``healthy`` for 200, ``http_503``,
    ``http_500``, else ``http_other``."""
    if status_code == 200:
        return "healthy"
    if status_code in (500, 503):
        return f"http_{status_code}"
    return "http_other"


class PoolHealthChecker(PoolPoller):
    """Periodic ``GET /health`` of every pool that has a health URL (:func:`health_url_of`).

    Args:
        pools: the configured pools.
        cfg: interval and timeout (``pool_health``).
        tracker: receives each verdict (:meth:`LoadTracker.record_health`).
        client: the HTTP client (built and closed by the caller).
        metrics: where check outcomes are counted.
    """

    task_name = "tbr-pool-health"

    def __init__(
        self,
        pools: list[PoolConfig] | tuple[PoolConfig, ...],
        cfg: PoolHealthConfig,
        tracker: LoadTracker,
        client: httpx.AsyncClient,
        metrics: PoolHealthMetrics,
    ) -> None:
        targets = [(p.name, url) for p in pools if (url := health_url_of(p)) is not None]
        super().__init__(targets, cfg.check_interval_s)
        self.cfg = cfg
        self.tracker = tracker
        self.client = client
        self.metrics = metrics

    async def check_once(self, pool: str, url: str) -> PoolHealth:
        """Check one pool, record and count the verdict, log a change of state. Never raises."""
        try:
            resp = await self.client.get(url, timeout=self.cfg.check_timeout_s)
        except httpx.TimeoutException:
            reason = "timeout"
        except httpx.HTTPError as exc:
            log.debug("health check of pool %s failed: %s", pool, exc)
            reason = "unreachable"
        else:
            reason = classify_status(resp.status_code)
        verdict = PoolHealth(up=reason == "healthy", reason=reason, at_s=self.tracker.clock())
        before = self.tracker.health(pool)
        self.tracker.record_health(pool, verdict)
        self.metrics.checks.labels(pool, reason).inc()
        if before is None or before.up != verdict.up:
            if verdict.up:
                if before is not None:
                    log.info("pool %s is up again (GET /health 200)", pool)
            else:
                log.warning(
                    "pool %s is down (%s): requests it would get go to the next larger pool", pool, reason
                )
        return verdict

    async def poll_once(self, pool: str, url: str) -> PoolHealth:
        """:meth:`check_once` (the shared loop's step)."""
        return await self.check_once(pool, url)

    def enabled(self) -> bool:
        """Checks run when ``pool_health.enabled`` and some pool has a health URL."""
        return self.cfg.enabled and bool(self.targets)
