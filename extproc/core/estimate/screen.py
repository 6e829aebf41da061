"""Route a short request without counting its text when no estimate could change the pool.

The router needs the budget only to pick a pool: the smallest whose ``max_model_len`` holds it. A
byte-level BPE tokenizer (Llama-3, Qwen, GPT cl100k/o200k) emits tokens that each cover at least one
byte of the rendered prompt, and a SentencePiece tokenizer at least one character (byte fallback: one
byte), so prompt text costs at most one token per UTF-8 byte. The **byte bound**

``bound = rendered_bytes + token ids + 2 × template framing + BOUND_SLACK_TOKENS``

(:attr:`RequestFeatures.rendered_bytes`: every string the template may render, reasoning and spaced
tool schemas included) is therefore never under the true prompt; if ``bound + n_sequences ·
output_reserve`` fits the smallest pool, the request fits there whatever its text is, and
:func:`route_budget` returns the bound without counting runs (the estimator's main cost: ~20 of the
~30 µs of parsing and budgeting a 1 KB chat body). Requests with images or audio are never bounded
(their tokens are not bytes). ``tests/core/estimate/test_screen.py`` checks the bound against the real
Llama-3 and Qwen3 tokenizers and templates on adversarial and real text.

A bounded budget is for routing only: the router uses it for requests whose estimate nobody reads
(not sampled for calibration, no decision log, no OpenTelemetry records; ``estimator.screen``). Its
category is :data:`BOUND_CATEGORY` and it is never learned from. For longer prompts
:func:`route_budget` is the exact :meth:`Estimator.estimate`. (Counting runs in windows of long texts
was measured and dropped: BENCHMARKS.md §Estimator cost.)
"""

from __future__ import annotations

from collections.abc import Sequence

from extproc.core.estimate.budget import TokenBudget
from extproc.core.estimate.estimator import Estimator
from extproc.core.request.request_body import RequestFeatures

__all__ = ["BOUND_CATEGORY", "BOUND_SLACK_TOKENS", "bound_budget", "route_budget"]

BOUND_CATEGORY = "bounded"
"""Category (metric label) of a request routed by the byte bound: no content kind was computed."""

BOUND_SLACK_TOKENS = 16
"""Tokens added to the byte bound beyond twice the modelled framing (BOS, a SentencePiece dummy
prefix, template text the profile does not model)."""


def bound_budget(est: Estimator, f: RequestFeatures) -> TokenBudget | None:
    """An upper bound of ``f``'s budget from its byte count alone (module docstring).

    Returns None for requests with media parts (images, audio), whose tokens bytes do not bound.
    """
    if f.n_images or f.n_audio:
        return None
    model_key = est.model_key(f.model)
    fixed = est.fixed_tokens(f)
    framing = fixed - f.exact_prompt_tokens
    prompt = f.rendered_bytes + fixed + framing + BOUND_SLACK_TOKENS
    return est.budget_for(
        f,
        key=(model_key, BOUND_CATEGORY),
        routing_ratio=1.0,
        fixed_prompt_tokens=fixed,
        prompt_tokens=prompt,
        warm=False,
        ratio_bytes=f.rendered_bytes,
        central_prompt_tokens=prompt,
        screened="bound",
    )


def route_budget(est: Estimator, f: RequestFeatures, limits_tokens: Sequence[int]) -> TokenBudget:
    """The budget to route ``f`` on among pools of ``limits_tokens`` (their ``max_model_len``,
    ascending): the byte bound if it fits the smallest pool, else the exact
    :meth:`Estimator.estimate`. The pool chosen is the exact estimate's, except that a bound
    fitting the smallest pool wins over an exact estimate that does not (the prompt provably fits).
    """
    if not limits_tokens:
        return est.estimate(f)
    bound = bound_budget(est, f)
    if bound is not None and bound.total_tokens <= limits_tokens[0]:
        return bound
    return est.estimate(f)
