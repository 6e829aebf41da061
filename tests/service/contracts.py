"""What every deployment of the router must keep, shared by the service and deploy tests: the
metrics documented in docs/metrics.md and the routing-relevant part of the router config."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from extproc.config import RouterConfig

REPO = Path(__file__).resolve().parents[2]

ROW = re.compile(r"^\| `(tbr_[a-z_]+)` \| (counter|gauge|histogram) \| ([^|]*) \| ([^|]+) \|")


def documented() -> dict[str, tuple[str, frozenset[str]]]:
    """{family name: (type, labels)} from the table in docs/metrics.md."""
    out = {}
    for line in (REPO / "docs" / "metrics.md").read_text().splitlines():
        m = ROW.match(line)
        if m:
            name, kind, labels, unit = m.groups()
            assert unit.strip(), f"{name}: no unit"
            family = name.removesuffix("_total") if kind == "counter" else name
            out[family] = (kind, frozenset(re.findall(r"`([a-z_]+)`", labels)))
    return out


def same_routing_behaviour(a: RouterConfig, b: RouterConfig) -> bool:
    """Equal except for what a deployment legitimately changes: listeners, Redis, snapshot, the
    addresses of the pools' health and metrics endpoints, and the fleet advice (it never changes a
    routing decision)."""
    deploy_only = {"redis_url", "redis_key_prefix", "redis_sync_interval_s", "redis_timeout_s",
                   "redis_queue_max", "snapshot_path", "snapshot_interval_s"}  # fmt: skip
    exclude: dict[str, Any] = {"server": True, "admin": True, "calibration": True, "advice": True}
    exclude["pools"] = {"__all__": {"health_url", "metrics_url"}}
    return a.model_dump(exclude=exclude) == b.model_dump(exclude=exclude) and a.calibration.model_dump(
        exclude=deploy_only
    ) == b.calibration.model_dump(exclude=deploy_only)
