"""devstack's Stack when ports it picked are taken before its processes bind them (issue: Envoy
"Address already in use" in ``make test-vllm``, where two vLLM servers start for ~1 min between
the pick and Envoy's bind): every process that lost a port starts again on fresh ones and the stack
serves requests through Envoy, the router and both pools."""

from __future__ import annotations

from pathlib import Path

import httpx

from devstack.stack import Stack
from tests.stacks import PortTaker, running

# picks in order: short 0, long 1 (both launch before either is waited on), their retries 2, 3;
# router gRPC 4 + admin 5, retry 6 + 7, retry 8 + 9; Envoy listener 10 + admin 11, retry 12 + 13
TAKEN_PICKS = {0, 1, 4, 7, 10}


def test_stack_starts_when_a_port_of_each_process_is_taken_before_it_binds(tmp_path: Path) -> None:
    taker = PortTaker(TAKEN_PICKS)
    try:
        for stack in running(Stack(tmp_path, pick_port=taker)):
            bound = {
                stack.ports.short_pool, stack.ports.long_pool, stack.ports.router_grpc,
                stack.ports.listener, stack.ports.admin, stack.router_admin_port,
            }  # fmt: skip
            assert len(taker.picked) == 14 and len(taker.taken) == len(TAKEN_PICKS)
            assert bound.isdisjoint(taker.taken)
            assert [p.name for p in stack.processes] == ["pool-short", "pool-long", "router", "envoy"]
            body = {
                "model": "Qwen/Qwen3-8B",
                "messages": [{"role": "user", "content": "hi"}],
                "max_tokens": 4,
            }
            resp = httpx.post(f"{stack.base_url}/chat/completions", json=body, timeout=30)
            assert resp.status_code == 200, resp.text
            assert resp.headers["x-served-by-pool"] == "short"
            assert stack.router_metric("tbr_routing_decisions_total", {"pool": "short"}) == 1
    finally:
        taker.close()
