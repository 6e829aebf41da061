"""Estimator arithmetic, EMA calibration and the routing policy."""

from __future__ import annotations

import json
import math

import pytest

from extproc.config import CalibrationConfig, EstimatorConfig, PoolConfig
from extproc.core.categories import classify_text
from extproc.core.estimate.calibration import InMemoryRatioStore, RatioState, ema_update
from extproc.core.estimate.estimator import CATEGORY_PRIORS_BPT, Estimator
from extproc.core.request.request_body import parse_request_body
from extproc.core.route.policy import Policy


def _estimator(**cal: object) -> Estimator:
    calibration = CalibrationConfig(**cal)  # type: ignore[arg-type]
    return Estimator(
        estimator=EstimatorConfig(cost_model="bytes"),  # the paper's bytes/token arithmetic
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


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("The quick brown fox jumps over the lazy dog.", "latin"),
        ("这是一个关于机器学习的问题，请详细回答。", "cjk_zh"),
        ("これは機械学習についての質問です。", "cjk_ja"),
        ("이것은 기계 학습에 관한 질문입니다.", "cjk_ko"),
        ("Это вопрос о машинном обучении.", "cyrillic"),
        ("นี่คือคำถามเกี่ยวกับการเรียนรู้ของเครื่อง", "thai"),
        ('{"type": "object", "properties": {"a": {"type": "string"}}}', "json"),
        ("```python\ndef f(x):\n    return x\n```", "code"),
        ("12345 67890", "no_letters"),
    ],
)
def test_classifier_scripts(text: str, category: str) -> None:
    assert classify_text(text.encode()) == category


def test_budget_uses_prior_then_learned_conservative_ratio() -> None:
    est = _estimator(warmup_samples=3, gamma=2.0, ema_beta=0.5, learner="ema_dev")
    text = "the word " * 444 + "the "  # 4000 bytes of English-like Latin prose
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 100})
    f = parse_request_body(body.encode(), "chat")
    b = est.estimate(f)
    prior = CATEGORY_PRIORS_BPT["latin"]
    assert not b.warm
    assert b.prompt_tokens == math.ceil(4000 / prior) + 5 + 5
    assert b.total_tokens == b.prompt_tokens + 100
    for _ in range(3):
        assert est.observe(b, 4000 // 5 + 10) is not None  # true ratio 5.0 B/token
    b2 = est.estimate(f)
    assert b2.warm
    state = est.store.get(b2.key)
    assert state is not None
    assert b2.routing_ratio == pytest.approx(state.mean_ratio - 2.0 * state.dev_ratio)


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
