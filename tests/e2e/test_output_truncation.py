"""Issue 30's acceptance case through the real Envoy (envoy/envoy.yaml, one message, responses read
off the path): pools whose model naturally answers in 5,000 tokens (``tbr mock-pool
--natural-output-tokens fixed:5000``), chat requests of ~3.9k / 5.1k / 5.6k true prompt tokens
with no ``max_tokens``.

With the shipped 1,024-token output reserve each fits the short pool (8,192), which cuts the
answer at ``8192 − prompt`` tokens and answers 200 with ``finish_reason: "length"``, as vLLM 0.32
does. Each such answer must be counted as a truncation misroute of the short pool
(``tbr_misroutes_total{outcome="truncated"}`` and the decision log), reach the client unchanged,
and teach the output learner, so that the same requests then go to the long pool and get their
whole 5,000 tokens with ``"stop"``.

The first test runs the reserve of earlier releases (``estimator.output_reserve.learned: false``:
1,024 tokens, nothing learned). The second runs the learner (the default) with its default settings
and repeats the three requests until each goes long: every answer on the way is either long and
whole or counted.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from devstack.inprocess import InProcessStack
from tests.e2e.harness import REPO, router_caught_up, three_pool_stack, wait_for_metric

pytestmark = pytest.mark.envoy

SENTENCE = "The quick brown fox jumps over the lazy dog while the farmer counts his sheep. "
# 16 Qwen3 tokens per sentence + 9 of chat framing: 3,897 / 5,097 / 5,593 prompt tokens
REPEATS = {"3.9k": 243, "5.1k": 318, "5.6k": 349}
NATURAL = 5000
SHORT, LONG = 8192, 65536


def _body(repeats: int, *, stream: bool = False) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": SENTENCE * repeats}]}
    if stream:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    return body


def _sse_summary(text: str) -> tuple[str | None, int | None, int | None]:
    """(finish_reason, prompt_tokens, completion_tokens) of a chat SSE answer."""
    reason, prompt, completion = None, None, None
    for line in text.splitlines():
        if not line.startswith("data: {"):
            continue
        event = orjson.loads(line[6:])
        for choice in event.get("choices") or []:
            reason = choice.get("finish_reason") or reason
        if event.get("usage"):
            prompt, completion = event["usage"]["prompt_tokens"], event["usage"]["completion_tokens"]
    return reason, prompt, completion


async def _ask(c: httpx.AsyncClient, base_url: str, name: str, rid: str) -> tuple[str, str | None, int, int]:
    """Send the ``name`` request (the 5.1k one streamed); (pool, finish_reason, prompt, completion)."""
    stream = name == "5.1k"  # one of them streamed: the SSE reader judges it the same way
    r = await c.post(
        f"{base_url}/chat/completions",
        json=_body(REPEATS[name], stream=stream),
        headers={"x-request-id": rid},
    )
    assert r.status_code == 200
    if stream:
        reason, prompt, completion = _sse_summary(r.text)
    else:
        doc = r.json()
        reason = doc["choices"][0]["finish_reason"]
        prompt, completion = doc["usage"]["prompt_tokens"], doc["usage"]["completion_tokens"]
    assert prompt is not None and completion is not None
    return r.headers["x-served-by-pool"], reason, prompt, completion


@contextlib.asynccontextmanager
async def _natural_stack(
    work_dir: Path, *, learned: bool
) -> AsyncIterator[tuple[InProcessStack, httpx.AsyncClient]]:
    """Short (8,192) and long pools whose model answers :data:`NATURAL` tokens, the router with its
    decision log at ``work_dir/decisions.jsonl`` and ``estimator.output_reserve.learned``, Envoy on
    envoy/envoy.yaml; with an HTTP client."""
    router = {
        "server": {"grace_period_s": 0.5},
        "decision_log_path": str(work_dir / "decisions.jsonl"),
        "estimator": {"output_reserve": {"learned": learned}},
    }
    # any model name: "m" is no reasoning model, so its class starts from the chat prior
    natural = {"natural_output_tokens": f"fixed:{NATURAL}", "strict_model": False}
    async with (
        three_pool_stack(
            work_dir,
            router_overrides=router,
            pool_limits={"short": SHORT, "long": LONG},
            pool_overrides={"short": natural, "long": natural},
            envoy_source=REPO / "envoy" / "envoy.yaml",
        ) as stack,
        httpx.AsyncClient(timeout=120.0) as c,
    ):
        yield stack, c


def _records(log_path: Path) -> dict[str, dict[str, Any]]:
    """The decision records by request id (records without one left out)."""
    rows = map(orjson.loads, log_path.read_bytes().splitlines())
    return {r["request_id"]: r for r in rows if r["request_id"]}


async def test_a_5000_token_answer_cut_by_the_short_pool_is_counted(tmp_path: Path) -> None:
    # the reserve of earlier releases: a fixed 1,024 tokens without max_tokens, nothing learned
    async with _natural_stack(tmp_path, learned=False) as (stack, c):
        first = {name: await _ask(c, stack.base_url, name, f"first-{name}") for name in REPEATS}
        for name, (pool, reason, prompt, completion) in first.items():
            # routed short on the 1,024-token reserve, and cut there exactly as vLLM cuts it
            assert (pool, reason, completion) == ("short", "length", SHORT - prompt), name
        labels = {"from_pool": "short", "to_pool": "short", "outcome": "truncated", "cause": "truncated"}
        assert await wait_for_metric(stack, "tbr_misroutes_total", labels, 3) == 3
    records = _records(tmp_path / "decisions.jsonl")
    for name, (_, _, prompt, completion) in first.items():
        rec = records[f"first-{name}"]
        assert (rec["pool"], rec["misroute"], rec["truncated"], rec["finish_reason"]) == (
            "short",
            "truncated",
            True,
            "length",
        ), name
        assert (rec["prompt_tokens"], rec["completion_tokens"], rec["output_reserve_tokens"]) == (
            prompt,
            completion,
            1024,
        )


async def test_the_output_learner_sends_them_long_after_counted_truncations(tmp_path: Path) -> None:
    """``estimator.output_reserve.learned: true`` with its default settings (cold prior, bounded
    steps, truncation controller): the requests start on the short pool on the chat prior's
    reserve; each cut answer is counted and learned as censored, and the class's reserve grows
    until the requests go long and get their 5,000 tokens whole."""
    rounds: list[dict[str, tuple[str, str | None, int, int]]] = []
    async with _natural_stack(tmp_path, learned=True) as (stack, c):
        cut = 0
        for i in range(40):
            answers = {name: await _ask(c, stack.base_url, name, f"r{i}-{name}") for name in REPEATS}
            rounds.append(answers)
            for name, (pool, reason, prompt, completion) in answers.items():
                if pool == "long":  # whole: the natural 5,000 tokens, "stop"
                    assert (reason, completion) == ("stop", NATURAL), (i, name)
                else:  # cut where vLLM cuts it, and counted below
                    assert (pool, reason, completion) == ("short", "length", SHORT - prompt), (i, name)
                    cut += 1
            # the router reads each answer off the request path: wait until it has learned them all
            await router_caught_up(stack)
            labels = {"from_pool": "short", "to_pool": "short", "outcome": "truncated", "cause": "truncated"}
            assert stack.app.metrics.registry.get_sample_value("tbr_misroutes_total", labels) == (cut or None)
            if all(a[0] == "long" for a in answers.values()):
                break
        assert all(a[0] == "long" for a in rounds[-1].values()), "still routed short after 40 rounds"
        assert cut > 0  # the prior's reserve did send them short first
        learner = stack.app.output_learner
        assert learner is not None and learner.truncations == cut
        view = [(k, s.truncated, s.reserve_tokens) for k, s in learner.items()]
    records = _records(tmp_path / "decisions.jsonl")
    for name in REPEATS:  # the reserve grew from the prior's, and the last budgets did not fit short
        first, last = records[f"r0-{name}"], records[f"r{len(rounds) - 1}-{name}"]
        assert first["output_reserve_tokens"] < last["output_reserve_tokens"]
        assert last["budget_tokens"] > SHORT
    for i, answers in enumerate(rounds):
        for name, (pool, _, _, completion) in answers.items():
            rec = records[f"r{i}-{name}"]
            assert (rec["end"], rec["completion_tokens"]) == ("complete", completion), json.dumps(rec)
            if pool == "short":  # every cut answer was read, judged and counted
                assert (rec["truncated"], rec["misroute"], rec["finish_reason"]) == (
                    True,
                    "truncated",
                    "length",
                )
            else:  # read and judged whole
                assert (rec["truncated"], rec["misroute"], rec["finish_reason"]) == (False, None, "stop")
    print(
        "rounds until all long:",
        len(rounds),
        [{n: (a[0], a[1], a[3], records[f"r{i}-{n}"]["output_reserve_tokens"]) for n, a in r.items()}
         for i, r in enumerate(rounds)],
        "classes:",
        view,
    )  # fmt: skip
