"""Pool sets per model: config validation and the model → pool set lookup."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from extproc.config import ConfigError, parse_config
from extproc.core.route.model_sets import ModelRouting
from tbr.cmd_config import config_warnings
from tests.e2e.harness import ROUTER_2MODELS


def two_models(**extra: Any) -> dict[str, Any]:
    raw: dict[str, Any] = yaml.safe_load(ROUTER_2MODELS.read_text(encoding="utf-8"))
    raw.update(extra)
    return raw


def test_single_model_config_is_one_set_for_every_model() -> None:
    cfg = parse_config(
        {
            "pools": [
                {"name": "short", "max_model_len": 8192, "header_value": "short"},
                {"name": "long", "max_model_len": 65536, "header_value": "long"},
            ]
        }
    )
    routing = ModelRouting(cfg)
    policy = routing.select("anything")
    assert policy is not None and [p.name for p in policy.pools] == ["short", "long"]
    assert routing.known("anything") and routing.fallback_for(None).name == "long"


def test_exact_then_pattern_then_default() -> None:
    routing = ModelRouting(parse_config(two_models()))
    llama = routing.select("meta-llama/Llama-3.1-8B-Instruct")
    assert llama is not None and llama.choose(9000).pool.name == "llama-long"
    assert llama.choose(100).pool.name == "llama-short"
    other_llama = routing.select("meta-llama/Llama-3.3-70B-Instruct")  # pattern
    assert other_llama is llama
    unknown = routing.select("mistral-7b")
    assert unknown is routing.select("Qwen/Qwen3-8B") and not routing.known("mistral-7b")
    assert routing.next_larger("llama-short").name == "llama-long"  # type: ignore[union-attr]
    assert routing.next_larger("qwen-long") is None
    assert routing.fallback_for("meta-llama/Llama-3.1-8B-Instruct").name == "llama-long"


def test_without_default_unknown_models_have_no_set() -> None:
    raw = two_models()
    del raw["default_model_set"]
    routing = ModelRouting(parse_config(raw))
    assert routing.select("mistral-7b") is None
    assert routing.largest.name == "llama-long"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"default_model_set": "nope"}, "default_model_set 'nope' is not a set name"),
        (
            {
                "models": [
                    {"name": "a", "pools": ["qwen-short", "qwen-long"]},
                    {"name": "b", "pools": ["qwen-short", "llama-long"]},
                ]
            },
            "is in two model sets",
        ),
        (
            {"models": [{"name": "a", "pools": ["qwen-short", "qwen-long"]}], "default_model_set": None},
            "pools in no model set (unreachable): llama-long, llama-short",
        ),
        (
            {"models": [{"name": "a", "pools": ["qwen-short", "ghost"]}], "default_model_set": None},
            "unknown pool 'ghost'",
        ),
    ],
)
def test_invalid_sets(change: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_config(two_models(**change))
    assert message in str(err.value)


def test_same_limit_in_two_sets_is_fine_but_not_within_one() -> None:
    parse_config(two_models())  # qwen-short and llama-short are both 8192
    raw = two_models()
    raw["pools"][1]["max_model_len"] = 8192  # qwen-long = qwen-short
    with pytest.raises(ConfigError, match=r"models\[qwen\]: two pools have the same max_model_len"):
        parse_config(raw)


def test_config_check_flags_single_pool_sets_and_order() -> None:
    raw = two_models()
    raw["pools"].append({"name": "solo", "max_model_len": 4096, "header_value": "solo"})
    raw["models"][0]["pools"] = ["qwen-long", "qwen-short"]
    raw["models"].append({"name": "solo", "models": ["solo-model"], "pools": ["solo"]})
    warnings = config_warnings(parse_config(raw))
    assert any("models[solo] has a single pool" in w for w in warnings)
    assert any("models[qwen] are not listed in increasing max_model_len" in w for w in warnings)
    assert not config_warnings(parse_config(two_models()))
