"""Fixtures: a real router (RouterApp: grpc.aio server + admin HTTP) on free loopback ports.

``app`` is fresh per test (for tests about absolute counts or learned state); ``shared_app`` is
one router per test module (tests using it compare metric deltas, see ``Counts``), which keeps
the many table-driven cases fast.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from extproc.config import parse_config
from extproc.service.app import RouterApp
from tests.hardening.helpers import CONFIG


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every async hardening test runs in its module's event loop (where ``shared_app`` lives)."""
    for item in items:
        if "tests/hardening/" not in str(item.path) or not isinstance(item, pytest.Function):
            continue
        if inspect.iscoroutinefunction(item.obj):
            item.add_marker(pytest.mark.asyncio(loop_scope="module"), append=False)


@pytest_asyncio.fixture(loop_scope="module")
async def app() -> AsyncIterator[RouterApp]:
    async with RouterApp(parse_config(CONFIG), grpc_port=0, admin_port=0) as running:
        yield running


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def shared_app() -> AsyncIterator[RouterApp]:
    async with RouterApp(parse_config(CONFIG), grpc_port=0, admin_port=0) as running:
        yield running
