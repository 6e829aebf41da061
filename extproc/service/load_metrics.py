"""Prometheus view of pool load, spillover and misroute recovery.

The core (:mod:`extproc.core.route.load`, :mod:`extproc.core.route.policy`, :mod:`extproc.core.learn.recovery`)
records nothing itself: the tracker keeps plain tallies that :class:`LoadCollector` reads at
scrape time (no work on the request path), and the routing and recovery *outcomes* it returns are
counted by the caller in :class:`LoadMetrics`.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from extproc.core.route.load import LoadTracker

__all__ = ["LoadCollector", "LoadMetrics"]


class LoadMetrics:
    """Counters of load events, registered once per process on the router's registry.

    Args:
        registry: the router's registry (``RouterMetrics.registry``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.scrapes = Counter(
            "tbr_pool_scrapes",
            "Scrapes of pool /metrics by outcome (ok, http_error, transport_error, parse_error, no_signal).",
            ["pool", "outcome"],
            registry=r,
        )
        self.saturated_checks = Counter(
            "tbr_pool_saturated_checks",
            "Routing decisions that found the pool saturated, by the signal that tripped.",
            ["pool", "signal"],
            registry=r,
        )
        self.spillover = Counter(
            "tbr_spillover",
            "Requests sent to a larger pool because their preferred pool was saturated.",
            ["from_pool", "to_pool", "signal"],
            registry=r,
        )
        self.misroutes = Counter(
            "tbr_misroutes",
            "Misroutes by outcome: Envoy retried the request on the next larger pool after its first "
            "pool refused it (recovered = 2xx, retry_failed); a context-length error inside the pool's "
            "2xx stream (error_in_stream); the pool cut the answer at its max_model_len (truncated). "
            "By cause: estimate_too_low, truncated (both teach the router), pool_unavailable, "
            "client_error, unknown.",
            ["from_pool", "to_pool", "outcome", "cause"],
            registry=r,
        )
        self.misroute_calibration = Counter(
            "tbr_misroute_calibration",
            "Recovered misroutes by what usage showed: confirmed (the budget overflowed the first "
            "pool), unconfirmed, ratcheted (strong ratio correction applied).",
            ["pool", "outcome"],
            registry=r,
        )


class LoadCollector(Collector):
    """Exports a :class:`LoadTracker`'s state when /metrics is scraped.

    Series: ``tbr_pool_inflight_requests``, ``tbr_pool_waiting_requests``,
    ``tbr_pool_kv_cache_usage_ratio`` (gauges, by ``pool``), ``tbr_pool_stale_signal_checks_total`` and
    ``tbr_pool_accounting_errors_total`` (counters, by ``pool``); ``tbr_pool_up`` (1/0, by ``pool``,
    for pools whose health is checked) and ``tbr_pool_health_reason`` (1 for the latest check's
    reason, by ``pool`` and ``reason``).
    """

    def __init__(self, tracker: LoadTracker) -> None:
        self.tracker = tracker

    def collect(self) -> Iterator[Metric]:
        """One metric family per series above, read from the tracker now."""
        t = self.tracker
        inflight = GaugeMetricFamily(
            "tbr_pool_inflight_requests",
            "Requests routed to the pool whose ext_proc stream has not ended (router's own count).",
            labels=["pool"],
        )
        for pool, n in sorted(t.inflight_by_pool().items()):
            inflight.add_metric([pool], n)
        waiting = GaugeMetricFamily(
            "tbr_pool_waiting_requests",
            "Last scraped vllm:num_requests_waiting of the pool (summed over engines).",
            labels=["pool"],
        )
        kv = GaugeMetricFamily(
            "tbr_pool_kv_cache_usage_ratio",
            "Last scraped vllm:kv_cache_usage_perc of the pool (fraction 0..1, mean over engines).",
            labels=["pool"],
        )
        for pool in t.pools():
            sig = t.signals(pool)
            if sig is None:
                continue
            if sig.waiting is not None:
                waiting.add_metric([pool], sig.waiting)
            if sig.kv_cache_usage is not None:
                kv.add_metric([pool], sig.kv_cache_usage)
        stale = CounterMetricFamily(
            "tbr_pool_stale_signal_checks",
            "Saturation checks that ignored a pool's scraped signals because they were stale.",
            labels=["pool"],
        )
        for pool, n in sorted(t.stale_signal_checks.items()):
            stale.add_metric([pool], n)
        errors = CounterMetricFamily(
            "tbr_pool_accounting_errors",
            "In-flight releases of a pool with no count (should stay 0).",
            labels=["pool"],
        )
        for pool, n in sorted(t.accounting_errors.items()):
            errors.add_metric([pool], n)
        up = GaugeMetricFamily(
            "tbr_pool_up",
            "1 when the pool's latest GET /health answered 200, 0 when it failed (503/500, timeout, "
            "refused); absent for pools whose health is not checked.",
            labels=["pool"],
        )
        reason = GaugeMetricFamily(
            "tbr_pool_health_reason",
            "1 for the reason of the pool's latest health check (healthy, http_503, http_500, "
            "http_other, timeout, unreachable).",
            labels=["pool", "reason"],
        )
        for pool, health in sorted(t.health_by_pool().items()):
            up.add_metric([pool], 1 if health.up else 0)
            reason.add_metric([pool, health.reason], 1)
        yield from (inflight, waiting, kv, stale, errors, up, reason)
