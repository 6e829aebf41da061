"""Routing policy: which pool a budget goes to (pure; no gRPC, no I/O).

Rule (arXiv 2604.09613 §3; generalised to N pools as the shortest fit of vllm-sr-sim's
``LengthRouter``): the smallest pool whose ``max_model_len`` holds ``budget.total_tokens``;
when none does, the largest pool (vLLM there answers with its own context-length error, which
is the correct answer for such a request). Requests the router cannot read go to the largest
pool with their reason.
"""

from __future__ import annotations

from dataclasses import dataclass

from extproc.config import PoolConfig

__all__ = ["Policy", "PoolDecision"]


@dataclass(frozen=True, slots=True)
class PoolDecision:
    """The chosen pool and why (``reason`` is a bounded metric label)."""

    pool: PoolConfig
    reason: str


class Policy:
    """Compiled routing policy over pools sorted by ``max_model_len``.

    Args:
        pools: the configured pools (any order; at least one).

    Raises:
        ValueError: ``pools`` is empty.
    """

    def __init__(self, pools: tuple[PoolConfig, ...] | list[PoolConfig]) -> None:
        if not pools:
            raise ValueError("at least one pool is required")
        self.pools = tuple(sorted(pools, key=lambda p: p.max_model_len))
        self.fallback = self.pools[-1]

    def choose(self, total_tokens: int) -> PoolDecision:
        """Shortest fit for a request needing ``total_tokens`` tokens of context."""
        for pool in self.pools:
            if total_tokens <= pool.max_model_len:
                return PoolDecision(pool, "fits")
        return PoolDecision(self.fallback, "exceeds_all_pools")

    def unreadable(self, reason: str) -> PoolDecision:
        """Decision for a request that could not be budgeted: the largest pool."""
        return PoolDecision(self.fallback, reason)
