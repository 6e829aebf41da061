"""Routing policy: which pool a budget goes to (no gRPC, no I/O).

Rule (arXiv 2604.09613, docs/method.md §3.5; generalised to N pools as the shortest fit of vllm-sr-sim's
``LengthRouter``): the smallest pool whose ``max_model_len`` holds ``budget.total_tokens`` (the
*preferred* pool); when none does, the largest pool (vLLM there answers with its own
context-length error, which is the correct answer for such a request). Requests the router
cannot read go to the largest pool with their reason.

Load-aware spillover (arXiv 2604.08075 "load-aware spillover + safety check";
docs/design/002-spillover.md): when ``spillover.enabled`` and the preferred pool is saturated
(:meth:`extproc.core.load.LoadTracker.saturated`), the request goes to the next larger pool that is
not saturated. It never goes to a smaller pool (the safety check: a smaller pool cannot hold it),
and when every larger pool is saturated too it stays on the preferred pool (spilling would only
move the queue to a more expensive pool).
"""

from __future__ import annotations

from dataclasses import dataclass

from extproc.config import PoolConfig, SpilloverConfig
from extproc.core.load import LoadTracker, Thresholds

__all__ = ["Policy", "PoolDecision"]


@dataclass(frozen=True, slots=True)
class PoolDecision:
    """The chosen pool and why (``reason`` is a bounded metric label).

    ``preferred`` is the shortest-fit pool when the request spilled over (else None) and
    ``signal`` the saturation signal that caused it (``inflight``, ``waiting``, ``kv_cache``).
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
        load: the process-wide load tracker (needed for spillover; None disables it).

    Raises:
        ValueError: ``pools`` is empty.
    """

    def __init__(
        self,
        pools: tuple[PoolConfig, ...] | list[PoolConfig],
        *,
        spillover: SpilloverConfig | None = None,
        load: LoadTracker | None = None,
    ) -> None:
        if not pools:
            raise ValueError("at least one pool is required")
        self.pools = tuple(sorted(pools, key=lambda p: p.max_model_len))
        self.limits_tokens = tuple(p.max_model_len for p in self.pools)
        """Each pool's ``max_model_len``, ascending (the screens of :mod:`extproc.core.screen`)."""
        self.fallback = self.pools[-1]
        self.spillover = spillover if spillover is not None else SpilloverConfig()
        self.load = load
        self.spill_enabled = self.spillover.enabled and load is not None
        self.thresholds = {p.name: Thresholds.of(p, self.spillover) for p in self.pools}
        self._index = {p.name: i for i, p in enumerate(self.pools)}

    def choose(self, total_tokens: int) -> PoolDecision:
        """Shortest fit for a request needing ``total_tokens`` tokens, with spillover when enabled."""
        for i, pool in enumerate(self.pools):
            if total_tokens <= pool.max_model_len:
                if self.spill_enabled and i + 1 < len(self.pools):
                    return self._spill(i)
                return PoolDecision(pool, "fits")
        return PoolDecision(self.fallback, "exceeds_all_pools")

    def _spill(self, i: int) -> PoolDecision:
        load = self.load
        assert load is not None
        preferred = self.pools[i]
        stale_s = self.spillover.max_staleness_s
        signal = load.saturated(preferred.name, self.thresholds[preferred.name], stale_s)
        if signal is None:
            return PoolDecision(preferred, "fits")
        saturated = [(preferred.name, signal)]
        for larger in self.pools[i + 1 :]:
            larger_signal = load.saturated(larger.name, self.thresholds[larger.name], stale_s)
            if larger_signal is None:
                return PoolDecision(
                    larger, "spillover", preferred=preferred, signal=signal, saturated=tuple(saturated)
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
