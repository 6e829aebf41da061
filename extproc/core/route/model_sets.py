"""Pool sets per model: which :class:`~extproc.core.route.policy.Policy` serves a request's ``model``.

Gateways that front several models route by model first, then by request (Envoy AI Gateway's
``x-ai-eg-model`` header route; vLLM Semantic Router's model selection). Here the config's
``models`` maps model names to their own ordered pools (:class:`~extproc.config.ModelSet`):
exact names first, then patterns in order, then ``default_model_set``. A model no set serves goes
to the default set (decision reason ``unknown_model``) or, without one, to the largest pool of all.
A config without ``models`` is one set of all pools serving every model (the single-model case).
"""

from __future__ import annotations

import re

from extproc.config import PoolConfig, RouterConfig
from extproc.core.route.load import LoadTracker
from extproc.core.route.policy import Policy

__all__ = ["ModelRouting"]

_CACHE_MAX = 4096


class ModelRouting:
    """One :class:`Policy` per pool set, and the lookup from ``model`` to set.

    Args:
        config: the validated configuration.
        load: the process-wide load tracker (spillover), or None.
    """

    def __init__(self, config: RouterConfig, load: LoadTracker | None = None) -> None:
        by_name = {p.name: p for p in config.pools}
        self.policies: dict[str, Policy] = {
            name: Policy(
                [by_name[n] for n in names],
                spillover=config.spillover,
                load=load,
                health=config.pool_health,
            )
            for name, names in config.pool_groups.items()
        }
        self._exact: dict[str, str] = {}
        self._patterns: list[tuple[re.Pattern[str], str]] = []
        for ms in config.models:
            for model in ms.models:
                self._exact.setdefault(model, ms.name)
            if ms.pattern is not None:
                self._patterns.append((re.compile(ms.pattern, re.IGNORECASE), ms.name))
        self.single = not config.models
        self.default: Policy | None = (
            next(iter(self.policies.values()))
            if self.single
            else (self.policies[config.default_model_set] if config.default_model_set else None)
        )
        self.largest: PoolConfig = config.pools_by_size[-1]
        self._owner = {p.name: pol for pol in self.policies.values() for p in pol.pools}
        self._cache: dict[str, Policy | None] = {}

    def select(self, model: str) -> Policy | None:
        """The policy of the set serving ``model``; None when no set serves it and there is no
        default set (the caller then routes to :attr:`largest` with reason ``unknown_model``)."""
        if self.single:
            return self.default
        if model in self._cache:
            return self._cache[model]
        name = self._exact.get(model)
        if name is None:
            name = next((n for rx, n in self._patterns if rx.search(model)), None)
        policy = self.policies[name] if name is not None else self.default
        if len(self._cache) < _CACHE_MAX:
            self._cache[model] = policy
        return policy

    def known(self, model: str) -> bool:
        """Whether a set names or matches ``model`` (always True without ``models``)."""
        if self.single:
            return True
        return model in self._exact or any(rx.search(model) for rx, _ in self._patterns)

    def fallback_for(self, model: str | None) -> PoolConfig:
        """Largest pool of ``model``'s set (of the default set, else of all pools, when unknown)."""
        policy = self.select(model) if model is not None else self.default
        if policy is None:
            policy = self.default
        return policy.fallback if policy is not None else self.largest

    def next_larger(self, pool_name: str) -> PoolConfig | None:
        """The next larger pool of the same set (None for a set's largest or an unknown pool)."""
        policy = self._owner.get(pool_name)
        return policy.next_larger(pool_name) if policy is not None else None

    def pool(self, pool_name: str) -> PoolConfig | None:
        """The pool named ``pool_name``, or None."""
        policy = self._owner.get(pool_name)
        return policy.pool(pool_name) if policy is not None else None
