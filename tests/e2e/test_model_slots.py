"""Issue 34, item 4: model-key slots go to the models the pools serve, not to whoever asks first.

Through Envoy, the router and stand-in pools that answer 404 for models they do not serve
(``--strict-model``, vLLM's behaviour), with ``estimator.max_models: 3``: 40 requests naming
models nobody serves (half of them matching a model profile) take no slot for good; the served
model with a profile and a served model without one (admitted after its first 2xx with usage)
each learn under their own key.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from devstack.stack import Stack, StackOptions
from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import OTHER, Estimator
from extproc.core.request.request_body import parse_request_body
from tests.stacks import running
from tests.waiting import until

pytestmark = pytest.mark.envoy

SERVED = "Qwen/Qwen3-8B"  # matches a model profile (qwen3): reserved
FINETUNE = "acme-support-ft"  # served, no profile: admitted after a 2xx with usage
TEXT = "Please summarise the plot of a short story about a lighthouse keeper and a storm. " * 3


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("slots")
    pool_args = ("--strict-model", "--served-model-name", SERVED, "--served-model-name", FINETUNE)
    options = StackOptions(pool_args=pool_args, router_overrides={"estimator": {"max_models": 3}})
    yield from running(Stack(work, options))


def chat(stack: Stack, model: str) -> httpx.Response:
    body = {"model": model, "messages": [{"role": "user", "content": TEXT}], "max_tokens": 8}
    return httpx.post(f"{stack.base_url}/chat/completions", json=body, timeout=30)


def learned_models(stack: Stack) -> dict[str, int]:
    rows = httpx.get(f"{stack.router_admin_url}/ratios", timeout=5).json()["ratios"]
    out: dict[str, int] = {}
    for r in rows:
        out[r["model"]] = out.get(r["model"], 0) + int(r["samples"])
    return out


def test_names_nobody_serves_do_not_take_the_served_models_slots(stack: Stack) -> None:
    for i in range(20):
        assert chat(stack, f"no-such-model-{i}").status_code == 404
        assert chat(stack, f"qwen3-fake-{i}").status_code == 404  # reserved by the qwen3 profile
    for _ in range(3):
        assert chat(stack, SERVED).status_code == 200
        assert chat(stack, FINETUNE).status_code == 200
    # no _other, no 404 name
    until(lambda: learned_models(stack) == {SERVED: 3, FINETUNE: 3}, what="exactly the served models learned")


def _estimator(max_models: int, **kw: object) -> Estimator:
    return Estimator(
        estimator=EstimatorConfig(max_models=max_models),
        calibration=CalibrationConfig(),
        store=InMemoryRatioStore(beta=0.9),
        **kw,  # type: ignore[arg-type]
    )


def _chat_features(model: str) -> object:
    body = f'{{"model": "{model}", "messages": [{{"role": "user", "content": "hello there"}}]}}'
    return parse_request_body(body.encode(), "chat")


def test_profile_is_matched_on_the_raw_name_when_the_key_is_other() -> None:
    est = _estimator(1)
    assert est.admit("some-model", learned=True) == "some-model"  # the only slot, learned: kept
    assert est.model_key(SERVED) == OTHER
    assert est.framing_of(SERVED).family == "qwen"
    assert est.framing(OTHER).family == ""
    with_slot = _estimator(2)
    f = _chat_features(SERVED)
    assert est.fixed_tokens(f) == with_slot.fixed_tokens(f)  # type: ignore[arg-type]


def test_exact_model_set_names_keep_their_slots_and_unlearned_slots_are_reclaimed() -> None:
    est = _estimator(2, reserved_models=["served-a"])
    assert est.admit("walk-in-1") == "walk-in-1"
    # one slot stays free for served-a: walk-in-2 takes walk-in-1's, which never learned anything
    assert est.admit("walk-in-2") == "walk-in-2"
    assert list(est.model_keys) == ["walk-in-2"] and est.model_key("walk-in-1") == OTHER
    assert est.model_key("served-a") == "served-a"  # a models: name takes its slot at once
    est.admit("walk-in-2", learned=True)
    est.admit("served-a", learned=True)
    assert est.admit("walk-in-3") == OTHER  # every slot learned something: none is reclaimed
    assert list(est.model_keys) == ["walk-in-2", "served-a"]
