"""CPU, RSS and context switches of a benchmark process from /proc, and ``strace -c`` summaries
(processes themselves are started by devstack).

CPU is read from ``/proc/<pid>/stat`` (``utime + stime`` of all threads, in clock ticks), RSS
from ``/proc/<pid>/status`` (``VmRSS``).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

__all__ = ["context_switches", "cpu_seconds", "rss_bytes", "strace_counts"]

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


def context_switches(pid: int) -> dict[str, tuple[int, int]]:
    """``{thread name/tid: (voluntary, involuntary)}`` context switches of every thread of ``pid``."""
    out: dict[str, tuple[int, int]] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            text = (task / "status").read_text()
        except OSError:
            continue
        name = re.search(r"^Name:\s+(.*)$", text, re.M)
        vol = re.search(r"^voluntary_ctxt_switches:\s+(\d+)", text, re.M)
        inv = re.search(r"^nonvoluntary_ctxt_switches:\s+(\d+)", text, re.M)
        if vol and inv:
            key = f"{name.group(1) if name else '?'}/{task.name}"
            out[key] = (int(vol.group(1)), int(inv.group(1)))
    return out


def strace_counts(text: str) -> dict[str, int]:
    """``{syscall: calls}`` from the summary table ``strace -c`` prints."""
    counts: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split()
        # % time, seconds, usecs/call, calls, [errors], syscall
        if len(parts) >= 5 and parts[-1] != "total" and parts[3].isdigit():
            counts[parts[-1]] = int(parts[3])
    return counts
