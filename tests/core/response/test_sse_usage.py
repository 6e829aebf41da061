"""usage read from SSE and JSON responses: prompt and completion tokens of the same usage object."""

from __future__ import annotations

import orjson

from extproc.core.response.sse import JSONUsageReader, SSEUsageReader, StreamError, is_context_length_error


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


def _read_json(body: bytes, chunk_bytes: int) -> tuple[int | None, int | None]:
    r = JSONUsageReader()
    for i in range(0, len(body), chunk_bytes):
        r.feed(body[i : i + chunk_bytes])
    r.close()
    return r.prompt_tokens, r.completion_tokens


def test_json_usage_in_any_chunking() -> None:
    body = (
        b'{"choices": [], "usage": {"prompt_tokens": 12, "completion_tokens": 3, "d": {"x": 1}}, "z": null}'
    )
    for n in (1, 2, 5, 11, len(body)):
        assert _read_json(body, n) == (12, 3)
    assert _read_json(b'{"usage": {"prompt_tokens": 12}}', 4) == (12, None)
    assert _read_json(b"not json", 3) == (None, None)
    assert _read_json(b'{"usage": null}', 3) == (None, None)
    assert _read_json(b'{"usage": {"prompt_tokens": 12', 3) == (None, None)  # truncated


def test_json_usage_key_inside_strings_is_not_a_match() -> None:
    content = 'he wrote "usage": {"prompt_tokens": 1} and } braces {'
    body = orjson.dumps(
        {
            "choices": [{"message": {"content": content}}],
            "usage": {"prompt_tokens": 99, "completion_tokens": 2},
        }
    )
    assert _read_json(body, 7) == (99, 2)
    only_in_string = orjson.dumps({"choices": [{"message": {"content": content}}]})
    assert _read_json(only_in_string, 7) == (None, None)


def test_json_usage_memory_is_bounded_for_large_bodies() -> None:
    top = [{"token": "tok", "logprob": -1.5, "bytes": [116, 111, 107]}] * 20
    body = orjson.dumps(
        {
            "choices": [{"logprobs": {"content": [{"token": "t", "top_logprobs": top}] * 20_000}}],
            "usage": {"prompt_tokens": 321, "completion_tokens": 20_000},
        }
    )
    assert len(body) > 8 << 20
    r = JSONUsageReader()
    for i in range(0, len(body), 65536):
        r.feed(body[i : i + 65536])
        assert len(r._candidate or b"") <= r.max_usage_bytes  # never the whole body
    r.close()
    assert (r.prompt_tokens, r.completion_tokens) == (321, 20_000)


def test_error_event_in_a_2xx_stream_is_kept_and_classified() -> None:
    sglang = (
        b'data: {"error": {"message": "The input (9001 tokens) is longer than the model\'s context length '
        b'(8192 tokens).", "type": "BadRequestError", "code": 400}}\n\n'
        b"data: [DONE]\n\n"
    )
    r = SSEUsageReader()
    for i in range(0, len(sglang), 7):
        r.feed(sglang[i : i + 7])
    r.close()
    assert r.error is not None and r.error.code == 400 and r.prompt_tokens is None
    assert is_context_length_error(r.error)
    other = StreamError(code=400, type="BadRequestError", message="temperature must be non-negative")
    assert not is_context_length_error(other)
    assert is_context_length_error(StreamError(code="context_length_exceeded", type="", message=""))
    # vLLM's error object, and content that merely mentions "error" in text
    r2 = SSEUsageReader()
    r2.feed(
        b'data: {"object": "error", "message": "This model\'s maximum context length is 8192 tokens."}\n\n'
    )
    r2.close()
    assert r2.error is not None and is_context_length_error(r2.error)
    r3 = SSEUsageReader()
    r3.feed(b'data: {"choices": [{"delta": {"content": "an \\"error\\": {} here"}}]}\n\n')
    r3.close()
    assert r3.error is None
