"""The pool's Responses, Anthropic Messages and chat batch endpoints with the official clients."""

from __future__ import annotations

import base64
import io
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai import AsyncOpenAI
from PIL import Image

from mockpool.server import serve_pool
from mockpool.settings import PoolSettings

HELLO: Any = [{"role": "user", "content": "Hello"}]


def png_data_uri(width: int, height: int) -> str:
    """A real PNG of ``width × height`` pixels as a data URI."""
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (200, 30, 30)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def oai(url: str) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


async def test_responses_json_and_chat_count_agree(qwen_pool: str) -> None:
    """``input`` as a string renders as one user message: same prompt tokens as chat."""
    async with oai(qwen_pool) as client:
        chat = await client.chat.completions.create(model="Qwen/Qwen3-8B", messages=HELLO, max_tokens=4)
        resp = await client.responses.create(model="Qwen/Qwen3-8B", input="Hello", max_output_tokens=4)
    assert chat.usage is not None and resp.usage is not None
    assert resp.usage.input_tokens == chat.usage.prompt_tokens
    assert resp.usage.output_tokens == 4
    assert resp.output_text == " quick brown fox jumps"
    assert resp.id.startswith("resp_")


async def test_responses_stream_events_and_previous_response(qwen_pool: str) -> None:
    async with oai(qwen_pool) as client:
        stream = await client.responses.create(
            model="Qwen/Qwen3-8B", input="Hello", instructions="Be brief.", max_output_tokens=3, stream=True
        )
        events = [e async for e in stream]
        assert events[0].type == "response.created" and events[0].response.usage is None
        done = events[-1]
        assert done.type == "response.completed"
        assert done.response.usage is not None and done.response.usage.output_tokens == 3
        first_tokens = done.response.usage.input_tokens
        follow = await client.responses.create(
            model="Qwen/Qwen3-8B",
            input="And then?",
            previous_response_id=done.response.id,
            max_output_tokens=3,
        )
        assert follow.usage is not None and follow.usage.input_tokens > first_tokens  # stored turns count
        with pytest.raises(openai.NotFoundError) as err:
            await client.responses.create(model="Qwen/Qwen3-8B", input="x", previous_response_id="resp_nope")
    assert "Response with id 'resp_nope' not found." in str(err.value)


async def test_responses_context_length_error(qwen_pool: str) -> None:
    async with oai(qwen_pool) as client:
        with pytest.raises(openai.BadRequestError) as err:
            await client.responses.create(model="Qwen/Qwen3-8B", input="Hello " * 3000, max_output_tokens=16)
        assert "maximum context length is 2048 tokens" in str(err.value)
        with pytest.raises(openai.BadRequestError) as err:
            await client.responses.create(model="Qwen/Qwen3-8B", input="Hello", max_output_tokens=4000)
    assert "max_output_tokens=4000 cannot be greater than max_model_len=2048" in str(err.value)


async def test_anthropic_client_json_stream_and_error(qwen_pool: str) -> None:
    client = anthropic.AsyncAnthropic(base_url=qwen_pool, api_key="unused", max_retries=0)
    try:
        msg = await client.messages.create(
            model="Qwen/Qwen3-8B",
            max_tokens=4,
            system="Be brief.",
            messages=[{"role": "user", "content": "Hello"}],
        )
        assert msg.usage.output_tokens == 4 and msg.stop_reason == "max_tokens"
        async with client.messages.stream(
            model="Qwen/Qwen3-8B",
            max_tokens=4,
            system="Be brief.",
            messages=[{"role": "user", "content": "Hello"}],
        ) as stream:
            final = await stream.get_final_message()
        assert final.usage.input_tokens == msg.usage.input_tokens
        with pytest.raises(anthropic.BadRequestError) as err:
            await client.messages.create(
                model="Qwen/Qwen3-8B", max_tokens=4000, messages=[{"role": "user", "content": "Hello"}]
            )
        assert "max_completion_tokens=4000 cannot be greater than max_model_len=2048" in str(err.value)
    finally:
        await client.close()


async def test_anthropic_tool_blocks_count_like_chat(qwen_pool: str) -> None:
    """tool_use → assistant tool_calls, tool_result → tool message: same count as the chat request."""
    chat_messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "weather", "arguments": '{"city": "Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "Sunny, 21 C"},
    ]
    anthropic_body = {
        "model": "Qwen/Qwen3-8B",
        "max_tokens": 4,
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "t1", "name": "weather", "input": {"city": "Paris"}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "Sunny, 21 C"}],
            },
        ],
    }
    async with httpx.AsyncClient(base_url=qwen_pool, timeout=30) as http:
        chat = (
            await http.post("/v1/chat/completions", json={"messages": chat_messages, "max_tokens": 4})
        ).json()
        msg = (await http.post("/v1/messages", json=anthropic_body)).json()
    assert msg["usage"]["input_tokens"] == chat["usage"]["prompt_tokens"]


async def test_chat_batch_sums_usage(qwen_pool: str) -> None:
    convs = [HELLO, [{"role": "user", "content": "Hello there, how are you today?"}]]
    async with httpx.AsyncClient(base_url=qwen_pool, timeout=30) as http:
        each = [
            (await http.post("/v1/chat/completions", json={"messages": c, "max_tokens": 2})).json()["usage"][
                "prompt_tokens"
            ]
            for c in convs
        ]
        batch = (
            await http.post("/v1/chat/completions/batch", json={"messages": convs, "max_tokens": 2})
        ).json()
        streamed = await http.post("/v1/chat/completions/batch", json={"messages": convs, "stream": True})
    assert batch["usage"]["prompt_tokens"] == sum(each)
    assert [c["index"] for c in batch["choices"]] == [0, 1]
    assert streamed.status_code == 400


async def test_qwen_vl_image_rule_counts_patches() -> None:
    """3840×2160 → 77 × 137 cells + 2 vision tokens; 256×256 → 81 + 2 (Qwen2.5-VL smart_resize)."""
    settings = PoolSettings(name="vl", max_model_len=32768, image_rule="qwen2.5-vl")
    async with serve_pool(settings) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        base = (await http.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 1})).json()
        counts = []
        for w, h in ((3840, 2160), (256, 256)):
            content = [
                {"type": "text", "text": "Hello"},
                {"type": "image_url", "image_url": {"url": png_data_uri(w, h)}},
            ]
            body = {"messages": [{"role": "user", "content": content}], "max_tokens": 1}
            counts.append(
                (await http.post("/v1/chat/completions", json=body)).json()["usage"]["prompt_tokens"]
            )
    text = base["usage"]["prompt_tokens"]
    assert [c - text for c in counts] == [77 * 137 + 2, 81 + 2]
