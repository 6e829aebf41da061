"""Why a request counts as a misroute (issue 34, item 10): ``tbr_misroutes_total{cause}`` and the
decision record's ``misroute_cause``.

Envoy retries a request on the next larger pool after its first pool answered 400 or could not
be reached (route ``retry_policy``: ``retriable-status-codes`` 400, ``connect-failure``,
``reset-before-request``, and 5xx where the deployment retries them); the router sees only the
last attempt's answer, with ``x-envoy-attempt-count`` > 1. It tells the causes apart by what that
answer shows:

==================  ===========================================================================
cause               the answer of the retry
==================  ===========================================================================
``estimate_too_low``  2xx whose ``usage.prompt_tokens`` proves the request did not fit the first
                    pool (:func:`extproc.core.learn.recovery.overflowed`); or an error whose message
                    is a context-length error (vLLM's "This model's maximum context length is
                    …", "max_tokens=… cannot be greater than max_model_len=…": the request fits
                    no pool, and the router sent it to a smaller one); or a context-length error
                    event inside a 2xx SSE stream (``outcome="error_in_stream"``)
``pool_unavailable``  2xx whose usage fits the first pool: the same body was served by the larger
                    pool, so the first one failed (connection refused or reset, 5xx); or a 5xx or
                    429 from the larger pool too (an Envoy local reply "no healthy upstream")
``client_error``    any other 4xx: the larger pool refused the request for the same reason as
                    the first (``temperature: -1``)
``truncated``       the pool cut the answer at its ``max_model_len`` (``outcome="truncated"``,
                    :mod:`extproc.core.learn.truncation`)
``unknown``         a 2xx whose usage could not be read (a stream without ``include_usage``, an
                    encoding the router does not decode, a client that left)
==================  ===========================================================================

Only ``estimate_too_low`` (misroute recovery, :mod:`extproc.core.learn.recovery`) and ``truncated``
(the output learner) teach the router anything; the others are counted only.
"""

from __future__ import annotations

from typing import Final

import orjson

from extproc.core.response.sse import StreamError, error_object, is_context_length_error

__all__ = [
    "CAUSES",
    "CLIENT_ERROR",
    "ESTIMATE_TOO_LOW",
    "POOL_UNAVAILABLE",
    "TRUNCATED",
    "UNKNOWN",
    "ErrorBodyReader",
    "cause_of_failed_retry",
    "cause_of_served_retry",
]

ESTIMATE_TOO_LOW: Final = "estimate_too_low"
TRUNCATED: Final = "truncated"
POOL_UNAVAILABLE: Final = "pool_unavailable"
CLIENT_ERROR: Final = "client_error"
UNKNOWN: Final = "unknown"
CAUSES: Final = (ESTIMATE_TOO_LOW, TRUNCATED, POOL_UNAVAILABLE, CLIENT_ERROR, UNKNOWN)
"""Every value of the ``cause`` label."""


class ErrorBodyReader:
    """Keeps the first ``max_bytes`` of an error answer (decoded) and parses its error object.

    vLLM's and OpenAI's errors are a few hundred bytes of JSON (``{"error": {"message", "type",
    "param", "code"}}``); anything longer is not one, and memory stays bounded whatever is sent.
    """

    __slots__ = ("_data", "max_bytes")

    def __init__(self, max_bytes: int = 16384) -> None:
        """``max_bytes``: bytes kept (the rest is ignored)."""
        self.max_bytes = max_bytes
        self._data = bytearray()

    def feed(self, data: bytes) -> None:
        """Add a decoded chunk of the body."""
        room = self.max_bytes - len(self._data)
        if room > 0:
            self._data += data[:room]

    def close(self) -> StreamError | None:
        """The body's error object, or None when the body is not a JSON error (empty, plain text,
        cut at ``max_bytes``, another shape)."""
        try:
            obj = orjson.loads(bytes(self._data))
        except orjson.JSONDecodeError:
            return None
        return error_object(obj)


def cause_of_served_retry(overflowed: bool | None) -> str:
    """The cause of a retried request that the larger pool served (2xx): ``estimate_too_low`` when
    usage proves it did not fit the first pool, ``pool_unavailable`` when it would have, ``unknown``
    when usage was not read (``overflowed`` None)."""
    if overflowed is None:
        return UNKNOWN
    return ESTIMATE_TOO_LOW if overflowed else POOL_UNAVAILABLE


def cause_of_failed_retry(status: int, error: StreamError | None) -> str:
    """The cause of a retried request whose retry failed too, from the last answer's HTTP
    ``status`` and error object (table in the module docstring)."""
    if error is not None and is_context_length_error(error):
        return ESTIMATE_TOO_LOW
    if 400 <= status < 500 and status != 429:
        return CLIENT_ERROR
    return POOL_UNAVAILABLE
