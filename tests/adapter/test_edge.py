"""The typed ext_proc edge: headers to plain values, and the explicit per-stream exchange state."""

from __future__ import annotations

import json
import random

from envoy.config.core.v3 import base_pb2 as core
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.adapter.headers import plain_headers
from extproc.adapter.processor import Exchange, StreamProcessor
from extproc.adapter.runtime import Runtime
from extproc.config import parse_config


def _map(*pairs: tuple[str, str | bytes], raw: bool = True) -> core.HeaderMap:
    hs = []
    for k, v in pairs:
        b = v if isinstance(v, bytes) else v.encode()
        hs.append(core.HeaderValue(key=k, raw_value=b) if raw else core.HeaderValue(key=k, value=b.decode()))
    return core.HeaderMap(headers=hs)


def test_plain_headers_keeps_only_wanted_names_lower_cased() -> None:
    h = plain_headers(
        _map((":path", "/v1/x"), ("Content-Type", "a/b"), ("cookie", "secret")), {":path", "content-type"}
    )
    assert h == {":path": "/v1/x", "content-type": "a/b"}


def test_plain_headers_reads_value_when_raw_value_is_empty() -> None:
    assert plain_headers(_map((":status", "200"), raw=False), {":status"}) == {":status": "200"}


def test_plain_headers_joins_repeated_fields_in_order() -> None:
    h = plain_headers(_map(("content-encoding", "gzip"), ("content-encoding", "br")), {"content-encoding"})
    assert h == {"content-encoding": "gzip, br"}


def test_plain_headers_replaces_undecodable_bytes() -> None:
    assert plain_headers(_map(("x-request-id", b"a\xffb")), {"x-request-id"}) == {"x-request-id": "a\ufffdb"}


CONFIG = {
    "pools": [
        {"name": "short", "max_model_len": 8192, "header_value": "short"},
        {"name": "long", "max_model_len": 65536, "header_value": "long"},
    ],
    "calibration": {"sample_rate": 1.0},
}


def _headers(eos: bool = False, **kv: str) -> pb.HttpHeaders:
    return pb.HttpHeaders(headers=_map(*kv.items()), end_of_stream=eos)


def _request(proc: StreamProcessor, path: str = "/v1/chat/completions", method: str = "POST") -> None:
    proc.handle(
        pb.ProcessingRequest(request_headers=_headers(method == "GET", **{":path": path, ":method": method}))
    )


def _exchange(proc: StreamProcessor) -> Exchange:
    """The stream's state, read through a call so the type checker does not narrow it across steps."""
    return proc.exchange


def test_exchange_state_follows_a_calibrated_json_exchange() -> None:
    proc = StreamProcessor(Runtime(parse_config(CONFIG)), rng=random.Random(0))
    assert _exchange(proc) is Exchange.REQUEST_HEADERS
    _request(proc)
    assert _exchange(proc) is Exchange.REQUEST_BODY
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi " * 50}]}).encode()
    proc.handle(pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True)))
    assert _exchange(proc) is Exchange.RESPONSE_HEADERS
    resp_headers = _headers(False, **{":status": "200", "content-type": "application/json"})
    proc.handle(pb.ProcessingRequest(response_headers=resp_headers))
    assert _exchange(proc) is Exchange.RESPONSE_BODY and not proc.exchange_done
    usage = json.dumps({"usage": {"prompt_tokens": 60, "completion_tokens": 1}}).encode()
    proc.handle(pb.ProcessingRequest(response_body=pb.HttpBody(body=usage[:5], end_of_stream=False)))
    assert _exchange(proc) is Exchange.RESPONSE_BODY
    proc.handle(pb.ProcessingRequest(response_body=pb.HttpBody(body=usage[5:], end_of_stream=True)))
    assert _exchange(proc) is Exchange.DONE and proc.exchange_done and proc.calibrated


def test_exchange_ends_at_request_headers_when_routed_there() -> None:
    proc = StreamProcessor(Runtime(parse_config(CONFIG)))
    _request(proc, path="/v1/models", method="GET")
    assert proc.exchange is Exchange.DONE and proc.pool == "long"


def test_exchange_ends_at_request_body_when_response_phases_are_off() -> None:
    cfg = {**CONFIG, "calibration": {"sample_rate": 0.0, "skip_unsampled_responses": True}}
    proc = StreamProcessor(Runtime(parse_config(cfg)))
    _request(proc)
    proc.handle(pb.ProcessingRequest(request_body=pb.HttpBody(body=b"not json", end_of_stream=True)))
    assert proc.exchange is Exchange.DONE and proc.reason != "fits"


def test_exchange_ends_on_a_non_2xx_response_without_body_request() -> None:
    proc = StreamProcessor(Runtime(parse_config(CONFIG)), rng=random.Random(0))
    _request(proc)
    proc.handle(pb.ProcessingRequest(request_body=pb.HttpBody(body=b"{}", end_of_stream=True)))
    proc.handle(pb.ProcessingRequest(response_headers=_headers(False, **{":status": "503"})))
    assert proc.exchange is Exchange.DONE


def _body_first(
    body: bytes, path: str = "/v1/chat/completions", method: str = "POST"
) -> pb.ProcessingRequest:
    req = pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))
    attrs = req.attributes["envoy.filters.http.ext_proc"]
    attrs["request.path"] = path
    attrs["request.method"] = method
    attrs["request.id"] = "one-1"
    return req


def _metadata_pool(resp: pb.ProcessingResponse) -> str:
    return resp.dynamic_metadata.fields["tbr"].struct_value.fields["pool"].string_value


def test_one_message_routes_by_dynamic_metadata_from_request_attributes() -> None:
    proc = StreamProcessor(Runtime(parse_config(CONFIG)))
    short = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi " * 50}]}).encode()
    resp = proc.handle(_body_first(short))
    assert resp.WhichOneof("response") == "request_body"
    assert resp.request_body.response.clear_route_cache
    assert _metadata_pool(resp) == "short" and proc.request_id == "one-1" and proc.exchange_done
    long_body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": "word " * 60000}]}
    ).encode()
    assert _metadata_pool(StreamProcessor(proc.router).handle(_body_first(long_body))) == "long"


def test_one_message_sends_unreadable_and_unhandled_requests_to_the_largest_pool() -> None:
    router = Runtime(parse_config(CONFIG))
    unreadable = StreamProcessor(router)
    assert _metadata_pool(unreadable.handle(_body_first(b"{not json"))) == "long"
    unhandled = StreamProcessor(router)
    assert _metadata_pool(unhandled.handle(_body_first(b"{}", path="/v1/embeddings"))) == "long"
    assert unhandled.reason == "unsupported_path"
    no_attrs = StreamProcessor(router)
    bare = pb.ProcessingRequest(request_body=pb.HttpBody(body=b"{}", end_of_stream=True))
    assert _metadata_pool(no_attrs.handle(bare)) == "long"
