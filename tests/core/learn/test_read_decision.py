"""The adaptive read decision (extproc/core/learn/read_decision.py): which responses the router reads."""

from __future__ import annotations

import random
from typing import Any

from extproc.core.learn.read_decision import (
    ReadDecision,
    ReadPolicyParams,
    ResponseReadPolicy,
    truncation_possible,
)

KEY = ("llama-3", "latin_prose")
BOUNDED = ("llama-3", "bounded")


def decide(
    policy: ResponseReadPolicy,
    key: tuple[str, str] = KEY,
    *,
    samples: int = 100,
    output: int | None = 100,
    trunc: bool = False,
    now: float = 0.0,
    draw: float = 0.5,
) -> ReadDecision:
    return policy.decide(
        key,
        ratio_samples=samples,
        output_samples=output,
        truncation=trunc,
        required=False,
        now_s=now,
        draw=draw,
    )


def test_a_cold_key_reads_its_burst_then_its_rate() -> None:
    policy = ResponseReadPolicy(ReadPolicyParams(cold_samples=32, burst_reads=4, reads_per_key_per_s=2.0))
    got = [decide(policy, samples=0, now=0.0) for _ in range(6)]
    assert [d.read for d in got] == [True] * 4 + [False] * 2
    assert {d.reason for d in got[:4]} == {"cold"} and got[4].reason == "over_budget"
    assert decide(policy, samples=0, now=0.49).read is False  # 0.98 reads refilled: not yet one
    assert decide(policy, samples=0, now=0.5) == (True, "cold")


def test_a_learned_key_reads_its_floor_share_only() -> None:
    policy = ResponseReadPolicy(ReadPolicyParams(floor_rate=0.05, reads_per_key_per_s=1e9))
    rng = random.Random(7)
    reads = [decide(policy, now=i * 1e-3, draw=rng.random()) for i in range(20_000)]
    share = sum(d.read for d in reads) / len(reads)
    assert 0.04 < share < 0.06
    assert {d.reason for d in reads if d.read} == {"floor"}
    assert {d.reason for d in reads if not d.read} == {"learned"}


def test_the_budget_caps_reads_per_key_not_across_keys() -> None:
    policy = ResponseReadPolicy(ReadPolicyParams(burst_reads=2, reads_per_key_per_s=1.0))
    other = ("llama-3", "code")
    assert [decide(policy, samples=0).read for _ in range(3)] == [True, True, False]
    assert decide(policy, other, samples=0).read is True


def test_required_reads_are_never_budgeted() -> None:
    policy = ResponseReadPolicy(ReadPolicyParams(burst_reads=1, reads_per_key_per_s=0.0))
    for _ in range(5):
        d = policy.decide(
            KEY, ratio_samples=0, output_samples=0, truncation=False, required=True, now_s=0, draw=0.9
        )
        assert d == (True, "required")


def test_a_miss_makes_the_key_drift_for_its_drift_reads() -> None:
    policy = ResponseReadPolicy(ReadPolicyParams(drift_rel_error=0.2, drift_reads=3, floor_rate=0.0))
    assert decide(policy).read is False
    policy.observed(KEY, -0.4, 0.0)
    assert decide(policy) == (True, "drift")
    for _ in range(3):  # good reads wind the drift down
        policy.observed(KEY, 0.05, 0.0)
    assert decide(policy) == (False, "learned")


def test_a_bounded_request_uses_its_models_reads_and_drift() -> None:
    policy = ResponseReadPolicy(
        ReadPolicyParams(cold_samples=2, drift_rel_error=0.2, drift_reads=2, floor_rate=0)
    )
    assert decide(policy, BOUNDED, samples=10_000) == (True, "cold")  # nothing seen of the model yet
    policy.observed(KEY, 0.01, 0.0)
    policy.observed(KEY, 0.01, 0.0)
    assert decide(policy, BOUNDED) == (False, "learned")
    policy.observed(KEY, 0.5, 0.0)  # any key of the model drifting
    assert decide(policy, BOUNDED) == (True, "drift")


def test_reasons_in_order_and_output_cold() -> None:
    policy = ResponseReadPolicy(ReadPolicyParams(output_cold_samples=10, floor_rate=0.0))
    assert decide(policy, output=3) == (True, "output_cold")
    assert decide(policy, output=None) == (False, "learned")  # output lengths not learned
    assert decide(policy, samples=0, output=3, trunc=True) == (True, "truncation_possible")
    assert decide(policy, samples=0, output=3) == (True, "cold")


def test_same_inputs_same_decisions() -> None:
    def run() -> list[tuple[bool, str]]:
        policy = ResponseReadPolicy(ReadPolicyParams(burst_reads=3, floor_rate=0.2))
        rng = random.Random(3)
        out = []
        for i in range(300):
            d = decide(policy, samples=i // 10, now=i * 0.01, draw=rng.random())
            if d.read:
                policy.observed(KEY, rng.uniform(-0.5, 0.5), i * 0.01)
            out.append((d.read, d.reason))
        return out

    assert run() == run()


def test_state_is_bounded_by_max_keys() -> None:
    policy = ResponseReadPolicy(ReadPolicyParams(max_keys=8))
    for i in range(100):
        decide(policy, (f"m{i}", "code"))
        policy.observed((f"m{i}", "code"), 0.9, 0.0)
    assert len(policy._keys) <= 8 and len(policy._models) <= 8


def test_truncation_possible_only_where_a_pool_may_cut_the_answer() -> None:
    kw: dict[str, Any] = {"pool_max_model_len": 8192, "larger_pool": True}
    # the client's maximum fits the room left: vLLM stops there first
    assert not truncation_possible(
        prompt_tokens=7000, output_reserve_tokens=512, client_max_output_tokens=1000, **kw
    )
    # no maximum: near the boundary (room < 2 reserves) it may be cut, far from it not
    assert truncation_possible(
        prompt_tokens=7000, output_reserve_tokens=1024, client_max_output_tokens=None, **kw
    )
    assert not truncation_possible(
        prompt_tokens=1000, output_reserve_tokens=1024, client_max_output_tokens=None, **kw
    )
    # a maximum that does not fit the room
    assert truncation_possible(
        prompt_tokens=7900, output_reserve_tokens=200, client_max_output_tokens=4000, **kw
    )
    # the largest pool's cut is not a misroute
    kw["larger_pool"] = False
    assert not truncation_possible(
        prompt_tokens=8000, output_reserve_tokens=1024, client_max_output_tokens=None, **kw
    )
