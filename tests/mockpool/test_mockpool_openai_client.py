"""The official ``openai`` client against the pool: JSON, SSE with include_usage, errors, split SSE writes."""

from __future__ import annotations

import time

import httpx
import openai
import pytest
from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionMessageParam

from mockpool.server import serve_pool
from mockpool.settings import PoolSettings

HELLO: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Hello"}]


def make_client(base_url: str) -> AsyncOpenAI:
    """AsyncOpenAI pointed at a pool (no retries: every call is observed once)."""
    return AsyncOpenAI(base_url=base_url + "/v1", api_key="unused", max_retries=0)


async def test_openai_chat_json(qwen_pool: str) -> None:
    async with make_client(qwen_pool) as client:
        raw = await client.chat.completions.with_raw_response.create(
            model="Qwen/Qwen3-8B", messages=HELLO, max_tokens=4
        )
        assert raw.headers["x-served-by-pool"] == "short"
        completion = raw.parse()
    assert completion.choices[0].message.content == " quick brown fox jumps"
    assert completion.usage is not None
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (9, 4)


async def test_openai_chat_stream_include_usage(qwen_pool: str) -> None:
    async with make_client(qwen_pool) as client:
        stream = await client.chat.completions.create(
            model="Qwen/Qwen3-8B",
            messages=HELLO,
            max_completion_tokens=6,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [chunk async for chunk in stream]
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == " quick brown fox jumps over the"
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finish == ["length"]
    assert [c.usage for c in chunks[:-1]] == [None] * (len(chunks) - 1)
    last = chunks[-1]
    assert last.choices == [] and last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (9, 6, 15)


async def test_stream_without_include_usage_has_no_usage_field(client: httpx.AsyncClient) -> None:
    async with client.stream("POST", "/v1/chat/completions", json={"messages": HELLO, "stream": True}) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in r.aiter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    assert all(line.startswith("data: ") for line in lines)
    assert all('"usage"' not in line for line in lines)


async def test_openai_completions_stream_and_error(llama_pool: str) -> None:
    async with make_client(llama_pool) as client:
        stream = await client.completions.create(
            model="meta-llama/Llama-3.1-8B-Instruct",
            prompt="Hi",
            max_tokens=3,
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = [c async for c in stream]
        assert "".join(c.choices[0].text for c in chunks if c.choices) == " quick brown fox"
        assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens == 2  # BOS + "Hi"
        with pytest.raises(openai.BadRequestError) as info:
            await client.chat.completions.create(
                model="meta-llama/Llama-3.1-8B-Instruct", messages=HELLO, max_tokens=40000
            )
    assert info.value.status_code == 400
    assert "max_tokens=40000 cannot be greater than max_model_len=32768" in info.value.message


async def test_split_sse_writes_reassemble() -> None:
    """Events cut into 7-byte writes still parse, byte-identical once reassembled."""
    settings = PoolSettings(name="split", sse_split_bytes=7, output_tokens=3)
    async with serve_pool(settings) as url:
        async with (
            httpx.AsyncClient(base_url=url) as c,
            c.stream("POST", "/v1/chat/completions", json={"messages": HELLO, "stream": True}) as r,
        ):
            pieces = [p async for p in r.aiter_raw()]
        assert len(pieces) > 20  # arrived in many reads, not one
        body = b"".join(pieces).decode()
        assert body.endswith("data: [DONE]\n\n") and body.count("\n\n") == 1 + 3 + 1 + 1
        async with make_client(url) as client:
            stream = await client.chat.completions.create(
                model="Qwen/Qwen3-8B", messages=HELLO, stream=True, stream_options={"include_usage": True}
            )
            chunks = [c async for c in stream]
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 3


async def test_latency_knobs() -> None:
    settings = PoolSettings(
        name="slow", time_to_first_token_s=0.2, inter_token_latency_s=0.05, output_tokens=5
    )
    async with serve_pool(settings) as url, httpx.AsyncClient(base_url=url) as c:
        start = time.monotonic()
        async with c.stream("POST", "/v1/chat/completions", json={"messages": HELLO, "stream": True}) as r:
            first = None
            async for line in r.aiter_lines():
                if '"content":" quick"' in line and first is None:
                    first = time.monotonic() - start
        total = time.monotonic() - start
    assert first is not None and first >= 0.2
    assert total >= 0.2 + 4 * 0.05
