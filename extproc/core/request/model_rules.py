"""Per-model rules chosen by name: the first configured rule whose ``pattern`` is found in the
request's ``model`` (``re.search``, case-insensitive). Used for image and audio token rules."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Generic, Protocol, TypeVar

__all__ = ["ModelRules"]


class _HasPattern(Protocol):
    @property
    def pattern(self) -> str: ...


R = TypeVar("R", bound=_HasPattern)

_CACHED_NAMES = 1024


class ModelRules(Generic[R]):
    """The rule of each model name, first match wins.

    Args:
        rules: the configured rules, in order (patterns already validated by the config).
    """

    def __init__(self, rules: Sequence[R]) -> None:
        self._rules = [(re.compile(r.pattern, re.IGNORECASE), r) for r in rules]
        self._by_model: dict[str, R | None] = {}

    def rule(self, model: str) -> R | None:
        """The rule of ``model`` (cached for the first 1,024 names seen), or None."""
        if model in self._by_model:
            return self._by_model[model]
        found = next((r for rx, r in self._rules if rx.search(model)), None)
        if len(self._by_model) < _CACHED_NAMES:
            self._by_model[model] = found
        return found
