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

Health (issue 34): the service's health check records a :class:`PoolHealth` verdict per pool (vLLM
``GET /health``); a fresh "down" verdict makes the pool *unavailable*, which the policy treats as
saturated whatever the other signals say. No verdict, or a stale one, is "up".
Everything here runs on the event loop thread; nothing blocks.

Nothing here records metrics: the tracker keeps plain per-pool tallies (in-flight counts, scraped
signals, stale-signal checks, accounting errors) that the service exports at scrape time
(``extproc.service.metrics.LoadCollector``), so the planner's simulator drives the same object
without Prometheus.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from extproc.config import PoolConfig, SpilloverConfig

__all__ = ["UNAVAILABLE", "LoadTracker", "PoolHealth", "PoolSignals", "Thresholds"]

UNAVAILABLE = "unavailable"
"""The saturation signal of a pool whose health check says it is down."""


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


@dataclass(frozen=True, slots=True)
class PoolHealth:
    """One health check of a pool: ``up`` (vLLM ``GET /health`` answered 200), ``reason`` (a bounded
    label: ``healthy``, ``http_503``, ``http_500``, ``http_other``, ``timeout``, ``unreachable``),
    taken at monotonic time ``at_s``."""

    up: bool
    reason: str
    at_s: float


class LoadTracker:
    """In-flight counts and scraped signals of every pool, by pool name.

    Args:
        clock: monotonic time source in seconds (tests and the simulator inject one).
    """

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._inflight: dict[str, int] = {}
        self._signals: dict[str, PoolSignals] = {}
        self._health: dict[str, PoolHealth] = {}
        self.stale_signal_checks: dict[str, int] = {}
        """Saturation checks that ignored a pool's scraped signals because they were stale, by pool."""
        self.accounting_errors: dict[str, int] = {}
        """Releases of a pool with no in-flight count (should stay empty), by pool."""

    # -- in-flight --------------------------------------------------------------------------

    def acquire(self, pool: str) -> None:
        """Count one more request on ``pool``."""
        self._inflight[pool] = self._inflight.get(pool, 0) + 1

    def release(self, pool: str) -> bool:
        """Count one request less on ``pool``; False (and a tally in :attr:`accounting_errors`) for a
        release of a pool with no count, which is ignored (counts never go below zero)."""
        n = self._inflight.get(pool, 0)
        if n <= 0:
            self.accounting_errors[pool] = self.accounting_errors.get(pool, 0) + 1
            return False
        self._inflight[pool] = n - 1
        return True

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

    def signals(self, pool: str) -> PoolSignals | None:
        """The last successful scrape of ``pool`` (fresh or not)."""
        return self._signals.get(pool)

    # -- health -----------------------------------------------------------------------------

    def record_health(self, pool: str, health: PoolHealth) -> None:
        """Store the latest health check of ``pool``."""
        self._health[pool] = health

    def health(self, pool: str) -> PoolHealth | None:
        """The latest health check of ``pool`` (fresh or not), None before the first."""
        return self._health.get(pool)

    def unavailable(self, pool: str, max_staleness_s: float) -> str | None:
        """The reason ``pool`` is down (e.g. ``http_503``) when its latest health check, at most
        ``max_staleness_s`` seconds old, failed; None when it is up, unchecked, or the news is stale."""
        h = self._health.get(pool)
        if h is None or h.up or self.clock() - h.at_s > max_staleness_s:
            return None
        return h.reason

    def health_by_pool(self) -> dict[str, PoolHealth]:
        """A copy of the latest health check of every checked pool."""
        return dict(self._health)

    # -- saturation -------------------------------------------------------------------------

    def saturated(self, pool: str, th: Thresholds, max_staleness_s: float) -> str | None:
        """The first signal at or over its threshold (``inflight``, ``waiting``, ``kv_cache``), or None.

        Scraped signals older than ``max_staleness_s`` seconds are ignored (tallied in
        :attr:`stale_signal_checks`); the in-flight count is always current.
        """
        if th.max_inflight is not None and self._inflight.get(pool, 0) >= th.max_inflight:
            return "inflight"
        if th.max_waiting is None and th.max_kv_cache_usage is None:
            return None
        sig = self._signals.get(pool)
        if sig is None or self.clock() - sig.at_s > max_staleness_s:
            self.stale_signal_checks[pool] = self.stale_signal_checks.get(pool, 0) + 1
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

    def inflight_by_pool(self) -> dict[str, int]:
        """A copy of the in-flight counts by pool."""
        return dict(self._inflight)

    def pools(self) -> Iterable[str]:
        """Names of pools that ever had a count or a scrape."""
        return sorted(set(self._inflight) | set(self._signals) | set(self._health))
