"""In-process memory snapshots for soak runs (``tracemalloc``), served on the admin port.

Off by default. ``tbr serve`` starts tracing when the environment variable ``TBR_TRACEMALLOC``
is a positive integer (the number of stack frames kept per allocation, as ``PYTHONTRACEMALLOC``);
tracing slows allocation-heavy code by roughly 2x, so it is for soaks and debugging only.

``GET /debug/memory`` (admin) then returns the traced total and the allocation sites that grew
most since the baseline; ``GET /debug/memory?baseline=1`` takes a new baseline first.
``GET /debug/memory?trim=1`` (any time) calls glibc's ``malloc_trim(0)`` and reports the RSS
before and after: memory freed but kept by the allocator is returned, a leak is not.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import tracemalloc
from pathlib import Path
from typing import Any

__all__ = ["MemoryProfiler", "start_from_env", "trim_malloc"]

ENV_VAR = "TBR_TRACEMALLOC"


def start_from_env() -> bool:
    """Start ``tracemalloc`` when ``TBR_TRACEMALLOC`` is a positive integer; True if tracing."""
    raw = os.environ.get(ENV_VAR, "").strip()
    try:
        frames = int(raw) if raw else 0
    except ValueError:
        frames = 0
    if frames > 0 and not tracemalloc.is_tracing():
        tracemalloc.start(frames)
    return tracemalloc.is_tracing()


class MemoryProfiler:
    """Snapshots compared with a baseline (the first snapshot, or the last ``reset``)."""

    def __init__(self) -> None:
        self._baseline: tracemalloc.Snapshot | None = None

    @staticmethod
    def _snapshot() -> tracemalloc.Snapshot:
        return tracemalloc.take_snapshot().filter_traces(
            (
                tracemalloc.Filter(False, tracemalloc.__file__),
                tracemalloc.Filter(False, "<frozen importlib._bootstrap*>"),
            )
        )

    def report(self, *, reset_baseline: bool = False, top: int = 25) -> dict[str, Any]:
        """Traced bytes now and the ``top`` allocation sites (file:line) by growth since the baseline.

        Returns ``{"tracing": False}`` when tracemalloc is off. Keys: ``traced_bytes``,
        ``traced_all_bytes`` (tracemalloc's own total, which includes the kept baseline),
        ``peak_bytes``, ``baseline_traced_bytes``, ``top_growth`` (list of ``{"where",
        "size_bytes", "size_diff_bytes", "count", "count_diff"}``).
        """
        if not tracemalloc.is_tracing():
            return {"tracing": False}
        snap = self._snapshot()
        if reset_baseline or self._baseline is None:
            self._baseline = snap
        traced, peak = tracemalloc.get_traced_memory()
        stats = snap.compare_to(self._baseline, "lineno")
        rows = [
            {
                "where": f"{s.traceback[0].filename}:{s.traceback[0].lineno}",
                "size_bytes": s.size,
                "size_diff_bytes": s.size_diff,
                "count": s.count,
                "count_diff": s.count_diff,
            }
            for s in stats[:top]
        ]
        base_total = sum(t.size for t in self._baseline.traces)
        return {
            "tracing": True,
            # Both totals from filtered snapshots: get_traced_memory() would also count the
            # baseline snapshot this profiler keeps (several MiB of Python objects).
            "traced_bytes": sum(t.size for t in snap.traces),
            "traced_all_bytes": traced,
            "peak_bytes": peak,
            "baseline_traced_bytes": base_total,
            "top_growth": rows,
        }


def _rss_kib() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def trim_malloc() -> dict[str, int | bool]:
    """``malloc_trim(0)`` (glibc) with the RSS before and after, in KiB; ``trimmed`` is False
    where there is no glibc (nothing is called)."""
    before = _rss_kib()
    name = ctypes.util.find_library("c")
    libc = ctypes.CDLL(name) if name else None
    fn = getattr(libc, "malloc_trim", None)
    if fn is None:
        return {"trimmed": False, "rss_before_kib": before, "rss_after_kib": before}
    fn(0)
    return {"trimmed": True, "rss_before_kib": before, "rss_after_kib": _rss_kib()}
