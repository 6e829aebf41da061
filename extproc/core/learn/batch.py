"""Learning from ``/v1/chat/completions/batch``: one usage for many conversations.

vLLM's batch endpoint (``vllm/entrypoints/openai/chat_completion/batch_serving.py``) serves each
conversation as its own sequence and reports ``usage.prompt_tokens`` summed over them. The router
routes by the longest conversation's budget and learns the sum of the served prompt tokens against
the sum of the per-conversation estimates (:func:`batch_budget`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from extproc.core.estimate.estimator import TokenBudget

__all__ = ["batch_budget"]


def batch_budget(budgets: Sequence[TokenBudget]) -> TokenBudget | None:
    """One :class:`TokenBudget` whose byte and token counts are the sums over ``budgets``, for
    :meth:`~extproc.core.estimate.estimator.Estimator.observe` against the summed ``usage.prompt_tokens``.

    Returns None when ``budgets`` is empty or its conversations fall in different (model,
    category) keys: one observation cannot be split between ratios.
    """
    if not budgets or len({b.key for b in budgets}) != 1:
        return None
    first = budgets[0]
    media_keys = {b.media_key for b in budgets if b.n_media}
    return replace(
        first,
        text_bytes=sum(b.text_bytes for b in budgets),
        fixed_prompt_tokens=sum(b.fixed_prompt_tokens for b in budgets),
        prompt_tokens=sum(b.prompt_tokens for b in budgets),
        total_tokens=sum(b.total_tokens for b in budgets),
        modelled_units=sum(b.modelled_units for b in budgets),
        central_prompt_tokens=sum(b.central_prompt_tokens for b in budgets),
        model_tokens=sum(b.model_tokens for b in budgets),
        n_media=sum(b.n_media for b in budgets),
        media_tokens=sum(b.media_tokens for b in budgets),
        media_base_tokens=sum(b.media_base_tokens for b in budgets),
        # the members' one media key (not the first member's: it may have no media)
        media_key=media_keys.pop() if len(media_keys) == 1 else "",
        # With truncate_prompt_tokens the sum cannot tell which members vLLM cut: any served count
        # reaches this cap of 1, so such a batch is not learned from (Estimator.observe).
        prompt_cap_tokens=1 if any(b.prompt_cap_tokens for b in budgets) else 0,
    )
