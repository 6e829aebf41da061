"""Run the estimator and its baselines over a replay and summarise fidelity (JSON-able dicts).

Strategies (all but ``fixed4_body`` run through the router's own :class:`~extproc.estimator.Estimator`):

* ``ours``: the shipped defaults (per-model framing, digits, per-family priors, per-category
  weighted quantile learner).
* ``paper``: per-category EMA with ``c* = ĉ − γσ̂`` (arXiv 2604.09613 §3.3), the authors' code
  constants (β = 0.995, warm-up 10, prior 4.0), framing folded into the ratio, no digit model.
* ``global_ema``: the same with a single ratio for all traffic.
* ``fixed4``: 4.0 bytes/token of decoded message text, never learned.
* ``fixed4_body``: 4.0 bytes/token of the raw request body (the naive router).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.evaluation.metrics import (
    abs_error_percentiles,
    convergence_requests,
    hindsight_fixed_ratios,
    misroutes,
)
from extproc.evaluation.replay import ReplayItem, ReplayResult, Strategy, run_strategy

__all__ = ["baseline_strategies", "evaluate", "hindsight", "ours", "paper", "summarise", "sweep"]

LARGE_PROMPT_TOKENS = 1000
"""Requests at least this long are where the p90 |error| target applies."""

_PAPER_ESTIMATOR = EstimatorConfig(
    family_priors=False,
    prior_bytes_per_token=4.0,
    model_profiles=(),
    message_framing_tokens=0,
    request_framing_tokens=0,
    tool_framing_tokens=0,
    count_digits=False,
)


def ours(calibration: CalibrationConfig | None = None, estimator: EstimatorConfig | None = None) -> Strategy:
    """The router's estimator with the given (default: shipped) configuration."""
    return Strategy(
        "ours",
        estimator if estimator is not None else EstimatorConfig(),
        calibration if calibration is not None else CalibrationConfig(),
    )


def paper(gamma: float = 1.0, *, per_category: bool = True, name: str = "paper") -> Strategy:
    """The paper's calibration (see module docstring) with ``γ``."""
    est = _PAPER_ESTIMATOR.model_copy(update={"per_category": per_category})
    cal = CalibrationConfig(learner="ema_dev", ema_beta=0.995, gamma=gamma, warmup_samples=10)
    return Strategy(name, est, cal)


def baseline_strategies(paper_gamma: float = 1.0) -> list[Strategy]:
    """``paper``, ``global_ema``, ``fixed4`` and ``fixed4_body``."""
    fixed_cal = CalibrationConfig(warmup_samples=1 << 30)
    return [
        paper(paper_gamma),
        paper(paper_gamma, per_category=False, name="global_ema"),
        Strategy(
            "fixed4", _PAPER_ESTIMATOR.model_copy(update={"per_category": False}), fixed_cal, learns=False
        ),
        Strategy("fixed4_body", body_ratio=4.0, learns=False),
    ]


def _pcts(v: tuple[float, ...]) -> dict[str, float]:
    return {"p50": v[0], "p90": v[1], "p99": v[2]}


def _block(res: ReplayResult, mask: np.ndarray, thresholds: Iterable[int]) -> dict[str, Any]:
    large = mask & (res.true_prompt >= LARGE_PROMPT_TOKENS)
    out: dict[str, Any] = {
        "n": int(mask.sum()),
        "abs_error": _pcts(abs_error_percentiles(res.est_prompt[mask], res.true_prompt[mask])),
        "abs_error_central": _pcts(abs_error_percentiles(res.central_prompt[mask], res.true_prompt[mask])),
        "n_large": int(large.sum()),
        "abs_error_large": _pcts(abs_error_percentiles(res.est_prompt[large], res.true_prompt[large])),
        "misroutes": {},
    }
    for b in thresholds:
        m = misroutes(res, b, mask)
        out["misroutes"][str(b)] = {
            "harmful": m.harmful,
            "wasteful": m.wasteful,
            "harmful_rate": m.harmful_rate,
            "wasteful_rate": m.wasteful_rate,
        }
    return out


def summarise(res: ReplayResult, thresholds: list[int], *, detail: bool = True) -> dict[str, Any]:
    """Overall (and, with ``detail``, per category and per source group) metrics of one replay."""
    everything = np.ones(len(res.true_prompt), dtype=bool)
    out: dict[str, Any] = {"overall": _block(res, everything, thresholds)}
    if detail:
        cats = np.asarray(res.category)
        groups = np.asarray(res.group)
        out["per_category"] = {}
        for cat in sorted(set(res.category)):
            block = _block(res, cats == cat, thresholds)
            traj = res.trajectories.get(cat, [])
            block["convergence_requests"] = convergence_requests(traj)
            block["final_ratio_bpt"] = traj[-1] if traj else None
            out["per_category"][cat] = block
        out["per_group"] = {g: _block(res, groups == g, thresholds) for g in sorted(set(res.group))}
    return out


def hindsight(res: ReplayResult) -> dict[str, Any]:
    """Target 3: p90 |error| of the learner after warm-up on requests ≥ 1,000 tokens against the
    best fixed per-category ratio chosen with hindsight on the same requests."""
    mask = res.warm & (res.true_prompt >= LARGE_PROMPT_TOKENS)
    if not mask.any():
        return {"n": 0}
    ratios = hindsight_fixed_ratios(res, mask)
    cats = np.asarray(res.category)
    est_h = np.zeros(len(cats), dtype=np.float64)
    for cat, c in ratios.items():
        sel = cats == cat
        est_h[sel] = np.ceil(res.ratio_bytes[sel] / c) + res.fixed[sel]
    p90_h = abs_error_percentiles(est_h[mask], res.true_prompt[mask])[1]
    p90_c = abs_error_percentiles(res.central_prompt[mask], res.true_prompt[mask])[1]
    p90_r = abs_error_percentiles(res.est_prompt[mask], res.true_prompt[mask])[1]
    return {
        "n": int(mask.sum()),
        "hindsight_ratios_bpt": ratios,
        "p90_hindsight": p90_h,
        "p90_learner_central": p90_c,
        "p90_learner_routing": p90_r,
        "central_over_hindsight": p90_c / p90_h if p90_h > 0 else math.inf,
        "routing_over_hindsight": p90_r / p90_h if p90_h > 0 else math.inf,
    }


def evaluate(
    items: list[ReplayItem],
    thresholds: list[int],
    strategies: list[Strategy],
    *,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """Replay ``items`` through each strategy; per-strategy summaries plus the hindsight check."""
    out: dict[str, Any] = {"n": len(items), "strategies": {}}
    for s in strategies:
        if progress is not None:
            progress(s.name)
        res = run_strategy(items, s)
        out["strategies"][s.name] = summarise(res, thresholds)
        if s.name == "ours":
            out["hindsight"] = hindsight(res)
    return out


def sweep(
    items: list[ReplayItem],
    thresholds: list[int],
    *,
    base: CalibrationConfig | None = None,
    grid: dict[str, list[Any]] | None = None,
    paper_gammas: list[float] | None = None,
) -> list[dict[str, Any]]:
    """One-at-a-time sweep of the calibration parameters of ``ours`` around ``base``, plus the
    paper's γ frontier. Each row: strategy, parameter, value, overall metrics."""
    cal = base if base is not None else CalibrationConfig()
    default_grid: dict[str, list[Any]] = {
        "quantile": [0.005, 0.01, 0.02, 0.05, 0.1],
        "quantile_step": [0.02, 0.05, 0.1, 0.2],
        "weight_ref_tokens": [0, 256, 1024, 4096],
        "warmup_samples": [1, 3, 10, 30],
        "ema_beta": [0.8, 0.9, 0.95, 0.99],
        "initial_margin": [0.05, 0.15, 0.3],
    }
    rows: list[dict[str, Any]] = []
    for param, values in (grid if grid is not None else default_grid).items():
        for v in values:
            res = run_strategy(items, ours(cal.model_copy(update={param: v})))
            row = {"strategy": "ours", "param": param, "value": v}
            row.update(summarise(res, thresholds, detail=False)["overall"])
            row["hindsight"] = hindsight(res)
            rows.append(row)
    for g in paper_gammas if paper_gammas is not None else [0.0, 0.5, 1.0, 2.0, 3.0, 4.0]:
        res = run_strategy(items, paper(g))
        row = {"strategy": "paper", "param": "gamma", "value": g}
        row.update(summarise(res, thresholds, detail=False)["overall"])
        rows.append(row)
    return rows
