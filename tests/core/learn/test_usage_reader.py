"""The usage reader: one object per answer body (decoder + SSE / JSON / error-body reader)."""

from __future__ import annotations

import gzip
import json

from extproc.core.learn.usage_reader import ReadKind, UsageReader
from extproc.core.request.endpoints import spec_of

USAGE = {"choices": [{"finish_reason": "length"}], "usage": {"prompt_tokens": 300, "completion_tokens": 7}}


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def test_gzip_json_answer_read_in_small_chunks() -> None:
    reader = UsageReader.for_answer(spec_of("chat"), "application/json; charset=utf-8", "gzip")
    assert isinstance(reader, UsageReader) and reader.kind is ReadKind.JSON
    for chunk in _chunks(gzip.compress(json.dumps(USAGE).encode()), 7):
        assert reader.feed(chunk)
    usage = reader.close()
    assert usage is not None and (usage.prompt_tokens, usage.completion_tokens) == (300, 7)
    assert usage.finish_reasons == ("length",) and usage.error is None


def test_sse_answer_shows_its_usage_before_the_end() -> None:
    reader = UsageReader.for_answer(spec_of("chat"), "text/event-stream", "")
    assert isinstance(reader, UsageReader) and reader.kind is ReadKind.SSE
    reader.feed(b'data: {"choices": [{"delta": {"content": "hi"}}]}\n\n')
    assert not reader.stream_usage_seen
    reader.feed(b"data: " + json.dumps(USAGE).encode() + b"\n\n")
    assert reader.stream_usage_seen
    usage = reader.close()
    assert usage is not None and usage.prompt_tokens == 300


def test_error_event_in_a_stream_is_returned_as_the_error() -> None:
    reader = UsageReader.for_answer(None, "text/event-stream", "")
    assert isinstance(reader, UsageReader)
    reader.feed(b'data: {"error": {"message": "maximum context length is 8192 tokens", "code": 400}}\n\n')
    usage = reader.close()
    assert usage is not None and usage.error is not None and usage.prompt_tokens is None


def test_unreadable_answers_say_why() -> None:
    assert UsageReader.for_answer(None, "application/json", "compress") == "unsupported_encoding"
    assert UsageReader.for_answer(None, "text/html", "") == "unsupported_content_type"
    assert UsageReader.for_error_body("compress") is None


def test_corrupt_body_stops_reading_and_gives_no_usage() -> None:
    reader = UsageReader.for_answer(None, "application/json", "gzip")
    assert isinstance(reader, UsageReader)
    assert not reader.feed(b"not gzip at all")
    assert not reader.decoding and reader.close() is None


def test_failed_retry_error_body() -> None:
    reader = UsageReader.for_error_body("")
    assert reader is not None and reader.kind is ReadKind.ERROR_BODY
    reader.feed(
        json.dumps({"error": {"message": "This model's maximum context length is 8192 tokens"}}).encode()
    )
    assert reader.close() is None
    error = reader.close_error()
    assert error is not None and "context length" in error.message
