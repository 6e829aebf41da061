"""Usage of each API from JSON bodies and from streams in any chunking."""

from __future__ import annotations

import orjson

from extproc.core.response.api_usage import json_usage
from extproc.core.response.sse import SSEUsageReader


def sse(event: str, data: object) -> bytes:
    return f"event: {event}\ndata: ".encode() + orjson.dumps(data) + b"\n\n"


def feed_bytewise(reader: SSEUsageReader, stream: bytes) -> SSEUsageReader:
    for i in range(len(stream)):
        reader.feed(stream[i : i + 1])
    reader.close()
    return reader


def test_json_shapes() -> None:
    resp = {"id": "resp_1", "object": "response", "usage": {"input_tokens": 12, "output_tokens": 3}}
    assert json_usage(orjson.dumps(resp), "responses") == (12, 3, "resp_1")
    msg = {"type": "message", "usage": {"input_tokens": 5, "cache_read_input_tokens": 7, "output_tokens": 2}}
    assert json_usage(orjson.dumps(msg), "anthropic") == (12, 2, None)
    chat = {"usage": {"prompt_tokens": 9, "completion_tokens": 1}}
    assert json_usage(orjson.dumps(chat), "openai") == (9, 1, None)
    assert json_usage(b"not json", "responses") == (None, None, None)


def test_responses_stream_reads_the_completed_event() -> None:
    created = {"type": "response.created", "response": {"id": "resp_9", "object": "response", "usage": None}}
    delta = {"type": "response.output_text.delta", "delta": "input_tokens"}
    done = {
        "type": "response.completed",
        "response": {"id": "resp_9", "object": "response", "usage": {"input_tokens": 40, "output_tokens": 4}},
    }
    stream = (
        sse("response.created", created)
        + sse("response.output_text.delta", delta)
        + sse("response.completed", done)
    )
    r = feed_bytewise(SSEUsageReader(api="responses"), stream)
    assert (r.prompt_tokens, r.completion_tokens, r.response_id) == (40, 4, "resp_9")


def test_anthropic_stream_counts_input_once() -> None:
    start = {"type": "message_start", "message": {"usage": {"input_tokens": 33, "output_tokens": 0}}}
    delta = {
        "type": "message_delta",
        "delta": {"stop_reason": "end_turn"},
        "usage": {"input_tokens": 33, "output_tokens": 5},
    }
    stream = (
        sse("message_start", start)
        + sse("message_delta", delta)
        + sse("message_stop", {"type": "message_stop"})
    )
    r = feed_bytewise(SSEUsageReader(api="anthropic"), stream)
    assert (r.prompt_tokens, r.completion_tokens) == (33, 5)


def test_openai_reader_ignores_other_shapes() -> None:
    done = {"type": "response.completed", "response": {"usage": {"input_tokens": 40}}}
    r = feed_bytewise(SSEUsageReader(), sse("response.completed", done))
    assert r.prompt_tokens is None
