"""The output half of the budget: classes, the learner's quantile, bounded steps, censoring,
the truncation controller, sharing, and the estimator's reserve policy (extproc.core.estimate.output_reserve)."""

from __future__ import annotations

import json
import math
import random
from statistics import NormalDist

import orjson
import pytest

from extproc.config import CalibrationConfig, EstimatorConfig, OutputReserveConfig
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.estimate.output_reserve import (
    ALL_BANDS,
    N_BINS,
    OUTPUT_PRIORS,
    OutputClassKey,
    OutputLengthLearner,
    OutputLengthState,
    bin_of,
    bin_upper_tokens,
    decode_class_key,
    encode_class_key,
    learned_total_tokens,
    output_class_of,
    prior_class_of,
    prompt_band_of,
)
from extproc.core.request.endpoints import parse_body
from extproc.core.request.request_body import parse_request_body, reasoning_request_of

BIG = 1 << 20


def _chat(**extra: object) -> bytes:
    body: dict[str, object] = {"model": "meta-llama/Llama-3.1-8B-Instruct"}
    body["messages"] = [{"role": "user", "content": "hello there"}]
    body.update(extra)
    return orjson.dumps(body)


# -- parsing ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({}, None),
        ({"chat_template_kwargs": {"enable_thinking": False}}, "off"),
        ({"chat_template_kwargs": {"enable_thinking": True}}, "on"),
        ({"chat_template_kwargs": {"thinking": True}}, "on"),
        ({"chat_template_kwargs": {"enable_thinking": "yes"}}, None),
        ({"reasoning_effort": "high"}, "high"),
        ({"reasoning_effort": "LOW"}, "low"),
        ({"reasoning_effort": "none"}, "off"),
        ({"reasoning_effort": "extreme"}, "on"),
        ({"reasoning_effort": 3}, None),
        ({"reasoning": {"effort": "medium"}}, "medium"),
        ({"thinking": {"type": "enabled", "budget_tokens": 2048}}, "on"),
        ({"thinking": {"type": "disabled"}}, "off"),
        # an explicit off wins over an effort
        ({"chat_template_kwargs": {"enable_thinking": False}, "reasoning_effort": "high"}, "off"),
    ],
)
def test_reasoning_request_of(body: dict[str, object], expected: str | None) -> None:
    assert reasoning_request_of(body) == expected


def test_parsers_carry_the_reasoning_request() -> None:
    f = parse_request_body(_chat(chat_template_kwargs={"enable_thinking": False}), "chat")
    assert f.reasoning_request == "off"
    assert parse_request_body(_chat(), "chat").reasoning_request is None
    responses = orjson.dumps({"model": "o3", "input": "hi", "reasoning": {"effort": "high"}})
    assert parse_body(responses, "responses").reasoning_request == "high"
    messages = orjson.dumps(
        {
            "model": "claude",
            "max_tokens": 10,
            "messages": [{"role": "user", "content": "hi"}],
            "thinking": {"type": "enabled", "budget_tokens": 1024},
        }
    )
    assert parse_body(messages, "messages").reasoning_request == "on"


# -- classes ---------------------------------------------------------------------------------


def test_bins_cover_lengths_and_upper_edges_hold_them() -> None:
    for tokens in (1, 2, 3, 7, 100, 999, 1000, 4096, 65_536, 262_143):
        b = bin_of(tokens)
        assert bin_upper_tokens(b) >= tokens
        assert b == 0 or bin_upper_tokens(b - 1) < tokens
    assert bin_of(10**9) == N_BINS - 1
    assert bin_of(0) == 0


def test_prompt_bands() -> None:
    edges = (1024, 4096, 16384)
    assert [prompt_band_of(t, edges) for t in (0, 1023, 1024, 4095, 4096, 16384, 10**6)] == [
        0,
        0,
        1,
        1,
        2,
        3,
        3,
    ]


def test_output_class_of_reads_endpoint_tools_reasoning_and_band() -> None:
    f = parse_request_body(_chat(), "chat")
    assert output_class_of(f, "m", 100) == OutputClassKey("m", "chat", "off", False, 0)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]
    g = parse_request_body(_chat(tools=tools, reasoning_effort="low"), "chat")
    assert output_class_of(g, "m", 5000) == OutputClassKey("m", "chat", "low", True, 2)
    qwen = parse_request_body(orjson.dumps({"model": "Qwen/Qwen3-8B", "prompt": "x"}), "completions")
    assert output_class_of(qwen, "q", 0).reasoning == "on"  # Qwen3 thinks by default
    assert output_class_of(qwen, "q", 0).endpoint == "completions"
    instruct = parse_request_body(
        orjson.dumps({"model": "Qwen/Qwen3-30B-A3B-Instruct-2507", "prompt": "x"}), "completions"
    )
    assert output_class_of(instruct, "q", 0).reasoning == "off"


def test_class_key_encoding_round_trips() -> None:
    key = OutputClassKey("org/model|with-bar", "responses", "high", True, 3)
    assert decode_class_key(encode_class_key(key)) == key
    with pytest.raises(ValueError):
        decode_class_key("chat|off|2|0|m")
    with pytest.raises(ValueError):
        decode_class_key("nonsense")


def test_prior_classes() -> None:
    assert prior_class_of(OutputClassKey("m", reasoning="on")) == "reasoning"
    assert prior_class_of(OutputClassKey("m", reasoning="high", tools=True)) == "reasoning"
    assert prior_class_of(OutputClassKey("m", reasoning="low")) == "reasoning_low"
    assert prior_class_of(OutputClassKey("m", tools=True)) == "tools"
    assert prior_class_of(OutputClassKey("m", endpoint="completions")) == "completions"
    assert prior_class_of(OutputClassKey("m")) == "chat"
    for prior in OUTPUT_PRIORS.values():
        pmf = prior.pmf()
        assert len(pmf) == N_BINS and math.isclose(sum(pmf), 1.0, rel_tol=1e-9)
        assert prior.source


# -- the learner -----------------------------------------------------------------------------


def _learner(**cfg: object) -> OutputLengthLearner:
    return OutputLengthLearner(OutputReserveConfig(**cfg))  # type: ignore[arg-type]


def test_cold_reserve_is_the_prior_quantile_and_reasoning_reserves_more() -> None:
    learner = _learner()
    chat = OutputClassKey("m")
    thinking = OutputClassKey("m", reasoning="on")
    cold = learner.reserve_tokens(chat, max_reserve_tokens=BIG)
    assert cold == learner.prior_quantile_tokens(chat)
    p = OUTPUT_PRIORS["chat"]
    z = NormalDist().inv_cdf(1.0 - learner.cfg.tail_share)
    exact = math.exp(math.log(p.median_tokens) + p.sigma * z)  # the prior's (1 - tail share) quantile
    assert exact <= cold <= exact * 2 ** (1 / 8) + 1
    assert learner.reserve_tokens(thinking, max_reserve_tokens=BIG) > 3 * cold
    # capped by what the largest pool allows and by the configuration
    assert learner.reserve_tokens(thinking, max_reserve_tokens=700) == 700
    assert _learner(max_reserve_tokens=300).reserve_tokens(chat, max_reserve_tokens=BIG) == 300


def _draw(rng: random.Random, mu: float, sigma: float) -> int:
    return max(1, round(rng.lognormvariate(mu, sigma)))


def test_learns_the_high_quantile_of_its_class() -> None:
    learner = _learner(controller_step=0.0, tail_share=0.01)  # tail share fixed at 0.01
    key = OutputClassKey("m")
    rng = random.Random(0)
    for _ in range(20_000):
        learner.observe(key, _draw(rng, 4.0, 0.7), truncated=False)
    true_q99 = math.exp(4.0 + 0.7 * 2.3263478740408408)  # ≈ 278
    reserve = learner.reserve_tokens(key, max_reserve_tokens=BIG)
    assert true_q99 * 0.9 <= reserve <= true_q99 * 1.25
    # another model's classes are untouched
    other = OutputClassKey("other")
    assert learner.reserve_tokens(other, max_reserve_tokens=BIG) == learner.prior_quantile_tokens(other)


def test_a_new_band_starts_from_what_its_model_learned() -> None:
    learner = _learner(controller_step=0.0)
    rng = random.Random(8)
    band0 = OutputClassKey("m", prompt_band=0)
    for _ in range(2000):
        learner.observe(band0, _draw(rng, 3.0, 0.4), truncated=False)
    parent = learner.get(band0._replace(prompt_band=ALL_BANDS))
    assert parent is not None and parent.samples == 2000
    unseen = OutputClassKey("m", prompt_band=2)
    prior = learner.prior_quantile_tokens(unseen)
    # the unseen band routes on its model's answers (≈ 60 tokens at the 97th percentile), not the prior's ≈ 800
    assert learner.reserve_tokens(unseen, max_reserve_tokens=BIG) == parent.reserve_tokens < prior / 5
    # another model's classes still start from the prior
    assert learner.reserve_tokens(OutputClassKey("other", prompt_band=2), max_reserve_tokens=BIG) == prior


def test_one_observation_moves_the_reserve_by_a_bounded_step() -> None:
    learner = _learner(controller_step=0.0, max_step=0.25)
    key = OutputClassKey("m")
    rng = random.Random(1)
    for _ in range(500):
        learner.observe(key, _draw(rng, 4.0, 0.5), truncated=False)
    for huge in (10**6, 10**6, 1, 10**6):
        before = learner.reserve_tokens(key, max_reserve_tokens=BIG)
        learner.observe(key, huge, truncated=False)
        after = learner.reserve_tokens(key, max_reserve_tokens=BIG)
        assert before / 1.25 - 1 <= after <= before * 1.25 + 1


def test_a_truncated_answer_is_censored_and_raises_the_reserve() -> None:
    key = OutputClassKey("m")
    plain, censored = _learner(controller_step=0.0), _learner(controller_step=0.0)
    rng = random.Random(2)
    values = [_draw(rng, 5.0, 0.4) for _ in range(3000)]
    for v in values:
        plain.observe(key, v, truncated=False)
        censored.observe(key, v, truncated=False)
    r0 = plain.reserve_tokens(key, max_reserve_tokens=BIG)
    for _ in range(100):  # 100 answers cut at 400 tokens: all longer than that
        plain.observe(key, 400, truncated=False)
        censored.observe(key, 400, truncated=True)
    assert censored.reserve_tokens(key, max_reserve_tokens=BIG) > plain.reserve_tokens(
        key, max_reserve_tokens=BIG
    )
    assert censored.reserve_tokens(key, max_reserve_tokens=BIG) > 400 >= r0 * 0.5
    state = censored.get(key)
    assert state is not None and state.truncated == 100 and state.censored == 100
    # a client-capped answer is censored but not a truncation
    censored.observe(key, 50, truncated=False, capped=True)
    assert state.censored == 101 and state.truncated == 100
    assert censored.truncations == 100
    # a first censored answer: its weight is spread over the bins above its length
    lone = _learner(controller_step=0.0)
    lone.observe(key, 1000, truncated=True)
    counts = lone.get(key).counts  # type: ignore[union-attr]
    assert min(counts) == bin_of(1000) + 1 and sum(counts.values()) == pytest.approx(1.0)
    # nothing above (beyond the histogram): the weight goes in the last bin
    lone.observe(key, 10**6, truncated=True)
    assert counts is not lone.get(key).counts  # type: ignore[union-attr]
    assert lone.get(key).counts[N_BINS - 1] >= 1.0  # type: ignore[union-attr]


def test_the_controller_holds_truncations_at_the_budget() -> None:
    learner = _learner(truncation_budget=0.001, tail_share=0.01, controller_step=0.2)
    key = OutputClassKey("m")
    start = learner.fleet_tail_share
    learner.observe(key, 100, truncated=True)
    assert learner.fleet_tail_share == pytest.approx(start * math.exp(-0.2))
    shares = []
    rng = random.Random(3)
    for i in range(60_000):  # 1 % truncated: ten times the budget
        learner.observe(key, 100, truncated=rng.random() < 0.01)
        if i % 1000 == 0:
            shares.append(learner.fleet_tail_share)
    assert learner.fleet_tail_share <= 1.05 * learner.cfg.min_tail_share
    assert shares[-1] < shares[0]
    quiet = _learner()
    for _ in range(20_000):  # no truncation: the share relaxes up to its maximum
        quiet.observe(key, 100, truncated=False)
    assert quiet.fleet_tail_share == quiet.cfg.max_tail_share
    # at the controller's target rate the share holds: t = margin x budget
    steady = _learner(truncation_budget=0.01, controller_margin=1.0, controller_step=0.2, max_tail_share=0.4)
    for i in range(50_000):
        steady.observe(key, 100, truncated=i % 100 == 0)
    assert 0.5 * steady.cfg.tail_share < steady.fleet_tail_share < 2.0 * steady.cfg.tail_share


def test_one_tail_share_for_the_fleet_or_one_per_class() -> None:
    a, b = OutputClassKey("m", prompt_band=0), OutputClassKey("m", prompt_band=1)
    fleet, per_class = _learner(), _learner(controller_scope="class")
    for learner in (fleet, per_class):
        for _ in range(200):
            learner.observe(a, 100, truncated=False)
            learner.observe(b, 100, truncated=True)
    assert fleet.tail_share(a) == fleet.tail_share(b) == fleet.fleet_tail_share
    assert per_class.tail_share(a) > per_class.cfg.tail_share > per_class.tail_share(b)


def test_an_answer_skipped_as_uncuttable_steps_the_controller_as_an_untruncated_one() -> None:
    """The adaptive read decision reads every request its pool may cut and skips the rest: each skip
    counts as an untruncated answer for the controller (its length is not learned)."""
    key = OutputClassKey("m", prompt_band=1)
    parent = key._replace(prompt_band=ALL_BANDS)
    for scope in ("fleet", "class"):
        read, skipped = _learner(controller_scope=scope), _learner(controller_scope=scope)
        read.observe(key, 100, truncated=True)
        skipped.observe(key, 100, truncated=True)
        for _ in range(50):
            read.observe(key, 100, truncated=False)
            skipped.count_untruncated(key)
        assert skipped.fleet_tail_share == pytest.approx(read.fleet_tail_share)
        assert skipped.tail_share(key) == pytest.approx(read.tail_share(key))
        assert skipped.tail_share(parent) == pytest.approx(read.tail_share(parent))
        state = skipped.get(key)
        assert state is not None and state.samples == 1 and skipped.observations == 1
    # a class with no answers yet keeps no state (nothing is created for a skip)
    fresh = _learner(controller_scope="class")
    fresh.count_untruncated(key)
    assert fresh.get(key) is None and fresh.fleet_tail_share > fresh.cfg.tail_share


def test_same_observations_same_reserves() -> None:
    def run() -> list[int]:
        learner = _learner()
        rng = random.Random(7)
        keys = [OutputClassKey("m", prompt_band=b) for b in range(3)]
        out = []
        for _ in range(2000):
            key = rng.choice(keys)
            learner.observe(key, _draw(rng, 5.0, 1.0), truncated=rng.random() < 0.002)
            out.append(learner.reserve_tokens(key, max_reserve_tokens=BIG))
        return out

    assert run() == run()


def test_state_round_trips_through_json_and_restore() -> None:
    learner = _learner()
    key = OutputClassKey("m", "chat", "on", True, 2)
    rng = random.Random(4)
    for _ in range(300):
        learner.observe(key, _draw(rng, 6.0, 0.8), truncated=rng.random() < 0.01)
    doc = json.loads(json.dumps({encode_class_key(k): s.to_dict() for k, s in learner.items()}))
    states = {decode_class_key(k): OutputLengthState.from_dict(v) for k, v in doc.items()}
    other = _learner()
    assert other.restore(states) == 2  # the class and its all-bands parent
    assert other.reserve_tokens(key, max_reserve_tokens=BIG) == learner.reserve_tokens(
        key, max_reserve_tokens=BIG
    )
    assert other.quantile_tokens(key, 0.01) == learner.quantile_tokens(key, 0.01)
    restored = other.get(key)
    assert restored is not None and restored.samples == 300


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"counts": {"999": 1.0}, "samples": 1},
        {"counts": {"3": -1.0}, "samples": 1},
        {"counts": {"3": float("nan")}, "samples": 1},
        {"counts": {"x": 1.0}, "samples": 1},
        {"counts": "x", "samples": 1},
        {"counts": {}, "samples": -1},
    ],
)
def test_from_dict_rejects_foreign_documents(doc: object) -> None:
    with pytest.raises(ValueError):
        OutputLengthState.from_dict(doc)


def test_merge_adds_what_another_replica_learned() -> None:
    key = OutputClassKey("m")
    a, b = _learner(controller_step=0.0), _learner(controller_step=0.0)
    rng = random.Random(5)
    for i in range(4000):
        v = _draw(rng, 4.5, 0.6) if i % 2 else _draw(rng, 6.5, 0.3)
        (a if i % 2 else b).observe(key, v, truncated=False)
    b_state = b.get(key)
    assert b_state is not None
    merged = a.merge(key, b_state)
    assert merged.samples == 4000
    assert merged.weight == pytest.approx(a.get(key).weight)  # type: ignore[union-attr]
    # the merged histogram holds b's long answers: its quantile is b's, not a's
    assert a.quantile_tokens(key) >= b.quantile_tokens(key) * 0.9


# -- the estimator's reserve -----------------------------------------------------------------


def _estimator(**out: object) -> Estimator:
    cal = CalibrationConfig()
    cfg = EstimatorConfig(output_reserve=OutputReserveConfig(**{"learned": True, **out}))  # type: ignore[arg-type]
    return Estimator(
        estimator=cfg, calibration=cal, store=InMemoryRatioStore.from_config(cal), max_model_len_tokens=65536
    )


def test_estimator_reserves_the_learned_quantile_without_a_maximum() -> None:
    est = _estimator()
    f = parse_request_body(_chat(), "chat")
    budget = est.estimate(f)
    assert budget.output_class == OutputClassKey("meta-llama/Llama-3.1-8B-Instruct", "chat", "off", False, 0)
    assert est.output_learner is not None
    assert budget.output_reserve_source == "learned"
    assert budget.output_reserve_tokens == est.output_learner.reserve_tokens(
        budget.output_class, max_reserve_tokens=BIG
    )
    assert budget.total_tokens == learned_total_tokens(
        budget.prompt_tokens, budget.central_prompt_tokens, budget.output_reserve_tokens
    )
    for _ in range(3000):
        est.output_learner.observe(budget.output_class, 20, truncated=False)
    again = est.estimate(f)
    assert again.output_reserve_tokens < budget.output_reserve_tokens / 3


def test_learned_total_adds_the_reserve_to_the_central_prompt() -> None:
    """One margin per failure: the conservative prompt must fit with min_reserve_tokens per
    sequence; the learned reserve (a quantile) goes on the central prompt estimate."""
    assert learned_total_tokens(1700, 1520, 400) == 1920  # not 1700 + 400
    assert learned_total_tokens(2040, 1000, 5) == 2045  # the reserve under the floor: the prompt's
    assert learned_total_tokens(2040, 1000, 400, min_reserve_tokens=16) == 2056  # the prompt guards
    assert learned_total_tokens(1000, 0, 300) == 1300  # no central estimate: the conservative one
    assert learned_total_tokens(1000, 1200, 300) == 1300  # a central above it is not believed
    assert learned_total_tokens(1000, 900, 300, 3) == 1800  # n sequences


def test_estimator_budget_of_a_learned_reserve_and_of_a_client_maximum() -> None:
    text = "The quarterly report describes revenue, costs and the outlook in some detail. " * 120
    est = _estimator()
    f = parse_request_body(_chat(messages=[{"role": "user", "content": text}]), "chat")
    b = est.estimate(f)
    assert b.output_reserve_source == "learned" and 0 < b.central_prompt_tokens < b.prompt_tokens
    assert b.total_tokens == b.central_prompt_tokens + b.output_reserve_tokens
    assert b.total_tokens < b.prompt_tokens + b.output_reserve_tokens
    strict = est.estimate(
        parse_request_body(_chat(messages=[{"role": "user", "content": text}], max_tokens=300), "chat")
    )
    assert strict.total_tokens == strict.prompt_tokens + 300  # a client's maximum is a promise


def test_strict_keeps_the_client_maximum_and_risk_takes_the_smaller() -> None:
    f = parse_request_body(_chat(max_tokens=6000), "chat")
    strict = _estimator().estimate(f)
    assert (strict.output_reserve_tokens, strict.output_reserve_source) == (6000, "client")
    risk = _estimator(policy="risk").estimate(f)
    assert risk.output_reserve_source == "risk" and risk.output_reserve_tokens < 6000
    small = _estimator(policy="risk").estimate(parse_request_body(_chat(max_tokens=10), "chat"))
    assert (small.output_reserve_tokens, small.output_reserve_source) == (10, "client")


def test_learning_off_keeps_the_default_reserve() -> None:
    est = _estimator(learned=False)
    budget = est.estimate(parse_request_body(_chat(), "chat"))
    assert est.output_learner is None and budget.output_class is None
    assert (budget.output_reserve_tokens, budget.output_reserve_source) == (1024, "default")


def test_reserve_never_exceeds_the_largest_pool() -> None:
    cal = CalibrationConfig()
    est = Estimator(
        estimator=EstimatorConfig(output_reserve=OutputReserveConfig(learned=True)),
        calibration=cal,
        store=InMemoryRatioStore.from_config(cal),
        max_model_len_tokens=4096,
    )
    f = parse_request_body(
        orjson.dumps({"model": "deepseek-r1", "messages": [{"role": "user", "content": "why?"}]}), "chat"
    )
    budget = est.estimate(f)
    assert budget.output_class is not None and budget.output_class.reasoning == "on"
    assert budget.output_reserve_tokens == 4096 - budget.prompt_tokens


def test_a_byte_bound_reserves_the_most_of_the_bands_its_prompt_may_be_in() -> None:
    from extproc.core.estimate.screen import bound_budget

    est = _estimator()
    learner = est.output_learner
    assert learner is not None
    f = parse_request_body(_chat(messages=[{"role": "user", "content": "word " * 1000}]), "chat")
    exact = est.estimate(f)
    bound = bound_budget(est, f)
    assert bound is not None and exact.output_class is not None and bound.output_class is not None
    assert bound.output_class.prompt_band > exact.output_class.prompt_band
    # the estimate's band learns long answers, the bound's band short ones
    for _ in range(300):
        learner.observe(exact.output_class, 3000, truncated=False)
        learner.observe(bound.output_class, 10, truncated=False)
    exact, bound = est.estimate(f), bound_budget(est, f)
    assert bound is not None
    assert bound.output_reserve_tokens >= exact.output_reserve_tokens > 1000


def test_config_rejects_bad_settings() -> None:
    with pytest.raises(ValueError):
        OutputReserveConfig(prompt_band_edges_tokens=(4096, 1024))
    with pytest.raises(ValueError):
        OutputReserveConfig(tail_share=0.1, max_tail_share=0.05)
    with pytest.raises(ValueError):
        OutputReserveConfig(reasoning_model_patterns=("(",))
