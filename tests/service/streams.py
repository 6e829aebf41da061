"""Drive a running router over real gRPC ext_proc streams (no Envoy), and read its admin API."""

from __future__ import annotations

import httpx

from tests.pb import json_response_msgs, request_msgs, routed_pool, run_stream

POOLS = [
    {"name": "short", "max_model_len": 8192, "header_value": "short"},
    {"name": "long", "max_model_len": 65536, "header_value": "long"},
]

# 8000 bytes of latin text: ~2000 tokens at the prior ratio (short pool), but 8000+ tokens once
# the router has learned ~1 byte/token for it (long pool: 8000 + 1024 reserve > 8192).
TEXT_8000 = ("The quick brown fox jumps over the lazy dog. " * 178)[:8000]


async def route_of(port: int, text: str) -> str | None:
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
