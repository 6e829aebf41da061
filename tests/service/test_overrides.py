"""12-factor configuration: TBR_* environment and `tbr serve` flags over the YAML, the Redis
password from the environment or a file, never from the YAML (issue 16, item 3)."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from extproc.config import ConfigError, load_config
from extproc.service.overrides import (
    ENV_SETTINGS,
    apply_overrides,
    changed_fields,
    env_overrides,
    load_config_with_overrides,
    redis_password,
)
from tbr.cli import build_parser
from tbr.cmd_serve import flag_overrides
from tests.service.contracts import REPO

DEFAULT = REPO / "config" / "router.yaml"


def serve_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["serve", "--config", str(DEFAULT), *argv])


def test_environment_overrides_every_listener_pools_and_redis() -> None:
    env = {
        "TBR_GRPC_HOST": "0.0.0.0",
        "TBR_GRPC_PORT": "6000",
        "TBR_ADMIN_HOST": "0.0.0.0",
        "TBR_ADMIN_PORT": "6001",
        "TBR_REDIS_URL": "redis://redis:6379/1",
        "TBR_POOLS": "short=4096,long=65536,huge=131072",
        "UNRELATED": "x",
    }
    assert set(env_overrides(env)) == set(ENV_SETTINGS.values())
    base = load_config(DEFAULT)
    cfg = load_config_with_overrides(DEFAULT, env_overrides(env))
    assert (cfg.server.grpc_host, cfg.server.grpc_port) == ("0.0.0.0", 6000)
    assert (cfg.admin.host, cfg.admin.port) == ("0.0.0.0", 6001)
    assert cfg.calibration.redis_url == "redis://redis:6379/1"
    assert [(p.name, p.max_model_len) for p in cfg.pools] == [
        ("short", 4096),
        ("long", 65536),
        ("huge", 131072),
    ]
    # A pool named like one in the YAML keeps its other settings; a new one gets its name as header.
    assert cfg.pools[0].header_value == base.pools[0].header_value
    assert cfg.pools[2].header_value == "huge"
    # Nothing else moved.
    assert cfg.estimator == base.estimator and cfg.routing_header == base.routing_header


def test_flags_win_over_environment() -> None:
    env = env_overrides({"TBR_GRPC_HOST": "10.0.0.1", "TBR_ADMIN_PORT": "7001"})
    flags = flag_overrides(
        serve_args("--grpc-host", "0.0.0.0", "--pool", "short=2048", "--pool", "long=8192")
    )
    cfg = load_config_with_overrides(DEFAULT, env | flags)
    assert cfg.server.grpc_host == "0.0.0.0" and cfg.admin.port == 7001
    assert [(p.name, p.max_model_len) for p in cfg.pools] == [("short", 2048), ("long", 8192)]
    assert flag_overrides(serve_args()) == {}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"server.grpc_port": "fifty"}, "not an integer"),
        ({"pools": "short:8192"}, "NAME=MAX_MODEL_LEN"),
        ({"admin.port": "70000"}, "admin.port"),
    ],
)
def test_bad_override_is_a_clear_error(overrides: dict[str, str], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_config_with_overrides(DEFAULT, overrides)


def test_password_never_from_yaml(tmp_path: Path) -> None:
    data = yaml.safe_load(DEFAULT.read_text())
    data.setdefault("calibration", {})["redis_url"] = "redis://:hunter2@redis:6379/0"
    path = tmp_path / "router.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ConfigError, match="TBR_REDIS_PASSWORD") as err:
        load_config_with_overrides(path, {})
    assert "hunter2" not in str(err.value)
    # The environment may carry a URL with credentials (it is not the YAML).
    cfg = load_config_with_overrides(DEFAULT, {"calibration.redis_url": "redis://:pw@redis:6379/0"})
    assert cfg.calibration.redis_url == "redis://:pw@redis:6379/0"


def test_redis_password_from_env_or_file(tmp_path: Path) -> None:
    secret = tmp_path / "redis-password"
    secret.write_text("s3cret\n")
    assert redis_password({}) is None
    assert redis_password({"TBR_REDIS_PASSWORD": "abc"}) == "abc"
    assert redis_password({"TBR_REDIS_PASSWORD_FILE": str(secret)}) == "s3cret"
    with pytest.raises(ConfigError, match="not both"):
        redis_password({"TBR_REDIS_PASSWORD": "a", "TBR_REDIS_PASSWORD_FILE": str(secret)})
    with pytest.raises(ConfigError, match="TBR_REDIS_PASSWORD_FILE"):
        redis_password({"TBR_REDIS_PASSWORD_FILE": str(tmp_path / "missing")})


def test_changed_fields_names_each_setting() -> None:
    base = load_config(DEFAULT)
    same = load_config_with_overrides(DEFAULT, {})
    assert changed_fields(base, same) == []
    moved = load_config_with_overrides(DEFAULT, {"pools": "short=4096,long=65536", "admin.port": "9999"})
    assert changed_fields(base, moved) == ["admin.port", "pools[0].max_model_len"]
    assert apply_overrides({"a": 1}, {}) == {"a": 1}
