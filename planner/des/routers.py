"""Pool-selection policies of the fleet simulator (docs/method.md §3.5, docs/design/002-spillover.md).

A router maps a request's *estimated* token budget ``L_total`` (tokens), the simulated time and a
:class:`FleetView` of live pool state to a pool index. Pools are ordered by ``max_model_len``
ascending. The DES tells the router when a request it routed ends (:meth:`Router.release`) or is
retried on a larger pool (:meth:`Router.move`), so a router can keep the same in-flight count the
real router keeps.

Load-aware spillover is not re-implemented here: :class:`PolicyRouter` drives the router's own
:class:`extproc.core.route.policy.Policy` and :class:`extproc.core.route.load.LoadTracker` (pure Python, no gRPC) with
the simulated clock, so the simulator applies exactly the thresholds, per-pool overrides, scan
order and staleness rule of a router configuration (``pools[]`` + ``spillover:``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from extproc.config import PoolConfig, SpilloverConfig
from extproc.core.route.load import LoadTracker, PoolSignals
from extproc.core.route.policy import Policy

__all__ = [
    "ROUTERS",
    "FleetView",
    "HomogeneousRouter",
    "PolicyRouter",
    "Router",
    "ShortestFitRouter",
    "make_router",
]


class FleetView(Protocol):
    """Live state of the simulated pools at the current simulated time (pool index ``i``)."""

    def waiting(self, i: int) -> float:
        """``vllm:num_requests_waiting`` of pool i: queued requests summed over its instances."""
        ...

    def kv_cache_usage(self, i: int) -> float:
        """``vllm:kv_cache_usage_perc`` of pool i: KV tokens in use / capacity, mean over instances."""
        ...


class Router(Protocol):
    """``route(budget_tokens, now_s, fleet) -> pool index``; ``release``/``move`` keep counts."""

    @property
    def name(self) -> str:
        """Registry name of the policy."""
        ...

    def route(self, budget_tokens: int, now_s: float, fleet: FleetView) -> int:
        """Pool index for a request of estimated budget ``budget_tokens`` arriving at ``now_s``."""
        ...

    def release(self, pool: int) -> None:
        """A request routed to ``pool`` ended (completed or rejected)."""
        ...

    def move(self, from_pool: int, to_pool: int) -> None:
        """A request routed to ``from_pool`` is served by ``to_pool`` (misroute retry)."""
        ...


@dataclass(frozen=True)
class HomogeneousRouter:
    """Every request to pool 0 (the baseline: one pool at the long ``max_model_len``)."""

    name: str = "homogeneous"

    def route(self, budget_tokens: int, now_s: float, fleet: FleetView) -> int:
        """Always 0."""
        return 0

    def release(self, pool: int) -> None:
        """No state."""

    def move(self, from_pool: int, to_pool: int) -> None:
        """No state."""


@dataclass(frozen=True)
class ShortestFitRouter:
    """Token-budget routing to the smallest pool whose threshold admits the budget (N pools).

    ``thresholds_tokens[i]`` is the largest ``L_total`` pool i accepts (its ``max_model_len``);
    budgets above every threshold go to the last (largest) pool. With two pools this is the
    paper's rule ``L_total <= B_short -> short else long``.
    """

    thresholds_tokens: tuple[int, ...]
    name: str = "token-budget"

    def route(self, budget_tokens: int, now_s: float, fleet: FleetView) -> int:
        """First pool i with ``budget_tokens <= thresholds_tokens[i]``, else the last pool."""
        for i, thr in enumerate(self.thresholds_tokens):
            if budget_tokens <= thr:
                return i
        return len(self.thresholds_tokens) - 1

    def release(self, pool: int) -> None:
        """No state."""

    def move(self, from_pool: int, to_pool: int) -> None:
        """No state."""


@dataclass
class PolicyRouter:
    """The router's :class:`~extproc.core.route.policy.Policy` with a :class:`~extproc.core.route.load.LoadTracker` on
    simulated time.

    * ``inflight`` (router's count) is exact: acquired at routing, released when the DES says the
      request ended, moved on a misroute retry — as ``extproc/core/route/load.py`` does per ext_proc stream.
    * ``waiting`` / ``kv_cache`` are *scraped*: every ``spillover.scrape_interval_s`` of simulated
      time (at the first arrival after each due time), each pool with a ``metrics_url`` records
      :meth:`FleetView.waiting` and :meth:`FleetView.kv_cache_usage`; between scrapes the policy
      sees the last values, as the real router does. Pools without ``metrics_url`` are never
      scraped (their scraped signals count as stale, as in the router).

    Args:
        pools: the pools (any order; the DES must use the same order as ``pools_by_size``).
        spillover: the ``spillover:`` section.

    Raises:
        ValueError: no pools.
    """

    pools: Sequence[PoolConfig]
    spillover: SpilloverConfig
    name: str = "spillover"

    def __post_init__(self) -> None:
        self._now = 0.0
        self._spilled: dict[tuple[str, str, str], int] = {}
        self.load = LoadTracker(clock=self._clock)
        self.policy = Policy(list(self.pools), spillover=self.spillover, load=self.load)
        self._names = [p.name for p in self.policy.pools]
        self._index = {n: i for i, n in enumerate(self._names)}
        self._scraped = [i for i, p in enumerate(self.policy.pools) if p.metrics_url]
        self._next_scrape = 0.0

    def _clock(self) -> float:
        return self._now

    def route(self, budget_tokens: int, now_s: float, fleet: FleetView) -> int:
        """The router's decision for ``budget_tokens`` at ``now_s`` (acquires the in-flight count)."""
        self._now = now_s
        if self.policy.spill_enabled and self._scraped and now_s >= self._next_scrape:
            for i in self._scraped:
                sig = PoolSignals(fleet.waiting(i), fleet.kv_cache_usage(i), now_s)
                self.load.record_signals(self._names[i], sig)
            step = self.spillover.scrape_interval_s
            while self._next_scrape <= now_s:
                self._next_scrape += step
        decision = self.policy.choose(budget_tokens)
        name = decision.pool.name
        if decision.preferred is not None:
            key = (decision.preferred.name, name, decision.signal)
            self._spilled[key] = self._spilled.get(key, 0) + 1
        self.load.acquire(name)
        return self._index[name]

    def release(self, pool: int) -> None:
        """Release one in-flight request of ``pool``."""
        self.load.release(self._names[pool])

    def move(self, from_pool: int, to_pool: int) -> None:
        """Move one in-flight request (the router's misroute-retry accounting)."""
        self.load.move(self._names[from_pool], self._names[to_pool])

    def spillover_counts(self) -> dict[tuple[str, str, str], int]:
        """Spilled requests by ``(from_pool, to_pool, signal)`` so far (what the router counts in
        ``tbr_spillover_total``), from the policy's decisions."""
        return dict(self._spilled)


ROUTERS: dict[str, Callable[..., object]] = {
    "homogeneous": HomogeneousRouter,
    "token-budget": ShortestFitRouter,
    "shortest-fit": ShortestFitRouter,
    "spillover": PolicyRouter,
}


def make_router(
    name: str,
    thresholds_tokens: Sequence[int] = (),
    *,
    pools: Sequence[PoolConfig] = (),
    spillover: SpilloverConfig | None = None,
) -> Router:
    """Build a router by registry name.

    ``spillover`` needs ``pools`` (router :class:`PoolConfig` s) and a ``spillover`` section.
    Raises ``ValueError`` for an unknown name or a spillover router without pools.
    """
    if name == "homogeneous":
        return HomogeneousRouter()
    if name in ("token-budget", "shortest-fit"):
        return ShortestFitRouter(tuple(thresholds_tokens), name=name)
    if name == "spillover":
        if not pools or spillover is None:
            raise ValueError("the spillover router needs pools and a spillover section")
        return PolicyRouter(pools, spillover)
    raise ValueError(f"unknown router {name!r}; choose from {sorted(ROUTERS)}")
