"""Route a request without counting all of its text when no estimate could change the pool.

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

For longer prompts :func:`route_budget` counts the text in prefixes (:class:`PieceCounter`) and
stops once the budget is certain to exceed the largest pool, the **prefix bound**
(:func:`prefix_budget`). Modelled tokens are ``Σ_kind (a_kind · runs_kind + b_kind · chars_kind) +
a_gap · gaps`` with non-negative coefficients (:mod:`extproc.core.text.run_costs`), and the counts of the
whole text are those of a prefix plus those of the rest, so the prefix's tokens (each language group,
:data:`LANGUAGE_GROUPS`, at its cheapest kind, since the language tests decide on the whole text)
divided by the largest routing ratio of any content kind of the model bound the prompt from below;
the budget is at least that prompt (as vLLM holds it, ``truncate_prompt_tokens``) plus ``n_sequences
· output_reserve`` when the reserve does not depend on the prompt. Once it exceeds the largest pool,
so does the exact estimate: the same pool (the largest) and reason (``exceeds_all_pools``), without
counting the rest. A 512 KB prompt stops after about half its text. The other direction, certain to
fit a pool from a prefix, has no useful bound: a character of the rest may cost up to ~22 modelled
tokens (a run of the ``other`` kind), so only the byte bound settles it.

A bounded budget is for routing only: the router uses it for requests whose estimate nobody reads
(not sampled for calibration, no decision log, no OpenTelemetry records; ``estimator.screen``). Its
category is :data:`BOUND_CATEGORY` and it is never learned from; a request the read decision then
reads is estimated exactly (the adapter counts it again). Its ``prompt_tokens`` is the byte bound
(an upper bound) or the prefix bound (a lower one, over every pool: routed to the largest, where a
truncation is no misroute). When the pieces reach the end of the text undecided, their counts are the text's
(:meth:`PieceCounter.whole`) and the exact estimate uses them: nothing is counted twice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from extproc.core.estimate.budget import TokenBudget
from extproc.core.estimate.estimator import ALL_CATEGORY, Estimator
from extproc.core.request.request_body import RequestFeatures
from extproc.core.text.run_costs import RunCosts, run_costs
from extproc.core.text.runs import CONTENT_KINDS, LANGUAGE_GROUPS, PieceCounter, RunCounts

__all__ = [
    "BOUND_CATEGORY",
    "BOUND_SLACK_TOKENS",
    "MIN_PREFIX_CHARS",
    "bound_budget",
    "prefix_budget",
    "route_budget",
]

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
        modelled_units=f.rendered_bytes,
        central_prompt_tokens=prompt,
        screened="bound",
    )


MIN_PREFIX_CHARS = 131072
"""Prompts of fewer characters are counted whole: their C count takes under ~0.1 ms, and a text that
turns out not to be over every pool pays ~20 µs more in pieces (docs/performance.md §Routing cost
that grows with the body)."""
_FIRST_PIECE_SHARE = 0.25
"""The first piece: this share of the text."""
_MIN_GROWTH = 1.25
"""Each further piece ends at least this factor past the counted prefix."""


def _lower_tokens(costs: RunCosts, prefix: RunCounts) -> float:
    """A lower bound of the modelled tokens of a text whose prefix has the counts ``prefix`` (before
    the language tests): the prefix's tokens with each language group at its cheapest kind."""
    lower = float(prefix.runs @ costs.per_run + prefix.chars @ costs.per_char) + prefix.gaps * costs.per_gap
    runs, chars = prefix.runs.tolist(), prefix.chars.tolist()
    per_run, per_char = costs.per_run.tolist(), costs.per_char.tolist()
    for group in LANGUAGE_GROUPS:
        group_runs, group_chars = sum(runs[k] for k in group), sum(chars[k] for k in group)
        counted = sum(per_run[k] * runs[k] + per_char[k] * chars[k] for k in group)
        lower += min(per_run[k] * group_runs + per_char[k] * group_chars for k in group) - counted
    return lower


def prefix_budget(est: Estimator, f: RequestFeatures, limits_tokens: Sequence[int]) -> TokenBudget | None:
    """A routing budget of ``f`` over every pool of ``limits_tokens`` (``max_model_len``, ascending)
    from a prefix of its prompt text, once the prefix lower bound (module docstring) exceeds the
    largest pool; None when it does not (the text's run counts are then held by ``f``,
    :meth:`RequestFeatures.with_prompt_runs`, for the exact estimate), for requests with media
    parts, a text under :data:`MIN_PREFIX_CHARS` characters, no pools, or a cost table with a
    negative coefficient.

    The exact estimate's budget is at least the bound's, so it also exceeds every pool:
    ``policy.choose`` gives the same pool (the largest) and reason (``exceeds_all_pools``)
    (tests/core/estimate/test_screen_prefix.py). Its ``prompt_tokens`` is the lower bound.
    """
    text = f.prompt_text
    if f.n_images or f.n_audio or not limits_tokens or len(text) < MIN_PREFIX_CHARS:
        return None
    fr = est.framing_of(f.model)
    costs = run_costs(fr.family)
    if min(float(costs.per_run.min()), float(costs.per_char.min()), costs.per_gap) < 0.0:
        return None
    extra_tokens = 0.0  # reasoning and tool schemas: counted whole, as the estimate does
    if f.reasoning_runs is not None and fr.renders_reasoning:
        extra_tokens += float(costs.tokens_by_kind(f.reasoning_runs).sum())
    if f.tools_runs is not None:
        extra_tokens += float(costs.tokens_by_kind(f.tools_runs[1 if fr.tools_json_spaced else 0]).sum())
    fixed = est.fixed_tokens(f)
    cap = f.truncate_prompt_tokens or 0
    # the budget is at least the prompt held, plus n · the reserve when the reserve does not depend
    # on the prompt (a client maximum under the strict policy, or the default reserve)
    fixed_reserve = est.output_learner is None or (
        f.max_output_tokens is not None and est.cfg.output_reserve.policy == "strict"
    )
    reserve_total = f.n_sequences * est.output_reserve_tokens(f) if fixed_reserve else 0
    largest = limits_tokens[-1]
    if cap and cap + reserve_total <= largest:
        return None  # the pool holds at most cap prompt tokens: never over every pool
    counter = PieceCounter(text)
    counter.advance(int(len(text) * _FIRST_PIECE_SHARE))
    # The first piece's tokens per character (its letters as counted) over the whole text, at the
    # smallest ratio any key routes at (the plausibility floor): a guess of the most the prompt could
    # be. When even that stays in a pool, the rest is counted at once (the two pieces are the text's
    # counts).
    first = counter.prefix
    projected = (
        float(first.runs @ costs.per_run + first.chars @ costs.per_char) * len(text) / counter.counted_chars
    )
    if (projected + extra_tokens) / est.cfg.min_model_ratio + fixed + reserve_total <= largest:
        counter.advance(len(text))
    lower = _lower_tokens(costs, counter.prefix) if not counter.done else 0.0
    model_key = est.model_key(f.model)
    kinds = CONTENT_KINDS if est.cfg.per_category else (ALL_CATEGORY,)
    ratio_max = max(est.routing_ratio((model_key, kind))[0] for kind in kinds) if not counter.done else 1.0
    # modelled tokens the text must have for the budget to exceed the largest pool
    needed = (largest + 1 - reserve_total - fixed) * ratio_max - extra_tokens
    while not counter.done:
        prompt = math.ceil((lower + extra_tokens) * (1 - 1e-9) / ratio_max) + fixed
        if (min(prompt, cap) if cap else prompt) + reserve_total > largest:
            return est.budget_for(
                f,
                key=(model_key, BOUND_CATEGORY),
                routing_ratio=ratio_max,
                fixed_prompt_tokens=fixed,
                prompt_tokens=prompt,
                warm=False,
                modelled_units=round(lower),
                central_prompt_tokens=prompt,
                screened="prefix",
            )
        counted = counter.counted_chars
        if lower <= 0.0 or lower * len(text) < needed * counted:
            counter.advance(len(text))  # at the prefix's rate the whole text would not do: count the rest
        else:  # where the bound would pass, at the prefix's rate (a guess: the bound decides)
            counter.advance(max(int(counted * _MIN_GROWTH), int(counted * needed / lower * 1.02)) + 1)
        lower = _lower_tokens(costs, counter.prefix) if not counter.done else lower
    f.with_prompt_runs(counter.whole())
    return None


def route_budget(est: Estimator, f: RequestFeatures, limits_tokens: Sequence[int]) -> TokenBudget:
    """The budget to route ``f`` on among pools of ``limits_tokens`` (their ``max_model_len``,
    ascending): the byte bound if it fits the smallest pool, else the prefix bounds when they settle
    the pool (:func:`prefix_budget`), else the exact :meth:`Estimator.estimate`. The pool chosen is
    the exact estimate's, except that a bound fitting the smallest pool wins over an exact estimate
    that does not (the prompt provably fits).
    """
    if not limits_tokens:
        return est.estimate(f)
    bound = bound_budget(est, f)
    if bound is not None and bound.total_tokens <= limits_tokens[0]:
        return bound
    prefix = prefix_budget(est, f, limits_tokens)
    return prefix if prefix is not None else est.estimate(f)
