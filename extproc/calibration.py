"""Online calibration of bytes-per-token ratios (arXiv 2604.09613 §3.3).

On each response with ``usage.prompt_tokens`` the router observes
``c_obs = text_bytes / text_tokens`` for the request's (model, category) key and updates

* ``ĉ ← β ĉ + (1 − β) c_obs`` (EMA of the ratio), and
* ``σ̂ ← β σ̂ + (1 − β) |c_obs − ĉ_prev|`` (EMA of the absolute deviation, against the
  pre-update mean),

and routes with the conservative ``c* = ĉ − γ σ̂`` once ``samples ≥ warmup``. The first
observation initialises ``ĉ = c_obs`` and ``σ̂ = c_obs · initial_rel_dev``.

:class:`RatioStore` is the interface the request path uses; it is synchronous and in-memory
(the shared Redis store of ``extproc.redis_store`` keeps a local copy and syncs in the
background). All ratios are bytes per token.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Protocol

__all__ = [
    "INITIAL_REL_DEV",
    "InMemoryRatioStore",
    "RatioKey",
    "RatioState",
    "RatioStore",
    "ema_update",
]

INITIAL_REL_DEV = 0.1
"""σ̂ after the first observation, as a fraction of it (no deviation is known yet)."""

RatioKey = tuple[str, str]
"""(model key, category)."""


@dataclass(frozen=True, slots=True)
class RatioState:
    """Learned ratio of one key: EMA mean ``mean_bpt``, EMA abs deviation ``dev_bpt``, count."""

    mean_bpt: float
    dev_bpt: float
    samples: int


def ema_update(state: RatioState | None, c_obs: float, beta: float) -> RatioState:
    """Fold one observation into a ratio state (formulas in the module docstring).

    Args:
        state: the current state, or None for a key never observed.
        c_obs: observed bytes per token (> 0, finite).
        beta: EMA decay β in [0, 1).

    Raises:
        ValueError: ``c_obs`` is not a positive finite number.
    """
    if not (c_obs > 0.0 and math.isfinite(c_obs)):
        raise ValueError(f"c_obs must be positive and finite, got {c_obs!r}")
    if state is None or state.samples == 0:
        return RatioState(c_obs, c_obs * INITIAL_REL_DEV, 1)
    mean = beta * state.mean_bpt + (1.0 - beta) * c_obs
    dev = beta * state.dev_bpt + (1.0 - beta) * abs(c_obs - state.mean_bpt)
    return RatioState(mean, dev, state.samples + 1)


class RatioStore(Protocol):
    """Where learned ratios live. Implementations must be cheap to read on the request path."""

    def get(self, key: RatioKey) -> RatioState | None:
        """The current state of ``key``, or None when never observed."""
        ...

    def observe(self, key: RatioKey, c_obs: float) -> RatioState:
        """Fold one observation in and return the new state."""
        ...

    def items(self) -> list[tuple[RatioKey, RatioState]]:
        """Every key with its state (admin view, metrics, snapshots)."""
        ...


class InMemoryRatioStore:
    """Process-local :class:`RatioStore` with optional JSON snapshot persistence.

    Args:
        beta: EMA decay β.
    """

    def __init__(self, *, beta: float) -> None:
        self.beta = beta
        self._states: dict[RatioKey, RatioState] = {}

    def get(self, key: RatioKey) -> RatioState | None:
        """See :meth:`RatioStore.get`."""
        return self._states.get(key)

    def observe(self, key: RatioKey, c_obs: float) -> RatioState:
        """See :meth:`RatioStore.observe`."""
        new = ema_update(self._states.get(key), c_obs, self.beta)
        self._states[key] = new
        return new

    def put(self, key: RatioKey, state: RatioState) -> None:
        """Replace the state of ``key`` (used when syncing from a shared store)."""
        self._states[key] = state

    def items(self) -> list[tuple[RatioKey, RatioState]]:
        """See :meth:`RatioStore.items`."""
        return list(self._states.items())

    def save_snapshot(self, path: str | Path) -> None:
        """Atomically write every state to ``path`` as JSON (write to a temp file, then rename).

        Raises:
            OSError: the directory is not writable.
        """
        p = Path(path)
        rows = [{"model": k[0], "category": k[1], **asdict(s)} for k, s in sorted(self._states.items())]
        fd, tmp = tempfile.mkstemp(prefix=".ratios-", dir=str(p.parent or Path(".")))
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump({"version": 1, "ratios": rows}, fh, indent=1)
            os.replace(tmp, p)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def load_snapshot(self, path: str | Path) -> int:
        """Restore states from a snapshot written by :meth:`save_snapshot`.

        Returns the number of keys restored. A missing file restores nothing (returns 0).

        Raises:
            ValueError: the file exists but is not a valid snapshot (nothing is restored).
        """
        p = Path(path)
        if not p.exists():
            return 0
        try:
            data = json.loads(p.read_text(encoding="utf-8"))
            rows = data["ratios"]
            states = {
                (str(r["model"]), str(r["category"])): RatioState(
                    float(r["mean_bpt"]), float(r["dev_bpt"]), int(r["samples"])
                )
                for r in rows
            }
        except (ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"invalid ratio snapshot {p}: {exc}") from exc
        for state in states.values():
            if not (state.mean_bpt > 0 and math.isfinite(state.mean_bpt) and state.dev_bpt >= 0):
                raise ValueError(f"invalid ratio snapshot {p}: non-positive ratio")
        self._states.update(states)
        return len(states)
