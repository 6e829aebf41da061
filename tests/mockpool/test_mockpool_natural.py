"""Natural answer lengths of the stand-in pool (issue 30 item 6): a per-request length drawn from a
seeded distribution or read from the request, cut as vLLM cuts it (``max_model_len − prompt``, the
client's ``max_tokens``) with ``finish_reason: "length"`` when cut and ``"stop"`` otherwise."""

from __future__ import annotations

import httpx
import pytest

from mockpool.natural import NATURAL_TOKENS_HEADER, NaturalLengths, parse_natural_spec
from mockpool.server import serve_pool
from mockpool.settings import PoolSettings

MSG = [{"role": "user", "content": "Tell me everything about foxes. " * 40}]


async def test_a_fixed_natural_length_is_cut_at_the_pools_limit_without_max_tokens() -> None:
    async with (
        serve_pool(
            PoolSettings(
                name="short", max_model_len=2048, natural_output_tokens="fixed:5000", strict_model=False
            )
        ) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as c,
    ):
        r = (await c.post("/v1/chat/completions", json={"model": "m", "messages": MSG})).json()
        prompt = r["usage"]["prompt_tokens"]
        assert r["usage"]["completion_tokens"] == 2048 - prompt
        assert r["choices"][0]["finish_reason"] == "length"
        # the client's own maximum cuts it too, "length"; a shorter natural answer stops
        r = (
            await c.post("/v1/chat/completions", json={"model": "m", "messages": MSG, "max_tokens": 50})
        ).json()
        assert (r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]) == (50, "length")
        h = {NATURAL_TOKENS_HEADER: "30"}
        r = (await c.post("/v1/chat/completions", json={"model": "m", "messages": MSG}, headers=h)).json()
        assert (r["usage"]["completion_tokens"], r["choices"][0]["finish_reason"]) == (30, "stop")
        # Responses and Messages use the same length
        r = (
            await c.post("/v1/responses", json={"model": "m", "input": "hi", "max_output_tokens": 40})
        ).json()
        assert r["usage"]["output_tokens"] == 40
        body = {"model": "m", "max_tokens": 60, "messages": [{"role": "user", "content": "hi"}]}
        r = (await c.post("/v1/messages", json=body, headers={NATURAL_TOKENS_HEADER: "20"})).json()
        assert (r["stop_reason"], r["usage"]["output_tokens"]) == ("end_turn", 20)


async def test_streamed_answers_have_the_same_lengths() -> None:
    async with (
        serve_pool(
            PoolSettings(
                name="short", max_model_len=2048, natural_output_tokens="fixed:5000", strict_model=False
            )
        ) as url,
        httpx.AsyncClient(base_url=url, timeout=60) as c,
    ):
        body = {"model": "m", "messages": MSG, "stream": True, "stream_options": {"include_usage": True}}
        text = (await c.post("/v1/chat/completions", json=body)).text
        assert '"finish_reason":"length"' in text
        assert text.count('"content":') >= 2048 - 600  # one chunk per token, prompt < 600 tokens


def test_lognormal_draws_are_seeded_and_spread_around_the_median() -> None:
    a = NaturalLengths("lognormal:300:1.0", 16, seed=7)
    b = NaturalLengths("lognormal:300:1.0", 16, seed=7)
    xs = [a.draw() for _ in range(2000)]
    assert xs == [b.draw() for _ in range(2000)]
    xs.sort()
    assert 250 <= xs[1000] <= 360  # the median
    assert xs[1900] > 3 * xs[1000]  # a long tail (σ = 1: p95 ≈ 5.2 × median)
    assert NaturalLengths("", 16, seed=0).draw() == 16
    assert NaturalLengths("fixed:5000", 16, seed=0).draw({NATURAL_TOKENS_HEADER: "12"}) == 12
    assert NaturalLengths("fixed:5000", 16, seed=0).draw({NATURAL_TOKENS_HEADER: "-3"}) == 5000


@pytest.mark.parametrize(
    "spec", ["", "fixed", "fixed:-1", "fixed:x", "lognormal:0:1", "lognormal:300", "gauss:1:2"]
)
def test_bad_specs_are_refused(spec: str) -> None:
    with pytest.raises(ValueError, match="natural output tokens"):
        parse_natural_spec(spec)
    if spec:
        with pytest.raises(ValueError):
            PoolSettings(natural_output_tokens=spec)
