"""How an unsampled stream ends over real gRPC (extproc/adapter/server.py, "How a stream ends"):
the router sends its routing answer and ends the call at once (``start_write``: the answer's write
is started, then the status, without waiting for the write's completion). The answer must still
arrive before the status on every stream, and each stream is counted once, after it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest

from extproc.adapter import responses as R
from extproc.config import parse_config
from extproc.service.app import RouterApp
from tests.hardening.helpers import Counts
from tests.pb import EOF, chat_body, open_stream, req_body, req_headers
from tests.waiting import until_async

CONFIG: dict[str, Any] = {
    "pools": [
        {"name": "short", "max_model_len": 8192, "header_value": "short"},
        {"name": "long", "max_model_len": 65536, "header_value": "long"},
    ],
    "calibration": {"sample_rate": 0.0, "skip_unsampled_responses": True},
    "admin": {"enabled": False},
}


@pytest.fixture
async def app() -> AsyncIterator[RouterApp]:
    async with RouterApp(parse_config(CONFIG), grpc_port=0) as running:
        yield running


async def _unsampled_exchange(port: int, text: str) -> tuple[list[Any], grpc.StatusCode]:
    """Request headers and body on one stream; every message read until the end, and the status."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = open_stream(ch)
        await call.write(req_headers())
        got: list[Any] = [await call.read()]
        await call.write(req_body(chat_body(text, max_tokens=16)))
        while (msg := await call.read()) is not EOF:
            got.append(msg)
        return got, await call.code()


async def test_routing_answer_arrives_before_the_status_on_every_concurrent_stream(app: RouterApp) -> None:
    counts = Counts(app)
    short_text, long_text = "route me. " * 40, "a long document. " * 6000  # ~100 KB: over 8,192 tokens
    texts = [short_text if i % 3 else long_text for i in range(120)]
    results = await asyncio.gather(*(_unsampled_exchange(app.grpc_port, t) for t in texts))
    for text, (got, code) in zip(texts, results, strict=True):
        assert code == grpc.StatusCode.OK
        assert len(got) == 2, "the headers answer and the routing answer, then the end of the call"
        assert got[0] == R.CONTINUE_REQUEST_HEADERS_SKIP_RESPONSE
        pool = "short" if text is short_text else "long"
        assert got[1] == app.current_router().body_responses[pool]
    await until_async(  # the stream's accounting runs just after its status
        lambda: counts.delta("tbr_streams_total", {"end": "complete"}) == len(texts),
        what="every stream counted complete",
    )
    assert counts.delta("tbr_streams_total") == len(texts)
