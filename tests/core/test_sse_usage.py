"""usage read from SSE and JSON responses: prompt and completion tokens of the same usage object."""

from __future__ import annotations

from extproc.core.sse import SSEUsageReader, usage_from_json


def test_completion_tokens_come_with_the_last_prompt_tokens() -> None:
    stream = (
        b'data: {"choices": [{"delta": {"content": "a"}}], "usage": {"prompt_tokens": 7, "completion_tokens": 1}}\n\n'
        b'data: {"choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 5}}\n\n'
        b"data: [DONE]\n\n"
    )
    r = SSEUsageReader()
    for i in range(0, len(stream), 9):
        r.feed(stream[i : i + 9])
    r.close()
    assert (r.prompt_tokens, r.completion_tokens) == (7, 5)


def test_usage_from_json() -> None:
    assert usage_from_json(b'{"usage": {"prompt_tokens": 12, "completion_tokens": 3}}') == (12, 3)
    assert usage_from_json(b'{"usage": {"prompt_tokens": 12}}') == (12, None)
    assert usage_from_json(b"not json") == (None, None)
