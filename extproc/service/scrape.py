"""Scrape vLLM ``/metrics`` of each pool and feed :class:`~extproc.core.route.load.LoadTracker`.

Metric names (vLLM V1, https://docs.vllm.ai/en/stable/usage/metrics/): the gauges
``vllm:num_requests_waiting`` and ``vllm:kv_cache_usage_perc`` (fraction 0..1; named
``vllm:gpu_cache_usage_perc`` before V1, read as a fallback). A server with several engines
(data parallel) or served model names exposes one sample per label set: waiting requests are
summed, KV usage is averaged.

The HTTP client is built once by the caller and injected (tests pass one aimed at a real server).
A failed scrape keeps the previous values, which then go stale and stop counting
(``spillover.max_staleness_s``).
"""

from __future__ import annotations

import logging
import math

import httpx
from prometheus_client.parser import text_string_to_metric_families

from extproc.config import PoolConfig, SpilloverConfig
from extproc.core.route.load import LoadTracker, PoolSignals
from extproc.service.load_metrics import LoadMetrics
from extproc.service.pool_poller import PoolPoller

__all__ = ["KV_USAGE_METRICS", "WAITING_METRIC", "PoolScraper", "parse_vllm_metrics"]

log = logging.getLogger(__name__)

WAITING_METRIC = "vllm:num_requests_waiting"
KV_USAGE_METRICS = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
"""Current name first; the pre-V1 name is read only when the current one is absent."""

_MAX_METRICS_BYTES = 8 << 20


class MetricsParseError(ValueError):
    """The text is not Prometheus exposition format."""


def parse_vllm_metrics(text: str) -> tuple[float | None, float | None]:
    """Return ``(num_requests_waiting, kv_cache_usage)`` from vLLM's Prometheus text.

    Waiting is summed over samples, KV usage averaged (and clamped to 0..1); a metric that is
    absent (or has only non-finite samples) gives None.

    Raises:
        MetricsParseError: the text cannot be parsed.
    """
    waiting: list[float] = []
    kv: dict[str, list[float]] = {name: [] for name in KV_USAGE_METRICS}
    try:
        for family in text_string_to_metric_families(text):
            if family.name == WAITING_METRIC:
                waiting.extend(s.value for s in family.samples if s.name == WAITING_METRIC)
            elif family.name in kv:
                kv[family.name].extend(s.value for s in family.samples if s.name == family.name)
    except (ValueError, TypeError, IndexError) as exc:
        raise MetricsParseError(str(exc)) from exc
    waiting = [v for v in waiting if math.isfinite(v) and v >= 0]
    kv_values: list[float] = []
    for name in KV_USAGE_METRICS:
        kv_values = [v for v in kv[name] if math.isfinite(v)]
        if kv_values:
            break
    w = sum(waiting) if waiting else None
    k = min(1.0, max(0.0, sum(kv_values) / len(kv_values))) if kv_values else None
    return w, k


class PoolScraper(PoolPoller):
    """Periodic scrape of every pool that has a ``metrics_url``.

    Args:
        pools: the configured pools (those without ``metrics_url`` are skipped).
        spillover: interval and timeout.
        tracker: receives the values.
        client: the HTTP client (built once by the caller, closed by the caller).
        metrics: where scrape outcomes are counted (``tbr_pool_scrapes_total``).
    """

    task_name = "tbr-pool-scraper"

    def __init__(
        self,
        pools: list[PoolConfig] | tuple[PoolConfig, ...],
        spillover: SpilloverConfig,
        tracker: LoadTracker,
        client: httpx.AsyncClient,
        metrics: LoadMetrics,
    ) -> None:
        targets = [(p.name, p.metrics_url) for p in pools if p.metrics_url]
        super().__init__(targets, spillover.scrape_interval_s)
        self.cfg = spillover
        self.tracker = tracker
        self.client = client
        self.metrics = metrics

    async def scrape_once(self, pool: str, url: str) -> str:
        """Scrape one pool; returns the outcome label (also counted). Never raises."""
        try:
            resp = await self.client.get(url, timeout=self.cfg.scrape_timeout_s)
        except httpx.HTTPError as exc:
            log.debug("scrape of pool %s failed: %s", pool, exc)
            outcome = "transport_error"
        else:
            if resp.status_code != 200 or len(resp.content) > _MAX_METRICS_BYTES:
                outcome = "http_error"
            else:
                try:
                    waiting, kv = parse_vllm_metrics(resp.text)
                except MetricsParseError as exc:
                    log.warning("pool %s: unparsable /metrics: %s", pool, exc)
                    outcome = "parse_error"
                else:
                    if waiting is None and kv is None:
                        outcome = "no_signal"
                    else:
                        self.tracker.record_signals(pool, PoolSignals(waiting, kv, self.tracker.clock()))
                        outcome = "ok"
        self.metrics.scrapes.labels(pool, outcome).inc()
        return outcome

    async def poll_once(self, pool: str, url: str) -> str:
        """:meth:`scrape_once` (the shared loop's step)."""
        return await self.scrape_once(pool, url)
