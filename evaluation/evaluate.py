"""Run the estimator and its baselines over a replay and summarise fidelity (JSON-able dicts).

Strategies (all but ``fixed4_body`` run through the router's own :class:`~extproc.core.estimate.estimator.Estimator`;
all but ``ours`` and ``fixed4_body`` cost the prompt text with the ``bytes`` baseline,
:mod:`evaluation.baselines.bytes_model`):

* ``ours``: the shipped defaults (run counts, per-model framing, per-(model, content kind) weighted
  quantile learner).
* ``bytes``: the router's cost model before the run counts: bytes/token per (model, category) with
  per-family priors, digits and punctuation costed outside the ratio, the same framing and learner.
* ``paper``: per-category EMA with ``c* = ĉ − γσ̂`` (arXiv 2604.09613; docs/method.md §3.3), the authors' code
  constants (β = 0.995, warm-up 10, prior 4.0), framing folded into the ratio, no digit or
  punctuation model.
* ``global_ema``: the same with a single ratio for all traffic.
* ``fixed4``: 4.0 bytes/token of decoded message text, never learned.
* ``fixed4_body``: 4.0 bytes/token of the raw request body (the naive router).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from evaluation.baselines.bytes_model import PAPER, BytesModelConfig
from evaluation.corpus import ReplayRequest
from evaluation.metrics import (
    abs_error_percentiles,
    convergence_requests,
    hindsight_fixed_ratios,
    misroutes,
)
from evaluation.replay import ReplayItem, ReplayResult, Strategy, build_items, run_strategy
from extproc.config import CalibrationConfig, EstimatorConfig

__all__ = [
    "baseline_strategies",
    "evaluate",
    "hindsight",
    "ours",
    "paper",
    "priors_from_replay",
    "seed_rows",
    "summarise",
    "sweep",
]

LARGE_PROMPT_TOKENS = 1000
"""Requests at least this long are where the p90 |error| target applies."""

WEIGHT_REF_TOKENS = CalibrationConfig().weight_ref_tokens
"""Observation weight reference of the hindsight conservative ratio (the shipped default)."""

_PAPER_ESTIMATOR = EstimatorConfig(
    model_profiles=(),
    message_framing_tokens=0,
    request_framing_tokens=0,
    tool_framing_tokens=0,
)
"""The router's side of the paper baselines: no framing (it is folded into the ratio)."""


def ours(calibration: CalibrationConfig | None = None, estimator: EstimatorConfig | None = None) -> Strategy:
    """The router's estimator with the given (default: shipped) configuration."""
    return Strategy(
        "ours",
        estimator if estimator is not None else EstimatorConfig(),
        calibration if calibration is not None else CalibrationConfig(),
    )


def paper(gamma: float = 1.0, *, per_category: bool = True, name: str = "paper") -> Strategy:
    """The paper's estimator and calibration (see module docstring) with ``γ``."""
    cal = CalibrationConfig(learner="ema_dev", ema_beta=0.995, gamma=gamma, warmup_samples=10)
    return Strategy(
        name, _PAPER_ESTIMATOR, cal, bytes_model=dataclasses.replace(PAPER, per_category=per_category)
    )


def baseline_strategies(paper_gamma: float = 1.0) -> list[Strategy]:
    """``bytes``, ``paper``, ``global_ema``, ``fixed4`` and ``fixed4_body``."""
    fixed_cal = CalibrationConfig(warmup_samples=1 << 30)
    return [
        Strategy("bytes", bytes_model=BytesModelConfig()),
        paper(paper_gamma),
        paper(paper_gamma, per_category=False, name="global_ema"),
        Strategy(
            "fixed4",
            _PAPER_ESTIMATOR,
            fixed_cal,
            learns=False,
            bytes_model=dataclasses.replace(PAPER, per_category=False),
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
            block["final_ratio"] = traj[-1] if traj else None
            out["per_category"][cat] = block
        out["per_group"] = {g: _block(res, groups == g, thresholds) for g in sorted(set(res.group))}
    return out


def _c_obs(res: ReplayResult) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(c_obs, weight, usable)`` per request, as :meth:`Estimator.observe` computes them."""
    ratio_tokens = (res.true_prompt - res.fixed).astype(np.float64)
    usable = (ratio_tokens > 0) & (ratio_tokens >= 0.5 * res.true_prompt) & (res.modelled_units > 0)
    c_obs = np.where(usable, res.modelled_units / np.maximum(ratio_tokens, 1.0), 0.0)
    weight = np.minimum(1.0, np.maximum(ratio_tokens, 0.0) / WEIGHT_REF_TOKENS)
    return c_obs, weight, usable


def _weighted_quantile(x: np.ndarray, w: np.ndarray, q: float) -> float:
    order = np.argsort(x)
    cw = np.cumsum(w[order])
    return float(x[order][min(len(x) - 1, int(np.searchsorted(cw, q * cw[-1])))])


def hindsight(res: ReplayResult, quantile: float | None = None) -> dict[str, Any]:
    """Target 3, measured on requests after warm-up (the key has ≥ ``warmup_samples``
    observations) whose true prompt is ≥ 1,000 tokens.

    * ``p90_learner_central``: p90 of ``|est − true| / true`` with the learner's **central**
      ratio ĉ (its accuracy: the quantity the target is about);
    * ``p90_learner_routing``: the same with the **routing** ratio c* (ĉ·exp(q), conservative by
      design);
    * ``p90_hindsight``: the best fixed per-category ratio chosen with hindsight (minimising the
      p90 on these very requests);
    * ``p90_hindsight_conservative``: a fixed per-category ratio at the weighted α-quantile of
      ``c_obs`` over the whole replay (hindsight counterpart of c*, α = ``quantile``, default the
      shipped one).
    """
    mask = res.warm & (res.true_prompt >= LARGE_PROMPT_TOKENS)
    if not mask.any():
        return {"n": 0}
    alpha = quantile if quantile is not None else CalibrationConfig().quantile
    ratios = hindsight_fixed_ratios(res, mask)
    cats = np.asarray(res.category)
    c_obs, weight, usable = _c_obs(res)
    est_h = np.zeros(len(cats), dtype=np.float64)
    est_hc = np.zeros(len(cats), dtype=np.float64)
    low: dict[str, float] = {}
    for cat, c in ratios.items():
        sel = cats == cat
        est_h[sel] = np.ceil(res.modelled_units[sel] / c) + res.fixed[sel]
        pool = sel & usable
        low[cat] = _weighted_quantile(c_obs[pool], weight[pool], alpha) if pool.any() else c
        est_hc[sel] = np.ceil(res.modelled_units[sel] / low[cat]) + res.fixed[sel]
    p90_h = abs_error_percentiles(est_h[mask], res.true_prompt[mask])[1]
    p90_hc = abs_error_percentiles(est_hc[mask], res.true_prompt[mask])[1]
    p90_c = abs_error_percentiles(res.central_prompt[mask], res.true_prompt[mask])[1]
    p90_r = abs_error_percentiles(res.est_prompt[mask], res.true_prompt[mask])[1]
    return {
        "n": int(mask.sum()),
        "hindsight_ratios": ratios,
        "hindsight_conservative_ratios": low,
        "quantile": alpha,
        "p90_hindsight": p90_h,
        "p90_hindsight_conservative": p90_hc,
        "p90_learner_central": p90_c,
        "p90_learner_routing": p90_r,
        "central_over_hindsight": p90_c / p90_h if p90_h > 0 else math.inf,
        "routing_over_hindsight": p90_r / p90_h if p90_h > 0 else math.inf,
        "routing_over_hindsight_conservative": p90_r / p90_hc if p90_hc > 0 else math.inf,
    }


def priors_from_replay(res: ReplayResult, percentile: float = 1.0) -> dict[str, float]:
    """Cold-start prior per category: the ``percentile`` (default 1st) of the per-request
    ``c_obs`` of the replay, rounded down to 0.1 (of the run model: modelled/true tokens, compare
    the cold corrections of ``extproc/core/text/run_costs.json``; of the ``bytes`` baseline: bytes/token,
    how :mod:`evaluation.baselines.priors` was made)."""
    cats = np.asarray(res.category)
    c_obs, _, usable = _c_obs(res)
    out: dict[str, float] = {}
    for cat in sorted(set(res.category)):
        sel = usable & (cats == cat)
        if sel.sum() >= 20:
            out[cat] = math.floor(10.0 * float(np.percentile(c_obs[sel], percentile))) / 10.0
    return out


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
            out["priors"] = priors_from_replay(res)
    return out


def sweep(
    items: list[ReplayItem],
    thresholds: list[int],
    *,
    base: CalibrationConfig | None = None,
    grid: dict[str, list[Any]] | None = None,
    estimator_grid: dict[str, list[Any]] | None = None,
    paper_gammas: list[float] | None = None,
) -> list[dict[str, Any]]:
    """One-at-a-time sweep of the calibration (``grid``) and estimator (``estimator_grid``)
    parameters of ``ours`` around the defaults, plus the paper's γ frontier (harmful vs wasteful
    as γ varies). Each row: strategy, parameter, value, overall metrics, hindsight check."""
    cal = base if base is not None else CalibrationConfig()
    default_grid: dict[str, list[Any]] = {
        "quantile": [0.02, 0.03, 0.05, 0.07, 0.1, 0.15],
        "quantile_step": [0.01, 0.02, 0.05, 0.1],
        "weight_ref_tokens": [0, 256, 1024, 4096],
        "warmup_samples": [1, 3, 10, 30],
        "ema_beta": [0.9, 0.95, 0.99, 0.995],
        "initial_margin": [0.05, 0.15, 0.3],
    }
    default_estimator_grid: dict[str, list[Any]] = {
        "per_category": [False, True],
        "prior_ramp_samples": [10, 50, 200],
        "first_observation_weight": [0.1, 0.25, 0.5],
    }
    rows: list[dict[str, Any]] = []

    def add(strategy: Strategy, name: str, param: str, value: Any, with_hindsight: bool) -> None:
        res = run_strategy(items, strategy)
        row: dict[str, Any] = {"strategy": name, "param": param, "value": value}
        row.update(summarise(res, thresholds, detail=False)["overall"])
        if with_hindsight:
            row["hindsight"] = hindsight(res, strategy.calibration.quantile)
        rows.append(row)

    for param, values in (grid if grid is not None else default_grid).items():
        for v in values:
            add(ours(cal.model_copy(update={param: v})), "ours", param, v, True)
    for param, values in (estimator_grid if estimator_grid is not None else default_estimator_grid).items():
        for v in values:
            add(ours(cal, EstimatorConfig().model_copy(update={param: v})), "ours", param, v, True)
    for g in paper_gammas if paper_gammas is not None else [0.0, 0.5, 1.0, 2.0, 3.0, 4.0, 6.0]:
        add(paper(g), "paper", "gamma", g, False)
    return rows


def seed_rows(
    requests: list[ReplayRequest],
    truth: list[int],
    model: str,
    seeds: list[int],
    thresholds: list[int],
    limit: int = 0,
) -> list[dict[str, Any]]:
    """The shipped defaults replayed once per seed (order, reserves, serialisations differ):
    overall metrics and the hindsight check per seed."""
    rows: list[dict[str, Any]] = []
    for seed in seeds:
        items = build_items(requests, truth, model=model, seed=seed, limit=limit)
        res = run_strategy(items, ours())
        row: dict[str, Any] = {"seed": seed}
        row.update(summarise(res, thresholds, detail=False)["overall"])
        row["hindsight"] = hindsight(res)
        rows.append(row)
    return rows
