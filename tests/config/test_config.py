"""Configuration schema: the shipped file is valid; mistakes give clear messages."""

from __future__ import annotations

from pathlib import Path

import pytest

from extproc.config import ConfigError, load_config, parse_config
from tbr.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_config_is_valid() -> None:
    cfg = load_config(ROOT / "config" / "router.yaml")
    assert [p.name for p in cfg.pools_by_size] == ["short", "long"]
    assert cfg.fallback_pool.name == "long"


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        pytest.param({"pools": []}, "pools", id="no-pools"),
        pytest.param(
            {"pools": [{"name": "a", "max_model_len": -1, "header_value": "a"}]}, "max_model_len", id="neg"
        ),
        pytest.param(
            {"pools": [{"name": "a", "max_model_len": 1, "header_value": "a b"}]}, "header_value", id="space"
        ),
        pytest.param(
            {"pools": [{"name": "a", "max_model_len": 1, "header_value": "a"}], "x": 1}, "x", id="unknown"
        ),
        pytest.param(
            {
                "pools": [
                    {"name": "a", "max_model_len": 1, "header_value": "a"},
                    {"name": "a", "max_model_len": 2, "header_value": "b"},
                ]
            },
            "duplicate",
            id="dup",
        ),
        pytest.param(
            {"pools": [{"name": "a", "max_model_len": 1, "header_value": "a"}], "routing_header": "X-P"},
            "routing_header",
            id="upper-header",
        ),
    ],
)
def test_invalid_configs_name_the_field(data: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    assert needle in str(exc.value)


def test_config_check_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "check", str(ROOT / "config" / "router.yaml")]) == 0
    assert "OK" in capsys.readouterr().out
    bad = tmp_path / "bad.yaml"
    bad.write_text("pools: [{name: a}]\n")
    assert main(["config", "check", str(bad)]) == 2
    assert "max_model_len" in capsys.readouterr().err


def test_config_check_warns_on_settings_that_cannot_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = tmp_path / "odd.yaml"
    cfg.write_text(
        "pools:\n"
        "  - {name: long, max_model_len: 8192, header_value: long}\n"
        "  - {name: short, max_model_len: 65536, header_value: short}\n"
        "estimator: {default_output_reserve_tokens: 100000}\n"
    )
    assert main(["config", "check", str(cfg)]) == 0
    err = capsys.readouterr().err
    assert "exceeds all pools" in err
    assert "not 'long'" in err
    assert main(["config", "check", str(ROOT / "config" / "router.yaml")]) == 0
    assert "warning" not in capsys.readouterr().err


POOL = {"name": "a", "max_model_len": 4096, "header_value": "a"}
REMOVED_ESTIMATOR = {
    "prior_bytes_per_token": 4.0,
    "family_priors": True,
    "count_digits": True,
    "count_punctuation": False,
    "code_structure_scale": 0.5,
    "digit_tokens_per_digit": 1.0,
    "punct_tokens_per_char": 1.0,
    "newline_tokens_per_char": 1.0,
    "min_bytes_per_token": 1.0,
    "sample_bytes": 16384,
    "cost_model": "runs",
}


def test_settings_of_the_removed_bytes_model_are_ignored_with_a_warning_naming_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A file written for the last release (the bytes model's knobs had no effect on the run
    counts) still loads, to the same configuration, and the log names every removed setting."""
    profile = {"pattern": "x", "family": "llama3", "message_framing_tokens": 5, "request_framing_tokens": 5}
    old_profile = {**profile, "digit_tokens_per_digit": 0.6, "punct_tokens_per_char": 0.75}
    with caplog.at_level("WARNING", logger="extproc.config.estimation"):
        old = parse_config(
            {"pools": [POOL], "estimator": {**REMOVED_ESTIMATOR, "model_profiles": [old_profile]}}
        )
    assert old == parse_config({"pools": [POOL], "estimator": {"model_profiles": [profile]}})
    logged = caplog.text
    for name in REMOVED_ESTIMATOR:
        assert f"estimator.{name} was removed" in logged, name
    assert "estimator.model_profiles[].digit_tokens_per_digit was removed" in logged
    assert "estimator.model_profiles[].punct_tokens_per_char was removed" in logged


def test_the_bytes_cost_model_is_an_error_naming_its_removal() -> None:
    with pytest.raises(ConfigError) as exc:
        parse_config({"pools": [POOL], "estimator": {"cost_model": "bytes", "sample_bytes": 1024}})
    message = str(exc.value)
    assert "estimator.cost_model: 'bytes' was removed" in message
    assert "evaluation/baselines/bytes_model.py" in message


def test_config_check_of_a_file_with_removed_settings(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    old = tmp_path / "old.yaml"
    old.write_text(
        "pools: [{name: a, max_model_len: 4096, header_value: a}]\nestimator: {prior_bytes_per_token: 4.0}\n"
    )
    with caplog.at_level("WARNING", logger="extproc.config.estimation"):
        assert main(["config", "check", str(old)]) == 0
    assert "estimator.prior_bytes_per_token was removed" in caplog.text
    old.write_text(
        "pools: [{name: a, max_model_len: 4096, header_value: a}]\nestimator: {cost_model: bytes}\n"
    )
    assert main(["config", "check", str(old)]) == 2
