"""The natural answer length of a stand-in pool's requests (issue 30 item 6).

A real model answers with a length of its own (a chat model a few hundred tokens, a thinking
model thousands), and vLLM cuts it at ``max_tokens`` or ``max_model_len − prompt``. The stand-in
draws that length per request from a seeded distribution (``tbr mock-pool
--natural-output-tokens``) or reads it from the request (:data:`NATURAL_TOKENS_HEADER`, tests), so
the router's output budget can be wrong in the demo and the tests the way it is in production.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping

__all__ = ["NATURAL_TOKENS_HEADER", "NaturalLengths", "parse_natural_spec"]

NATURAL_TOKENS_HEADER = "x-tbr-test-natural-tokens"
"""Request header (tests): the natural answer length of this request in tokens, a decimal integer
in ``[0, 10_000_000]``; any other value is ignored (the pool's own draw is used)."""

_MAX_NATURAL = 10_000_000


def parse_natural_spec(spec: str) -> tuple[str, float, float]:
    """``"fixed:N"`` or ``"lognormal:MEDIAN:SIGMA"`` → ``(kind, a, b)`` (tokens; ``b`` = 0 for fixed).

    ``lognormal:MEDIAN:SIGMA``: ``exp(N(ln MEDIAN, SIGMA))`` rounded, the usual shape of answer
    lengths (e.g. ``lognormal:300:1.0`` for chat, a thinking model's ``lognormal:5000:0.3``).

    Raises:
        ValueError: any other form, a non-positive median, a negative sigma or N outside
            ``[0, 10_000_000]``.
    """
    parts = spec.split(":")
    try:
        if parts[0] == "fixed" and len(parts) == 2:
            n = int(parts[1])
            if not 0 <= n <= _MAX_NATURAL:
                raise ValueError
            return "fixed", float(n), 0.0
        if parts[0] == "lognormal" and len(parts) == 3:
            median, sigma = float(parts[1]), float(parts[2])
            if not (0 < median <= _MAX_NATURAL and 0 <= sigma <= 10 and math.isfinite(median)):
                raise ValueError
            return "lognormal", median, sigma
    except ValueError:
        pass
    raise ValueError(f"natural output tokens must be fixed:N or lognormal:MEDIAN:SIGMA, got {spec!r}")


class NaturalLengths:
    """The natural answer length of each request of one pool (tokens), reproducible from a seed.

    Args:
        spec: ``""`` (always ``fixed_tokens``) or a :func:`parse_natural_spec` form
            (``PoolSettings.natural_output_tokens``).
        fixed_tokens: the length without a spec (``PoolSettings.output_tokens``).
        seed: seed of the draws (``PoolSettings.natural_output_seed``).

    Raises:
        ValueError: a bad ``spec``.
    """

    def __init__(self, spec: str, fixed_tokens: int, seed: int) -> None:
        self._fixed = fixed_tokens
        self._spec = parse_natural_spec(spec) if spec else None
        self._rng = random.Random(seed)

    def draw(self, headers: Mapping[str, str] | None = None) -> int:
        """The next request's natural length: its :data:`NATURAL_TOKENS_HEADER` when valid, else
        the pool's (one draw of the seeded sequence per request)."""
        raw = headers.get(NATURAL_TOKENS_HEADER) if headers is not None else None
        if raw is not None and raw.strip().isdigit() and int(raw) <= _MAX_NATURAL:
            return int(raw)
        if self._spec is None:
            return self._fixed
        kind, a, b = self._spec
        if kind == "fixed":
            return int(a)
        return min(_MAX_NATURAL, max(0, round(math.exp(self._rng.gauss(math.log(a), b)))))
