"""What the end-to-end tests share: the repository paths, the real-prompt data dir, and the
three-pool stack (devstack's in-process stack on envoy/envoy-3pools.yaml)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from devstack.inprocess import InProcessStack, inprocess_stack

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO.parent / "shared" / "data"
ENVOY_3POOLS = REPO / "envoy" / "envoy-3pools.yaml"
POOL_LIMITS = {"short": 4096, "medium": 16384, "long": 65536}

Stack = InProcessStack


def data_dir() -> Path | None:
    """``../shared/data`` when present (tests then use real prompts), else None (built-in text)."""
    return DATA_DIR if (DATA_DIR / "text").is_dir() else None


@contextlib.asynccontextmanager
async def three_pool_stack(
    work_dir: Path,
    *,
    router_overrides: dict[str, Any],
    pool_overrides: dict[str, dict[str, Any]] | None = None,
    scrape: bool = False,
    pool_limits: dict[str, int] | None = None,
    envoy_source: Path = ENVOY_3POOLS,
) -> AsyncIterator[InProcessStack]:
    """Pools short 4096, medium 16384, long 65536 tokens (or ``pool_limits``), the router, and
    Envoy on envoy/envoy-3pools.yaml (or ``envoy_source``); see
    :func:`devstack.inprocess.inprocess_stack` for the arguments."""
    async with inprocess_stack(
        work_dir,
        pool_limits=POOL_LIMITS if pool_limits is None else pool_limits,
        envoy_source=envoy_source,
        router_overrides=router_overrides,
        pool_overrides=pool_overrides,
        scrape=scrape,
    ) as stack:
        yield stack


@dataclass(frozen=True)
class RouterEndpoints:
    """Where the e2e router listens and logs: its gRPC port, admin URL, decision log."""

    grpc_port: int
    admin_url: str
    decision_log: Path
