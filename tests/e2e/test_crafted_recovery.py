"""Issue 34, item 9, through the real Envoy (envoy/envoy-3pools.yaml), the router and stand-in
vLLM pools (short 4,096, medium 16,384, long 65,536 tokens; Qwen3 tokenizer): one crafted request
cannot move a learned value by more than one bounded step.

Measured on real vLLM before the fix: random letters of 8,300 true tokens were estimated at 4,535
(random punctuation, streamed: 185), recovered on long as designed, and their key's routing value
then sat at its floor 0.5, so ordinary requests of that key were over-estimated about twice (a
357-token snippet estimated at 992). Here the crafted prompts are built from a seeded generator,
sized to overflow the short pool while the router budgets them short; ordinary requests are the
broad corpus' own texts of the same key (real Go/Rust/JavaScript code and real texts of
Latin-script languages), served before and after.
"""

from __future__ import annotations

import json
import random
import string
from pathlib import Path
from typing import Any

import httpx
import pytest

from extproc.core.estimate.estimator import Estimator
from extproc.core.request.request_body import parse_request_body
from tests.e2e.harness import three_pool_stack, wait_for_metric
from tests.shared_data import BROAD_CORPUS

pytestmark = pytest.mark.envoy

MODEL = "Qwen/Qwen3-8B"
STEP = 0.1  # recovery.max_step (the default)


def random_letters(n_chars: int, seed: int) -> str:
    """Letters and spaces drawn uniformly (seeded): no word the tokenizer knows."""
    rng = random.Random(seed)
    return "".join(rng.choice(string.ascii_letters + "  ") for _ in range(n_chars))


def random_punctuation(n_chars: int, seed: int) -> str:
    """ASCII punctuation drawn uniformly (seeded): BPE merges almost none of it."""
    rng = random.Random(seed)
    return "".join(rng.choice(string.punctuation) for _ in range(n_chars))


def chat(content: str, **extra: Any) -> dict[str, Any]:
    return {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 16, **extra}


def estimate(est: Estimator, body: dict[str, Any]) -> tuple[int, tuple[str, str]]:
    budget = est.estimate(parse_request_body(json.dumps(body).encode(), "chat"))
    return budget.prompt_tokens, budget.key


def ordinary_texts(kinds: tuple[str, ...]) -> list[str]:
    """The broad corpus' texts of these kinds, in file order (skips when the corpus is absent)."""
    if not BROAD_CORPUS.is_file():
        pytest.skip(f"broad corpus not found: {BROAD_CORPUS}")
    rows = [json.loads(line) for line in BROAD_CORPUS.read_text(encoding="utf-8").splitlines()]
    return [
        r["messages"][0]["content"]
        for r in rows
        if r["metadata"]["kind"] in kinds
        and len(r["messages"]) == 1
        and len(r["messages"][0]["content"]) < 6000
    ]


async def post(http: httpx.AsyncClient, body: dict[str, Any]) -> tuple[str, str, int]:
    """(x-served-by-pool, x-envoy-attempt-count, usage.prompt_tokens) of one 200 answer, JSON or SSE."""
    async with http.stream("POST", "/chat/completions", json=body) as r:
        raw = (await r.aread()).decode()
        assert r.status_code == 200, raw[:300]
        pool, attempts = r.headers["x-served-by-pool"], r.headers.get("x-envoy-attempt-count", "1")
    if body.get("stream"):
        events = [json.loads(line[6:]) for line in raw.splitlines() if line.startswith("data: {")]
        prompt = next(e["usage"]["prompt_tokens"] for e in events if e.get("usage"))
    else:
        prompt = json.loads(raw)["usage"]["prompt_tokens"]
    return pool, attempts, int(prompt)


@pytest.mark.parametrize(
    ("crafted", "kinds", "stream", "moves"),
    [
        # 6,500 letters: ~1,900 estimated, ~4,200 true; served/estimate within reject_factor: one step
        pytest.param(random_letters(6500, 34), ("latin_other",), False, True, id="random_letters"),
        # 6,500 punctuation characters: ~100 estimated, ~4,300 true: not like its key, moves nothing
        pytest.param(random_punctuation(6500, 34), ("code",), True, False, id="random_punctuation_streamed"),
    ],
)
async def test_one_crafted_request_moves_its_key_by_one_bounded_step(
    tmp_path: Path, crafted: str, kinds: tuple[str, ...], stream: bool, moves: bool
) -> None:
    router = {"server": {"grace_period_s": 0.5}}
    async with three_pool_stack(tmp_path, router_overrides=router) as stack:
        est = stack.app.current_router().estimator
        crafted_body = chat(
            crafted, stream=stream, **({"stream_options": {"include_usage": True}} if stream else {})
        )
        crafted_estimate, key = estimate(est, crafted_body)
        texts = [t for t in ordinary_texts(kinds) if estimate(est, chat(t))[1] == key]
        assert len(texts) >= 24, (key, len(texts))
        warm, held_out = texts[:16], texts[16:32]
        async with httpx.AsyncClient(base_url=stack.base_url, timeout=60.0) as http:
            for text in warm:  # the key learns from ordinary traffic first
                assert (await post(http, chat(text)))[1] == "1"
            truth = [(await post(http, chat(text)))[2] for text in held_out]
            n_read = len(warm) + len(held_out)
            await wait_for_metric(stack, "tbr_calibration_events_total", {"outcome": "applied"}, n_read)
            ratio_before = est.routing_ratio(key)[0]
            before = [estimate(est, chat(t))[0] for t in held_out]

            assert crafted_estimate < 4096 - 16
            pool, attempts, served = await post(http, crafted_body)
            # refused by short for length, recovered on medium; the client got its 200
            assert (pool, attempts) == ("medium", "2") and served > 4096
            await wait_for_metric(
                stack, "tbr_misroute_calibration_total", {"pool": "short", "outcome": "confirmed"}, 1
            )

        ratio_after = est.routing_ratio(key)[0]
        after = [estimate(est, chat(t))[0] for t in held_out]
        floor = est.cfg.min_model_ratio
        assert served > 2 * crafted_estimate  # the crafted request was far off
        # one request moves the key's value by at most one bounded step, never to its floor
        assert ratio_before / (1.0 + STEP) - 1e-9 <= ratio_after <= ratio_before
        assert ratio_after > floor + 0.1
        assert (ratio_after < ratio_before) is moves
        ratcheted = stack.app.metrics.registry.get_sample_value(
            "tbr_misroute_calibration_total", {"pool": "short", "outcome": "ratcheted"}
        )
        assert (ratcheted == 1) is moves
        # ordinary requests of the key keep their estimates within the step (and the ordinary
        # learning step of the crafted request's own answer), never under their true size
        for b, a, t in zip(before, after, truth, strict=True):
            assert b - 1 <= a <= (1.0 + STEP) * 1.03 * b + 1, (b, a, t)
        over_before = sorted((b - t) / t for b, t in zip(before, truth, strict=True))
        over_after = sorted((a - t) / t for a, t in zip(after, truth, strict=True))
        assert min(over_after) >= min(over_before)
        median_before, median_after = over_before[len(truth) // 2], over_after[len(truth) // 2]
        assert median_after <= (1.0 + STEP) * 1.03 * (1.0 + median_before) - 1.0
