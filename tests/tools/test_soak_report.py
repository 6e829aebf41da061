"""benchmarks/soak.py's report helpers on real inputs: the [heap] mapping of a real process, and
the replacement of BENCHMARKS.md's 60-minute soak section (the shipped file itself)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from benchmarks.soak import heap_kib, replace_section

REPO = Path(__file__).resolve().parents[2]


def test_heap_kib_grows_with_a_real_processes_malloc_heap() -> None:
    """A child that mallocs 64 MiB in small blocks (the main heap, below the mmap threshold)."""
    code = "import sys\nb = [bytearray(4000) for _ in range(16000)]\nprint('ready', flush=True)\nsys.stdin.read()"
    child = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        assert heap_kib(child.pid) >= 60 * 1024
    finally:
        child.communicate("")
    assert heap_kib(os.getpid()) > 1024  # this pytest process has a main heap of more than 1 MiB


def test_replace_section_swaps_only_the_60_min_soak() -> None:
    md = (REPO / "BENCHMARKS.md").read_text(encoding="utf-8")
    new = "\n## Soak: 60 min at 80% of max (test)\n\n| a | b |\n\nChecks: PASS x\n"
    out = replace_section(md, new)
    assert out.count("## Soak: 60 min") == 1 and "## Soak: 60 min at 80% of max (test)" in out
    before = md[: md.index("## Soak: 60 min")]
    assert out.startswith(before)  # everything before it, the 1-minute soak included, unchanged
    assert replace_section(out, new) == out  # idempotent
    appended = replace_section("# Benchmarks\n", new)
    assert appended == "# Benchmarks\n\n" + new.strip("\n") + "\n"
    middle = "# B\n\n## Soak: 60 min old\nold\n\n## Next\nkept\n"
    assert replace_section(middle, new) == "# B\n\n" + new.strip("\n") + "\n\n## Next\nkept\n"
