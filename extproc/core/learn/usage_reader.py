"""One response body's reader: the decoded copy of the body, read for ``usage`` or for an error.

A :class:`UsageReader` owns what reading one answer takes: the ``content-encoding`` decoder
(:mod:`extproc.core.response.encoding`) and, by :class:`ReadKind`, an SSE or JSON usage reader in the usage
shape of the request's endpoint (:data:`extproc.core.request.endpoints.ENDPOINTS`, :mod:`extproc.core.response.sse`),
or the error-body reader of a failed retry (:mod:`extproc.core.learn.misroute_cause`). The transport feeds
it the body's chunks and closes it at the end of the stream; :meth:`UsageReader.close` gives the
:class:`ResponseUsage` that :func:`extproc.core.facade.learn` learns from. Memory stays bounded
whatever the body size (each reader keeps a bounded window).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from extproc.core.learn.misroute_cause import ErrorBodyReader
from extproc.core.learn.outcomes import CalibrationOutcome
from extproc.core.request.endpoints import EndpointSpec, UsageShape
from extproc.core.response.encoding import DecodeError, StreamDecoder, make_decoder
from extproc.core.response.sse import JSONUsageReader, SSEUsageReader, StreamError

__all__ = ["ReadKind", "ResponseUsage", "UsageReader"]


class ReadKind(enum.Enum):
    """What a response body is read for."""

    SSE = "sse"
    """A ``text/event-stream`` answer: usage from its events."""
    JSON = "json"
    """A JSON answer: usage from the body."""
    ERROR_BODY = "error_body"
    """The error answer of a failed retry: the error that tells its cause."""


_SSE, _JSON, _ERROR_BODY = ReadKind.SSE, ReadKind.JSON, ReadKind.ERROR_BODY
"""Module aliases of the members: CPython 3.11 resolves ``ReadKind.SSE`` through the enum class in
~0.1 µs, a module global in a few ns (this is the response path)."""


@dataclass(slots=True)
class ResponseUsage:
    """What a served answer reported.

    Attributes:
        prompt_tokens: ``usage.prompt_tokens`` (or the API's equivalent), None when absent.
        completion_tokens: ``usage.completion_tokens`` summed over choices, None when absent.
        response_id: the Responses API ``id``, None for other APIs or when absent.
        finish_reasons: each choice's finish reason, in choice order (may be empty).
        error: the error event a 2xx SSE stream carried, None when there was none (then the
            other fields are None / empty: such a stream is never learned from).

    Not changed once built (not frozen: a frozen dataclass costs twice as much to build, and this
    is the response path).
    """

    prompt_tokens: int | None
    completion_tokens: int | None
    response_id: str | None
    finish_reasons: tuple[str, ...]
    error: StreamError | None = None


class UsageReader:
    """Reads one response body copy (module docstring). Build with :meth:`for_answer` or
    :meth:`for_error_body`; feed every chunk to :meth:`feed`; then :meth:`close` (usage) or
    :meth:`close_error` (a failed retry's error)."""

    __slots__ = ("_decoder", "_error", "_json", "_sse", "kind")

    def __init__(
        self,
        kind: ReadKind,
        decoder: StreamDecoder,
        *,
        sse: SSEUsageReader | None = None,
        json: JSONUsageReader | None = None,
        error: ErrorBodyReader | None = None,
    ) -> None:
        self.kind = kind
        self._decoder: StreamDecoder | None = decoder
        self._sse = sse
        self._json = json
        self._error = error

    @classmethod
    def for_answer(
        cls, spec: EndpointSpec | None, content_type: str, encoding: str
    ) -> UsageReader | CalibrationOutcome:
        """The reader of a 2xx answer, or the calibration outcome saying why it cannot be read
        (``unsupported_encoding``, ``unsupported_content_type``).

        Args:
            spec: the request's endpoint row (its usage shape; ``openai`` when None).
            content_type: the answer's ``content-type``, lower-cased.
            encoding: its ``content-encoding`` (several fields joined in order, RFC 9110 §5.3).
        """
        decoder = make_decoder(encoding)
        if decoder is None:
            return "unsupported_encoding"
        shape: UsageShape = spec.usage_shape if spec is not None else "openai"
        if content_type.startswith("text/event-stream"):
            return cls(_SSE, decoder, sse=SSEUsageReader(api=shape))
        if "json" in content_type:
            return cls(_JSON, decoder, json=JSONUsageReader(api=shape))
        return "unsupported_content_type"

    @classmethod
    def for_error_body(cls, encoding: str) -> UsageReader | None:
        """The reader of a failed retry's error answer; None when its encoding is unsupported."""
        decoder = make_decoder(encoding)
        return cls(_ERROR_BODY, decoder, error=ErrorBodyReader()) if decoder is not None else None

    @property
    def decoding(self) -> bool:
        """False once the body could not be decoded (nothing more is read)."""
        return self._decoder is not None

    def feed(self, chunk: bytes) -> bool:
        """Read one chunk of the (encoded) body; False when it cannot be decoded (then nothing
        more is read, and a usage reader gives no usage)."""
        decoder = self._decoder
        if decoder is None:
            return False
        try:
            data = decoder.decode(chunk)
        except DecodeError:
            self._decoder = self._sse = self._json = None
            return False
        if self._sse is not None:
            self._sse.feed(data)
        elif self._json is not None:
            self._json.feed(data)
        elif self._error is not None:
            self._error.feed(data)
        return True

    @property
    def stream_usage_seen(self) -> bool:
        """An SSE answer already showed its usage or an error event (a stream the client aborts
        after that is still learned from)."""
        sse = self._sse
        return sse is not None and (sse.prompt_tokens is not None or sse.error is not None)

    def close(self) -> ResponseUsage | None:
        """The answer's usage; None for an error-body reader or a body that could not be decoded."""
        self._decoder = None
        if self._sse is not None:
            sse, self._sse = self._sse, None
            sse.close()
            if sse.error is not None:
                return ResponseUsage(None, None, None, (), sse.error)
            return ResponseUsage(
                sse.prompt_tokens, sse.completion_tokens, sse.response_id, sse.finish_reasons
            )
        if self._json is not None:
            js, self._json = self._json, None
            js.close()
            return ResponseUsage(
                js.prompt_tokens, js.completion_tokens, js.response_id, tuple(js.finish_reasons)
            )
        return None

    def close_error(self) -> StreamError | None:
        """The error a failed retry's answer carried (None when unreadable or for a usage reader)."""
        self._decoder = None
        error, self._error = self._error, None
        return error.close() if error is not None else None
