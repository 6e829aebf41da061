"""Shared helpers for the hardening tests: build ext_proc messages, drive a real gRPC stream,
read the router's Prometheus metrics.

Message builders generate only the phases Envoy sends with ``envoy/envoy.yaml``'s processing
mode (request headers SEND, request body BUFFERED, response headers SEND, response body as the
router's ``mode_override`` asks).
"""

from __future__ import annotations

from collections.abc import Iterable

import httpx
from envoy.config.core.v3 import base_pb2 as core
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from prometheus_client.parser import text_string_to_metric_families

from tests.extproc_stream import chat_body as chat_body  # re-exported for the hardening tests
from tests.extproc_stream import run_stream as run_stream

CONFIG: dict[str, object] = {
    "pools": [
        {"name": "short", "max_model_len": 8192, "header_value": "short"},
        {"name": "long", "max_model_len": 65536, "header_value": "long"},
    ],
    "calibration": {"warmup_samples": 2},
}

CHAT_HEADERS = {":method": "POST", ":path": "/v1/chat/completions", "x-request-id": "r1"}
COMPLETIONS_HEADERS = {":method": "POST", ":path": "/v1/completions", "x-request-id": "r2"}


def headers(
    pairs: dict[str, str] | Iterable[tuple[str, str | bytes]], *, eos: bool = False, raw: bool = True
) -> pb.HttpHeaders:
    """An ``HttpHeaders`` message; values in ``raw_value`` (what Envoy sends) or in ``value``."""
    items = pairs.items() if isinstance(pairs, dict) else pairs
    hs = []
    for k, v in items:
        b = v if isinstance(v, bytes) else v.encode()
        hs.append(core.HeaderValue(key=k, raw_value=b) if raw else core.HeaderValue(key=k, value=b.decode()))
    return pb.HttpHeaders(headers=core.HeaderMap(headers=hs), end_of_stream=eos)


def req_headers(
    pairs: dict[str, str] | None = None, *, eos: bool = False, raw: bool = True
) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_headers=headers(pairs or CHAT_HEADERS, eos=eos, raw=raw))


def req_body(body: bytes, *, eos: bool = True) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=eos))


def resp_headers(
    pairs: dict[str, str] | Iterable[tuple[str, str | bytes]], *, eos: bool = False
) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(response_headers=headers(pairs, eos=eos))


def resp_body(body: bytes, *, eos: bool = False) -> pb.ProcessingRequest:
    return pb.ProcessingRequest(response_body=pb.HttpBody(body=body, end_of_stream=eos))


def phase_of(resp: pb.ProcessingResponse) -> str:
    """Which phase a ProcessingResponse answers."""
    return str(resp.WhichOneof("response"))


def routed_pool(resp: pb.ProcessingResponse) -> str | None:
    """The pool a response routes to (x-tbr-pool raw_value), or None when it sets no header."""
    if resp.HasField("request_body"):
        common = resp.request_body.response
    elif resp.HasField("request_headers"):
        common = resp.request_headers.response
    else:
        return None
    sets = list(common.header_mutation.set_headers)
    if not sets:
        return None
    assert common.clear_route_cache
    (opt,) = sets
    assert opt.header.key == "x-tbr-pool"
    assert opt.append_action == core.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
    return opt.header.raw_value.decode()


async def metrics_text(admin_port: int) -> str:
    async with httpx.AsyncClient() as c:
        r = await c.get(f"http://127.0.0.1:{admin_port}/metrics")
        r.raise_for_status()
        return r.text


def sample(text: str, name: str, labels: dict[str, str] | None = None) -> float:
    """Value of one Prometheus sample (0.0 when absent)."""
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and (labels is None or all(s.labels.get(k) == v for k, v in labels.items())):
                return float(s.value)
    return 0.0


class Counts:
    """Metric deltas on a shared router: ``c = Counts(app)`` then ``c.delta(name, labels)``.

    Reads the router's own Prometheus registry (the same one ``/metrics`` serves).
    """

    def __init__(self, app: object) -> None:
        self._registry = app.metrics.registry  # type: ignore[attr-defined]
        self._before = self._snapshot()

    def _snapshot(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        out = {}
        for fam in self._registry.collect():
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = float(s.value)
        return out

    def delta(self, name: str, labels: dict[str, str] | None = None) -> float:
        """Sum over samples of ``name`` matching ``labels`` (a subset) of now − before."""
        now = self._snapshot()
        total = 0.0
        for (n, lab), v in now.items():
            if n != name:
                continue
            d = dict(lab)
            if labels is not None and any(d.get(k) != v2 for k, v2 in labels.items()):
                continue
            total += v - self._before.get((n, lab), 0.0)
        return total

    def now(self, name: str, labels: dict[str, str] | None = None) -> float:
        total = 0.0
        for (n, lab), v in self._snapshot().items():
            if n == name and (labels is None or all(dict(lab).get(k) == v2 for k, v2 in labels.items())):
                total += v
        return total
