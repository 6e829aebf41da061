"""Fixtures for the service tests: a real redis-server on a free loopback port (devstack)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from devstack.redis import RedisServer, redis_binary


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A fresh redis-server (skips when the Debian ``redis-server`` binary is absent)."""
    if redis_binary() is None:
        pytest.skip("redis-server binary not installed (apt-get install redis-server; .ci/run does)")
    with RedisServer(tmp_path) as server:
        yield server
