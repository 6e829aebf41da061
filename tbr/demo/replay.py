"""Send :class:`~tbr.demo.workload.DemoRequest` s through Envoy with the official ``openai`` client.

Each request carries its own ``x-request-id`` (the router's decision log is joined on it). The pool
that served it is read from the stand-in pool's ``x-served-by-pool`` response header, the true
prompt size from ``usage.prompt_tokens`` (JSON body, or the last SSE chunk with ``include_usage``).
HTTP errors are outcomes, not exceptions: a 400 from the short pool is a harmful misroute.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import openai

from tbr.demo.workload import DemoRequest

__all__ = ["Outcome", "replay", "send_one"]

SERVED_BY_HEADER = "x-served-by-pool"


@dataclass(frozen=True)
class Outcome:
    """What happened to one request.

    Attributes:
        status: HTTP status seen by the client (0 = no HTTP response: connection error/timeout).
        pool: ``x-served-by-pool`` of the response (None when no pool answered).
        prompt_tokens / completion_tokens: the pool's ``usage`` (None when not returned, e.g. a
            stream without ``include_usage``).
        latency_s: wall time from send to the last byte.
        error: exception class name for failures (never prompt text).
    """

    request: DemoRequest
    status: int
    pool: str | None
    prompt_tokens: int | None
    completion_tokens: int | None
    latency_s: float
    error: str | None = None


def _kwargs(req: DemoRequest, model: str) -> dict[str, Any]:
    kw: dict[str, Any] = {"model": model, "messages": req.messages}
    if req.tools:
        kw["tools"] = req.tools
    if req.max_tokens is not None:
        kw["max_tokens"] = req.max_tokens
    if req.stream:
        kw["stream"] = True
        if req.include_usage:
            kw["stream_options"] = {"include_usage": True}
    return kw


async def send_one(client: openai.AsyncOpenAI, req: DemoRequest, model: str) -> Outcome:
    """Send ``req``; returns its :class:`Outcome` (HTTP and connection errors included, never raised)."""
    t0 = time.perf_counter()
    headers = {"x-request-id": req.request_id}
    try:
        raw = await client.chat.completions.with_raw_response.create(
            **_kwargs(req, model), extra_headers=headers
        )
        pool = raw.headers.get(SERVED_BY_HEADER)
        prompt = completion = None
        if req.stream:
            stream: Any = raw.parse()
            async for chunk in stream:
                if chunk.usage is not None:
                    prompt, completion = chunk.usage.prompt_tokens, chunk.usage.completion_tokens
        else:
            body: Any = raw.parse()
            if body.usage is not None:
                prompt, completion = body.usage.prompt_tokens, body.usage.completion_tokens
        return Outcome(req, raw.status_code, pool, prompt, completion, time.perf_counter() - t0)
    except openai.APIStatusError as e:
        return Outcome(
            req,
            e.status_code,
            e.response.headers.get(SERVED_BY_HEADER),
            None,
            None,
            time.perf_counter() - t0,
            type(e).__name__,
        )
    except openai.APIError as e:  # connection error, timeout, broken stream
        return Outcome(req, 0, None, None, None, time.perf_counter() - t0, type(e).__name__)


async def replay(
    base_url: str,
    requests: list[DemoRequest],
    *,
    model: str,
    concurrency: int = 8,
    timeout_s: float = 120.0,
    on_done: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """Send all ``requests`` with at most ``concurrency`` in flight; outcomes in request order."""
    sem = asyncio.Semaphore(max(1, concurrency))
    async with openai.AsyncOpenAI(
        base_url=base_url, api_key="demo", max_retries=0, timeout=timeout_s
    ) as client:

        async def run(req: DemoRequest) -> Outcome:
            async with sem:
                out = await send_one(client, req, model)
            if on_done is not None:
                on_done(out)
            return out

        return list(await asyncio.gather(*(run(r) for r in requests)))
