"""benchmarks/procs.py (used by benchmarks/wakeups.py) reads real strace summaries and real /proc context switch counts."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.procs import context_switches, strace_counts


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_strace_counts_reads_the_summary_of_a_real_run(tmp_path: Path) -> None:
    out = tmp_path / "strace.txt"
    code = "import os\nfor _ in range(7): os.getppid()"
    subprocess.run(["strace", "-c", "-f", "-o", str(out), sys.executable, "-c", code], check=True)
    counts = strace_counts(out.read_text())
    assert counts["getppid"] >= 7
    assert "total" not in counts
    assert all(isinstance(v, int) and v > 0 for v in counts.values())


def test_context_switches_count_a_sleeping_thread() -> None:
    import threading
    import time

    slept, done = threading.Event(), threading.Event()

    def sleeper() -> None:
        time.sleep(0.01)  # the behaviour measured: a thread that sleeps gives up the CPU
        slept.set()
        done.wait(5)

    t = threading.Thread(target=sleeper)
    t.start()
    assert slept.wait(10)  # the thread has slept once and waits: voluntary switches
    during = context_switches(os.getpid())
    done.set()
    t.join()
    assert any(key.endswith(f"/{t.native_id}") and vol >= 1 for key, (vol, _) in during.items())
    before = during
    after = context_switches(os.getpid())
    main = f"{Path('/proc/self/comm').read_text().strip()}/{os.getpid()}"
    assert main in before and main in after
    assert all(vol >= 0 and invol >= 0 for vol, invol in after.values())
    assert after[main][0] >= before[main][0]
