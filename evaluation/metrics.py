"""Fidelity metrics of a replay: misroutes per threshold, |error| percentiles, convergence,
and the best fixed per-category ratio chosen with hindsight.

Definitions (issue 4): at threshold B a request is a *harmful* misroute when its true total
(true prompt + reserve) exceeds B but the estimate sends it short (estimated total ≤ B), and a
*wasteful* one when its true total fits B but the estimate sends it long. Rates are fractions of
all replayed requests. |error| is ``|estimated − true| / true`` of prompt tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evaluation.replay import ReplayResult

__all__ = [
    "Misroutes",
    "abs_error_percentiles",
    "convergence_requests",
    "hindsight_fixed_ratios",
    "misroutes",
]


@dataclass(frozen=True, slots=True)
class Misroutes:
    """Counts at one threshold over ``n`` requests."""

    threshold_tokens: int
    n: int
    harmful: int
    wasteful: int

    @property
    def harmful_rate(self) -> float:
        """Harmful misroutes / requests."""
        return self.harmful / self.n if self.n else 0.0

    @property
    def wasteful_rate(self) -> float:
        """Wasteful misroutes / requests."""
        return self.wasteful / self.n if self.n else 0.0


def misroutes(res: ReplayResult, threshold_tokens: int, mask: np.ndarray | None = None) -> Misroutes:
    """Harmful and wasteful misroutes of ``res`` at B = ``threshold_tokens`` (optionally on a subset)."""
    true_total = res.true_total()
    est_total = res.est_total()
    sel = np.ones(len(true_total), dtype=bool) if mask is None else mask
    harmful = int(np.sum(sel & (true_total > threshold_tokens) & (est_total <= threshold_tokens)))
    wasteful = int(np.sum(sel & (true_total <= threshold_tokens) & (est_total > threshold_tokens)))
    return Misroutes(threshold_tokens, int(np.sum(sel)), harmful, wasteful)


def abs_error_percentiles(
    est: np.ndarray, true: np.ndarray, qs: tuple[float, ...] = (50, 90, 99)
) -> tuple[float, ...]:
    """Percentiles (numpy linear) of ``|est − true| / true``; NaNs when empty."""
    if len(true) == 0:
        return tuple(float("nan") for _ in qs)
    err = np.abs(est.astype(np.float64) - true) / np.maximum(true, 1)
    return tuple(float(v) for v in np.percentile(err, qs))


def convergence_requests(trajectory: list[float], tolerance: float = 0.05) -> int:
    """Observations until ĉ stays within ``tolerance`` of its final value (0 when empty).

    The count is 1 + the index of the last observation outside the band (so a learner already
    within the band after its first observation converges in 1).
    """
    if not trajectory:
        return 0
    final = trajectory[-1]
    outside = np.nonzero(np.abs(np.asarray(trajectory) / final - 1.0) > tolerance)[0]
    return int(outside[-1]) + 2 if len(outside) else 1


def hindsight_fixed_ratios(res: ReplayResult, mask: np.ndarray, grid_points: int = 400) -> dict[str, float]:
    """Per category, the fixed ratio minimising p90 |error| over the requests in ``mask``.

    The estimate of a fixed ratio c is ``ceil(modelled_units / c) + fixed`` (same framing and digit
    model as the router), searched on a grid of ``grid_points`` ratios from 0.5× to 1.5× of the
    category's median observed ratio.
    """
    cats = np.asarray(res.category)
    out: dict[str, float] = {}
    for cat in sorted(set(cats[mask])):
        sel = mask & (cats == cat)
        rb = res.modelled_units[sel].astype(np.float64)
        fixed = res.fixed[sel]
        true = res.true_prompt[sel]
        tok = np.maximum(true - fixed, 1)
        med = float(np.median(rb / tok))
        if not med > 0:
            continue
        grid = np.linspace(0.5 * med, 1.5 * med, grid_points)
        est = np.ceil(rb[None, :] / grid[:, None]) + fixed[None, :]
        p90 = np.percentile(np.abs(est - true[None, :]) / true[None, :], 90, axis=1)
        out[str(cat)] = float(grid[int(np.argmin(p90))])
    return out
