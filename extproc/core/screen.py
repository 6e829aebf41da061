"""Route with bounded work when the exact estimate cannot change the decision.

The router needs the budget only to pick a pool: the smallest whose ``max_model_len`` holds it.
Two screens run before the exact estimate (:meth:`Estimator.estimate`, which counts every character's
run) and answer when the decision cannot depend on it; otherwise :func:`route_budget` falls back to
the exact estimate, so a screened decision equals the exact one by construction:

1. **Byte bound** (short prompts): a byte-level BPE tokenizer (Llama-3, Qwen, GPT cl100k/o200k) emits
   tokens that each cover at least one byte of the rendered prompt, and a SentencePiece tokenizer at
   least one character (byte fallback: one byte), so the text costs at most one token per UTF-8 byte.
   ``bound = rendered_bytes + template framing × 2 + token ids + BOUND_SLACK_TOKENS``; if ``bound +
   n_sequences · output_reserve`` fits the smallest pool, the request fits there whatever its text is.
   Requests with images or audio are never bounded (their token counts are not bytes).
2. **Windows** (long prompts, ≥ :data:`WINDOW_MIN_CHARS` characters): runs are counted in
   :data:`N_WINDOWS` evenly spaced windows of :data:`WINDOW_CHARS` characters and scaled to the
   text. If the windows differ in kind (some ASCII and some not, or whitespace per character more
   than :data:`MAX_WHITESPACE_SPREAD` apart: prose with a base64 blob, a table or another script in
   part of the text), or if any pool limit lies within ×/÷ (1 + :data:`WINDOW_MARGIN`) of the
   windowed prompt estimate, the exact estimate is used. The margin covers the largest gap measured
   between windowed and exact text tokens, ×1.58 on 234 windowed texts of the shared data (LongBench
   v2 slices, concatenated prompts) and the broad corpus (p1 0.85, median 1.00, p99 1.29), where a
   text's content kind flips between the windows and the whole (English-like or not, prose or code);
   ``tests/core/test_screen.py`` checks that screening changes no decision on them.

Screened budgets are for routing only: the router uses them for requests whose estimate nobody
reads (not sampled for calibration, no decision log). A bounded budget is in category
:data:`BOUND_CATEGORY`; it is never learned from.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from extproc.core.budget import TokenBudget
from extproc.core.estimator import Estimator
from extproc.core.request_body import RequestFeatures
from extproc.core.runs import RunCounts, count_runs

__all__ = [
    "BOUND_CATEGORY",
    "BOUND_SLACK_TOKENS",
    "MAX_WHITESPACE_SPREAD",
    "N_WINDOWS",
    "WINDOW_CHARS",
    "WINDOW_MARGIN",
    "WINDOW_MIN_CHARS",
    "bound_budget",
    "route_budget",
    "window_budget",
]

BOUND_CATEGORY = "bounded"
"""Category (metric label) of a request routed by the byte bound: no content kind was computed."""

BOUND_SLACK_TOKENS = 16
"""Tokens added to the byte bound beyond twice the modelled framing (BOS, a SentencePiece dummy
prefix per segment, template text the profile does not model)."""

N_WINDOWS = 8
WINDOW_CHARS = 2048
WINDOW_MIN_CHARS = 4 * N_WINDOWS * WINDOW_CHARS
"""Windows only for prompts of at least this many characters (the windows then cover ≤ 25 %)."""

WINDOW_MARGIN = 1.0
"""A windowed estimate decides only when no pool limit lies within ×/÷ (1 + margin) of it."""

MAX_WHITESPACE_SPREAD = 2.5
"""Largest ratio between the whitespace per character of two windows of one text (:func:`_alike`)."""


def bound_budget(est: Estimator, f: RequestFeatures) -> TokenBudget | None:
    """An upper bound of ``f``'s budget from its byte count alone (module docstring, screen 1).

    Returns None for requests with media parts (images, audio), whose tokens bytes do not bound.
    """
    if f.n_images or f.n_audio:
        return None
    model_key = est.model_key(f.model)
    fixed = est.fixed_tokens(f)
    framing = fixed - f.exact_prompt_tokens
    prompt = f.rendered_bytes + fixed + framing + BOUND_SLACK_TOKENS
    reserve = est.output_reserve_tokens(f)
    return TokenBudget(
        key=(model_key, BOUND_CATEGORY),
        ratio_bpt=1.0,
        text_bytes=f.text_bytes,
        fixed_prompt_tokens=fixed,
        prompt_tokens=prompt,
        output_reserve_tokens=reserve,
        n_sequences=f.n_sequences,
        total_tokens=prompt + f.n_sequences * reserve,
        warm=False,
        ratio_bytes=f.rendered_bytes,
        central_prompt_tokens=prompt,
        screened="bound",
    )


def _windows(text: str) -> list[str]:
    """:data:`N_WINDOWS` evenly spaced windows of :data:`WINDOW_CHARS` characters of ``text``."""
    step = (len(text) - WINDOW_CHARS) / (N_WINDOWS - 1)
    return [text[s : s + WINDOW_CHARS] for s in (round(i * step) for i in range(N_WINDOWS))]


def _alike(windows: list[str]) -> bool:
    """True when the windows look like one kind of text: all ASCII or none, and whitespace per
    character within :data:`MAX_WHITESPACE_SPREAD` of each other (prose ≈ 0.17, code 0.2–0.3, base64
    0.013, CSV and CJK ≈ 0: a blob, a table or another script in part of the text shows)."""
    ascii_windows = sum(w.isascii() for w in windows)
    if 0 < ascii_windows < len(windows):
        return False
    density = [(w.count(" ") + w.count("\n") + 1) / len(w) for w in windows]
    return max(density) <= MAX_WHITESPACE_SPREAD * min(density)


def window_budget(est: Estimator, f: RequestFeatures) -> TokenBudget | None:
    """The budget of ``f`` with its prompt text's runs counted in windows and scaled to the text
    (module docstring, screen 2); None for short texts and texts whose windows differ (:func:`_alike`)."""
    text = f.prompt_text
    if len(text) < WINDOW_MIN_CHARS:
        return None
    windows = _windows(text)
    if not _alike(windows):
        return None
    sample = "\n".join(windows)
    counts = count_runs(sample)
    scale = len(text) / len(sample)
    budget = est.estimate(f, RunCounts(counts.runs * scale, counts.chars * scale, counts.gaps * scale))
    return dataclasses.replace(budget, screened="windows")


def _decides(budget: TokenBudget, limits_tokens: Sequence[int], margin: float) -> bool:
    """True when every total within ×/÷ (1 + margin) of ``budget``'s prompt tokens (framing and
    media kept) fits exactly the same pools as ``budget`` itself."""
    text = budget.prompt_tokens - budget.fixed_prompt_tokens
    outside = budget.fixed_prompt_tokens + budget.n_sequences * budget.output_reserve_tokens
    lo = math.floor(text / (1.0 + margin)) + outside
    hi = math.ceil(text * (1.0 + margin)) + outside
    return not any(lo <= limit < hi for limit in limits_tokens)


def route_budget(est: Estimator, f: RequestFeatures, limits_tokens: Sequence[int]) -> TokenBudget:
    """The budget to route ``f`` on among pools of ``limits_tokens`` (their ``max_model_len``,
    ascending): the byte bound if it fits the smallest pool, else the windowed estimate if it
    decides, else the exact :meth:`Estimator.estimate`. The pool chosen is the exact estimate's,
    except that a bound fitting the smallest pool wins over an exact estimate that does not (the
    prompt provably fits).
    """
    if not limits_tokens:
        return est.estimate(f)
    bound = bound_budget(est, f)
    if bound is not None and bound.total_tokens <= limits_tokens[0]:
        return bound
    if est.cfg.cost_model == "runs":
        windowed = window_budget(est, f)
        if windowed is not None and _decides(windowed, limits_tokens, WINDOW_MARGIN):
            return windowed
    return est.estimate(f)
