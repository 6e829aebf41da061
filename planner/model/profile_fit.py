"""Fit the iteration-time model to measurements of a real engine (``tbr profile``).

Model (:mod:`planner.model.profiles`): one iteration takes ``t_iter = W + H·Σc + P·Σchunk`` seconds. A
sweep runs ``c`` identical requests at once (prompt ``L`` tokens, ``O`` output tokens, ``ignore_eos``):

- a decode iteration of that batch carries ``Σc = c·(L + O/2)`` context tokens and no prefill, so each
  request's time per output token is ``TPOT = W + H·c·(L + O/2)``;
- alone (``c = 1``) a prompt of ``L`` tokens takes ``k = ceil(L / chunk)`` prefill iterations, so
  ``TTFT = k·W + k·H·(L + O/2) + P·L`` (plus the server's fixed per-request overhead, which the fit
  puts into W's share of the prefill rows).

The three constants come from one non-negative least-squares fit of all rows, each divided by its
measured value so that milliseconds-long decode steps and second-long prefills weigh alike (relative
error). With three unknowns the non-negative optimum is found exactly by solving the unconstrained
least squares (``numpy.linalg.lstsq``) on every subset of {H, P} and keeping the best feasible one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = ["Measurement", "ProfileFit", "fit_iteration_model"]


@dataclass(frozen=True)
class Measurement:
    """One request of a sweep: ``concurrency`` requests ran together, each ``prompt_tokens`` in and
    ``completion_tokens`` out (vLLM's ``usage``); ``ttft_s`` and ``tpot_s`` measured by the client."""

    concurrency: int
    prompt_tokens: int
    completion_tokens: int
    ttft_s: float
    tpot_s: float


@dataclass(frozen=True)
class ProfileFit:
    """Fitted ``w_s``, ``h_s_per_kv_token``, ``p_s_per_prefill_token`` (seconds) and the fit's median
    and worst relative error on the TPOT and the (single-request) TTFT rows."""

    w_s: float
    h_s_per_kv_token: float
    p_s_per_prefill_token: float
    tpot_median_rel_error: float
    tpot_max_rel_error: float
    ttft_median_rel_error: float
    ttft_max_rel_error: float
    rows: int


def _rows(ms: list[Measurement], chunk_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    a, y, kind = [], [], []
    for m in ms:
        ctx = m.prompt_tokens + m.completion_tokens / 2.0
        if m.completion_tokens > 1 and m.tpot_s > 0:
            a.append([1.0, m.concurrency * ctx, 0.0])
            y.append(m.tpot_s)
            kind.append(0)
        if m.concurrency == 1 and m.ttft_s > 0:
            k = max(1, math.ceil(m.prompt_tokens / chunk_tokens))
            a.append([float(k), k * ctx, float(m.prompt_tokens)])
            y.append(m.ttft_s)
            kind.append(1)
    return np.asarray(a, dtype=np.float64), np.asarray(y, dtype=np.float64), np.asarray(kind)


def _nonnegative_lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin ||a x − y|| over x >= 0 for 3 columns, column 0 (W) always free: every subset of the
    other columns is solved unconstrained and the best all-non-negative solution kept."""
    best, best_res = np.zeros(a.shape[1]), math.inf
    for cols in ([0, 1, 2], [0, 1], [0, 2], [0]):
        x, *_ = np.linalg.lstsq(a[:, cols], y, rcond=None)
        if np.any(x < 0):
            continue
        full = np.zeros(a.shape[1])
        full[cols] = x
        res = float(np.sum((a @ full - y) ** 2))
        if res < best_res:
            best, best_res = full, res
    return best


def fit_iteration_model(ms: list[Measurement], chunk_tokens: int) -> ProfileFit:
    """Fit W, H, P (module docstring) to ``ms``; ``chunk_tokens`` is the engine's prefill chunk (vLLM:
    ``max_num_batched_tokens``). Raises ``ValueError`` when there are too few usable rows (at least two
    concurrencies of decode and one single-request TTFT are needed) or W comes out 0."""
    a, y, kind = _rows(ms, chunk_tokens)
    if (kind == 1).sum() < 1 or len({m.concurrency for m in ms if m.completion_tokens > 1}) < 2:
        raise ValueError(
            "too few measurements to fit: need decode timings at >= 2 concurrencies and >= 1 single-request TTFT"
        )
    w = 1.0 / y
    coef = _nonnegative_lstsq(a * w[:, None], y * w)
    if coef[0] <= 0:
        raise ValueError("the fit gave W = 0: the timings do not follow the iteration-time model")
    rel = np.abs(a @ coef - y) / y
    dec, pre = rel[kind == 0], rel[kind == 1]
    return ProfileFit(
        w_s=float(coef[0]),
        h_s_per_kv_token=float(coef[1]),
        p_s_per_prefill_token=float(coef[2]),
        tpot_median_rel_error=float(np.median(dec)),
        tpot_max_rel_error=float(np.max(dec)),
        ttft_median_rel_error=float(np.median(pre)),
        ttft_max_rel_error=float(np.max(pre)),
        rows=len(y),
    )
