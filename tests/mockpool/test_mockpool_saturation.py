"""Deterministic saturation: max_num_seqs, FIFO waiting queue, hold/release, vLLM gauges."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
from prometheus_client.parser import text_string_to_metric_families

from mockpool.server import serve_pool
from mockpool.settings import PoolSettings
from tests.waiting import until_async

HELLO = [{"role": "user", "content": "Hello"}]


async def gauges(c: httpx.AsyncClient) -> dict[str, float]:
    """Current vLLM gauges of the pool, parsed with prometheus_client."""
    text = (await c.get("/metrics")).text
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


async def wait_for(c: httpx.AsyncClient, running: int, waiting: int) -> dict[str, float]:
    """Poll /metrics until the running/waiting gauges reach the given values (30 s limit: the
    machine may be loaded; the condition, not the timing, is what is tested)."""
    g: dict[str, float] = {}

    async def reached() -> bool:
        g.update(await gauges(c))
        return (g["vllm:num_requests_running"], g["vllm:num_requests_waiting"]) == (running, waiting)

    await until_async(reached, timeout_s=30.0, what=f"gauges at running={running} waiting={waiting}")
    return g


async def test_hold_fills_pool_then_release_drains() -> None:
    settings = PoolSettings(name="sat", max_num_seqs=2, output_tokens=4, kv_cache_capacity_tokens=100)
    async with serve_pool(settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
        assert (await c.post("/admin/hold")).json()["held"] is True
        tasks = [
            asyncio.create_task(c.post("/v1/chat/completions", json={"messages": HELLO, "max_tokens": 4}))
            for _ in range(5)
        ]
        g = await wait_for(c, running=2, waiting=3)
        assert g["vllm:kv_cache_usage_perc"] == 2 * 9 / 100  # two prompts of 9 tokens, nothing generated yet
        stats = (await c.get("/admin/stats")).json()
        assert (stats["running"], stats["waiting"], stats["held"]) == (2, 3, True)
        assert not any(t.done() for t in tasks)
        await c.post("/admin/release")
        responses = await asyncio.gather(*tasks)
        assert [r.status_code for r in responses] == [200] * 5
        assert all(r.headers["x-served-by-pool"] == "sat" for r in responses)
        g = await wait_for(c, running=0, waiting=0)
        assert g["vllm:kv_cache_usage_perc"] == 0
        stats = (await c.get("/admin/stats")).json()
        assert stats["requests"]["/v1/chat/completions"] == {"200": 5}
        assert stats["generation_tokens_total"] == 20


async def test_queue_without_hold_serves_in_fifo_order() -> None:
    """max_num_seqs=1 with a token delay: requests finish in arrival order, the queue is observable."""
    settings = PoolSettings(
        name="fifo", max_num_seqs=1, output_tokens=3, inter_token_latency_s=0.01, hold=True
    )
    async with serve_pool(settings) as url, httpx.AsyncClient(base_url=url, timeout=60) as c:
        done: list[int] = []

        async def one(i: int) -> None:
            r = await c.post("/v1/chat/completions", json={"messages": HELLO})
            assert r.status_code == 200
            done.append(i)

        tasks = []
        for i in range(3):
            tasks.append(asyncio.create_task(one(i)))
            await wait_for(c, running=1, waiting=i)  # arrival order 0, 1, 2, observed not timed
        await c.post("/admin/release")
        await asyncio.gather(*tasks)
        assert done == [0, 1, 2]


async def test_cancelled_waiter_leaves_queue() -> None:
    """A client that gives up while queued does not keep a waiting slot (vLLM aborts on disconnect)."""
    settings = PoolSettings(name="cancel", max_num_seqs=1, hold=True)
    async with serve_pool(settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
        first = asyncio.create_task(c.post("/v1/chat/completions", json={"messages": HELLO}))
        await wait_for(c, running=1, waiting=0)
        async with httpx.AsyncClient(base_url=url, timeout=1.0) as impatient:
            gone = asyncio.create_task(impatient.post("/v1/chat/completions", json={"messages": HELLO}))
            await wait_for(c, running=1, waiting=1)
            with contextlib.suppress(httpx.ReadTimeout):
                await gone
        await wait_for(c, running=1, waiting=0)
        await c.post("/admin/release")
        assert (await first).status_code == 200
        await wait_for(c, running=0, waiting=0)
        stats = (await c.get("/admin/stats")).json()
        assert stats["requests"]["/v1/chat/completions"] == {"200": 1, "499": 1}
        assert stats["finished"] == {"stop": 1, "abort": 1}


async def test_stream_disconnect_frees_running_slot() -> None:
    settings = PoolSettings(name="sd", max_num_seqs=4, hold=True)
    async with serve_pool(settings) as url, httpx.AsyncClient(base_url=url, timeout=30) as c:
        async with (
            httpx.AsyncClient(base_url=url) as streamer,
            streamer.stream("POST", "/v1/chat/completions", json={"messages": HELLO, "stream": True}) as r,
        ):
            assert r.status_code == 200 and r.headers["x-served-by-pool"] == "sd"
            await wait_for(c, running=1, waiting=0)
        await wait_for(c, running=0, waiting=0)
        g = await gauges(c)
        assert g["vllm:kv_cache_usage_perc"] == 0
