"""Issue 34, item 5: prompts budgeted as vLLM counts them, through Envoy, the router and the pools.

* ``truncate_prompt_tokens: N``: vLLM keeps the last N tokens, so the pool holds ``min(prompt, N)``
  (vLLM ``_validate_and_normalize_truncate_tokens`` / ``truncation=True, max_length=N``; the stand-in
  pool does the same). Four 100 KB prompts with N = 3000 and ``max_tokens`` 256 fit the short pool;
  the served count (= N) is not learned (it says nothing about the text's ratio).
* ``/v1/completions`` with a list of text prompts: vLLM checks each prompt alone and sums
  ``usage.prompt_tokens``: routed by the longest prompt, learned sum against sum.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devstack.stack import Stack, StackOptions
from tests.e2e.harness import decision_records
from tests.stacks import running
from tests.waiting import until

pytestmark = pytest.mark.envoy

MODEL = "Qwen/Qwen3-8B"
# ~100 KB of English prose: ~20k tokens, far over the short pool's 8192.
DOCUMENT = "The committee reviewed every clause of the agreement in detail before the final vote. " * 1180
# ~1.4k tokens each: six of them sum to ~8.4k (over 8192), each alone fits.
PROMPTS = [
    f"Item {i}: " + "A quiet harbour town wakes up slowly as the fishing boats come home. " * 100
    for i in range(6)
]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("bounds")
    options = StackOptions(decision_log=True, router_overrides={"decision_log_flush_interval_s": 0.1})
    yield from running(Stack(work, options))


def records(stack: Stack, request_id: str) -> list[dict[str, Any]]:
    """The records of ``request_id`` once each has its usage (``prompt_tokens``)."""
    return decision_records(
        stack.decision_log_path,
        request_id,
        complete=lambda rs: bool(rs) and all(r.get("prompt_tokens") is not None for r in rs),
    )


def ratio_samples(stack: Stack) -> int:
    rows = httpx.get(f"{stack.router_admin_url}/ratios", timeout=5).json()["ratios"]
    return sum(int(r["samples"]) for r in rows)


def test_truncate_prompt_tokens_bounds_the_budget_and_is_not_learned(stack: Stack) -> None:
    before = ratio_samples(stack)
    for i in range(4):
        body = {
            "model": MODEL,
            "messages": [{"role": "user", "content": DOCUMENT}],
            "max_tokens": 256,
            "truncate_prompt_tokens": 3000,
        }
        r = httpx.post(
            f"{stack.base_url}/chat/completions",
            json=body,
            headers={"x-request-id": f"trunc-{i}"},
            timeout=60,
        )
        assert r.status_code == 200, r.text
        assert r.headers["x-served-by-pool"] == "short"  # was long: the whole text was budgeted
        assert r.json()["usage"]["prompt_tokens"] == 3000
        (rec,) = records(stack, f"trunc-{i}")
        assert rec["pool"] == "short" and rec["budget_tokens"] == 3000 + 256
        assert rec["estimated_prompt_tokens"] > 8192  # the text's own estimate, kept for the record
    assert ratio_samples(stack) == before  # the cut count is not learned

    body = {"model": MODEL, "messages": [{"role": "user", "content": DOCUMENT}], "max_tokens": 256}
    r = httpx.post(f"{stack.base_url}/chat/completions", json=body, timeout=60)
    assert (r.status_code, r.headers["x-served-by-pool"]) == (200, "long")  # control: no bound, long


def test_completions_prompt_list_is_routed_by_its_longest_member_and_learned_sum_against_sum(
    stack: Stack,
) -> None:
    before = ratio_samples(stack)
    body = {"model": MODEL, "prompt": PROMPTS, "max_tokens": 16}
    r = httpx.post(f"{stack.base_url}/completions", json=body, headers={"x-request-id": "list-1"}, timeout=60)
    assert r.status_code == 200, r.text
    served = r.json()["usage"]["prompt_tokens"]
    assert served > 8192  # the sum would not fit the short pool
    assert r.headers["x-served-by-pool"] == "short"  # was long: the sum was budgeted
    (rec,) = records(stack, "list-1")
    assert rec["pool"] == "short" and rec["budget_tokens"] < 8192 / 4  # one prompt + its reserve
    assert rec["prompt_tokens"] == served
    # the record keeps the routed (longest) prompt's estimate: about a sixth of the served sum
    assert abs(6 * rec["estimated_prompt_tokens"] - served) / served < 0.35, rec
    # learned sum against sum: one observation, whose ratio (modelled / served tokens) is that of
    # ordinary prose; the longest prompt against the sum (~1/6) is outside the learner's
    # reject_factor and would not have been learned at all
    until(lambda: ratio_samples(stack) != before, what="the list's usage learned")
    assert ratio_samples(stack) == before + 1
    rows = httpx.get(f"{stack.router_admin_url}/ratios", timeout=5).json()["ratios"]
    (row,) = [r for r in rows if r["model"] == MODEL and r["category"] == rec["category"]]
    assert 0.7 < row["mean_model_to_true_ratio"] < 1.4, row
