"""One observation for a chat batch (extproc/core/learn/batch.py): sums over the conversations of one key."""

from __future__ import annotations

from dataclasses import replace

from extproc.core.estimate.budget import TokenBudget
from extproc.core.learn.batch import batch_budget


def _budget(key: tuple[str, str], text_bytes: int, prompt: int, **extra: object) -> TokenBudget:
    b = TokenBudget(
        key=key,
        routing_ratio=0.95,
        text_bytes=text_bytes,
        fixed_prompt_tokens=10,
        prompt_tokens=prompt,
        output_reserve_tokens=64,
        n_sequences=1,
        total_tokens=prompt + 64,
        warm=True,
        modelled_units=text_bytes,
        central_prompt_tokens=prompt - 5,
        model_tokens=prompt * 0.9,
    )
    return replace(b, **extra)  # type: ignore[arg-type]


def test_conversations_of_one_key_sum_their_counts() -> None:
    a = _budget(("m", "latin"), 400, 110)
    b = _budget(("m", "latin"), 1000, 260, n_media=1, media_tokens=50, media_key="image:small")
    out = batch_budget([a, b])
    assert out is not None
    assert out.key == ("m", "latin")
    assert (out.text_bytes, out.prompt_tokens, out.total_tokens) == (1400, 370, 370 + 128)
    assert (out.fixed_prompt_tokens, out.modelled_units, out.central_prompt_tokens) == (20, 1400, 360)
    assert out.model_tokens == a.model_tokens + b.model_tokens
    assert (out.n_media, out.media_tokens, out.media_key) == (1, 50, "image:small")
    assert out.prompt_cap_tokens == 0


def test_mixed_keys_or_no_conversation_give_no_observation() -> None:
    assert batch_budget([]) is None
    assert batch_budget([_budget(("m", "latin"), 400, 110), _budget(("m", "han"), 400, 300)]) is None


def test_mixed_media_kinds_learn_no_media_key_and_a_cut_member_blocks_learning() -> None:
    a = _budget(("m", "latin"), 400, 110, n_media=1, media_key="image:small")
    b = _budget(("m", "latin"), 400, 110, n_media=1, media_key="audio:short")
    out = batch_budget([a, b])
    assert out is not None and out.media_key == ""
    cut = batch_budget([a, replace(a, prompt_cap_tokens=50)])
    assert cut is not None and cut.prompt_cap_tokens == 1  # any served sum reaches it: never learned
