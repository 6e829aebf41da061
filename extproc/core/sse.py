"""Incremental readers of ``usage`` from OpenAI responses: SSE streams and JSON bodies.

SSE framing follows the WHATWG EventSource spec (§9.2 "Server-sent events"): events end at a
blank line; lines end with CRLF, LF or CR; ``data:`` may or may not be followed by one space;
comment lines start with ``:``; several ``data`` lines of one event are joined with ``\\n``.
Chunks from Envoy split events (and multi-byte characters) at arbitrary byte offsets, so
bytes are buffered until an event is complete. Only events that mention ``"usage"`` are
JSON-decoded; the last non-null ``usage.prompt_tokens`` wins (OpenAI sends it once, in the
final chunk, when ``stream_options.include_usage`` is true; some servers repeat a cumulative
usage in every chunk).

Memory is bounded: an event longer than ``max_event_bytes`` is skipped up to its end (counted
in ``dropped_events``), and work is linear in the stream length whatever the chunking. One
leading UTF-8 byte-order mark is ignored, as EventSource does.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from extproc.core.api_usage import response_id_of, usage_of

__all__ = [
    "SSEUsageReader",
    "completion_tokens_of",
    "prompt_tokens_of",
    "usage_from_json",
]

_EVENT_END = re.compile(rb"\r\n\r\n|\n\n|\r\r|\n\r\n|\r\n\n")
_LINE_SPLIT = re.compile(rb"\r\n|\n|\r")
_BOM = b"\xef\xbb\xbf"


def prompt_tokens_of(obj: Any) -> int | None:
    """``obj["usage"]["prompt_tokens"]`` when it is a positive int, else None."""
    if not isinstance(obj, dict):
        return None
    usage = obj.get("usage")
    if not isinstance(usage, dict):
        return None
    value = usage.get("prompt_tokens")
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return value
    return None


def completion_tokens_of(obj: Any) -> int | None:
    """``obj["usage"]["completion_tokens"]`` when it is a non-negative int, else None."""
    usage = obj.get("usage") if isinstance(obj, dict) else None
    value = usage.get("completion_tokens") if isinstance(usage, dict) else None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def usage_from_json(body: bytes) -> tuple[int | None, int | None]:
    """``(usage.prompt_tokens, usage.completion_tokens)`` of a complete JSON response body; each
    None when absent or unreadable."""
    if b'"usage"' not in body:
        return None, None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None
    return prompt_tokens_of(obj), completion_tokens_of(obj)


class SSEUsageReader:
    """Feed SSE bytes in any chunking; read :attr:`prompt_tokens` (and the
    :attr:`completion_tokens` of the same usage object) at the end.

    Args:
        max_event_bytes: events longer than this are discarded (bounded memory).
        api: the usage shape (:mod:`extproc.core.api_usage`): ``openai`` (default),
            ``responses`` (also sets :attr:`response_id`) or ``anthropic``.
    """

    __slots__ = (
        "_api",
        "_buf",
        "_marker",
        "_skipping",
        "_started",
        "completion_tokens",
        "dropped_events",
        "events",
        "max_event_bytes",
        "prompt_tokens",
        "response_id",
    )

    def __init__(self, *, max_event_bytes: int = 1 << 20, api: str = "openai") -> None:
        self._api = api
        self._marker = b"prompt_tokens" if api == "openai" else b"input_tokens"
        self.response_id: str | None = None
        self._buf = bytearray()
        self._skipping = False
        self._started = False
        self.max_event_bytes = max_event_bytes
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.events = 0
        self.dropped_events = 0

    def feed(self, chunk: bytes) -> None:
        """Consume the next bytes of the stream.

        Work is linear in the bytes fed: the buffer grows in place, and only the new bytes
        (plus the 3 bytes before them, where a split event terminator may start) are searched
        for an event end.
        """
        if not chunk:
            return
        buf = self._buf
        old = len(buf)
        buf += chunk
        if not self._started:
            if len(buf) < 3 and _BOM.startswith(buf):
                return  # too short to know whether it is a byte-order mark
            self._started = True
            if buf.startswith(_BOM):  # EventSource ignores one leading BOM
                del buf[: len(_BOM)]
                old = 0
        start = 0
        for m in _EVENT_END.finditer(buf, max(0, old - 3)):
            if self._skipping:
                self._skipping = False  # the end of the oversized event: resume after it
            else:
                self._event(bytes(buf[start : m.start()]))
            start = m.end()
        if start:
            del buf[:start]
        if len(buf) > self.max_event_bytes:
            if not self._skipping:
                self.dropped_events += 1
                self._skipping = True
            del buf[:-3]  # keep a possible partial terminator

    def close(self) -> None:
        """End of stream: a final event without its blank line still counts."""
        if self._buf.strip() and not self._skipping:
            self._event(bytes(self._buf))
        self._buf = bytearray()
        self._skipping = False

    def _event(self, raw: bytes) -> None:
        if not raw:
            return
        self.events += 1
        if self._marker not in raw:  # most chunks carry no usage, or "usage": null
            return
        data: list[bytes] = []
        for line in _LINE_SPLIT.split(raw):
            if line.startswith(b"data:"):
                value = line[5:]
                data.append(value[1:] if value.startswith(b" ") else value)
        if not data:
            return
        payload = b"\n".join(data)
        if payload.strip() == b"[DONE]":
            return
        try:
            obj = orjson.loads(payload)
        except orjson.JSONDecodeError:
            return
        if self._api != "openai":
            tokens, completion = usage_of(obj, self._api)
            if tokens is not None:
                self.prompt_tokens, self.completion_tokens = tokens, completion
                if self._api == "responses":
                    self.response_id = response_id_of(obj) or self.response_id
            return
        tokens = prompt_tokens_of(obj)
        if tokens is not None:
            self.prompt_tokens = tokens
            self.completion_tokens = completion_tokens_of(obj)
