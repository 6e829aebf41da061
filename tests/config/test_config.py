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
