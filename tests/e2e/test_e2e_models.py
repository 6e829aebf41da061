"""Two models behind one Envoy (envoy/envoy-2models.yaml, config/router-2models.yaml): a Qwen3 pair
and a Llama-3 pair of strict stand-in pools. Every API the router budgets (chat, completions,
Responses with the official ``openai`` client; Anthropic Messages with the official ``anthropic``
client; the chat batch endpoint over HTTP) routes short and long prompts to the right pool of the
right model, streaming or not, and the router learns from the usage each API reports. A strict pool
answers 404 to another model, so a cross-model misroute cannot pass; ``x-envoy-attempt-count: 1``
shows no request needed Envoy's retry."""

from __future__ import annotations

import base64
import inspect
import io
from collections.abc import AsyncIterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
import pytest_asyncio
from openai import AsyncOpenAI
from PIL import Image, ImageDraw

from tbr.demo.workload import long_prompt, short_prompt
from tests.e2e.harness import Stack, data_dir, model_sets_stack, router_caught_up

pytestmark = [pytest.mark.envoy, pytest.mark.asyncio(loop_scope="module")]

MODELS = {"qwen": "Qwen/Qwen3-8B", "llama": "meta-llama/Llama-3.1-8B-Instruct"}
TEXT = {"short": short_prompt(data_dir())[1], "long": long_prompt(data_dir())[1]}
QWEN_VL = {"image_rule": "qwen2.5-vl"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def stack(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Stack]:
    work = tmp_path_factory.mktemp("models")
    async with model_sets_stack(work, pool_overrides={"qwen-short": QWEN_VL, "qwen-long": QWEN_VL}) as s:
        yield s


def metric(stack: Stack, name: str, labels: dict[str, str]) -> float:
    value = stack.app.metrics.registry.get_sample_value(name, labels)
    return 0.0 if value is None else value


def decisions(stack: Stack, pool: str, reason: str) -> float:
    """``tbr_routing_decisions_total`` of ``pool`` and ``reason``, over all categories."""
    return sum(
        sample.value
        for family in stack.app.metrics.registry.collect()
        if family.name == "tbr_routing_decisions"
        for sample in family.samples
        if sample.name.endswith("_total")
        and sample.labels["pool"] == pool
        and sample.labels["reason"] == reason
    )


def read(stack: Stack) -> float:
    """Batch usages read: learned, or skipped because the conversations' keys differ."""
    return applied(stack) + metric(stack, "tbr_calibration_events_total", {"outcome": "batch_mixed_keys"})


def applied(stack: Stack) -> float:
    return metric(stack, "tbr_calibration_events_total", {"outcome": "applied"})


async def settled_read(stack: Stack) -> float:
    """:func:`read` once earlier tests' usages have all arrived: responses are read off the request
    path (the observability stream), so the last test's may still be on their way."""
    await router_caught_up(stack)
    return read(stack)


async def learned_once_more(stack: Stack, before: float) -> None:
    """The router read this exchange's usage and learned from it exactly once."""
    await router_caught_up(stack)
    assert applied(stack) == before + 1


def oai(stack: Stack) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=stack.base_url, api_key="unused", max_retries=0, timeout=60.0)


async def call(stack: Stack, api: str, model: str, text: str, stream: bool) -> tuple[str, str]:
    """One request through Envoy; ``(x-served-by-pool, x-envoy-attempt-count)``. Streams are read
    to the end."""
    if api == "messages":
        client = anthropic.AsyncAnthropic(
            base_url=stack.base_url.removesuffix("/v1"), api_key="x", max_retries=0
        )
        async with client:
            req: dict[str, Any] = {
                "model": model,
                "max_tokens": 8,
                "messages": [{"role": "user", "content": text}],
            }
            raw_a = await client.messages.with_raw_response.create(**req, stream=stream)
            parsed_a: Any = raw_a.parse()
            if inspect.isawaitable(parsed_a):
                parsed_a = await parsed_a
            if stream:
                assert [e.type async for e in parsed_a][-1] == "message_stop"
            return raw_a.headers["x-served-by-pool"], raw_a.headers.get("x-envoy-attempt-count", "")
    async with oai(stack) as client_o:
        c: Any = client_o
        if api == "chat":
            extra = {"stream_options": {"include_usage": True}} if stream else {}
            raw: Any = await c.chat.completions.with_raw_response.create(
                model=model,
                messages=[{"role": "user", "content": text}],
                max_tokens=8,
                stream=stream,
                **extra,
            )
        elif api == "completions":
            extra = {"stream_options": {"include_usage": True}} if stream else {}
            raw = await c.completions.with_raw_response.create(
                model=model, prompt=text, max_tokens=8, stream=stream, **extra
            )
        else:
            raw = await c.responses.with_raw_response.create(
                model=model, input=text, max_output_tokens=8, stream=stream
            )
        parsed = raw.parse()
        if stream:
            _ = [chunk async for chunk in parsed]
        return raw.headers["x-served-by-pool"], raw.headers.get("x-envoy-attempt-count", "")


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
@pytest.mark.parametrize("api", ["chat", "completions", "responses", "messages"])
@pytest.mark.parametrize("size", ["short", "long"])
@pytest.mark.parametrize("family", ["qwen", "llama"])
async def test_each_api_routes_by_model_then_budget(
    stack: Stack, family: str, size: str, api: str, stream: bool
) -> None:
    before = applied(stack)
    pool, attempts = await call(stack, api, MODELS[family], TEXT[size], stream)
    assert (pool, attempts) == (f"{family}-{size}", "1")
    await learned_once_more(stack, before)


async def test_both_models_learn_their_own_ratios(stack: Stack) -> None:
    before = applied(stack)
    for family in MODELS:
        await call(stack, "chat", MODELS[family], TEXT["short"], False)
    await router_caught_up(stack)  # both usages read (off the request path), so none lands in the next test
    assert applied(stack) == before + len(MODELS)
    models = {model for (model, _), _ in stack.app.store.items()}
    assert set(MODELS.values()) <= models


async def test_chat_batch_routes_by_its_longest_conversation(stack: Stack) -> None:
    body: dict[str, Any] = {
        "model": MODELS["llama"],
        "max_tokens": 4,
        "messages": [
            [{"role": "user", "content": TEXT["short"]}],
            [{"role": "user", "content": TEXT["long"]}],
        ],
    }
    before = await settled_read(stack)
    async with httpx.AsyncClient(timeout=60) as http:
        r = await http.post(f"{stack.base_url}/chat/completions/batch", json=body)
        short = await http.post(
            f"{stack.base_url}/chat/completions/batch", json={**body, "messages": body["messages"][:1]}
        )
    assert r.status_code == 200 and r.headers["x-served-by-pool"] == "llama-long"
    assert len(r.json()["choices"]) == 2
    assert short.status_code == 200 and short.headers["x-served-by-pool"] == "llama-short"
    await router_caught_up(stack)
    # each summed usage is learned against the summed estimate, or (conversations of two
    # categories) counted as batch_mixed_keys: never learned against one conversation's estimate
    assert read(stack) == before + 2


async def test_previous_response_goes_to_the_pool_that_stored_it(stack: Stack) -> None:
    async with oai(stack) as c:
        first = await c.responses.with_raw_response.create(
            model=MODELS["llama"], input=TEXT["long"], max_output_tokens=4
        )
        assert first.headers["x-served-by-pool"] == "llama-long"
        await router_caught_up(stack)  # its answer read: the stored response's pool is known
        learned_before = applied(stack)
        skipped_before = metric(stack, "tbr_calibration_events_total", {"outcome": "previous_response"})
        follow = await c.responses.with_raw_response.create(
            model=MODELS["llama"], input="Summarise it in one line.", previous_response_id=first.parse().id
        )
        # the follow-up alone is short, but only llama-long holds the stored conversation
        assert follow.headers["x-served-by-pool"] == "llama-long"
        assert follow.parse().usage.input_tokens > first.parse().usage.input_tokens  # type: ignore[union-attr]
        await router_caught_up(stack)  # its usage counts the stored turns: read, not learned from
        assert (
            metric(stack, "tbr_calibration_events_total", {"outcome": "previous_response"})
            == skipped_before + 1
        )
        assert applied(stack) == learned_before
        with pytest.raises(openai.NotFoundError):
            await c.responses.create(model=MODELS["llama"], input="x", previous_response_id="resp_unknown")
    assert decisions(stack, "llama-long", "previous_response") >= 1
    assert decisions(stack, "llama-long", "previous_response_unknown") >= 1


async def test_unknown_model_goes_to_the_default_set_with_a_counted_reason(stack: Stack) -> None:
    before = decisions(stack, "qwen-short", "unknown_model")
    async with oai(stack) as c:
        with pytest.raises(openai.NotFoundError):  # the default set's pool does not serve it (strict)
            await c.chat.completions.create(
                model="mistral-7b", messages=[{"role": "user", "content": "Hi there"}], max_tokens=4
            )
    assert decisions(stack, "qwen-short", "unknown_model") == before + 1


def png_data_uri(width: int, height: int) -> str:
    """A real PNG screenshot-like image (light background, a dark bar and some text)."""
    img = Image.new("RGB", (width, height), (245, 245, 245))
    draw = ImageDraw.Draw(img)
    draw.rectangle((0, 0, width, height // 20), fill=(40, 40, 60))
    draw.text((width // 10, height // 3), "Quarterly report: revenue up 12%", fill=(0, 0, 0))
    buf = io.BytesIO()
    img.save(buf, format="PNG", optimize=True)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


@pytest.mark.parametrize(("size", "pool"), [((3840, 2160), "qwen-long"), ((256, 256), "qwen-short")])
async def test_image_routes_by_its_true_cost(stack: Stack, size: tuple[int, int], pool: str) -> None:
    """A 4K screenshot with a one-line question costs ~10,551 Qwen2.5-VL tokens (over the 8192 short
    pool): it goes straight to the long pool, no retry. A thumbnail (83 tokens) stays short. The
    flat 4,096-token budget would have sent the screenshot to the short pool."""
    content = [
        {"type": "text", "text": "What does this screenshot show?"},
        {"type": "image_url", "image_url": {"url": png_data_uri(*size)}},
    ]
    messages: Any = [{"role": "user", "content": content}]
    async with oai(stack) as c:
        raw = await c.chat.completions.with_raw_response.create(
            model=MODELS["qwen"], messages=messages, max_tokens=8
        )
        usage = raw.parse().usage
    assert (raw.headers["x-served-by-pool"], raw.headers.get("x-envoy-attempt-count")) == (pool, "1")
    assert usage is not None
    if pool == "qwen-long":
        assert usage.prompt_tokens > 8192
