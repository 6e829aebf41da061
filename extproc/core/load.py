"""Per-pool load: the router's own in-flight count and the latest scraped vLLM signals.

One :class:`LoadTracker` lives for the whole router process (it survives config reloads, like the
ratio store), because in-flight requests started under the old config still end under the new.

In-flight accounting (exact by construction): a stream *acquires* its pool when the routing
decision is made and *releases* it exactly once when the stream ends (``StreamProcessor.finish``,
which the server calls in a ``finally`` for every kind of ending: complete, cancelled, error).
A retry served by another pool *moves* the count. Counts never go below zero (a release of a pool
with no count is counted as an accounting error and ignored).

Saturation (docs/design/002-spillover.md): a pool is saturated when any configured signal is at or
above its threshold; scraped signals older than ``spillover.max_staleness_s`` are ignored.
Everything here runs on the event loop thread; nothing blocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Gauge

from extproc.config import PoolConfig, SpilloverConfig

__all__ = ["LoadMetrics", "LoadTracker", "PoolSignals", "Thresholds"]


class LoadMetrics:
    """Metrics of pool load, spillover and misroute recovery (registered once per process).

    Args:
        registry: the router's registry (``RouterMetrics.registry``).
    """

    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.inflight = Gauge(
            "tbr_pool_inflight_requests",
            "Requests routed to the pool whose ext_proc stream has not ended (router's own count).",
            ["pool"],
            registry=r,
        )
        self.waiting = Gauge(
            "tbr_pool_waiting_requests",
            "Last scraped vllm:num_requests_waiting of the pool (summed over engines).",
            ["pool"],
            registry=r,
        )
        self.kv_cache_usage = Gauge(
            "tbr_pool_kv_cache_usage",
            "Last scraped vllm:kv_cache_usage_perc of the pool (fraction 0..1, mean over engines).",
            ["pool"],
            registry=r,
        )
        self.scrapes = Counter(
            "tbr_pool_scrapes",
            "Scrapes of pool /metrics by outcome (ok, http_error, transport_error, parse_error, no_signal).",
            ["pool", "outcome"],
            registry=r,
        )
        self.stale_signals = Counter(
            "tbr_pool_stale_signal_checks",
            "Saturation checks that ignored a pool's scraped signals because they were stale.",
            ["pool"],
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
            "Requests Envoy retried on the next larger pool after a 400 from their first pool, by "
            "outcome of the retry (recovered = 2xx, retry_failed).",
            ["from_pool", "to_pool", "outcome"],
            registry=r,
        )
        self.misroute_calibration = Counter(
            "tbr_misroute_calibration",
            "Recovered misroutes by what usage showed: confirmed (the budget overflowed the first "
            "pool), unconfirmed, ratcheted (strong ratio correction applied).",
            ["pool", "outcome"],
            registry=r,
        )
        self.accounting_errors = Counter(
            "tbr_pool_accounting_errors",
            "In-flight releases of a pool with no count (should stay 0).",
            ["pool"],
            registry=r,
        )


@dataclass(frozen=True, slots=True)
class Thresholds:
    """Saturation thresholds of one pool (None = signal not used). Units: requests, requests, 0..1."""

    max_inflight: int | None
    max_waiting: float | None
    max_kv_cache_usage: float | None

    @classmethod
    def of(cls, pool: PoolConfig, sp: SpilloverConfig) -> Thresholds:
        """Per-pool override, else the ``spillover`` default."""
        return cls(
            max_inflight=pool.max_inflight if pool.max_inflight is not None else sp.max_inflight_per_pool,
            max_waiting=pool.max_waiting if pool.max_waiting is not None else sp.max_waiting,
            max_kv_cache_usage=(
                pool.max_kv_cache_usage if pool.max_kv_cache_usage is not None else sp.max_kv_cache_usage
            ),
        )


@dataclass(frozen=True, slots=True)
class PoolSignals:
    """One successful scrape: ``num_requests_waiting`` (requests), ``kv_cache_usage`` (0..1 or None
    when the endpoint exposes no KV metric), taken at monotonic time ``at_s``."""

    waiting: float | None
    kv_cache_usage: float | None
    at_s: float


class LoadTracker:
    """In-flight counts and scraped signals of every pool, by pool name.

    Args:
        metrics: where counts and events are exported.
        clock: monotonic time source in seconds (tests inject one).
    """

    def __init__(self, metrics: LoadMetrics, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.metrics = metrics
        self.clock = clock
        self._inflight: dict[str, int] = {}
        self._signals: dict[str, PoolSignals] = {}

    # -- in-flight --------------------------------------------------------------------------

    def acquire(self, pool: str) -> None:
        """Count one more request on ``pool``."""
        n = self._inflight.get(pool, 0) + 1
        self._inflight[pool] = n
        self.metrics.inflight.labels(pool).set(n)

    def release(self, pool: str) -> None:
        """Count one request less on ``pool`` (never below zero; a spurious release is counted)."""
        n = self._inflight.get(pool, 0)
        if n <= 0:
            self.metrics.accounting_errors.labels(pool).inc()
            return
        self._inflight[pool] = n - 1
        self.metrics.inflight.labels(pool).set(n - 1)

    def move(self, from_pool: str, to_pool: str) -> None:
        """A request counted on ``from_pool`` is now served by ``to_pool``."""
        if from_pool == to_pool:
            return
        self.release(from_pool)
        self.acquire(to_pool)

    def inflight(self, pool: str) -> int:
        """Requests currently counted on ``pool``."""
        return self._inflight.get(pool, 0)

    def total_inflight(self) -> int:
        """Sum over all pools (0 when every stream has ended)."""
        return sum(self._inflight.values())

    # -- scraped signals --------------------------------------------------------------------

    def record_signals(self, pool: str, signals: PoolSignals) -> None:
        """Store a successful scrape of ``pool``."""
        self._signals[pool] = signals
        if signals.waiting is not None:
            self.metrics.waiting.labels(pool).set(signals.waiting)
        if signals.kv_cache_usage is not None:
            self.metrics.kv_cache_usage.labels(pool).set(signals.kv_cache_usage)

    def signals(self, pool: str) -> PoolSignals | None:
        """The last successful scrape of ``pool`` (fresh or not)."""
        return self._signals.get(pool)

    # -- saturation -------------------------------------------------------------------------

    def saturated(self, pool: str, th: Thresholds, max_staleness_s: float) -> str | None:
        """The first signal at or over its threshold (``inflight``, ``waiting``, ``kv_cache``), or None.

        Scraped signals older than ``max_staleness_s`` seconds are ignored (counted in
        ``tbr_pool_stale_signal_checks``); the in-flight count is always current.
        """
        if th.max_inflight is not None and self._inflight.get(pool, 0) >= th.max_inflight:
            return "inflight"
        if th.max_waiting is None and th.max_kv_cache_usage is None:
            return None
        sig = self._signals.get(pool)
        if sig is None or self.clock() - sig.at_s > max_staleness_s:
            self.metrics.stale_signals.labels(pool).inc()
            return None
        if th.max_waiting is not None and sig.waiting is not None and sig.waiting >= th.max_waiting:
            return "waiting"
        if (
            th.max_kv_cache_usage is not None
            and sig.kv_cache_usage is not None
            and sig.kv_cache_usage >= th.max_kv_cache_usage
        ):
            return "kv_cache"
        return None

    def pools(self) -> Iterable[str]:
        """Names of pools that ever had a count or a scrape."""
        return sorted(set(self._inflight) | set(self._signals))
