"""Deterministic "generation": admission, hold, time to first token, per-token delay, token pieces.

Output text of a choice with ``k`` tokens is the first ``k`` entries of the cycle
:data:`mockpool.settings.OUTPUT_PIECES` (each exactly one token in the Qwen3 and the Llama-3 vocabulary).
A choice gets ``k = min(max_tokens, natural)`` tokens, where a missing ``max_tokens`` is
``max_model_len - prompt_tokens`` (vLLM's default) and ``natural`` is the length the model would
answer with if nothing stopped it (:class:`mockpool.natural.NaturalLengths`: ``settings.output_tokens``, or one draw
per request from ``settings.natural_output_tokens``, or the request's
:data:`mockpool.natural.NATURAL_TOKENS_HEADER`); ``finish_reason`` is ``"length"`` when ``k == max_tokens``, else
``"stop"``, as vLLM reports a cut answer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import dataclass

from mockpool.settings import OUTPUT_PIECES, PoolSettings
from mockpool.state import PoolState


@dataclass(frozen=True)
class ChoicePlan:
    """What one choice will generate: ``tokens`` pieces, then ``finish_reason``."""

    tokens: int
    finish_reason: str


def plan_choice(settings: PoolSettings, max_tokens: int, natural_tokens: int | None = None) -> ChoicePlan:
    """Tokens and finish reason for one choice given its effective ``max_tokens`` (≥ 1) and its
    natural length (``settings.output_tokens`` when None): ``"length"`` when ``max_tokens`` cut it."""
    natural = settings.output_tokens if natural_tokens is None else natural_tokens
    tokens = min(max_tokens, natural)
    return ChoicePlan(tokens, "length" if tokens >= max_tokens else "stop")


def piece(step: int) -> str:
    """Text of output token number ``step`` (0-based)."""
    return OUTPUT_PIECES[step % len(OUTPUT_PIECES)]


def full_text(tokens: int) -> str:
    """Whole output text of a choice with ``tokens`` tokens."""
    return "".join(piece(i) for i in range(tokens))


@dataclass(frozen=True)
class Started:
    """Event: the request was admitted, released and its first token is due."""


@dataclass(frozen=True)
class Token:
    """Event: output token ``step`` of choice ``choice`` with text ``text``."""

    choice: int
    step: int
    text: str


async def generate(
    state: PoolState, settings: PoolSettings, prompt_tokens: int, plans: list[ChoicePlan]
) -> AsyncGenerator[Started | Token, None]:
    """Run one request through the pool and yield :class:`Started` then its :class:`Token` events.

    Waits for a running slot (``max_num_seqs``), then for release if the pool is held, then
    ``time_to_first_token_s + prompt_tokens × prefill_s_per_token``, then emits one token per choice per
    step with ``inter_token_latency_s`` between steps. The slot and KV tokens are returned when the
    generator finishes or is closed/cancelled (client gone).
    """
    async with state.slot(prompt_tokens) as lease:
        await state.wait_released()
        ttft_s = settings.time_to_first_token_s + prompt_tokens * settings.prefill_s_per_token
        if ttft_s > 0:
            await asyncio.sleep(ttft_s)
        yield Started()
        steps = max((p.tokens for p in plans), default=0)
        for step in range(steps):
            if step and settings.inter_token_latency_s > 0:
                await asyncio.sleep(settings.inter_token_latency_s)
            await state.engine_step()
            for choice, plan in enumerate(plans):
                if step < plan.tokens:
                    lease.add(1)
                    yield Token(choice, step, piece(step))
