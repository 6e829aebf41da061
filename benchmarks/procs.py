"""Process plumbing for the benchmarks: free ports, readiness waits, CPU and RSS from /proc.

CPU is read from ``/proc/<pid>/stat`` (``utime + stime`` of all threads, in clock ticks), RSS
from ``/proc/<pid>/status`` (``VmRSS``). Every process started through :class:`Procs` is
killed by its pid when the context exits.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType

__all__ = ["Procs", "cpu_seconds", "free_port", "rss_bytes", "wait_http", "wait_tcp"]

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


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


def wait_tcp(port: int, timeout_s: float = 20.0) -> None:
    """Wait until 127.0.0.1:port accepts connections.

    Raises:
        TimeoutError: not listening within ``timeout_s``.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout_s}s")


def wait_http(port: int, path: str, timeout_s: float = 20.0) -> None:
    """Wait until ``GET path`` on 127.0.0.1:port answers 200 (e.g. Envoy admin ``/ready``)."""
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}{path}", timeout=1.0).status_code == 200:
                return
        time.sleep(0.05)
    raise TimeoutError(f"127.0.0.1:{port}{path} not ready after {timeout_s}s")


class Procs:
    """Starts processes and kills exactly those (by pid) on exit."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = log_dir
        self.started: list[subprocess.Popen[bytes]] = []

    def start(
        self, name: str, argv: Sequence[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        """Start ``argv`` with stdout/stderr to ``<log_dir>/<name>.log``."""
        log = (self.log_dir / f"{name}.log").open("wb")
        p = subprocess.Popen(
            list(argv), stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        log.close()
        self.started.append(p)
        return p

    def stop(self, p: subprocess.Popen[bytes], timeout_s: float = 5.0) -> None:
        """SIGTERM then SIGKILL one process."""
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout_s)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def __enter__(self) -> Procs:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        for p in reversed(self.started):
            self.stop(p)
