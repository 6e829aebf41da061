"""Running child-process stacks in fixtures, one way: start the stack, show the log tail of each of
its processes in the report of any test that fails while it runs, stop it when the fixture ends
(also when a test or the start itself failed).

In a fixture::

    @pytest.fixture(scope="module")
    def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
        yield from running(Stack(tmp_path_factory.mktemp("faults"), StackOptions(...)))

The report hook that attaches the logs is ``tests/conftest.py``'s ``pytest_runtest_makereport``.
"""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from types import TracebackType
from typing import Protocol, Self, TypeVar

import pytest

from devstack.procs import LOOPBACK, ManagedProcess, free_port

__all__ = ["LOG_TAIL_LINES", "PortTaker", "attach_logs", "logs_shown", "running"]

LOG_TAIL_LINES = 80
"""Lines of each process's log shown in a failing test's report."""

_SHOWN: list[list[ManagedProcess]] = []


class ProcessStack(Protocol):
    """A context manager that starts child processes and lists them (devstack's ``Stack``,
    ``ModelSetsStack``); processes added to ``processes`` later are shown too."""

    processes: list[ManagedProcess]

    def __enter__(self) -> Self: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
        /,
    ) -> None: ...


S = TypeVar("S", bound=ProcessStack)


@contextlib.contextmanager
def logs_shown(processes: list[ManagedProcess]) -> Iterator[None]:
    """While inside, a failing test's report holds the log tail of each of ``processes`` (the list
    itself is kept: processes appended to it later are shown too)."""
    _SHOWN.append(processes)
    try:
        yield
    finally:
        _SHOWN.remove(processes)


def running(stack: S) -> Iterator[S]:
    """Start ``stack``, yield it once with its processes' logs shown in failing tests' reports, and
    stop it: ``yield from running(...)`` in a fixture.

    Raises:
        devstack.procs.StartupError: a process of the stack did not start (the stack stops
            what it started first).
    """
    with stack, logs_shown(stack.processes):
        yield stack


def attach_logs(report: pytest.TestReport) -> None:
    """Append to ``report`` one section per shown process: ``log of <name>``, its last
    :data:`LOG_TAIL_LINES` lines."""
    for processes in _SHOWN:
        for proc in processes:
            report.sections.append((f"log of {proc.name}", proc.log_tail(LOG_TAIL_LINES)))


class PortTaker:
    """A port picker (``free_port``) that binds and listens on the picks numbered in ``take``
    right after handing them out: the port is taken between the pick and the child's bind."""

    def __init__(self, take: set[int]) -> None:
        self.take = take
        self.picked: list[int] = []
        self.held: list[socket.socket] = []

    def __call__(self) -> int:
        port = free_port()
        if len(self.picked) in self.take:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, port))
            sock.listen(1)
            self.held.append(sock)
        self.picked.append(port)
        return port

    @property
    def taken(self) -> list[int]:
        return [s.getsockname()[1] for s in self.held]

    def close(self) -> None:
        """Release every taken port."""
        for sock in self.held:
            sock.close()
