"""The state of one stream's HTTP exchange, as the processor tracks it."""

from __future__ import annotations

import enum

__all__ = ["Exchange"]


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
