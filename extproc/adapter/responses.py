"""Builders of ext_proc ``ProcessingResponse`` messages, and immutable prebuilt ones.

Every header the router sets goes through :func:`header_option`: lower-case key, ``raw_value``
bytes and ``OVERWRITE_IF_EXISTS_OR_ADD`` (so a client's copy is replaced, never appended to);
keys and values are validated (no CR/LF, no controls) because they end up on the wire.
"""

from __future__ import annotations

import re

from envoy.config.core.v3 import base_pb2 as core
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from google.protobuf import struct_pb2

__all__ = [
    "CONTINUE_REQUEST_BODY",
    "CONTINUE_REQUEST_HEADERS",
    "CONTINUE_REQUEST_HEADERS_SKIP_RESPONSE",
    "CONTINUE_REQUEST_TRAILERS",
    "CONTINUE_RESPONSE_BODY",
    "CONTINUE_RESPONSE_HEADERS",
    "CONTINUE_RESPONSE_TRAILERS",
    "READ_JSON_RESPONSE",
    "READ_SSE_RESPONSE",
    "ROUTING_METADATA_KEY",
    "ROUTING_METADATA_NAMESPACE",
    "ROUTING_METADATA_STREAM_KEY",
    "header_option",
    "route_by_metadata",
    "route_request_body",
    "route_request_headers",
]

_KEY = re.compile(r"^[a-z0-9!#$%&'*+.^_`|~-]+$")
_BAD_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")

_OVERWRITE = core.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD


def header_option(key: str, value: str | bytes) -> core.HeaderValueOption:
    """One header to set: ``raw_value`` + ``OVERWRITE_IF_EXISTS_OR_ADD``.

    Raises:
        ValueError: the key is not a lower-case token or the value holds CR, LF or controls.
    """
    if not _KEY.match(key):
        raise ValueError(f"invalid header name {key!r}")
    raw = value.encode("utf-8") if isinstance(value, str) else value
    if _BAD_VALUE.search(raw):
        raise ValueError(f"invalid value for header {key!r}")
    return core.HeaderValueOption(header=core.HeaderValue(key=key, raw_value=raw), append_action=_OVERWRITE)


def _routing_common(header: str, value: str) -> pb.CommonResponse:
    return pb.CommonResponse(
        header_mutation=pb.HeaderMutation(set_headers=[header_option(header, value)]),
        clear_route_cache=True,
    )


def route_request_body(header: str, value: str) -> pb.ProcessingResponse:
    """Answer to ``request_body``: set the routing header and clear the route cache."""
    return pb.ProcessingResponse(request_body=pb.BodyResponse(response=_routing_common(header, value)))


ROUTING_METADATA_NAMESPACE = "tbr"
"""Dynamic-metadata namespace of the one-message design's routing decision (the ext_proc filter
accepts it through ``metadata_options.receiving_namespaces.untyped``)."""
ROUTING_METADATA_KEY = "pool"
"""Key of the pool's routing value in :data:`ROUTING_METADATA_NAMESPACE`; routes match
``dynamic_metadata`` filter ``tbr``, path ``pool``."""


ROUTING_METADATA_STREAM_KEY = "stream"
"""Key set to ``true`` in :data:`ROUTING_METADATA_NAMESPACE` for a request that asked for SSE
(``stream: true``): envoy/envoy.yaml's streaming routes match it and bound the silence between two
chunks (issue 34, item 8; envoy/README.md, "Timeouts")."""


def route_by_metadata(header: str, value: str, *, stream: bool = False) -> pb.ProcessingResponse:
    """Answer to a ``request_body`` that came without ``request_headers`` (one message per request,
    docs/design/004-one-message.md): the pool goes into dynamic metadata ``{tbr: {pool: value}}``
    and the route cache is cleared so that the route (matching that metadata) is picked again.
    With ``stream`` the metadata also says ``{tbr: {stream: true}}`` (the streaming routes).

    The request headers have already passed the filter, so Envoy drops the header mutation; it is
    still sent because Envoy 1.40 clears the route cache on a body answer only when the answer
    carries a header mutation (stat ``clear_route_cache_ignored`` otherwise, even with
    ``route_cache_action: CLEAR``).
    """
    md = struct_pb2.Struct()
    ns = md.get_or_create_struct(ROUTING_METADATA_NAMESPACE)
    ns[ROUTING_METADATA_KEY] = value
    if stream:
        ns[ROUTING_METADATA_STREAM_KEY] = True
    return pb.ProcessingResponse(
        request_body=pb.BodyResponse(response=_routing_common(header, value)), dynamic_metadata=md
    )


def route_request_headers(header: str, value: str) -> pb.ProcessingResponse:
    """Answer to ``request_headers`` for bodiless or unhandled requests: route now, and skip the body.

    The mode override turns the request body and every response phase off (the exchange needs
    nothing more from Envoy); body modes have no DEFAULT, so the override
    states every mode explicitly (docs/envoy-facts.md §1.4 gotcha 4).
    """
    return pb.ProcessingResponse(
        request_headers=pb.HeadersResponse(response=_routing_common(header, value)),
        mode_override=pm.ProcessingMode(
            request_body_mode=pm.ProcessingMode.NONE,
            response_header_mode=pm.ProcessingMode.SKIP,
            response_body_mode=pm.ProcessingMode.NONE,
        ),
    )


CONTINUE_REQUEST_HEADERS = pb.ProcessingResponse(request_headers=pb.HeadersResponse())
CONTINUE_REQUEST_HEADERS_SKIP_RESPONSE = pb.ProcessingResponse(
    request_headers=pb.HeadersResponse(),
    mode_override=pm.ProcessingMode(
        request_body_mode=pm.ProcessingMode.BUFFERED,
        response_header_mode=pm.ProcessingMode.SKIP,
        response_body_mode=pm.ProcessingMode.NONE,
    ),
)
"""Answer to ``request_headers`` of a request routed on its body but not sampled for calibration:
keep the request body BUFFERED (body modes have no DEFAULT, so it is stated; docs/envoy-facts.md §1.4
gotcha 4) and turn the response phases off, so the stream ends after ``request_body``
(2 messages instead of 4). Envoy honours it only with ``allow_mode_override: true`` and without
``send_body_without_waiting_for_header_response``; otherwise the response headers still arrive
and the router just continues them."""

CONTINUE_REQUEST_BODY = pb.ProcessingResponse(request_body=pb.BodyResponse())
CONTINUE_REQUEST_TRAILERS = pb.ProcessingResponse(request_trailers=pb.TrailersResponse())
CONTINUE_RESPONSE_HEADERS = pb.ProcessingResponse(response_headers=pb.HeadersResponse())
CONTINUE_RESPONSE_BODY = pb.ProcessingResponse(response_body=pb.BodyResponse())
CONTINUE_RESPONSE_TRAILERS = pb.ProcessingResponse(response_trailers=pb.TrailersResponse())

READ_JSON_RESPONSE = pb.ProcessingResponse(
    response_headers=pb.HeadersResponse(),
    mode_override=pm.ProcessingMode(response_body_mode=pm.ProcessingMode.STREAMED),
)
"""Answer to 2xx JSON ``response_headers``: stream the body to us chunk by chunk (usage sits near
its end; :class:`~extproc.core.response.sse.JSONUsageReader` keeps only the bytes after the key).

STREAMED, not BUFFERED: a BUFFERED body is held whole by Envoy and fails with 500 once it passes
the cluster's ``per_connection_buffer_limit_bytes`` (8 MiB in envoy/envoy.yaml), so reading usage
would change what the client gets for large answers (e.g. ``logprobs`` with many
``top_logprobs``). ``content-length`` is kept: the router never changes the body, so it stays
true (tests/e2e/test_large_responses.py)."""

READ_SSE_RESPONSE = pb.ProcessingResponse(
    response_headers=pb.HeadersResponse(
        response=pb.CommonResponse(header_mutation=pb.HeaderMutation(remove_headers=["content-length"]))
    ),
    mode_override=pm.ProcessingMode(response_body_mode=pm.ProcessingMode.STREAMED),
)
"""Answer to 2xx ``text/event-stream`` ``response_headers``: stream chunks to us as they pass.
``content-length`` is removed, as Envoy requires when a body mode changes to STREAMED."""
