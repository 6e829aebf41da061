"""Real-process fixtures: mock pools → router (``tbr serve``) → Envoy on loopback, one devstack
:class:`~devstack.stack.Stack` per session, plus a second Envoy whose router is down.

Every process log is attached to a failing test's report (and only then shown: tests/stacks.py);
everything is stopped at the end of the session.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devstack.procs import free_port
from devstack.stack import Gateway, Stack, StackOptions
from tests.e2e.harness import RouterEndpoints
from tests.stacks import running


@pytest.fixture(scope="session")
def e2e_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    """Pools (short 8192, long 65536 tokens), the router with its decision log, Envoy."""
    yield from running(Stack(tmp_path_factory.mktemp("e2e"), StackOptions(decision_log=True)))


@pytest.fixture(scope="session")
def router(e2e_stack: Stack) -> RouterEndpoints:
    assert e2e_stack.decision_log_path is not None
    return RouterEndpoints(
        e2e_stack.ports.router_grpc, e2e_stack.router_admin_url, e2e_stack.decision_log_path
    )


@pytest.fixture(scope="session")
def gateway(e2e_stack: Stack) -> Gateway:
    """Envoy in front of the running router and both pools."""
    return e2e_stack.gateway


@pytest.fixture(scope="session")
def gateway_router_down(e2e_stack: Stack) -> Gateway:
    """Envoy whose ext_proc cluster points at a port nothing listens on (router down)."""
    return e2e_stack.add_envoy(router_grpc=free_port(), tag="envoy-router-down")
