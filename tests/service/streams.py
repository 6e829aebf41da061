"""Drive a running router over real gRPC ext_proc streams (no Envoy), and read its admin API."""

from __future__ import annotations

import json

import httpx
from envoy.config.core.v3 import base_pb2 as core
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from tests.extproc_stream import chat_body, run_stream

POOLS = [
    {"name": "short", "max_model_len": 8192, "header_value": "short"},
    {"name": "long", "max_model_len": 65536, "header_value": "long"},
]

REQ_HEADERS = {":method": "POST", ":path": "/v1/chat/completions", "x-request-id": "ops-1"}

# 8000 bytes of latin text: ~2000 tokens at the prior ratio (short pool), but 8000+ tokens once
# the router has learned ~1 byte/token for it (long pool: 8000 + 1024 reserve > 8192).
TEXT_8000 = ("The quick brown fox jumps over the lazy dog. " * 178)[:8000]


def headers(pairs: dict[str, str], *, eos: bool = False) -> pb.HttpHeaders:
    hs = [core.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    return pb.HttpHeaders(headers=core.HeaderMap(headers=hs), end_of_stream=eos)


def request_msgs(text: str, request_id: str = "ops-1") -> list[pb.ProcessingRequest]:
    return [
        pb.ProcessingRequest(request_headers=headers({**REQ_HEADERS, "x-request-id": request_id})),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=chat_body(text), end_of_stream=True)),
    ]


def json_response_msgs(prompt_tokens: int) -> list[pb.ProcessingRequest]:
    usage = json.dumps({"usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 1}}).encode()
    return [
        pb.ProcessingRequest(
            response_headers=headers({":status": "200", "content-type": "application/json"})
        ),
        pb.ProcessingRequest(response_body=pb.HttpBody(body=usage, end_of_stream=True)),
    ]


def routed_pool(resp: pb.ProcessingResponse) -> str:
    common = resp.request_body.response if resp.HasField("request_body") else resp.request_headers.response
    assert common.clear_route_cache
    (opt,) = common.header_mutation.set_headers
    return str(opt.header.raw_value.decode())


async def route_of(port: int, text: str) -> str:
    """The pool the router picks for a chat request with ``text``."""
    out = await run_stream(port, request_msgs(text))
    return routed_pool(out[1])


async def calibrate(port: int, text: str, prompt_tokens: int, *, times: int = 1) -> None:
    """Full request/response streams whose JSON response reports ``prompt_tokens``."""
    for _ in range(times):
        await run_stream(port, request_msgs(text) + json_response_msgs(prompt_tokens))


async def admin_get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5.0) as c:
        return await c.get(f"http://127.0.0.1:{port}{path}")


async def ratios(port: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = (await admin_get(port, "/ratios")).json()["ratios"]
    return rows
