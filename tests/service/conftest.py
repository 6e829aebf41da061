"""Fixtures for operations tests: a real redis-server on a free loopback port, ext_proc helpers."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from extproc.config import RouterConfig

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class RedisServer:
    """A ``redis-server`` process without persistence, bound to loopback; restartable."""

    def __init__(self, binary: str, port: int, tmp: Path) -> None:
        self.binary = binary
        self.port = port
        self.tmp = tmp
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [
                self.binary,
                "--port", str(self.port),
                "--bind", "127.0.0.1",
                "--save", "",
                "--appendonly", "no",
                "--dir", str(self.tmp),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.2) as s:
                    s.sendall(b"PING\r\n")
                    if s.recv(16).startswith(b"+PONG"):
                        return
            except OSError:
                time.sleep(0.02)
        self.stop()
        raise RuntimeError("redis-server did not answer PING within 5 s")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=5)
            self.proc = None


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server (skips when the Debian ``redis-server`` binary is absent)."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server binary not installed (apt-get install redis-server; .ci/run does)")
    server = RedisServer(binary, free_port(), tmp_path)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def same_routing_behaviour(a: RouterConfig, b: RouterConfig) -> bool:
    """Equal except for what a deployment legitimately changes: listeners, Redis, snapshot."""
    deploy_only = {"redis_url", "redis_key_prefix", "redis_sync_interval_s", "redis_timeout_s",
                   "redis_queue_max", "snapshot_path"}  # fmt: skip
    return a.model_dump(exclude={"server", "admin", "calibration"}) == b.model_dump(
        exclude={"server", "admin", "calibration"}
    ) and a.calibration.model_dump(exclude=deploy_only) == b.calibration.model_dump(exclude=deploy_only)
