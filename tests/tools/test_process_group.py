"""devstack.procs.ProcessGroup, the start and stop every devstack stack shares, on real child
processes: started together, all stopped on close, a failed start stops what started before it, and a
process whose port was taken between the pick and its bind starts again on a fresh one."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from devstack.procs import (
    LOOPBACK,
    ManagedProcess,
    PortInUseError,
    PortsBuilder,
    ProcessGroup,
    StartupError,
    tcp_open,
)
from tests.stacks import PortTaker


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


def binder(tmp_path: Path, name: str) -> PortsBuilder:
    """A child that binds and listens on its one port (Python's ``OSError: [Errno 98] Address
    already in use`` when it is taken), then says it is up."""

    def build(ports: tuple[int, ...]) -> ManagedProcess:
        log = tmp_path / f"{name}.log"
        code = (
            "import socket, time\n"
            f"s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"
            f"s.bind(('{LOOPBACK}', {ports[0]})); s.listen(1)\n"
            "print('up', flush=True); time.sleep(60)\n"
        )
        return ManagedProcess(
            name, [sys.executable, "-c", code], log_path=log, ready=lambda: log.read_text().startswith("up")
        )

    return build


def test_a_port_taken_between_pick_and_bind_is_replaced_by_a_fresh_one(tmp_path: Path) -> None:
    taker = PortTaker({0, 1})  # a's and b's first picks (both launch before either is waited on)
    group = ProcessGroup(pick_port=taker)
    try:
        (a, (port_a,)), (b, (port_b,)) = group.start_together_on_free_ports(
            [(1, binder(tmp_path, "a")), (1, binder(tmp_path, "b"))]
        )
        assert a.running() and b.running()
        assert tcp_open(port_a) and tcp_open(port_b)
        assert {port_a, port_b}.isdisjoint(taker.taken) and len(taker.taken) == 2
        assert len(group.processes) == 2 and {a, b} == set(group.processes)  # failed starts are not listed
    finally:
        group.close()
        taker.close()


def test_a_port_taken_at_every_attempt_fails_with_port_in_use(tmp_path: Path) -> None:
    taker = PortTaker(set(range(3)))
    group = ProcessGroup(pick_port=taker, bind_attempts=3)
    try:
        with pytest.raises(PortInUseError, match=r"(?i)address already in use"):
            group.start_on_free_ports(1, binder(tmp_path, "unlucky"))
        assert len(taker.picked) == 3
    finally:
        group.close()
        taker.close()
