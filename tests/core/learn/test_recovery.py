"""Misrouted requests (extproc/core/learn/recovery.py), unit by unit: the attempt-count header, when usage
proves an overflow, the ratchet of the bytes model's ratio, and the router's side of a retry."""

from __future__ import annotations

import pytest

from extproc.config import PoolConfig, RecoveryConfig
from extproc.core.estimate.budget import TokenBudget
from extproc.core.estimate.calibration import InMemoryRatioStore, RatioState
from extproc.core.learn.recovery import MisrouteRecovery, overflowed, parse_attempt_count, strong_correction
from extproc.core.route.load import LoadTracker
from extproc.core.route.policy import Policy

KEY = ("m", "latin")
POOLS = [
    PoolConfig(name="short", max_model_len=4096, header_value="short"),
    PoolConfig(name="long", max_model_len=32768, header_value="long"),
]


def _budget(
    routing_ratio: float = 8.0, text_bytes: int = 40_000, fixed: int = 20, reserve: int = 256
) -> TokenBudget:
    prompt = fixed + int(text_bytes / routing_ratio)
    return TokenBudget(
        key=KEY,
        routing_ratio=routing_ratio,
        text_bytes=text_bytes,
        fixed_prompt_tokens=fixed,
        prompt_tokens=prompt,
        output_reserve_tokens=reserve,
        n_sequences=1,
        total_tokens=prompt + reserve,
        warm=True,
        ratio_bytes=text_bytes,
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [("2", 2), (" 3 ", 3), ("", 1), ("x", 1), ("0", 1), ("-4", 1), ("1001", 1), ("1000", 1000)],
)
def test_attempt_count_reads_envoys_header_and_defaults_to_one(value: str, expected: int) -> None:
    assert parse_attempt_count(value) == expected


def test_overflow_follows_vllms_two_checks() -> None:
    b = _budget(reserve=256)
    assert overflowed(b, 4096, 4096)  # prompt_tokens >= max_model_len
    assert overflowed(b, 3900, 4096)  # prompt + reserve > max_model_len
    assert not overflowed(b, 3840, 4096)  # exactly fits
    assert not overflowed(b, 100, 4096)


def test_strong_correction_moves_the_ratio_one_bounded_step_towards_the_request() -> None:
    store = InMemoryRatioStore(beta=0.9)
    store.put(KEY, RatioState(8.0, 0.1, 3, 7.5))
    b = _budget(routing_ratio=8.0, text_bytes=40_000, fixed=20)
    new = strong_correction(store, b, 10_020, warmup_samples=20, dev_before_ratio=0.1, max_step=0.1)
    assert new is not None
    c_obs = 40_000 / 10_000
    # one request moves the mean and the low quantile down by at most x1.1, never to c_obs at once
    assert new.mean_ratio == pytest.approx(8.0 / 1.1)
    assert new.low_ratio == pytest.approx(7.5 / 1.1)
    assert c_obs < new.low_ratio < new.mean_ratio
    assert new.samples == 20  # leaves warm-up: the prior was proven too high
    assert new.dev_ratio == pytest.approx(0.1)  # min(dev, max(dev_before, 0.1 · mean)): no spread
    assert store.get(KEY) == new


def test_strong_correction_with_a_large_step_ratchets_to_what_the_request_had() -> None:
    store = InMemoryRatioStore(beta=0.9)
    store.put(KEY, RatioState(8.0, 0.1, 3, 7.5))
    b = _budget(routing_ratio=8.0, text_bytes=40_000, fixed=20)
    new = strong_correction(store, b, 10_020, warmup_samples=20, dev_before_ratio=0.1, max_step=10.0)
    assert new is not None
    assert new.mean_ratio == pytest.approx(40_000 / 10_000)
    assert new.low_ratio == pytest.approx(40_000 / 10_000)


def test_strong_correction_leaves_a_ratio_already_below_the_observation() -> None:
    store = InMemoryRatioStore(beta=0.9)
    store.put(KEY, RatioState(3.0, 0.1, 30, 2.9))
    b = _budget(routing_ratio=3.0, text_bytes=40_000, fixed=20)
    assert strong_correction(store, b, 10_020, warmup_samples=20, dev_before_ratio=0.1) is None
    assert store.get(KEY) == RatioState(3.0, 0.1, 30, 2.9)


def test_strong_correction_needs_a_text_signal_and_a_state() -> None:
    store = InMemoryRatioStore(beta=0.9)
    b = _budget()
    assert strong_correction(store, b, 10_020, warmup_samples=20, dev_before_ratio=0.0) is None  # no state
    store.put(KEY, RatioState(8.0, 0.1, 3))
    assert strong_correction(store, b, 20, warmup_samples=20, dev_before_ratio=0.0) is None  # no text tokens


def _recovery(calibrate: bool = True) -> tuple[MisrouteRecovery, LoadTracker, InMemoryRatioStore]:
    load = LoadTracker()
    store = InMemoryRatioStore(beta=0.9)
    rec = MisrouteRecovery(RecoveryConfig(calibrate=calibrate), Policy(POOLS, load=load), load, store, 20)
    return rec, load, store


def test_a_retry_moves_the_request_to_the_next_larger_pool() -> None:
    rec, load, _ = _recovery()
    load.acquire("short")
    assert rec.on_retried("short", 1, 200) is None  # first attempt: no retry
    out = rec.on_retried("short", 2, 200)
    assert out is not None and (out.from_pool, out.to_pool, out.outcome) == ("short", "long", "recovered")
    assert (load.inflight("short"), load.inflight("long")) == (0, 1)
    failed = rec.on_retried("short", 2, 503, move_load=False)
    assert failed is not None and failed.outcome == "retry_failed"
    assert (load.inflight("short"), load.inflight("long")) == (0, 1)  # not moved again
    assert rec.on_retried("long", 2, 200) is None  # the largest pool: a retry within it


def test_usage_confirms_a_misroute_only_when_the_prompt_overflowed_the_first_pool() -> None:
    rec, _, store = _recovery()
    store.put(KEY, RatioState(8.0, 0.1, 3, 7.5))
    b = _budget(routing_ratio=8.0)
    assert rec.on_usage(b, "short", "long", 1000, 0.1) == (
        "unconfirmed",
    )  # fitted: the 400 had another cause
    assert rec.on_usage(b, "short", "long", 10_020, 0.1) == ("confirmed", "ratcheted")
    state = store.get(KEY)
    assert state is not None and state.mean_ratio == pytest.approx(
        8.0 / 1.1
    )  # one bounded step (recovery.max_step)
    rec_off, _, store_off = _recovery(calibrate=False)
    store_off.put(KEY, RatioState(8.0, 0.1, 3, 7.5))
    assert rec_off.on_usage(b, "short", "long", 10_020, 0.1) == ("confirmed",)
    assert store_off.get(KEY) == RatioState(8.0, 0.1, 3, 7.5)
