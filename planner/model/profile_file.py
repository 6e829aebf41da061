"""Profile files: a :class:`planner.model.profiles.PoolProfile` as JSON, for ``--profile-file``.

One JSON object with the iteration-time constants (seconds), the KV capacity (tokens) and the
price of one instance's GPUs; the fields are :class:`PoolProfile`'s. Unknown fields, missing
required ones and out-of-range values are errors that name the field (``ValueError``).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from planner.model.profiles import ADMISSION_MODES, PoolProfile

__all__ = ["load_profile_file", "write_profile_file"]


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


def load_profile_file(path: str | Path) -> PoolProfile:
    """Read a profile file. Raises ``ValueError`` naming the file and the bad fields (or the JSON error)."""
    p = Path(path)
    try:
        raw = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"profile file {p}: {exc}") from None
    try:
        data = _ProfileFile.model_validate(raw)
    except ValidationError as exc:
        bad = "; ".join(f"{'.'.join(str(x) for x in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors())
        raise ValueError(f"profile file {p}: {bad}") from None
    if data.admission not in ADMISSION_MODES:
        raise ValueError(
            f"profile file {p}: admission must be one of {ADMISSION_MODES}, got {data.admission!r}"
        )
    return PoolProfile(**data.model_dump())


def write_profile_file(profile: PoolProfile, path: str | Path) -> Path:
    """Write ``profile`` as a profile file (what :func:`load_profile_file` reads back equal)."""
    p = Path(path)
    p.write_text(json.dumps(asdict(profile), indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return p
