"""The admin memory diagnostics used by the soak (extproc/service/memprof.py)."""

from __future__ import annotations

import tracemalloc

from extproc.config import parse_config
from extproc.service.app import RouterApp
from extproc.service.memprof import MemoryProfiler
from tests.service.streams import POOLS, admin_get


async def test_debug_memory_reports_tracing_state_and_trims() -> None:
    cfg = parse_config({"pools": POOLS})
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        off = (await admin_get(app.admin_port, "/debug/memory")).json()
        trim = (await admin_get(app.admin_port, "/debug/memory?trim=1")).json()
    assert off == {"tracing": False} or tracemalloc.is_tracing()
    assert trim["trimmed"] is True and trim["rss_before_kib"] > 0 and trim["rss_after_kib"] > 0


def test_profiler_reports_growth_since_the_baseline() -> None:
    tracemalloc.start(1)
    try:
        prof = MemoryProfiler()
        first = prof.report()
        kept = [bytearray(1000) for _ in range(1000)]  # ~1 MB that stays alive
        later = prof.report()
    finally:
        tracemalloc.stop()
    assert first["tracing"] and later["traced_bytes"] - later["baseline_traced_bytes"] >= 900_000
    assert any(r["size_diff_bytes"] >= 900_000 for r in later["top_growth"])
    assert len(kept) == 1000
