"""Issue 34, item 8: in the one-message design the router marks a request that asked for SSE
(``stream: true``) with ``tbr.stream: true`` beside ``tbr.pool``, so envoy/envoy.yaml's streaming
routes (60 s idle timeout) carry it; every other answer is unchanged, sampled or not."""

from __future__ import annotations

import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.adapter.responses import ROUTING_METADATA_NAMESPACE, ROUTING_METADATA_STREAM_KEY
from extproc.config import parse_config
from extproc.service.app import RouterApp
from tests.pb import chat_body, req_body, req_headers, routed_pool, run_stream

POOLS = [
    {"name": "short", "max_model_len": 8192, "header_value": "short"},
    {"name": "long", "max_model_len": 65536, "header_value": "long"},
]


def one_message(body: bytes) -> pb.ProcessingRequest:
    """The request body with the request line as attributes (Envoy, request headers SKIPped)."""
    req = pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))
    attrs = req.attributes["envoy.filters.http.ext_proc"]
    attrs["request.path"] = "/v1/chat/completions"
    attrs["request.method"] = "POST"
    return req


@pytest.mark.parametrize("sample_rate", [0.0, 1.0], ids=["unsampled", "sampled"])
async def test_streaming_requests_are_marked_in_the_routing_metadata(sample_rate: float) -> None:
    cfg = parse_config({"pools": POOLS, "calibration": {"sample_rate": sample_rate}})
    async with RouterApp(cfg, grpc_port=0) as app:
        for body, pool, streamed in [
            (chat_body("hello"), "short", False),
            (chat_body("hello", stream=True), "short", True),
            (chat_body("hello", stream=True, max_tokens=60000), "long", True),
            (chat_body("hello", stream=False), "short", False),
        ]:
            (answer,) = await run_stream(app.grpc_port, [one_message(body)])
            tbr = answer.dynamic_metadata.fields[ROUTING_METADATA_NAMESPACE].struct_value.fields
            assert tbr["pool"].string_value == pool
            if streamed:
                assert tbr[ROUTING_METADATA_STREAM_KEY].bool_value is True
            else:
                assert ROUTING_METADATA_STREAM_KEY not in tbr
            assert ("calib" in tbr) is (sample_rate == 1.0)


async def test_two_message_answers_carry_no_stream_mark() -> None:
    """Envoy Gateway and Istio route on the header; their answers are as before."""
    cfg = parse_config({"pools": POOLS, "calibration": {"sample_rate": 0.0}})
    async with RouterApp(cfg, grpc_port=0) as app:
        out = await run_stream(
            app.grpc_port,
            [
                req_headers({":method": "POST", ":path": "/v1/chat/completions"}),
                req_body(chat_body("hi", stream=True)),
            ],
        )
        assert routed_pool(out[1]) == "short"
        assert not out[1].HasField("dynamic_metadata")
