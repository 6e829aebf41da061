"""Fit the iteration-time model to measurements of a real engine (``tbr profile``).

Model (:mod:`planner.model.profiles`): one iteration of ``n`` running sequences takes
``t_iter = W + S·n + H·Σc + P·Σchunk`` seconds. A sweep runs ``c`` identical requests at once (prompt
``L`` tokens, ``O`` output tokens, ``ignore_eos``):

- a decode iteration of that batch carries ``Σc = c·(L + O/2)`` context tokens and no prefill, so each
  request's time per output token is ``TPOT = W + S·c + H·c·(L + O/2)``;
- alone (``c = 1``) a prompt of ``L`` tokens takes ``k = ceil(L / chunk)`` prefill iterations, so
  ``TTFT = R + k·(W + S) + k·H·(L + O/2) + P·L + A·L²/2`` (A: prefill attention, each prompt token
  attending to the ones before it), where ``R`` is the server's fixed per-request time
  outside the iterations (HTTP, tokenising, handing the request to the engine, streaming the first
  token back): ``request_overhead_s`` of the profile, which the simulator adds to every TTFT.

S is the per-sequence work of an iteration that does not grow with the context (sampling, the output
projection over the vocabulary): on the CPU engine it is most of a decode step (issue 32 item 3).

The six constants come from one non-negative least-squares fit of all rows, each divided by its
measured value so that milliseconds-long decode steps and second-long prefills weigh alike (relative
error). The non-negative optimum is found exactly by solving the unconstrained least squares
(``numpy.linalg.lstsq``) on every subset of {H, P, R, S, A} and keeping the best feasible one.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

__all__ = ["Measurement", "ProfileFit", "fit_iteration_model", "fit_rows"]


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
    """Fitted ``w_s``, ``h_s_per_kv_token``, ``p_s_per_prefill_token``, ``request_overhead_s``,
    ``s_s_per_running_seq``, ``a_s_per_prefill_context_token`` (seconds) and the fit's median and worst relative error on the TPOT and the (single-request) TTFT
    rows."""

    w_s: float
    h_s_per_kv_token: float
    p_s_per_prefill_token: float
    request_overhead_s: float
    s_s_per_running_seq: float
    a_s_per_prefill_context_token: float
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
            a.append([1.0, m.concurrency * ctx, 0.0, 0.0, float(m.concurrency), 0.0])
            y.append(m.tpot_s)
            kind.append(0)
        if m.concurrency == 1 and m.ttft_s > 0:
            k = max(1, math.ceil(m.prompt_tokens / chunk_tokens))
            a.append([float(k), k * ctx, float(m.prompt_tokens), 1.0, float(k), m.prompt_tokens**2 / 2.0])
            y.append(m.ttft_s)
            kind.append(1)
    return np.asarray(a, dtype=np.float64), np.asarray(y, dtype=np.float64), np.asarray(kind)


def _nonnegative_lstsq(a: np.ndarray, y: np.ndarray) -> np.ndarray:
    """argmin ||a x − y|| over x >= 0, column 0 (W) always free: every subset of the
    other columns is solved unconstrained and the best all-non-negative solution kept."""
    best, best_res = np.zeros(a.shape[1]), math.inf
    others = range(1, a.shape[1])
    subsets = [[0, *c] for r in range(len(others), -1, -1) for c in itertools.combinations(others, r)]
    for cols in subsets:
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
    """Fit W, H, P, R, S, A (module docstring) to ``ms``; ``chunk_tokens`` is the engine's prefill chunk (vLLM:
    ``max_num_batched_tokens``). Raises ``ValueError`` when there are too few usable rows (at least two
    concurrencies of decode and one single-request TTFT are needed) or W comes out 0."""
    a, y, kind = _rows(ms, chunk_tokens)
    if (kind == 1).sum() < 1 or len({m.concurrency for m in ms if m.completion_tokens > 1}) < 2:
        raise ValueError(
            "too few measurements to fit: need decode timings at >= 2 concurrencies and >= 1 single-request TTFT"
        )
    return fit_rows(a, y, kind)


def fit_rows(
    a: npt.NDArray[np.float64], y: npt.NDArray[np.float64], kind: npt.NDArray[np.int64]
) -> ProfileFit:
    """Relative-error non-negative least squares of ``a @ [W, H, P, R, S, A] = y`` (``a`` shape ``(m, 6)``, ``y``
    seconds, ``kind`` 0 for a decode-time row and 1 for a prefill/TTFT row, shape ``(m,)``). Raises
    ``ValueError`` when W comes out 0 or a kind has no row."""
    if not ((kind == 0).any() and (kind == 1).any()) or np.any(y <= 0):
        raise ValueError("the fit needs decode and prefill rows with positive times")
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
        request_overhead_s=float(coef[3]),
        s_s_per_running_seq=float(coef[4]),
        a_s_per_prefill_context_token=float(coef[5]),
        tpot_median_rel_error=float(np.median(dec)),
        tpot_max_rel_error=float(np.max(dec)),
        ttft_median_rel_error=float(np.median(pre)),
        ttft_max_rel_error=float(np.max(pre)),
        rows=len(y),
    )
