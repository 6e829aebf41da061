"""The state of one stream's HTTP exchange, as the processor tracks it, and which kind of stream it is."""

from __future__ import annotations

import enum

__all__ = ["OFF_PATH", "ONE_MESSAGE", "TWO_MESSAGE", "UNROUTED", "Exchange", "StreamKind"]


class Exchange(enum.Enum):
    """Where one stream's HTTP exchange stands: the message the router expects next from Envoy.

    Each phase handler sets the next state explicitly from what it decided (routed at the
    headers, response phases turned off, response body requested, …). ``DONE`` means the message
    just handled was the exchange's last: the server then ends the call itself, or Envoy resets
    the stream (gRPC CANCELLED) rather than half-closing it, so only this state tells a finished
    exchange from a client abort.
    """

    REQUEST_HEADERS = "request_headers"
    REQUEST_BODY = "request_body"
    RESPONSE_HEADERS = "response_headers"
    RESPONSE_BODY = "response_body"
    DONE = "done"


class StreamKind(enum.Enum):
    """Which of the ext_proc streams Envoy opens for a request this one is (envoy/envoy.yaml,
    docs/design/004-one-message.md). Set once, when the stream's first message tells."""

    TWO_MESSAGE = "two_message"
    """A routing stream that starts with ``request_headers``: the decision goes out as the routing
    header (the two-message design, Envoy Gateway and Istio overlays)."""
    ONE_MESSAGE = "one_message"
    """A routing stream that starts with ``request_body`` (request headers SKIPped): the decision goes
    out as dynamic metadata, and the router cannot turn response phases on."""
    OFF_PATH = "off_path"
    """An observability stream carrying a sampled request's calibration payload: its response is
    read silently (Envoy waits for no answer)."""
    UNROUTED = "unrouted"
    """A stream of Envoy's ``tbr_unrouted`` observability filter: a request no routing answer reached."""


TWO_MESSAGE, ONE_MESSAGE, OFF_PATH, UNROUTED = (
    StreamKind.TWO_MESSAGE,
    StreamKind.ONE_MESSAGE,
    StreamKind.OFF_PATH,
    StreamKind.UNROUTED,
)
"""Module aliases of the :class:`StreamKind` members for the request path: CPython 3.11 resolves
``StreamKind.ONE_MESSAGE`` through the enum class in ~0.1 µs, a module global in a few ns."""
