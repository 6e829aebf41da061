"""Child processes for the demo and the end-to-end tests: free ports, start, wait, stop.

Every process writes stdout+stderr to its own log file (shown only when something fails) and is
stopped with SIGTERM, then SIGKILL after a grace period, by its own pid. Nothing here binds
anything but loopback.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import TypeVar

import httpx

__all__ = [
    "BIND_ATTEMPTS",
    "ManagedProcess",
    "PortInUseError",
    "PortsBuilder",
    "ProcessGroup",
    "StartupError",
    "free_port",
    "http_ok",
    "tcp_open",
]

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"


class StartupError(RuntimeError):
    """A child process exited or did not become ready in time; the message holds its log tail."""


class PortInUseError(StartupError):
    """A child process exited during start and its log says a port it binds was taken
    (:data:`PORT_IN_USE`): started again on fresh ports, it may well start."""


PORT_IN_USE = re.compile(r"address already in use|EADDRINUSE|cannot bind|bind to address", re.IGNORECASE)
"""What a child that lost its port logs before exiting: Envoy ``cannot bind '127.0.0.1:P': Address
already in use``, ``tbr serve`` ``Failed to bind to address 127.0.0.1:P`` / ``cannot bind gRPC listener``
(gRPC) or ``[Errno 98] Address already in use`` (admin), ``tbr mock-pool`` and vLLM's API server
``[Errno 98] Address already in use``."""

BIND_ATTEMPTS = 3
"""Starts of one process on fresh ports before :class:`ProcessGroup` gives up on it."""


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago (bind to port 0, then close).

    There is a race between closing and the child binding it: another process may bind the port
    in between (vLLM's engine takes ephemeral ports while it starts, ~1 min). Stacks therefore pick
    a process's ports right before launching it and start it again on fresh ports when it exits
    because one was taken (:meth:`ProcessGroup.start_together_on_free_ports`). A port this process was
    already given is never returned again: the kernel may hand a just-closed ephemeral port out
    twice, and a stack that asks for many ports before starting anything (the benchmark's front
    Envoy: one listener per variant) then collided ("duplicate address").
    """
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind((LOOPBACK, 0))
            port: int = s.getsockname()[1]
        if port not in _GIVEN_PORTS:
            _GIVEN_PORTS.add(port)
            return port


_GIVEN_PORTS: set[int] = set()


def tcp_open(port: int, host: str = LOOPBACK) -> bool:
    """True when a TCP connection to ``host:port`` succeeds within 0.5 s."""
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def http_ok(url: str) -> bool:
    """True when ``GET url`` answers 2xx within 1 s (connection errors → False)."""
    try:
        return httpx.get(url, timeout=1.0).is_success
    except httpx.HTTPError:
        return False


class ManagedProcess:
    """One child process with a log file, a readiness probe and a guaranteed stop.

    Use as a context manager: ``__enter__`` starts the process and blocks until ``ready()`` is
    true; ``__exit__`` stops it. The owner must stay alive while the child runs (Envoy receives
    SIGTERM when its parent exits).

    Args:
        name: label used in logs and errors.
        argv: the command line.
        log_path: file receiving the child's stdout and stderr.
        ready: probe called every 50 ms until it returns True.
        ready_timeout_s: how long to wait for ``ready``.
        env: extra environment variables (merged over ``os.environ``).

    Raises:
        StartupError: from ``__enter__`` if the child exits early or is not ready in time.
    """

    def __init__(
        self,
        name: str,
        argv: Sequence[str],
        *,
        log_path: Path,
        ready: Callable[[], bool],
        ready_timeout_s: float = 120.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.name = name
        self.argv = [str(a) for a in argv]
        self.log_path = log_path
        self._ready = ready
        self._ready_timeout_s = ready_timeout_s
        self._env = {**os.environ, **(env or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self._deadline = 0.0

    @property
    def pid(self) -> int | None:
        """The child's pid while it runs."""
        return self.proc.pid if self.proc is not None else None

    def launch(self) -> None:
        """Start the child without waiting (pair with :meth:`wait_ready`; lets several start at once)."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("wb") as out:
            self.proc = subprocess.Popen(
                self.argv, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self._env
            )
        self._deadline = time.monotonic() + self._ready_timeout_s

    def wait_ready(self) -> None:
        """Block until the readiness probe passes (raises :class:`StartupError`, stopping the child)."""
        proc = self.proc
        if proc is None:
            raise StartupError(f"{self.name} was never launched")
        while True:
            rc = proc.poll()
            if rc is not None:
                error = PortInUseError if PORT_IN_USE.search(self.log_text()) else StartupError
                raise error(f"{self.name} exited with code {rc} during start\n{self.log_tail()}")
            if self._ready():
                log.debug("%s ready (pid %d)", self.name, proc.pid)
                return
            if time.monotonic() > self._deadline:
                self.stop()
                raise StartupError(
                    f"{self.name} not ready after {self._ready_timeout_s:.0f} s\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def start(self) -> None:
        """Start the child and wait until it is ready (raises :class:`StartupError`)."""
        if self.proc is None:
            self.launch()
        self.wait_ready()

    def restart(self) -> None:
        """Stop the child if it runs, then start a new one on the same command line and log file
        (the log is rewritten) and wait until it is ready (raises :class:`StartupError`)."""
        self.stop()
        self.proc = None
        self.start()

    def stop(self, grace_s: float = 5.0) -> int | None:
        """SIGTERM, wait up to ``grace_s``, then SIGKILL. Returns the exit code (None if never started)."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                proc.wait(timeout=5.0)
        return proc.returncode

    def running(self) -> bool:
        """True while the child has not exited."""
        return self.proc is not None and self.proc.poll() is None

    def log_text(self) -> str:
        """The whole log so far (decoded leniently)."""
        try:
            return self.log_path.read_bytes().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = 60) -> str:
        """The last ``lines`` lines of the log, prefixed with the process name."""
        tail = self.log_text().splitlines()[-lines:]
        return "\n".join(f"[{self.name}] {line}" for line in tail)

    def __enter__(self) -> ManagedProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


P = TypeVar("P", bound=ManagedProcess)
PortsBuilder = Callable[[tuple[int, ...]], ManagedProcess]
"""Builds an unstarted process that binds the given loopback ports (see
:meth:`ProcessGroup.start_together_on_free_ports`)."""


class ProcessGroup:
    """The processes of a stack: started in order (or several at once), stopped in reverse order.

    The start and stop that :class:`devstack.stack.Stack` and
    :class:`devstack.model_stack.ModelSetsStack` share: each process's stop is registered as soon as
    it is launched, so a failed start stops everything started before it.

    Args:
        processes: the list every started process is appended to (the stack's ``processes``, read
            for log reports); a new one when omitted.
        pick_port: returns a free loopback port (:func:`free_port`; a test passes one that hands
            out taken ports).
        bind_attempts: starts of one process on fresh ports before its :class:`PortInUseError`
            is raised.
    """

    def __init__(
        self,
        processes: list[ManagedProcess] | None = None,
        *,
        pick_port: Callable[[], int] = free_port,
        bind_attempts: int = BIND_ATTEMPTS,
    ) -> None:
        self.processes: list[ManagedProcess] = [] if processes is None else processes
        self._stops = contextlib.ExitStack()
        self._pick_port = pick_port
        self._bind_attempts = bind_attempts

    def start(self, proc: ManagedProcess) -> None:
        """Start ``proc`` and wait until it is ready (raises :class:`StartupError`)."""
        self.start_together([proc])

    def start_together(self, procs: Iterable[ManagedProcess]) -> None:
        """Launch all of ``procs`` at once, then wait until each is ready (raises
        :class:`StartupError`; the ones launched are stopped by :meth:`close`)."""
        launched = list(procs)
        for proc in launched:
            self._launch(proc)
        for proc in launched:
            proc.wait_ready()

    def start_on_free_ports(
        self, n_ports: int, build: Callable[[tuple[int, ...]], P]
    ) -> tuple[P, tuple[int, ...]]:
        """:meth:`start_together_on_free_ports` for one process; returns it and its ports."""
        return self.start_together_on_free_ports([(n_ports, build)])[0]

    def start_together_on_free_ports(
        self, builds: Sequence[tuple[int, Callable[[tuple[int, ...]], P]]]
    ) -> list[tuple[P, tuple[int, ...]]]:
        """Start processes that bind ports picked right before each launches, all at once.

        For each ``(n_ports, build)``: pick ``n_ports`` free ports, ``build(ports)`` the process and
        launch it; then wait until each is ready. A process that exits because a port was taken
        between the pick and its bind (:class:`PortInUseError`) is dropped from ``processes`` and
        built again on fresh ports, up to ``bind_attempts`` starts.

        Returns:
            ``(process, ports)`` per build, in order: the processes running and the ports they bound.

        Raises:
            PortInUseError: a process lost its ports ``bind_attempts`` times.
            StartupError: a process failed to start for another reason (the ones launched are
                stopped by :meth:`close`).
        """
        started: list[tuple[P, tuple[int, ...]]] = []
        for n_ports, build in builds:
            ports = tuple(self._pick_port() for _ in range(n_ports))
            proc = build(ports)
            self._launch(proc)
            started.append((proc, ports))
        for i, (n_ports, build) in enumerate(builds):
            proc, ports = started[i]
            for attempt in range(1, self._bind_attempts + 1):
                try:
                    proc.wait_ready()
                    break
                except PortInUseError:
                    if attempt == self._bind_attempts:
                        raise
                    log.warning(
                        "%s: a port of %s was taken before it bound; starting it on fresh ports",
                        proc.name,
                        ports,
                    )
                    self.processes.remove(proc)
                    ports = tuple(self._pick_port() for _ in range(n_ports))
                    proc = build(ports)
                    self._launch(proc)
            started[i] = (proc, ports)
        return started

    def _launch(self, proc: ManagedProcess) -> None:
        proc.launch()
        self._stops.callback(proc.stop)
        self.processes.append(proc)

    def close(self) -> None:
        """Stop every started process, the last started first (a second call does nothing)."""
        self._stops.close()

    @contextlib.contextmanager
    def closed_on_error(self) -> Iterator[None]:
        """Run the block that starts the stack; on any exception stop what started, then re-raise."""
        try:
            yield
        except BaseException:
            self.close()
            raise
