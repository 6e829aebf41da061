"""Calibration off the request path (``calibration.off_path``, docs/design/005-off-path-calibration.md).

The routing ext_proc filter (request headers + buffered body) never turns the response phases on.
For a request sampled for calibration, the router's body answer also sets the request header
:data:`CALIB_HEADER` carrying what calibration needs (the exact budget, the pool, the endpoint).
A second ext_proc filter in ``observability_mode``, wrapped in a ``composite`` filter that runs it
only for requests carrying that header (envoy/envoy.yaml), sends the request headers, the response
headers and the response body to the router without waiting for any answer: the sampled request's
response reaches the client as fast as an unsampled one. The router reads that second stream
silently (no answers), calibrates at the end of the response body and ends the call.

Envoy strips a client's own :data:`CALIB_HEADER` before anything else
(``early_header_mutation_extensions``), so only the router's value reaches the second filter, also
when the router is down and the first filter fails open. A forged or damaged payload is still only
an observation: it is rejected unless it parses exactly, and the learner bounds what one
observation can move (docs/estimator.md §Learning).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import orjson
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.adapter.responses import ROUTING_METADATA_NAMESPACE, header_option
from extproc.core.estimate.budget import TokenBudget
from extproc.core.estimate.output_reserve import decode_class_key, encode_class_key

__all__ = [
    "CALIB_HEADER",
    "CALIB_METADATA_KEY",
    "CalibPayload",
    "decode_payload",
    "encode_payload",
    "payload_from_metadata",
    "route_and_sample",
]

CALIB_HEADER = "x-tbr-calib"
"""Request header set by the router on sampled requests; its presence selects the second filter."""
CALIB_METADATA_KEY = "calib"
"""In the one-message design (request headers SKIPped, docs/design/004-one-message.md) the body answer
cannot set a header: the payload goes into the routing answer's dynamic metadata
``{tbr: {calib: <payload>}}``; the composite filter matches that key (``DynamicMetadataInput`` with the
``metadata_matcher``), and the observability filter forwards the ``tbr`` namespace
(``metadata_options.forwarding_namespaces``) in each message's ``metadata_context``. A client cannot
write dynamic metadata, so nothing needs stripping."""

_VERSION = 2
"""2: the budget field ``ratio_bytes`` renamed ``modelled_units`` (a version-1 payload is not read)."""
_MAX_PAYLOAD_CHARS = 4096
_BUDGET_FIELDS = {f.name: f.type for f in dataclasses.fields(TokenBudget)}


@dataclasses.dataclass(frozen=True, slots=True)
class CalibPayload:
    """What the observability stream needs to calibrate one response.

    Attributes:
        budget: the budget to learn against (a chat batch's summed budget).
        pool: the pool the request was routed to.
        endpoint: ``chat``, ``completions``, ``responses``, ``messages`` or ``chat_batch``.
        learn: False for ``previous_response_id`` continuations (usage counts stored turns).
        request_id: Envoy's ``x-request-id`` (logs only: a client may reuse it).
        record_key: pairs the routing stream's decision record with this stream
            (:mod:`extproc.adapter.held_records`); unique per routed request, "" = none.
        client_max_output_tokens: the client's own output maximum (tokens; None when it sent
            none): tells a pool's cut of the answer from the client's (:mod:`extproc.core.learn.truncation`).
            Key ``mx``, written only when set.
    """

    budget: TokenBudget
    pool: str
    endpoint: str
    learn: bool
    request_id: str
    record_key: str = ""
    client_max_output_tokens: int | None = None


def encode_payload(p: CalibPayload) -> str:
    """The header value of ``p``: compact ASCII JSON (non-ASCII model names escaped)."""
    # the fields one by one: dataclasses.asdict deep-copies every value (~70 µs of a read's cost);
    # each field is a scalar but key and output_class, both rewritten below
    budget = p.budget
    b: dict[str, Any] = {name: getattr(budget, name) for name in _BUDGET_FIELDS}
    b["key"] = list(budget.key)
    oc = p.budget.output_class
    b["output_class"] = encode_class_key(oc) if oc is not None else None
    doc = {"v": _VERSION, "b": b, "pool": p.pool, "ep": p.endpoint, "learn": p.learn, "id": p.request_id}
    if p.record_key:
        doc["k"] = p.record_key
    if p.client_max_output_tokens is not None:
        doc["mx"] = p.client_max_output_tokens
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=True)


def _typed(name: str, value: Any) -> bool:
    kind = _BUDGET_FIELDS[name]
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, int | float) and not isinstance(value, bool)
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    return True  # key, output_class: checked by the caller


def decode_payload(value: str) -> CalibPayload | None:
    """Parse a :data:`CALIB_HEADER` value; None unless it is exactly what :func:`encode_payload`
    writes (version, every budget field with its type, a two-string key)."""
    if len(value) > _MAX_PAYLOAD_CHARS:
        return None
    try:
        doc = orjson.loads(value)  # the payload is ASCII JSON; orjson reads it ~3× faster than json
    except orjson.JSONDecodeError:
        return None
    if not isinstance(doc, dict) or doc.get("v") != _VERSION:
        return None
    b, pool, endpoint, learn, rid = (
        doc.get("b"),
        doc.get("pool"),
        doc.get("ep"),
        doc.get("learn"),
        doc.get("id"),
    )
    if not (isinstance(b, dict) and isinstance(pool, str) and isinstance(endpoint, str)):
        return None
    if not (isinstance(learn, bool) and isinstance(rid, str)) or set(b) != set(_BUDGET_FIELDS):
        return None
    record_key = doc.get("k", "")
    if not isinstance(record_key, str) or len(record_key) > 64:
        return None
    mx = doc.get("mx")
    if mx is not None and not (isinstance(mx, int) and not isinstance(mx, bool) and mx >= 0):
        return None
    key = b["key"]
    if not (isinstance(key, list) and len(key) == 2 and all(isinstance(k, str) for k in key)):
        return None
    if not all(_typed(n, v) for n, v in b.items() if n not in ("key", "output_class")):
        return None
    fields: dict[str, Any] = {n: (float(v) if _BUDGET_FIELDS[n] == "float" else v) for n, v in b.items()}
    fields["key"] = (key[0], key[1])
    oc = b["output_class"]
    if oc is not None:
        if not isinstance(oc, str):
            return None
        try:
            fields["output_class"] = decode_class_key(oc)
        except ValueError:
            return None
    return CalibPayload(TokenBudget(**fields), pool, endpoint, learn, rid[:128], record_key, mx)


def route_and_sample(routing: pb.ProcessingResponse, payload: CalibPayload) -> pb.ProcessingResponse:
    """The body answer ``routing`` (a prebuilt route to a pool) plus the payload: as
    :data:`CALIB_HEADER`, or, when ``routing`` routes by dynamic metadata (one message), as
    :data:`CALIB_METADATA_KEY` beside the pool in that metadata."""
    resp = pb.ProcessingResponse()
    resp.CopyFrom(routing)
    value = encode_payload(payload)
    ns = (
        resp.dynamic_metadata.fields.get(ROUTING_METADATA_NAMESPACE)
        if resp.HasField("dynamic_metadata")
        else None
    )
    if ns is not None:
        ns.struct_value.fields[CALIB_METADATA_KEY].string_value = value
        return resp
    mutation = resp.request_body.response.header_mutation
    mutation.set_headers.append(header_option(CALIB_HEADER, value))
    return resp


def payload_from_metadata(req: pb.ProcessingRequest) -> str | None:
    """The :data:`CALIB_METADATA_KEY` string Envoy forwarded in ``req.metadata_context`` (namespace
    ``tbr``); None when absent or not a string."""
    md = req.metadata_context.filter_metadata
    if ROUTING_METADATA_NAMESPACE not in md:
        return None
    v = md[ROUTING_METADATA_NAMESPACE].fields.get(CALIB_METADATA_KEY)
    return v.string_value if v is not None and v.WhichOneof("kind") == "string_value" else None
