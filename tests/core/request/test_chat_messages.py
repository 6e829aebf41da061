"""Walking chat messages and completion prompts (extproc/core/request/chat_messages.py): which fields become
prompt text, what is counted apart, and what is refused."""

from __future__ import annotations

from typing import Any

import pytest

from extproc.core.request.chat_messages import PromptText, UnreadableRequest, walk_messages, walk_prompt


def _walk(messages: Any) -> tuple[str, int, list[int], list[str]]:
    text = PromptText()
    counts = [0, 0, 0, 0]
    reasoning: list[str] = []
    walk_messages(messages, text, counts, reasoning)
    joined, nbytes, _ = text.joined([])
    return joined, nbytes, counts, reasoning


def test_contents_tool_calls_and_extra_fields_become_text() -> None:
    joined, nbytes, counts, reasoning = _walk(
        [
            {"role": "system", "content": "Be brief."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "Hello"},
                    {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": '{"a": 1}'}}
                ],
                "reasoning_content": "think",
            },
            {"role": "tool", "tool_call_id": "c1", "content": "ok", "mood": "odd"},
        ]
    )
    for part in ("Be brief.", "Hello", '"a"', "ok", "odd"):
        assert part in joined
    assert reasoning == ["think"]
    assert counts[0] == 1  # one image part
    assert counts[2] == 1  # one tool call
    assert counts[3] == 1  # "mood" is not a field vLLM passes to the template
    assert nbytes == len(joined.encode()) - joined.count("\n")  # the separators are not counted


def test_non_ascii_text_is_measured_in_utf8_bytes() -> None:
    _, nbytes, _, _ = _walk([{"role": "user", "content": "日本語 é"}])
    assert nbytes == len("日本語 é".encode())


@pytest.mark.parametrize(
    ("messages", "reason"),
    [([], "empty_prompt"), ("hi", "bad_field_type"), (["hi"], "bad_field_type")],
)
def test_unreadable_messages_are_refused_with_a_reason(messages: Any, reason: str) -> None:
    with pytest.raises(UnreadableRequest) as err:
        _walk(messages)
    assert err.value.reason == reason


@pytest.mark.parametrize(
    ("prompt", "exact_tokens", "text"),
    [("hello", 0, "hello"), (["a", "b"], 0, "a\nb"), ([1, 2, 3], 3, ""), ([[1, 2], [3, 4, 5]], 3, "")],
)
def test_completion_prompts_are_text_or_exact_token_ids(prompt: Any, exact_tokens: int, text: str) -> None:
    t = PromptText()
    assert walk_prompt(prompt, t) == exact_tokens
    assert t.joined([])[0] == text


@pytest.mark.parametrize("prompt", [[], 7, [1, "a"], [True, 2], [[1], "a"], [{"x": 1}]])
def test_malformed_completion_prompts_are_refused(prompt: Any) -> None:
    with pytest.raises(UnreadableRequest):
        walk_prompt(prompt, PromptText())
