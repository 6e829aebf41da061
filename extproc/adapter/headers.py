"""Envoy header maps to plain values, at the edge: the rest of the router sees ``str``, never protobuf.

Envoy sends each header as a ``HeaderValue`` with the bytes in ``raw_value`` (``value`` stays
empty); older senders and tests may fill ``value`` instead, so both are read.
"""

from __future__ import annotations

from collections.abc import Collection

from envoy.config.core.v3 import base_pb2 as core
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

__all__ = ["EXT_PROC_ATTRIBUTES", "header_value", "plain_headers", "request_attributes"]

EXT_PROC_ATTRIBUTES = "envoy.filters.http.ext_proc"
"""Key of ``ProcessingRequest.attributes`` under which Envoy sends the filter's ``request_attributes``."""


def header_value(h: core.HeaderValue) -> str:
    """Value of one ``HeaderValue``: ``raw_value`` (what Envoy sends) else ``value``.

    Non-UTF-8 bytes are replaced (U+FFFD), never raised on.
    """
    raw = h.raw_value
    if raw:
        return raw.decode("utf-8", "replace")
    return h.value


def plain_headers(headers: core.HeaderMap, names: Collection[str]) -> dict[str, str]:
    """The headers of ``headers`` whose lower-cased name is in ``names``, as ``{name: value}``.

    Only the wanted names are decoded (the router reads 3–4 of the ~10–20 headers of a message).
    A name sent several times yields its values joined with ``", "`` in order, the one combined
    value of a repeated field line (RFC 9110 §5.3), e.g. ``content-encoding: gzip`` twice →
    ``"gzip, gzip"``.

    Args:
        headers: the ``HeaderMap`` of an ``HttpHeaders`` message.
        names: lower-case header names to keep (pseudo-headers such as ``:path`` included).
    Returns:
        name → value (str, undecodable bytes replaced); absent names are missing.
    """
    out: dict[str, str] = {}
    for h in headers.headers:
        key = h.key.lower()
        if key in names:
            value = header_value(h)
            prev = out.get(key)
            out[key] = value if prev is None else f"{prev}, {value}"
    return out


def request_attributes(req: pb.ProcessingRequest, names: Collection[str]) -> dict[str, str]:
    """The string ``request_attributes`` named ``names`` (e.g. ``request.path``, ``request.method``,
    ``request.id``) that Envoy attached to ``req``, as ``{attribute: value}``; absent ones are
    missing and a non-string value reads as ``""``.

    Envoy sends them with the first message of the stream, so with request headers SKIPped they
    come with the ``request_body`` (docs/design/004-one-message.md). Looking the wanted names up
    costs half of walking the whole ``Struct`` (~1.5 vs 3.5 µs with upb).
    """
    attrs = req.attributes.get(EXT_PROC_ATTRIBUTES)
    if attrs is None:
        return {}
    fields = attrs.fields
    out: dict[str, str] = {}
    for name in names:
        value = fields.get(name)
        if value is not None:
            out[name] = value.string_value
    return out
