"""EMA calibration, model keys and the routing policy (the run model's arithmetic:
tests/core/estimate/test_estimator_runs_model.py)."""

from __future__ import annotations

import json

import pytest

from extproc.config import CalibrationConfig, EstimatorConfig, PoolConfig
from extproc.core.estimate.calibration import InMemoryRatioStore, RatioState, ema_update
from extproc.core.estimate.estimator import Estimator
from extproc.core.request.request_body import parse_request_body
from extproc.core.route.policy import Policy


def _estimator(**cal: object) -> Estimator:
    calibration = CalibrationConfig(**cal)  # type: ignore[arg-type]
    return Estimator(
        estimator=EstimatorConfig(),
        calibration=calibration,
        store=InMemoryRatioStore.from_config(calibration),
    )


def test_ema_update_matches_hand_computation() -> None:
    s = ema_update(None, 4.0, 0.9)
    assert s == RatioState(4.0, 0.4, 1)
    s = ema_update(s, 5.0, 0.9)
    assert s.mean_ratio == pytest.approx(0.9 * 4.0 + 0.1 * 5.0)
    assert s.dev_ratio == pytest.approx(0.9 * 0.4 + 0.1 * abs(5.0 - 4.0))
    with pytest.raises(ValueError):
        ema_update(s, 0.0, 0.9)


def test_observe_skips_non_text_dominated_prompts() -> None:
    est = _estimator()
    body = json.dumps({"model": "m", "prompt": list(range(500))})
    b = est.estimate(parse_request_body(body.encode(), "completions"))
    assert est.observe(b, 500) is None


def test_model_keys_are_bounded() -> None:
    est = Estimator(
        estimator=EstimatorConfig(max_models=2),
        calibration=CalibrationConfig(),
        store=InMemoryRatioStore(beta=0.9),
    )
    # names no profile or model set knows take a slot only once served (issue 34, item 4)
    assert [est.model_key(m) for m in ("a", "b")] == ["_other", "_other"]
    assert [est.admit(m, learned=True) for m in ("a", "b", "c")] == ["a", "b", "_other"]
    assert [est.model_key(m) for m in ("a", "b", "c", "a")] == ["a", "b", "_other", "a"]


def test_policy_shortest_fit_and_fallback() -> None:
    pools = [
        PoolConfig(name="long", max_model_len=65536, header_value="long"),
        PoolConfig(name="short", max_model_len=8192, header_value="short"),
    ]
    policy = Policy(pools)
    assert policy.choose(8192).pool.name == "short"
    assert policy.choose(8193).pool.name == "long"
    d = policy.choose(10**6)
    assert (d.pool.name, d.reason) == ("long", "exceeds_all_pools")
    assert policy.unreadable("body_not_json").pool.name == "long"
