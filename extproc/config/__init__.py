"""Router configuration: one YAML schema, validated once at start.

The declarative :class:`RouterConfig` (pydantic) is what operators write (its sections live in
:mod:`.pools`, :mod:`.estimation` and :mod:`.listeners`; shared pieces in :mod:`.base`); everything the request
path needs is derived from it once (sorted pools, header names). The module imports neither gRPC
nor Envoy types, so ``tbr config check`` and the planner can use it anywhere.

Errors: :func:`load_config` raises :class:`ConfigError` with one line per problem, naming the
YAML path of the offending field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import yaml
from pydantic import Field, ValidationError, field_validator, model_validator

from extproc.config.advice import AdviceConfig
from extproc.config.base import HEADER_NAME, ConfigError, Strict
from extproc.config.estimation import (
    DEFAULT_AUDIO_RULES,
    DEFAULT_IMAGE_RULES,
    DEFAULT_MODEL_PROFILES,
    AudioRule,
    CalibrationConfig,
    EstimatorConfig,
    ImageRule,
    ModelProfile,
    OutputReserveConfig,
    ResponseReadsConfig,
)
from extproc.config.listeners import AdminConfig, ServerConfig
from extproc.config.pools import ModelSet, PoolConfig, PoolHealthConfig, RecoveryConfig, SpilloverConfig

__all__ = [
    "DEFAULT_AUDIO_RULES",
    "DEFAULT_IMAGE_RULES",
    "DEFAULT_MODEL_PROFILES",
    "AdminConfig",
    "AdviceConfig",
    "AudioRule",
    "CalibrationConfig",
    "ConfigError",
    "EstimatorConfig",
    "ImageRule",
    "ModelProfile",
    "ModelSet",
    "OutputReserveConfig",
    "PoolConfig",
    "PoolHealthConfig",
    "RecoveryConfig",
    "ResponseReadsConfig",
    "RouterConfig",
    "ServerConfig",
    "SpilloverConfig",
    "load_config",
    "parse_config",
    "read_config_data",
]


class RouterConfig(Strict):
    """Top-level router configuration (the YAML file's schema)."""

    pools: Annotated[list[PoolConfig], Field(min_length=1, max_length=64)]
    models: Annotated[list[ModelSet], Field(max_length=32, default_factory=list)]
    """Pool sets per model (see :class:`ModelSet`); empty = one set of all ``pools`` for every model."""
    default_model_set: str | None = None
    """Set that serves a model no set names or matches (decision reason ``unknown_model``);
    None = such requests go to the largest pool of all, reason ``unknown_model``."""
    routing_header: str = "x-tbr-pool"
    """Header the router sets and Envoy routes on in the two-message design (Envoy Gateway, Istio);
    Envoy strips any client copy before routing. In the one-message design (envoy/envoy.yaml) the
    pool's ``header_value`` goes into dynamic metadata ``tbr.pool`` instead, which the routes match."""
    estimator: EstimatorConfig = EstimatorConfig()
    calibration: CalibrationConfig = CalibrationConfig()
    server: ServerConfig = ServerConfig()
    admin: AdminConfig = AdminConfig()
    spillover: SpilloverConfig = SpilloverConfig()
    recovery: RecoveryConfig = RecoveryConfig()
    advice: AdviceConfig = AdviceConfig()
    """Live fleet advice (issue 33; off by default): :class:`extproc.config.advice.AdviceConfig`."""
    pool_health: PoolHealthConfig = PoolHealthConfig()
    decision_log_path: str | None = None
    """Optional JSON Lines log of routing decisions (no prompt text), readable by ``tbr plan``.
    Written off the request path (extproc/service/decision_log.py)."""
    decision_log_flush_interval_s: Annotated[float, Field(gt=0.0, le=60.0)] = 1.0
    """Seconds between background writes of the decision log (and at shutdown)."""
    decision_log_queue_max: Annotated[int, Field(ge=1, le=10_000_000)] = 100_000
    """Records held between flushes at most; more are dropped (``tbr_decision_log_dropped_records_total``)."""

    @field_validator("routing_header")
    @classmethod
    def _lower_header(cls, v: str) -> str:
        if not HEADER_NAME.match(v):
            raise ValueError("must be a lower-case HTTP header name (letters, digits, '-')")
        return v

    @model_validator(mode="after")
    def _unique_pools(self) -> RouterConfig:
        for attr in ("name", "header_value"):
            seen: set[str] = set()
            for pool in self.pools:
                value = getattr(pool, attr)
                if value in seen:
                    raise ValueError(f"pools: duplicate {attr} {value!r}")
                seen.add(value)
        by_name = {p.name: p for p in self.pools}
        for group, names in self.pool_groups.items():
            lens = [by_name[n].max_model_len for n in names if n in by_name]
            if len(set(lens)) != len(lens):
                where = "pools" if not self.models else f"models[{group}]"
                raise ValueError(
                    f"{where}: two pools have the same max_model_len; each pool needs its own limit"
                )
        return self

    @model_validator(mode="after")
    def _model_sets(self) -> RouterConfig:
        if not self.models:
            if self.default_model_set is not None:
                raise ValueError("default_model_set needs models")
            return self
        names = {p.name for p in self.pools}
        owner: dict[str, str] = {}
        set_names: set[str] = set()
        for ms in self.models:
            if ms.name in set_names:
                raise ValueError(f"models: duplicate set name {ms.name!r}")
            set_names.add(ms.name)
            for pool in ms.pools:
                if pool not in names:
                    raise ValueError(f"models[{ms.name}]: unknown pool {pool!r}")
                if pool in owner:
                    raise ValueError(f"pool {pool!r} is in two model sets ({owner[pool]}, {ms.name})")
                owner[pool] = ms.name
        unused = sorted(names - set(owner))
        if unused:
            raise ValueError(f"pools in no model set (unreachable): {', '.join(unused)}")
        if self.default_model_set is not None and self.default_model_set not in set_names:
            raise ValueError(f"default_model_set {self.default_model_set!r} is not a set name")
        return self

    @property
    def pool_groups(self) -> dict[str, list[str]]:
        """Set name → its pool names as configured (one set ``default`` of all pools without ``models``)."""
        if not self.models:
            return {"default": [p.name for p in self.pools]}
        return {ms.name: list(ms.pools) for ms in self.models}

    @model_validator(mode="after")
    def _spillover_signals(self) -> RouterConfig:
        sp = self.spillover
        if not sp.enabled:
            return self
        inflight = sp.max_inflight_per_pool is not None or any(p.max_inflight for p in self.pools)
        scraped = (
            sp.max_waiting is not None
            or sp.max_kv_cache_usage is not None
            or any(p.max_waiting is not None or p.max_kv_cache_usage is not None for p in self.pools)
        )
        if not (inflight or scraped):
            raise ValueError(
                "spillover.enabled needs a threshold: max_inflight_per_pool, max_waiting or "
                "max_kv_cache_usage (or the per-pool overrides)"
            )
        if scraped and not inflight and not any(p.metrics_url for p in self.pools):
            raise ValueError("spillover: max_waiting/max_kv_cache_usage need pools[].metrics_url")
        return self

    @model_validator(mode="after")
    def _distinct_ports(self) -> RouterConfig:
        port = self.server.grpc_port
        if self.admin.enabled and port != 0 and port == self.admin.port:
            raise ValueError(
                f"server.grpc_port and admin.port are both {port}: the two listeners need their own ports"
            )
        return self

    @model_validator(mode="after")
    def _advice_pools(self) -> RouterConfig:
        unknown = sorted(
            (set(self.advice.profiles) | set(self.advice.capacity_correction)) - {p.name for p in self.pools}
        )
        if unknown:
            raise ValueError(
                f"advice.profiles / capacity_correction: unknown pool {', '.join(map(repr, unknown))}"
            )
        return self

    @property
    def pools_by_size(self) -> tuple[PoolConfig, ...]:
        """Pools sorted by ``max_model_len`` ascending; the last is the fallback (long) pool."""
        return tuple(sorted(self.pools, key=lambda p: p.max_model_len))

    @property
    def fallback_pool(self) -> PoolConfig:
        """The largest pool: where unreadable requests go (with model sets: the largest of the
        default set, else of all pools)."""
        if self.models and self.default_model_set is not None:
            members = set(self.pool_groups[self.default_model_set])
            return max((p for p in self.pools if p.name in members), key=lambda p: p.max_model_len)
        return self.pools_by_size[-1]


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        lines.append(f"  {loc}: {err['msg']}")
    return "invalid configuration:\n" + "\n".join(lines)


def parse_config(data: Any) -> RouterConfig:
    """Validate an already-parsed YAML/JSON mapping.

    Raises:
        ConfigError: the mapping does not match the schema (message lists every problem).
    """
    if not isinstance(data, dict):
        raise ConfigError("invalid configuration: the top level must be a mapping")
    try:
        return RouterConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc)) from exc


def read_config_data(path: str | Path) -> Any:
    """Read a YAML configuration file into plain data (not validated).

    Raises:
        ConfigError: the file cannot be read, is not UTF-8 text, or is not YAML.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read configuration {p}: {exc.strerror or exc}") from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ConfigError(
            f"configuration {p} is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset {exc.start} (line {line})"
        ) from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"configuration {p} is not valid YAML: {exc}") from exc


def load_config(path: str | Path) -> RouterConfig:
    """Read and validate a YAML configuration file.

    Raises:
        ConfigError: the file cannot be read, is not YAML, or fails validation.
    """
    return parse_config(read_config_data(path))
