"""devstack.procs.ProcessGroup, the start and stop every devstack stack shares, on real child
processes: started together, all stopped on close, and a failed start stops what started before it."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from devstack.procs import ManagedProcess, ProcessGroup, StartupError


def child(tmp_path: Path, name: str, code: str = "import time; time.sleep(60)") -> ManagedProcess:
    """A Python child ready once it has written its log line (``code`` runs after it)."""
    log = tmp_path / f"{name}.log"
    argv = [sys.executable, "-c", f"print('up', flush=True)\n{code}"]
    return ManagedProcess(name, argv, log_path=log, ready=lambda: log.read_text().startswith("up"))


def test_started_together_listed_in_order_and_all_stopped_on_close(tmp_path: Path) -> None:
    listed: list[ManagedProcess] = []
    group = ProcessGroup(listed)
    a, b, c = (child(tmp_path, n) for n in ("a", "b", "c"))
    group.start_together([a, b])
    group.start(c)
    assert listed == [a, b, c] and all(p.running() for p in listed)
    group.close()
    assert not any(p.running() for p in listed)
    group.close()  # a second close does nothing


def test_a_failed_start_stops_what_started_before_it(tmp_path: Path) -> None:
    group = ProcessGroup()
    first = child(tmp_path, "first")
    dying = ManagedProcess(
        "dying",
        [sys.executable, "-c", "raise SystemExit(3)"],
        log_path=tmp_path / "dying.log",
        ready=lambda: False,
    )
    with pytest.raises(StartupError, match="dying exited with code 3"), group.closed_on_error():
        group.start(first)
        assert first.running()
        group.start(dying)
    assert not first.running()
    assert group.processes == [first, dying]  # both listed: their logs stay readable
