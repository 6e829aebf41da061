"""Router down: Envoy fails open and every request is served by the long pool, spoofed header or not."""

from __future__ import annotations

import pytest

from devstack.stack import Gateway
from tbr.demo.workload import long_prompt, short_prompt
from tests.e2e.client import chat
from tests.e2e.harness import data_dir

pytestmark = pytest.mark.envoy


def test_short_prompt_goes_to_long_pool_when_router_is_down(gateway_router_down: Gateway) -> None:
    _, text = short_prompt(data_dir())
    before = gateway_router_down.envoy.stats("ext_proc.tbr.failure_mode_allowed")
    served = chat(gateway_router_down.base_url, text, headers={"x-expected-pool": "long"}, max_tokens=64)
    assert (served.status, served.pool) == (200, "long")
    assert served.prompt_tokens and served.prompt_tokens > 0
    after = gateway_router_down.envoy.stats("ext_proc.tbr.failure_mode_allowed")
    (name,) = after
    assert after[name] == before.get(name, 0) + 1


@pytest.mark.parametrize("kind", ["short", "long"])
def test_spoofed_header_is_ignored_when_router_is_down(gateway_router_down: Gateway, kind: str) -> None:
    """`x-tbr-pool: short` from the client is stripped before route selection (early header mutation)."""
    _, text = (short_prompt if kind == "short" else long_prompt)(data_dir())
    served = chat(gateway_router_down.base_url, text, headers={"x-tbr-pool": "short"}, max_tokens=16)
    assert (served.status, served.pool) == (200, "long")


def test_streaming_is_served_when_router_is_down(gateway_router_down: Gateway) -> None:
    _, text = short_prompt(data_dir())
    served = chat(gateway_router_down.base_url, text, stream=True, include_usage=True, max_tokens=8)
    assert (served.status, served.pool) == (200, "long")
    assert served.completion_tokens == 8
