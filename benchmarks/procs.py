"""CPU and RSS of a benchmark process from /proc (processes themselves are started by devstack).

CPU is read from ``/proc/<pid>/stat`` (``utime + stime`` of all threads, in clock ticks), RSS
from ``/proc/<pid>/status`` (``VmRSS``).
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cpu_seconds", "rss_bytes"]

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process has used so far (all threads)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


def rss_bytes(pid: int) -> int:
    """Resident set size of the process, bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0
