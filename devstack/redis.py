"""A throwaway ``redis-server`` on loopback for the tests and benchmarks of the shared ratio store.

No persistence (``--save ''``, ``--appendonly no``), bound to 127.0.0.1, its log shown only when
it fails to start. Restartable on the same port (a restart is an empty data set, as after a real
Redis restart without persistence).
"""

from __future__ import annotations

import shutil
import socket
from pathlib import Path
from types import TracebackType

from devstack.procs import LOOPBACK, ManagedProcess, free_port

__all__ = ["RedisServer", "redis_binary"]


def redis_binary() -> str | None:
    """Path of the Debian ``redis-server`` binary, or None when it is not installed."""
    return shutil.which("redis-server")


def _answers_ping(port: int) -> bool:
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.2) as s:
            s.sendall(b"PING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    """``redis-server`` on ``127.0.0.1:port``; ready when it answers ``PING``.

    Use as a context manager or call :meth:`start` / :meth:`stop` (e.g. to simulate an outage).

    Args:
        work_dir: Redis's ``--dir`` and where its log goes.
        port: the port (default: a free one).
        binary: the ``redis-server`` path (default: found on PATH).
        extra_args: more ``redis-server`` arguments (e.g. ``("--timeout", "1")``).

    Raises:
        FileNotFoundError: no ``redis-server`` binary.
        devstack.procs.StartupError: from :meth:`start` when Redis does not answer within 5 s.
    """

    def __init__(
        self,
        work_dir: Path,
        *,
        port: int | None = None,
        binary: str | None = None,
        extra_args: tuple[str, ...] = (),
    ) -> None:
        found = binary or redis_binary()
        if found is None:
            raise FileNotFoundError("redis-server binary not installed (apt-get install redis-server)")
        self.binary = found
        self.port = port if port is not None else free_port()
        self.work_dir = work_dir
        self.extra_args = extra_args
        self._proc: ManagedProcess | None = None

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://{LOOPBACK}:{self.port}/0"

    def start(self) -> None:
        """Start the server and wait for ``PING`` (raises ``StartupError``)."""
        argv = [self.binary, "--port", str(self.port), "--bind", LOOPBACK, "--save", "", "--appendonly", "no"]
        argv += ["--dir", str(self.work_dir), *self.extra_args]
        self._proc = ManagedProcess(
            "redis",
            argv,
            log_path=self.work_dir / f"redis-{self.port}.log",
            ready=lambda: _answers_ping(self.port),
            ready_timeout_s=5.0,
        )
        self._proc.start()

    def stop(self) -> None:
        """Kill the server at once (an outage, not a shutdown); a no-op when not running."""
        if self._proc is not None:
            self._proc.stop(grace_s=0.0)
            self._proc = None

    def __enter__(self) -> RedisServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
