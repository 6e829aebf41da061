"""Pool-selection policies of the fleet simulator, the same rules the router applies (method.md §3.5).

A router maps a request's *estimated* token budget ``L_total`` (tokens) and the live mean in-flight
count per instance of each pool to a pool index. Pools are ordered by ``max_model_len`` ascending.
Policies are pure and deterministic; they are picked by name through :data:`ROUTERS`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

__all__ = ["ROUTERS", "HomogeneousRouter", "Router", "ShortestFitRouter", "SpilloverRouter", "make_router"]


class Router(Protocol):
    """``route(budget_tokens, inflight_per_instance) -> pool index``."""

    @property
    def name(self) -> str:
        """Registry name of the policy."""
        ...

    def route(self, budget_tokens: int, inflight_per_instance: Sequence[float]) -> int:
        """Pool index for a request of estimated budget ``budget_tokens``."""
        ...


@dataclass(frozen=True)
class HomogeneousRouter:
    """Every request to pool 0 (the baseline: one pool at the long ``max_model_len``)."""

    name: str = "homogeneous"

    def route(self, budget_tokens: int, inflight_per_instance: Sequence[float]) -> int:
        """Always 0."""
        return 0


@dataclass(frozen=True)
class ShortestFitRouter:
    """Token-budget routing to the smallest pool whose threshold admits the budget (N pools).

    ``thresholds_tokens[i]`` is the largest ``L_total`` pool i accepts (typically its
    ``max_model_len``); budgets above every threshold go to the last (largest) pool. With two pools
    this is the paper's rule ``L_total <= B_short -> short else long``.
    """

    thresholds_tokens: tuple[int, ...]
    name: str = "token-budget"

    def route(self, budget_tokens: int, inflight_per_instance: Sequence[float]) -> int:
        """First pool i with ``budget_tokens <= thresholds_tokens[i]``, else the last pool."""
        for i, thr in enumerate(self.thresholds_tokens):
            if budget_tokens <= thr:
                return i
        return len(self.thresholds_tokens) - 1


@dataclass(frozen=True)
class SpilloverRouter:
    """Shortest fit, then load-aware spillover (2604.08075): if the preferred pool's mean in-flight
    requests per instance (running + waiting) is ``>= spill_inflight_per_instance``, send the request
    to the next larger pool. Only upward moves, so the safety check (the target fits) always holds.
    """

    thresholds_tokens: tuple[int, ...]
    spill_inflight_per_instance: float
    name: str = "spillover"

    def route(self, budget_tokens: int, inflight_per_instance: Sequence[float]) -> int:
        """Shortest-fit pool, or the next larger one when it is over the in-flight threshold."""
        i = ShortestFitRouter(self.thresholds_tokens).route(budget_tokens, inflight_per_instance)
        if (
            i + 1 < len(self.thresholds_tokens)
            and inflight_per_instance[i] >= self.spill_inflight_per_instance
        ):
            return i + 1
        return i


ROUTERS: dict[str, Callable[..., object]] = {
    "homogeneous": HomogeneousRouter,
    "token-budget": ShortestFitRouter,
    "shortest-fit": ShortestFitRouter,
    "spillover": SpilloverRouter,
}


def make_router(
    name: str, thresholds_tokens: Sequence[int] = (), spill_inflight_per_instance: float = 0.0
) -> Router:
    """Build a router by registry name. Raises ``ValueError`` for an unknown name."""
    if name == "homogeneous":
        return HomogeneousRouter()
    if name in ("token-budget", "shortest-fit"):
        return ShortestFitRouter(tuple(thresholds_tokens), name=name)
    if name == "spillover":
        return SpilloverRouter(tuple(thresholds_tokens), spill_inflight_per_instance)
    raise ValueError(f"unknown router {name!r}; choose from {sorted(ROUTERS)}")
