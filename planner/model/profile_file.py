"""Profile files: a :class:`planner.model.profiles.PoolProfile` as JSON or YAML — the one profile reader.

One mapping with the iteration-time constants (seconds), the KV capacity (tokens) and the price of
one instance's GPUs; the fields are :class:`PoolProfile`'s. Unknown fields, missing required ones and
out-of-range values are errors that name the field (``ValueError``). ``tbr plan``/``tbr simulate``
``--profile-file``, ``tbr profile``'s output and the router's fleet advice (``advice.pools[].profile``,
a shipped name or a file: :func:`load_profile`) all read profiles here.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.model.profiles import ADMISSION_MODES, PROFILES, PoolProfile

__all__ = ["load_profile", "load_profile_file", "profile_from_mapping", "write_profile_file"]


class _ProfileFile(BaseModel):
    """Schema of a profile file (units in the names: _s seconds, _tokens tokens, _usd_per_gpu_h $/GPU-hour)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    model: str = "unknown"
    gpu: str = "unknown"
    tp: int = Field(ge=1)
    price_usd_per_gpu_h: float = Field(ge=0)
    kv_capacity_tokens: int = Field(ge=1)
    block_size_tokens: int = Field(default=16, ge=1)
    max_num_seqs_cap: int = Field(default=256, ge=1)
    w_s: float = Field(gt=0)
    h_s_per_kv_token: float = Field(ge=0)
    p_s_per_prefill_token: float = Field(ge=0)
    chunk_tokens: int = Field(default=512, ge=1)
    source: str = ""
    max_num_batched_tokens: int | None = Field(default=None, ge=1)
    admission: str = "paper"
    request_overhead_s: float = Field(default=0.0, ge=0)
    s_s_per_running_seq: float = Field(default=0.0, ge=0)
    a_s_per_prefill_context_token: float = Field(default=0.0, ge=0)


def profile_from_mapping(raw: Any, where: str) -> PoolProfile:
    """A profile from a decoded mapping; ``where`` names it in errors. Raises ``ValueError`` naming the
    unknown, missing and out-of-range fields (or saying the top level is not a mapping)."""
    if not isinstance(raw, dict):
        raise ValueError(f"profile file {where}: the top level must be a mapping of the profile's fields")
    unknown = sorted(str(k) for k in raw if k not in _ProfileFile.model_fields)
    required = [k for k, f in _ProfileFile.model_fields.items() if f.is_required()]
    missing = [k for k in required if k not in raw]
    try:
        data = _ProfileFile.model_validate(raw)
    except ValidationError as exc:
        bad = [f"unknown fields {', '.join(unknown)}"] if unknown else []
        bad += [f"missing fields {', '.join(missing)}"] if missing else []
        bad += [f"{'.'.join(str(x) for x in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()]
        raise ValueError(f"profile file {where}: {'; '.join(bad)}") from None
    if data.admission not in ADMISSION_MODES:
        raise ValueError(
            f"profile file {where}: admission must be one of {ADMISSION_MODES}, got {data.admission!r}"
        )
    return PoolProfile(**data.model_dump())


def load_profile_file(path: str | Path) -> PoolProfile:
    """Read a profile file: YAML when the name ends in ``.yaml``/``.yml``, else JSON. Raises
    ``ValueError`` naming the file and the bad fields (or the parse error)."""
    p = Path(path).expanduser()
    try:
        text = p.read_text(encoding="utf-8")
        raw = yaml.safe_load(text) if p.suffix in (".yaml", ".yml") else json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError) as exc:
        raise ValueError(f"profile file {p}: {exc}") from None
    return profile_from_mapping(raw, str(p))


def load_profile(spec: str) -> PoolProfile:
    """A shipped profile by name (:data:`planner.model.profiles.PROFILES`) or a profile file
    (:func:`load_profile_file`). Raises ``ValueError`` when it is neither (or the file is bad)."""
    if spec in PROFILES:
        return PROFILES[spec]
    if not Path(spec).expanduser().is_file():
        raise ValueError(f"profile {spec!r}: not one of {', '.join(sorted(PROFILES))} and not a file")
    return load_profile_file(spec)


def write_profile_file(profile: PoolProfile, path: str | Path) -> Path:
    """Write ``profile`` as a profile file (what :func:`load_profile_file` reads back equal)."""
    p = Path(path)
    p.write_text(json.dumps(asdict(profile), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return p
