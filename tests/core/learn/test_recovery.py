"""Misrouted requests (extproc/core/learn/recovery.py), unit by unit: the attempt-count header, when usage
proves an overflow, the bounded step of the key's routing value, and the router's side of a retry."""

from __future__ import annotations

import pytest

from extproc.config import CalibrationConfig, EstimatorConfig, PoolConfig, RecoveryConfig
from extproc.core.estimate.budget import TokenBudget
from extproc.core.estimate.calibration import InMemoryRatioStore, RatioState
from extproc.core.estimate.estimator import Estimator
from extproc.core.learn.recovery import MisrouteRecovery, overflowed, parse_attempt_count
from extproc.core.route.load import LoadTracker
from extproc.core.route.policy import Policy

KEY = ("m", "latin")
POOLS = [
    PoolConfig(name="short", max_model_len=4096, header_value="short"),
    PoolConfig(name="long", max_model_len=32768, header_value="long"),
]


def _budget(
    routing_ratio: float = 1.0, model_tokens: float = 8000.0, fixed: int = 20, reserve: int = 256
) -> TokenBudget:
    """A budget of ``model_tokens`` modelled text tokens routed at ``routing_ratio`` (modelled/true)."""
    prompt = fixed + int(model_tokens / routing_ratio)
    return TokenBudget(
        key=KEY,
        routing_ratio=routing_ratio,
        text_bytes=32_000,
        fixed_prompt_tokens=fixed,
        prompt_tokens=prompt,
        output_reserve_tokens=reserve,
        n_sequences=1,
        total_tokens=prompt + reserve,
        warm=True,
        modelled_units=round(model_tokens),
        model_tokens=model_tokens,
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


def _recovery(calibrate: bool = True) -> tuple[MisrouteRecovery, LoadTracker, Estimator]:
    load = LoadTracker()
    cal = CalibrationConfig()
    store = InMemoryRatioStore.from_config(cal)
    store.put(KEY, RatioState(1.0, 0.05, 100, 1.0))  # warm, routing at 1.0 modelled/true
    est = Estimator(estimator=EstimatorConfig(), calibration=cal, store=store)
    rec = MisrouteRecovery(RecoveryConfig(calibrate=calibrate), Policy(POOLS, load=load), load, est)
    return rec, load, est


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
    rec, _, est = _recovery()
    b = _budget(routing_ratio=1.0, model_tokens=8000.0)
    assert est.routing_ratio(KEY) == (1.0, True)
    assert rec.on_usage(b, "short", "long", 1000) == ("unconfirmed",)  # fitted: the 400 had another cause
    assert est.routing_ratio(KEY) == (1.0, True)
    # served 10,000 text tokens: modelled/true 0.8, one bounded step down (recovery.max_step 0.1)
    assert rec.on_usage(b, "short", "long", 10_020) == ("confirmed", "ratcheted")
    assert est.routing_ratio(KEY)[0] == pytest.approx(1.0 / 1.1)
    assert est.store.get(KEY) == RatioState(1.0, 0.05, 100, 1.0)  # the store is not written
    rec_off, _, est_off = _recovery(calibrate=False)
    assert rec_off.on_usage(b, "short", "long", 10_020) == ("confirmed",)
    assert est_off.routing_ratio(KEY) == (1.0, True)


def test_a_misroute_without_modelled_text_is_confirmed_and_corrects_nothing() -> None:
    rec, _, est = _recovery()
    ids_only = _budget(model_tokens=0.0)
    assert rec.on_usage(ids_only, "short", "long", 10_020) == ("confirmed",)
    assert est.routing_ratio(KEY) == (1.0, True)
