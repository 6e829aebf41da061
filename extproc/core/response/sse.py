"""Incremental readers of ``usage`` from OpenAI responses: SSE streams and JSON bodies.

SSE framing follows the WHATWG EventSource spec (§9.2 "Server-sent events"): events end at a
blank line; lines end with CRLF, LF or CR; ``data:`` may or may not be followed by one space;
comment lines start with ``:``; several ``data`` lines of one event are joined with ``\\n``.
Chunks from Envoy split events (and multi-byte characters) at arbitrary byte offsets, so
bytes are buffered until an event is complete. Only events that mention ``"usage"`` are
JSON-decoded (and events that mention ``"error"``: a pool's error inside a 2xx stream is kept in
:attr:`SSEUsageReader.error`); the last non-null ``usage.prompt_tokens`` wins (OpenAI sends it once, in the
final chunk, when ``stream_options.include_usage`` is true; some servers repeat a cumulative
usage in every chunk).

Memory is bounded: an event longer than ``max_event_bytes`` is skipped up to its end (counted
in ``dropped_events``), and work is linear in the stream length whatever the chunking. One
leading UTF-8 byte-order mark is ignored, as EventSource does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from extproc.core.response.api_usage import MAX_FINISH_REASONS, finish_reasons_of, response_id_of, usage_of

__all__ = [
    "JSONUsageReader",
    "SSEUsageReader",
    "StreamError",
    "completion_tokens_of",
    "error_object",
    "is_context_length_error",
    "prompt_tokens_of",
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


@dataclass(frozen=True, slots=True)
class StreamError:
    """An error event inside a 2xx SSE stream: ``data: {"error": {"message", "type", "code"}}``
    (SGLang, some simulators) or an OpenAI error object (``"object": "error"``, vLLM).

    Attributes:
        code: the error's ``code`` (int or str as sent; None when absent).
        type: the error's ``type`` ("" when absent).
        message: the error's ``message``, cut to 512 characters (never logged with prompt text:
            pools do not echo the prompt in it).
    """

    code: int | str | None
    type: str
    message: str


_CONTEXT_LENGTH = re.compile(
    r"context length|context_length|context window|maximum context|too long|"
    r"exceeds? (?:the )?(?:model'?s? )?(?:max|maximum)|max_model_len",
    re.IGNORECASE,
)


def is_context_length_error(err: StreamError) -> bool:
    """True when ``err`` says the request did not fit the pool's context (vLLM's
    "This model's maximum context length is N tokens…", SGLang's "…is longer than the model's
    context length…", OpenAI's ``context_length_exceeded``)."""
    if isinstance(err.code, str) and "context_length" in err.code:
        return True
    return bool(_CONTEXT_LENGTH.search(err.message) or _CONTEXT_LENGTH.search(err.type))


def error_object(obj: Any) -> StreamError | None:
    """The error of a decoded JSON error answer or SSE error event (``{"error": {...}}``, or a
    flat ``{"object": "error", ...}``); None when ``obj`` is not one."""
    return _stream_error(obj)


def _stream_error(obj: Any) -> StreamError | None:
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if not isinstance(err, dict):
        if obj.get("object") != "error":
            return None
        err = obj
    code = err.get("code")
    return StreamError(
        code=code if isinstance(code, int | str) and not isinstance(code, bool) else None,
        type=str(err.get("type") or "")[:128],
        message=str(err.get("message") or "")[:512],
    )


_USAGE_KEY = re.compile(rb'"usage"\s*:\s*\{')
_STRING_OR_BRACE = re.compile(rb'"(?:[^"\\]|\\.)*"|[{}]')


def _object_at(data: bytes, start: int) -> bytes | None:
    """The JSON object starting at ``data[start]`` (a ``{``) up to its matching ``}``, skipping
    braces inside strings; None when it does not end within ``data``."""
    depth = 0
    for m in _STRING_OR_BRACE.finditer(data, start):
        tok = m.group()
        if tok == b"{":
            depth += 1
        elif tok == b"}":
            depth -= 1
            if depth == 0:
                return data[start : m.end()]
    return None


_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"(resp[_-][A-Za-z0-9_-]{1,200})"')
_FINISH_KEYS = {
    "openai": re.compile(rb'"finish_reason"\s{0,8}:\s{0,8}"([A-Za-z_]{1,32})"'),
    "anthropic": re.compile(rb'"stop_reason"\s{0,8}:\s{0,8}"([A-Za-z_]{1,32})"'),
    "responses": re.compile(
        rb'"incomplete_details"\s{0,8}:\s{0,8}\{\s{0,8}"reason"\s{0,8}:\s{0,8}"([A-Za-z_]{1,32})"'
    ),
}
"""A finish reason's key and string value in a JSON body (per usage shape). A JSON string cannot
contain an unescaped ``"finish_reason":"`` sequence, so a match is a real key."""
_FINISH_LITERALS = {
    "openai": b'"finish_reason"',
    "anthropic": b'"stop_reason"',
    "responses": b'"incomplete_details"',
}
"""Each pattern's first bytes: found with ``bytes.find`` (much faster than the regex's own search)."""
_FINISH_CARRY_BYTES = 96  # the longest match above, with its bounded whitespace


class JSONUsageReader:
    """Read ``usage`` from a JSON response body fed in chunks, in bounded memory.

    The body is never held whole: each chunk is searched for the key ``"usage": {`` (across chunk
    boundaries), and the ``max_usage_bytes`` after the last occurrence are kept. At :meth:`close`
    that object is parsed. A JSON string cannot contain an unescaped ``"usage":`` sequence, so a
    match is a real key; the last one wins (OpenAI and vLLM put the top-level ``usage`` after
    ``choices``, so a nested key of the same name earlier in the body is superseded). Work is
    linear in the body length, memory O(``max_usage_bytes``) whatever the body size (an 8 or
    17 MiB ``logprobs`` answer costs the same as a small one).

    Args:
        max_usage_bytes: bytes kept from the ``usage`` key on (a usage object is ~200 B).
        api: the usage shape (:mod:`extproc.core.response.api_usage`): ``openai`` (default), ``responses``
            (``input_tokens``; also reads the response ``id``, in the first 4 KiB where servers put
            it, into :attr:`response_id`) or ``anthropic``.
    """

    __slots__ = (
        "_api",
        "_candidate",
        "_carry",
        "_finish_carry",
        "_missing",
        "bytes_seen",
        "completion_tokens",
        "finish_reasons",
        "max_usage_bytes",
        "prompt_tokens",
        "response_id",
    )

    _CARRY_BYTES = 64  # a key split across chunks, with whitespace around the colon

    def __init__(self, *, max_usage_bytes: int = 4096, api: str = "openai") -> None:
        self._api = api
        self.response_id: str | None = None
        self.max_usage_bytes = max_usage_bytes
        self._carry = b""
        self._candidate: bytes | None = None
        self._missing = 0
        self.bytes_seen = 0
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.finish_reasons: list[str] = []
        """Finish reasons in body order (one per choice; ``incomplete_details.reason`` for the
        Responses API, found only when the response is incomplete), at most
        :data:`~extproc.core.response.api_usage.MAX_FINISH_REASONS` + 1."""
        self._finish_carry = b""

    def feed(self, chunk: bytes) -> None:
        """Consume the next bytes of the body (any chunking)."""
        if not chunk:
            return
        self._scan_finish(chunk)
        if self._api == "responses" and self.response_id is None and self.bytes_seen < 4096:
            found = _RESPONSE_ID.search(self._carry + chunk[:4096])
            if found is not None:
                self.response_id = found.group(1).decode("ascii", "replace")
        self.bytes_seen += len(chunk)
        if self._candidate is not None and self._missing > 0:
            self._candidate += chunk[: self._missing]
            self._missing = self.max_usage_bytes - len(self._candidate)
        data = self._carry + chunk
        last = None
        for m in _USAGE_KEY.finditer(data):
            last = m
        if last is not None:
            self._candidate = data[last.end() - 1 : last.end() - 1 + self.max_usage_bytes]
            self._missing = self.max_usage_bytes - len(self._candidate)
        self._carry = data[-self._CARRY_BYTES :]

    def _scan_finish(self, chunk: bytes) -> None:
        """Collect the finish reasons in ``chunk``, and the one that crosses from the previous chunk
        into it (each counted once); the chunk is searched in place, never copied whole."""
        if len(self.finish_reasons) > MAX_FINISH_REASONS:
            return
        rx = _FINISH_KEYS.get(self._api, _FINISH_KEYS["openai"])
        carry = self._finish_carry
        found = self.finish_reasons
        if carry:  # a match cannot be longer than the carry: it ends in the chunk's first bytes
            for m in rx.finditer(carry + chunk[:_FINISH_CARRY_BYTES]):
                if m.start() < len(carry) < m.end():
                    found.append(m.group(1).decode("ascii"))
        literal = _FINISH_LITERALS.get(self._api, _FINISH_LITERALS["openai"])
        at = chunk.find(literal)
        while at >= 0 and len(found) <= MAX_FINISH_REASONS:
            hit = rx.match(chunk, at)
            if hit is not None:
                found.append(hit.group(1).decode("ascii"))
            at = chunk.find(literal, at + len(literal))
        tail = chunk[-_FINISH_CARRY_BYTES:]
        self._finish_carry = (
            tail if len(tail) == _FINISH_CARRY_BYTES else (carry + tail)[-_FINISH_CARRY_BYTES:]
        )

    def close(self) -> None:
        """End of body: parse the last usage object seen (nothing when absent or unreadable)."""
        candidate, self._candidate, self._carry = self._candidate, None, b""
        if candidate is None:
            return
        raw = _object_at(candidate, 0)
        if raw is None:
            return
        try:
            usage = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return
        obj = {"usage": usage}
        if self._api != "openai":
            self.prompt_tokens, completion = usage_of(obj, self._api)
            self.completion_tokens = completion if self.prompt_tokens is not None else None
            return
        self.prompt_tokens = prompt_tokens_of(obj)
        self.completion_tokens = completion_tokens_of(obj) if self.prompt_tokens is not None else None


class SSEUsageReader:
    """Feed SSE bytes in any chunking; read :attr:`prompt_tokens` (and the
    :attr:`completion_tokens` of the same usage object) at the end.

    Args:
        max_event_bytes: events longer than this are discarded (bounded memory).
        api: the usage shape (:mod:`extproc.core.response.api_usage`): ``openai`` (default),
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
        "error",
        "events",
        "finish",
        "max_event_bytes",
        "prompt_tokens",
        "response_id",
    )

    def __init__(self, *, max_event_bytes: int = 1 << 20, api: str = "openai") -> None:
        self._api = api
        self._marker = b"prompt_tokens" if api == "openai" else b"input_tokens"
        self.finish: dict[int, str] = {}
        """Finish reason per choice index (the last one read wins), at most
        :data:`~extproc.core.response.api_usage.MAX_FINISH_REASONS` choices."""
        self.response_id: str | None = None
        self._buf = bytearray()
        self._skipping = False
        self._started = False
        self.max_event_bytes = max_event_bytes
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.events = 0
        self.dropped_events = 0
        self.error: StreamError | None = None

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
        has_error = b'"error"' in raw
        # most chunks: no usage ("usage": null) and "finish_reason":null
        if self._marker not in raw and not has_error and not self._may_finish(raw):
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
        if has_error:
            err = _stream_error(obj)
            if err is not None:
                self.error = err
                return
        self._finish_of(obj)
        if self._api != "openai":
            self._api_usage(obj)
            return
        tokens = prompt_tokens_of(obj)
        if tokens is not None:
            self.prompt_tokens = tokens
            self.completion_tokens = completion_tokens_of(obj)

    def _finish_of(self, obj: object) -> None:
        for index, reason in finish_reasons_of(obj, self._api):
            if index in self.finish or len(self.finish) < MAX_FINISH_REASONS:
                self.finish[index] = reason

    def _may_finish(self, raw: bytes) -> bool:
        """Whether an event without usage may carry a finish reason (cheap byte tests; a false
        positive costs one JSON parse): a chat/completions chunk whose ``finish_reason`` is not
        the compact ``null`` every other chunk has, an Anthropic ``stop_reason`` string."""
        if self._api == "openai":
            at = raw.find(b'"finish_reason":')
            if at < 0:
                return False
            # compact null (every chunk but a choice's last): only another choice's key may follow
            return raw[at + 16 : at + 20] != b"null" or raw.find(b'"finish_reason":', at + 20) >= 0
        if self._api == "anthropic":
            return b'"stop_reason"' in raw and b'"stop_reason":null' not in raw
        return b'"incomplete"' in raw or b'"response.completed"' in raw

    @property
    def finish_reasons(self) -> tuple[str, ...]:
        """The finish reasons in choice order, when the choices read are ``0 … k−1``; else empty."""
        if sorted(self.finish) != list(range(len(self.finish))):
            return ()
        return tuple(self.finish[i] for i in range(len(self.finish)))

    def _api_usage(self, obj: object) -> None:
        """Usage (and the Responses API id) of a Responses or Anthropic stream event. Anthropic's
        ``message_delta`` may carry only the cumulative ``output_tokens`` (Anthropic's own API;
        vLLM repeats ``input_tokens``): it then updates the completion count of the prompt read
        in ``message_start``."""
        tokens, completion = usage_of(obj, self._api)
        if tokens is not None:
            self.prompt_tokens, self.completion_tokens = tokens, completion
            if self._api == "responses":
                self.response_id = response_id_of(obj) or self.response_id
        elif self._api == "anthropic" and completion is not None and self.prompt_tokens is not None:
            self.completion_tokens = completion
