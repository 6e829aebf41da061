"""Settings from the environment and the command line over the YAML file (12-factor config).

Precedence: ``tbr serve`` flags > ``TBR_*`` environment variables > the YAML file > defaults.
The overrides are applied to the YAML mapping before validation, at start and on every reload,
so a reload never reverts them.

=====================  ==========================  ======================================
environment            ``tbr serve`` flag          setting
=====================  ==========================  ======================================
``TBR_GRPC_HOST``      ``--grpc-host``             ``server.grpc_host``
``TBR_GRPC_PORT``      ``--grpc-port``             ``server.grpc_port``
``TBR_ADMIN_HOST``     ``--admin-host``            ``admin.host``
``TBR_ADMIN_PORT``     ``--admin-port``            ``admin.port``
``TBR_REDIS_URL``      ``--redis-url``             ``calibration.redis_url``
``TBR_POOLS``          ``--pool`` (repeated)       ``pools`` (``NAME=MAX_MODEL_LEN,...``)
=====================  ==========================  ======================================

``TBR_POOLS=short=8192,long=65536`` keeps the YAML's other settings of a pool with the same
name (header value, metrics URL, ...) and sets its ``max_model_len``; a new name gets the
defaults with ``header_value`` = name; pools not listed are dropped.

Secrets: the Redis password comes from ``TBR_REDIS_PASSWORD`` or the file named by
``TBR_REDIS_PASSWORD_FILE`` (e.g. a mounted Kubernetes Secret), never from the YAML: a password
inside the YAML's ``calibration.redis_url`` is a :class:`~extproc.config.ConfigError`.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from extproc.config import ConfigError, RouterConfig, parse_config, read_config_data

__all__ = [
    "ENV_SETTINGS",
    "apply_overrides",
    "changed_fields",
    "env_overrides",
    "load_config_with_overrides",
    "redis_password",
]

ENV_SETTINGS: dict[str, str] = {
    "TBR_GRPC_HOST": "server.grpc_host",
    "TBR_GRPC_PORT": "server.grpc_port",
    "TBR_ADMIN_HOST": "admin.host",
    "TBR_ADMIN_PORT": "admin.port",
    "TBR_REDIS_URL": "calibration.redis_url",
    "TBR_POOLS": "pools",
}
_INT_SETTINGS = {"server.grpc_port", "admin.port"}


def env_overrides(env: Mapping[str, str]) -> dict[str, str]:
    """The ``TBR_*`` settings present (non-empty) in ``env`` as {dotted setting: raw value}."""
    return {path: env[name] for name, path in ENV_SETTINGS.items() if env.get(name, "") != ""}


def _pools(spec: str, current: Any) -> list[dict[str, Any]]:
    by_name = {p.get("name"): p for p in current if isinstance(p, dict)} if isinstance(current, list) else {}
    pools = []
    for item in (s.strip() for s in spec.split(",")):
        name, sep, size = item.partition("=")
        if not sep or not name.strip() or not size.strip().isdigit():
            raise ConfigError(f"pools override {spec!r}: expected NAME=MAX_MODEL_LEN[,NAME=MAX_MODEL_LEN...]")
        name = name.strip()
        pool = dict(by_name.get(name) or {"name": name, "header_value": name})
        pool["max_model_len"] = int(size)
        pools.append(pool)
    return pools


def apply_overrides(data: Any, overrides: Mapping[str, str]) -> Any:
    """A copy of the YAML mapping ``data`` with ``overrides`` ({dotted setting: raw value}) set.

    Raises:
        ConfigError: a port is not an integer, or a pools spec is malformed.
    """
    if not overrides:
        return data
    out: dict[str, Any] = copy.deepcopy(data) if isinstance(data, dict) else {}
    for path, raw in overrides.items():
        value: Any = raw
        if path in _INT_SETTINGS:
            try:
                value = int(raw)
            except ValueError:
                raise ConfigError(f"{path} override {raw!r} is not an integer") from None
        if path == "pools":
            out["pools"] = _pools(raw, out.get("pools"))
            continue
        section, _, field = path.partition(".")
        if not isinstance(out.get(section), dict):
            out[section] = {}
        out[section][field] = value
    return out


def _reject_yaml_password(data: Any, path: Path) -> None:
    cal = data.get("calibration") if isinstance(data, dict) else None
    url = cal.get("redis_url") if isinstance(cal, dict) else None
    if isinstance(url, str) and urlsplit(url).password:
        raise ConfigError(
            f"{path}: calibration.redis_url contains a password; set TBR_REDIS_PASSWORD or "
            "TBR_REDIS_PASSWORD_FILE instead (secrets never go in the YAML)"
        )


def load_config_with_overrides(path: str | Path, overrides: Mapping[str, str]) -> RouterConfig:
    """Read ``path``, apply ``overrides`` (see :func:`apply_overrides`), validate.

    Raises:
        ConfigError: unreadable or invalid file, a password in the YAML's Redis URL, or an invalid
            override.
    """
    data = read_config_data(path)
    _reject_yaml_password(data, Path(path))
    return parse_config(apply_overrides(data, overrides))


def redis_password(env: Mapping[str, str]) -> str | None:
    """The Redis password from ``TBR_REDIS_PASSWORD`` or the file ``TBR_REDIS_PASSWORD_FILE``
    (trailing newline removed); None when neither is set.

    Raises:
        ConfigError: both are set, or the file cannot be read.
    """
    value, file = env.get("TBR_REDIS_PASSWORD"), env.get("TBR_REDIS_PASSWORD_FILE")
    if value and file:
        raise ConfigError("set one of TBR_REDIS_PASSWORD and TBR_REDIS_PASSWORD_FILE, not both")
    if file:
        try:
            return Path(file).read_text(encoding="utf-8").rstrip("\r\n")
        except OSError as exc:
            raise ConfigError(f"TBR_REDIS_PASSWORD_FILE {file}: {exc.strerror or exc}") from exc
        except UnicodeDecodeError as exc:
            raise ConfigError(f"TBR_REDIS_PASSWORD_FILE {file}: not UTF-8 text") from exc
    return value or None


def changed_fields(old: RouterConfig, new: RouterConfig) -> list[str]:
    """Dotted names of the settings that differ (``pools[1].max_model_len``, ``estimator``...)."""
    out: list[str] = []

    def walk(a: Any, b: Any, name: str) -> None:
        if a == b:
            return
        if isinstance(a, dict) and isinstance(b, dict):
            for key in sorted(a.keys() | b.keys()):
                walk(a.get(key), b.get(key), f"{name}.{key}" if name else key)
        elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
            for i, (x, y) in enumerate(zip(a, b, strict=True)):
                walk(x, y, f"{name}[{i}]")
        else:
            out.append(name)

    walk(old.model_dump(mode="json"), new.model_dump(mode="json"), "")
    return out
