"""Reading the router's decision log back for the demo summary."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

__all__ = ["read_decisions"]


def read_decisions(path: Path | None, expected: int, timeout_s: float = 30.0) -> dict[str, dict[str, Any]]:
    """The decision log at ``path`` (JSON Lines, :class:`extproc.core.route.decision.DecisionRecord` rows)
    as records by ``request_id``; polls until ``expected`` records are there or ``timeout_s`` has
    passed (streams still closing write their record last). Unreadable lines are skipped; no
    ``path`` gives an empty dict."""
    out: dict[str, dict[str, Any]] = {}
    if path is None:
        return out
    deadline = time.monotonic() + timeout_s
    while True:
        out.clear()
        if path.is_file():
            for line in path.read_text(encoding="utf-8").splitlines():
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line being written
                if isinstance(rec, dict) and rec.get("request_id"):
                    out[str(rec["request_id"])] = rec
        if len(out) >= expected or time.monotonic() > deadline:
            return out
        time.sleep(0.1)
