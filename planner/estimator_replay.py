"""Replay the router's bytes-per-token estimator on real prompts to get realistic routing errors.

The router estimates ``L_total = ceil(bytes / c*_k) + output_reserve`` with an online per-category
EMA of bytes/token and a conservative ratio ``c* = ĉ − γ σ̂`` (method.md §3.1, §3.3, §3.6). Traces
carry token counts but no text, so each trace request borrows a real prompt's bytes/token ratio from
``shared/data/derived/request_token_counts.csv`` (compact UTF-8 body bytes / Llama-3 templated prompt
tokens, with its category), drawn uniformly with a seed: ``bytes = round(input_tokens * ratio)``.
The estimator then sees those bytes and learns from the true token count after each request
(feedback delay ignored). This mirrors ``extproc/estimator.py``; switch to importing it once the
router package is merged (it is not on this branch).
"""

from __future__ import annotations

import csv
import math
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from planner.trace import Trace, TraceError

__all__ = ["EstimatorParams", "load_prompt_ratios", "replay_estimates"]


@dataclass(frozen=True)
class EstimatorParams:
    """Estimator constants: prior 4.0 bytes/token, EMA β 0.995, warm-up 10 samples ([C1]); γ = 1."""

    prior_bytes_per_token: float = 4.0
    beta: float = 0.995
    gamma: float = 1.0
    min_samples: int = 10
    min_ratio: float = 0.5


def load_prompt_ratios(path: str | Path, tokenizer: str = "llama3") -> list[tuple[str, float]]:
    """``(category, body_bytes_compact_utf8 / <tokenizer>_prompt_tokens)`` for every row of the CSV.

    Raises :class:`TraceError` if the file is missing or lacks the columns.
    """
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"prompt counts file not found: {p}")
    out: list[tuple[str, float]] = []
    col = f"{tokenizer}_prompt_tokens"
    with p.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        if reader.fieldnames is None or col not in reader.fieldnames:
            raise TraceError(f"{p}: column {col} missing")
        for row in reader:
            tok = int(row[col])
            if tok > 0:
                out.append((row["category"], int(row["body_bytes_compact_utf8"]) / tok))
    return out


def replay_estimates(
    trace: Trace, ratios: list[tuple[str, float]], *, seed: int, params: EstimatorParams | None = None
) -> npt.NDArray[np.int64]:
    """Estimated prompt tokens per request, shape ``(n,)``, from the online estimator (see module doc)."""
    prm = params or EstimatorParams()
    rng = random.Random(seed)
    state: dict[str, tuple[float, float, int]] = {}
    est = np.empty(len(trace), dtype=np.int64)
    for i, tokens in enumerate(trace.input_tokens.tolist()):
        cat, ratio = ratios[rng.randrange(len(ratios))]
        nbytes = max(1, round(tokens * ratio))
        m, d, n = state.get(cat, (prm.prior_bytes_per_token, 0.0, 0))
        c_star = prm.prior_bytes_per_token if n < prm.min_samples else max(prm.min_ratio, m - prm.gamma * d)
        est[i] = max(1, math.ceil(nbytes / c_star))
        c_obs = nbytes / tokens
        if n == 0:
            m, d = c_obs, 0.0
        else:
            d = prm.beta * d + (1 - prm.beta) * abs(c_obs - m)
            m = prm.beta * m + (1 - prm.beta) * c_obs
        state[cat] = (m, d, n + 1)
    return est
