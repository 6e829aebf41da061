"""The pool over real HTTP (uvicorn on a free loopback port, httpx client)."""

from __future__ import annotations

import gzip

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from mockpool.server import serve_pool
from mockpool.settings import PoolSettings
from mockpool.tokencount import load_counter

HELLO = [{"role": "user", "content": "Hello"}]  # 9 Qwen3 prompt tokens (see test_tokencount)


def metric_values(text: str) -> dict[str, float]:
    """Sample name → value (labels dropped) from Prometheus text, parsed by prometheus_client."""
    return {s.name: s.value for fam in text_string_to_metric_families(text) for s in fam.samples}


async def test_chat_json_usage_and_identity(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/chat/completions", json={"model": "Qwen/Qwen3-8B", "messages": HELLO, "max_tokens": 5}
    )
    assert r.status_code == 200
    assert r.headers["x-served-by-pool"] == "short"
    body = r.json()
    assert set(body) == {
        "id",
        "object",
        "created",
        "model",
        "choices",
        "usage",
    }  # OpenAI shape, nothing added
    assert body["object"] == "chat.completion" and body["model"] == "Qwen/Qwen3-8B"
    assert body["usage"] == {
        "prompt_tokens": 9,
        "completion_tokens": 5,
        "total_tokens": 14,
        "prompt_tokens_details": None,
    }
    choice = body["choices"][0]
    assert choice["message"]["content"] == " quick brown fox jumps over"
    assert choice["finish_reason"] == "length"


async def test_chat_default_max_tokens_and_n(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/chat/completions", json={"messages": HELLO, "n": 3})
    body = r.json()
    assert [c["finish_reason"] for c in body["choices"]] == ["stop"] * 3  # 8 output tokens < 2048 - 9
    assert body["usage"]["completion_tokens"] == 24
    assert body["model"] == "Qwen/Qwen3-8B"


async def test_max_completion_tokens_preferred(client: httpx.AsyncClient) -> None:
    payload = {"messages": HELLO, "max_tokens": 5000, "max_completion_tokens": 3}
    r = await client.post("/v1/chat/completions", json=payload)
    assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] == 3


async def test_prompt_plus_max_tokens_over_the_limit_is_clamped_as_vllm_does(
    client: httpx.AsyncClient,
) -> None:
    """vLLM 0.32 (``get_max_tokens``): prompt 9 + max_tokens 2040 > 2048 is not an error; the
    output budget becomes 2048 - 9 = 2039 (the stand-in then stops at its 8 output tokens)."""
    r = await client.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2040})
    assert r.status_code == 200 and r.headers["x-served-by-pool"] == "short"
    assert r.json()["usage"] == {
        "prompt_tokens": 9,
        "total_tokens": 17,
        "completion_tokens": 8,
        "prompt_tokens_details": None,
    }
    long_prompt = [{"role": "user", "content": " hello" * 2039}]  # + 9 template tokens: 2044
    n = load_counter("qwen3").count_chat(long_prompt).prompt_tokens
    r = await client.post("/v1/chat/completions", json={"messages": long_prompt, "max_tokens": 100})
    assert r.status_code == 200, r.text
    choice = r.json()["choices"][0]
    assert choice["finish_reason"] == "length" and r.json()["usage"]["completion_tokens"] == 2048 - n


@pytest.mark.parametrize(
    ("path", "temperature", "message"),
    [
        ("/v1/chat/completions", -1, "temperature must be non-negative, got -1.0."),
        ("/v1/completions", -0.5, "temperature must be non-negative, got -0.5."),
        ("/v1/chat/completions", 2.5, "temperature must be in [0, 2], got 2.5."),
    ],
)
async def test_temperature_out_of_range_is_vllms_400(
    client: httpx.AsyncClient, path: str, temperature: float, message: str
) -> None:
    """vLLM 0.32's ``SamplingParams._verify_args`` (a ``VLLMValidationError`` on ``temperature``)."""
    body: dict[str, object] = {"max_tokens": 2, "temperature": temperature}
    body |= {"messages": HELLO} if path.endswith("chat/completions") else {"prompt": "Hi"}
    r = await client.post(path, json=body)
    assert r.status_code == 400
    assert r.json() == {
        "error": {
            "message": f"{message} (parameter=temperature, value={float(temperature)})",
            "type": "BadRequestError",
            "param": "temperature",
            "code": 400,
        }
    }
    ok = await client.post(path, json=body | {"temperature": 0})
    assert ok.status_code == 200


async def test_max_tokens_above_max_model_len_400_vllm_shape(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2049})
    assert r.status_code == 400
    assert r.headers["x-served-by-pool"] == "short"
    assert r.json() == {
        "error": {
            "message": "max_tokens=2049 cannot be greater than max_model_len=2048. Please request fewer "
            "output tokens. (parameter=max_tokens, value=2049)",
            "type": "BadRequestError",
            "param": "max_tokens",
            "code": 400,
        }
    }
    ok = await client.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2048})
    assert ok.status_code == 200


async def test_prompt_longer_than_max_model_len(client: httpx.AsyncClient) -> None:
    long_text = " hello" * 3000
    r = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": long_text}]})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["param"] == "input_tokens"
    assert err["message"] == (  # vLLM counts a text prompt only up to max_model_len + 1
        "This model's maximum context length is 2048 tokens. However, your prompt contains at least 2049 "
        "input tokens, which exceeds this limit even without any output tokens. Please reduce the length "
        "of the input prompt. (parameter=input_tokens, value=2049)"
    )


async def test_prompt_of_exactly_max_model_len_leaves_no_output(client: httpx.AsyncClient) -> None:
    counter = load_counter("qwen3")
    words = 2048 - counter.count_chat([{"role": "user", "content": ""}]).prompt_tokens
    exact = [{"role": "user", "content": " hello" * words}]
    assert counter.count_chat(exact).prompt_tokens == 2048
    r = await client.post("/v1/chat/completions", json={"messages": exact})
    assert r.status_code == 400 and r.json()["error"] == {
        "message": "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
        "type": "BadRequestError",
        "param": "max_tokens",
        "code": 400,
    }


@pytest.mark.parametrize(
    ("content", "param"),
    [
        (b"{not json", None),
        (b"[1, 2]", None),
        (b'{"messages": "hi"}', None),
        (b'{"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}', "max_tokens"),
        (
            b'{"messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}}',
            "stream_options",
        ),
    ],
)
async def test_bad_requests_are_400(client: httpx.AsyncClient, content: bytes, param: str | None) -> None:
    r = await client.post(
        "/v1/chat/completions", content=content, headers={"content-type": "application/json"}
    )
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["type"] == "BadRequestError" and error["code"] == 400 and error["param"] == param


async def test_completions_prompt_forms(llama_pool: str) -> None:
    counter = load_counter("llama3")
    async with httpx.AsyncClient(base_url=llama_pool) as c:
        r = await c.post("/v1/completions", json={"prompt": "Once upon a time", "max_tokens": 4})
        assert r.json()["usage"]["prompt_tokens"] == counter.count_text("Once upon a time") + 1  # + BOS
        assert r.json()["choices"][0]["text"] == " quick brown fox jumps"
        r = await c.post("/v1/completions", json={"prompt": ["a b", "c d e"], "max_tokens": 2})
        body = r.json()
        assert body["usage"]["prompt_tokens"] == (1 + 2) + (1 + 3) and len(body["choices"]) == 2
        assert body["usage"]["completion_tokens"] == 4
        r = await c.post("/v1/completions", json={"prompt": [1, 2, 3, 128000], "max_tokens": 1})
        assert r.json()["usage"]["prompt_tokens"] == 4  # token ids count exactly
        r = await c.post("/v1/completions", json={"prompt": [[5] * 10, [6] * 20], "max_tokens": 1})
        assert r.json()["usage"]["prompt_tokens"] == 30
        r = await c.post("/v1/completions", json={"prompt": [10**6]})
        assert r.status_code == 400 and "out of vocabulary" in r.json()["error"]["message"]
        r = await c.post("/v1/completions", json={"prompt": [[1] * 32768]})  # no room for output
        assert r.status_code == 400 and r.json()["error"]["param"] == "max_tokens"
        r = await c.post("/v1/completions", json={"prompt": [[1] * 40000]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "input_tokens"
        assert "contains 40000 input tokens" in r.json()["error"]["message"]  # ids: the exact count
        assert r.headers["x-served-by-pool"] == "long"


async def test_expected_pool_header(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/v1/chat/completions", json={"messages": HELLO}, headers={"x-expected-pool": "long"}
    )
    assert r.status_code == 421
    assert r.headers["x-served-by-pool"] == "short"
    assert r.json()["error"]["code"] == 421 and "'long'" in r.json()["error"]["message"]
    r = await client.post(
        "/v1/chat/completions", json={"messages": HELLO}, headers={"x-expected-pool": "short"}
    )
    assert r.status_code == 200


async def test_models_health_metrics_stats(client: httpx.AsyncClient) -> None:
    models = (await client.get("/v1/models")).json()
    assert models["data"][0]["id"] == "Qwen/Qwen3-8B" and models["data"][0]["max_model_len"] == 2048
    health = await client.get("/health")
    assert health.status_code == 200 and health.headers["x-served-by-pool"] == "short"
    await client.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 2})
    await client.post("/v1/chat/completions", content=b"{")
    text = (await client.get("/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert families[name].type == "gauge"
        assert families[name].samples[0].labels == {"engine": "0", "model_name": "Qwen/Qwen3-8B"}
    values = metric_values(text)
    assert values["vllm:prompt_tokens_total"] == 9 and values["vllm:generation_tokens_total"] == 2
    stats = (await client.get("/admin/stats")).json()
    assert stats["requests"]["/v1/chat/completions"] == {"200": 1, "400": 1}
    assert stats["pool"] == "short" and stats["prompt_tokens_total"] == 9
    reset = (await client.post("/admin/reset")).json()
    assert reset["requests_total"] == 0


async def test_strict_model_404_and_gzip() -> None:
    settings = PoolSettings(name="g", served_model_names=("m1",), strict_model=True, gzip=True)
    async with serve_pool(settings) as url, httpx.AsyncClient(base_url=url) as c:
        r = await c.post("/v1/chat/completions", json={"model": "other", "messages": HELLO})
        assert r.status_code == 404 and r.json()["error"] == {
            "message": "The model `other` does not exist. Valid aliases: m1.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
        r = await c.post(
            "/v1/chat/completions",
            json={"model": "m1", "messages": HELLO},
            headers={"accept-encoding": "gzip"},
        )
        assert r.headers["content-encoding"] == "gzip" and r.json()["model"] == "m1"  # httpx decompresses
        raw = await c.post(
            "/v1/chat/completions",
            json={"model": "m1", "messages": HELLO},
            headers={"accept-encoding": "identity"},
        )
        assert "content-encoding" not in raw.headers
        async with c.stream(
            "POST",
            "/v1/chat/completions",
            json={"model": "m1", "messages": HELLO},
            headers={"accept-encoding": "gzip"},
        ) as s:
            compressed = b"".join([chunk async for chunk in s.aiter_raw()])
        assert b'"usage"' in gzip.decompress(compressed)
