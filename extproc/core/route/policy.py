"""Routing policy: which pool a budget goes to (no gRPC, no I/O).

Rule (arXiv 2604.09613, docs/method.md §3.5; generalised to N pools as the shortest fit of vllm-sr-sim's
``LengthRouter``): the smallest pool whose ``max_model_len`` holds ``budget.total_tokens`` (the
*preferred* pool); when none does, the largest pool (vLLM there answers with its own
context-length error, which is the correct answer for such a request). Requests the router
cannot read go to the largest pool with their reason.

Load-aware spillover (arXiv 2604.08075 "load-aware spillover + safety check";
docs/design/002-spillover.md): when ``spillover.enabled`` and the preferred pool is saturated
(:meth:`extproc.core.route.load.LoadTracker.saturated`), the request goes to the next larger pool that is
not saturated. It never goes to a smaller pool (the safety check: a smaller pool cannot hold it),
and when every larger pool is saturated too it stays on the preferred pool (spilling would only
move the queue to a more expensive pool).

Pool health (issue 34; :class:`extproc.config.PoolHealthConfig`): a pool whose fresh health check
says it is down (:meth:`extproc.core.route.load.LoadTracker.unavailable`) is saturated with the signal
``unavailable``, whether or not spillover is enabled: a request that fits it goes to the next
larger pool that is up and not saturated, with the decision reason ``pool_unavailable``.
"""

from __future__ import annotations

from dataclasses import dataclass

from extproc.config import PoolConfig, PoolHealthConfig, SpilloverConfig
from extproc.core.route.load import UNAVAILABLE, LoadTracker, Thresholds

__all__ = ["POOL_UNAVAILABLE", "Policy", "PoolDecision"]

POOL_UNAVAILABLE = "pool_unavailable"
"""Decision reason of a request sent past its pool because that pool's health check failed."""


@dataclass(frozen=True, slots=True)
class PoolDecision:
    """The chosen pool and why (``reason`` is a bounded metric label).

    ``preferred`` is the shortest-fit pool when the request spilled over (else None) and
    ``signal`` the saturation signal that caused it (``inflight``, ``waiting``, ``kv_cache``, or
    ``unavailable`` for a pool whose health check failed: reason ``pool_unavailable``).
    ``saturated`` lists every ``(pool name, signal)`` the decision found saturated, in the order
    checked (empty without spillover); the service counts them.
    """

    pool: PoolConfig
    reason: str
    preferred: PoolConfig | None = None
    signal: str = ""
    saturated: tuple[tuple[str, str], ...] = ()


class Policy:
    """Compiled routing policy over pools sorted by ``max_model_len``.

    Args:
        pools: the configured pools (any order; at least one).
        spillover: spillover settings (default: disabled).
        load: the process-wide load tracker (needed for spillover and health; None disables both).
        health: pool health settings (None or ``enabled: false``: health is not consulted).

    Raises:
        ValueError: ``pools`` is empty.
    """

    def __init__(
        self,
        pools: tuple[PoolConfig, ...] | list[PoolConfig],
        *,
        spillover: SpilloverConfig | None = None,
        load: LoadTracker | None = None,
        health: PoolHealthConfig | None = None,
    ) -> None:
        if not pools:
            raise ValueError("at least one pool is required")
        self.pools = tuple(sorted(pools, key=lambda p: p.max_model_len))
        self.limits_tokens = tuple(p.max_model_len for p in self.pools)
        """Each pool's ``max_model_len``, ascending (the screens of :mod:`extproc.core.estimate.screen`)."""
        self.fallback = self.pools[-1]
        self.spillover = spillover if spillover is not None else SpilloverConfig()
        self.load = load
        self.spill_enabled = self.spillover.enabled and load is not None
        self.health_staleness_s = (
            health.max_staleness_s if health is not None and health.enabled and load is not None else None
        )
        """How old a failed health check may be and still count (None: health not consulted)."""
        self.thresholds = {p.name: Thresholds.of(p, self.spillover) for p in self.pools}
        self._index = {p.name: i for i, p in enumerate(self.pools)}

    def choose(self, total_tokens: int) -> PoolDecision:
        """Shortest fit for a request needing ``total_tokens`` tokens, with spillover when enabled
        and past a pool that is down."""
        for i, pool in enumerate(self.pools):
            if total_tokens <= pool.max_model_len:
                if i + 1 < len(self.pools) and (self.spill_enabled or self._down(pool.name)):
                    return self._spill(i)
                return PoolDecision(pool, "fits")
        return PoolDecision(self.fallback, "exceeds_all_pools")

    def _down(self, pool_name: str) -> bool:
        if self.health_staleness_s is None or self.load is None:
            return False
        return self.load.unavailable(pool_name, self.health_staleness_s) is not None

    def _saturation(self, pool: PoolConfig) -> str | None:
        """``unavailable`` for a pool that is down, else (with spillover) its saturated signal."""
        if self._down(pool.name):
            return UNAVAILABLE
        if not self.spill_enabled:
            return None
        assert self.load is not None
        return self.load.saturated(pool.name, self.thresholds[pool.name], self.spillover.max_staleness_s)

    def _spill(self, i: int) -> PoolDecision:
        preferred = self.pools[i]
        signal = self._saturation(preferred)
        if signal is None:
            return PoolDecision(preferred, "fits")
        saturated = [(preferred.name, signal)]
        for larger in self.pools[i + 1 :]:
            larger_signal = self._saturation(larger)
            if larger_signal is None:
                reason = POOL_UNAVAILABLE if signal == UNAVAILABLE else "spillover"
                return PoolDecision(
                    larger, reason, preferred=preferred, signal=signal, saturated=tuple(saturated)
                )
            saturated.append((larger.name, larger_signal))
        return PoolDecision(preferred, "all_saturated", signal=signal, saturated=tuple(saturated))

    def unreadable(self, reason: str) -> PoolDecision:
        """Decision for a request that could not be budgeted: the largest pool."""
        return PoolDecision(self.fallback, reason)

    def next_larger(self, pool_name: str) -> PoolConfig | None:
        """The pool right above ``pool_name`` by ``max_model_len`` (None for the largest or unknown)."""
        i = self._index.get(pool_name)
        if i is None or i + 1 >= len(self.pools):
            return None
        return self.pools[i + 1]

    def pool(self, pool_name: str) -> PoolConfig | None:
        """The pool named ``pool_name``, or None."""
        i = self._index.get(pool_name)
        return None if i is None else self.pools[i]
