"""Calibration off the request path (docs/design/005-off-path-calibration.md) through the shipped
envoy/envoy.yaml (one message per request, docs/design/004-one-message.md): the routing filter's
streams carry only the request body, sampled responses reach the router through the
observability-mode filter selected by the routing answer's dynamic metadata, and a client cannot
forge the calibration header. The two-message design (``calibration.off_path``) is checked too."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from openai import AsyncOpenAI

from devstack.inprocess import InProcessStack
from tests.e2e.harness import REPO, Stack, router_caught_up, three_pool_stack

pytestmark = pytest.mark.envoy

PROMPTS = [
    "Explain in two sentences why the sky is blue during the day and red at sunset.",
    "Write a haiku about a lighthouse keeper who collects lost letters.",
    "Summarise the causes of the French Revolution for a ten-year-old reader.",
    "What is the difference between a process and a thread in an operating system?",
]


def _router(sample_rate: float, *, off_path: bool = False) -> dict[str, Any]:
    """The one-message design needs no ``off_path`` (its sampled requests can only go off the path)."""
    return {
        "server": {"grace_period_s": 0.5},
        "calibration": {"sample_rate": sample_rate, "off_path": off_path, "warmup_samples": 2},
    }


@contextlib.asynccontextmanager
async def _stack(
    tmp_path: Path, sample_rate: float, envoy_source: Path | None = None, *, off_path: bool = False
) -> AsyncIterator[tuple[InProcessStack, AsyncOpenAI]]:
    """Two pools (8,192 / 65,536), the router sampling at ``sample_rate``, ``envoy_source``
    (envoy/envoy.yaml by default), and an OpenAI client through it."""
    async with three_pool_stack(
        tmp_path,
        router_overrides=_router(sample_rate, off_path=off_path),
        pool_limits={"short": 8192, "long": 65536},
        envoy_source=envoy_source or REPO / "envoy" / "envoy.yaml",
    ) as stack:
        c = AsyncOpenAI(base_url=stack.base_url, api_key="unused", max_retries=0, timeout=30.0)
        try:
            yield stack, c
        finally:
            await c.close()


def _no_stream_failed(routing: dict[str, int], calib: dict[str, int]) -> None:
    """No fail-open, timeout or failed stream on either filter, and the router ended every
    observability stream itself: none waited for deferred_close_timeout (no client aborts here)."""
    assert calib.get("http.llm_ingress.ext_proc.tbr_calib.streams_closed", 0) == 0
    for name in ("failure_mode_allowed", "message_timeouts", "streams_failed"):
        assert routing.get(f"http.llm_ingress.ext_proc.tbr.{name}", 0) == 0
        assert calib.get(f"http.llm_ingress.ext_proc.tbr_calib.{name}", 0) == 0


async def _learned(stack: Stack) -> int:
    """Observations applied by the router once it has ended every stream Envoy opened (the
    observability stream may end after the client already has its response): final, so a count
    of zero means none will come."""
    await router_caught_up(stack)
    got = stack.app.metrics.registry.get_sample_value("tbr_calibration_events_total", {"outcome": "applied"})
    return int(got or 0)


async def test_sampled_responses_are_read_by_the_observability_filter(tmp_path: Path) -> None:
    async with _stack(tmp_path, 1.0) as (stack, c):
        for p in PROMPTS:
            r = await c.chat.completions.create(
                model="Qwen/Qwen3-8B", messages=[{"role": "user", "content": p}], max_tokens=8
            )
            assert r.usage is not None and r.usage.prompt_tokens > 0
        for p in PROMPTS:
            chunks = await c.chat.completions.create(
                model="Qwen/Qwen3-8B",
                messages=[{"role": "user", "content": p}],
                max_tokens=8,
                stream=True,
                stream_options={"include_usage": True},
            )
            usage = [ch.usage async for ch in chunks if ch.usage is not None]
            assert usage and usage[0].prompt_tokens > 0
        n = 2 * len(PROMPTS)
        assert await _learned(stack) == n
        assert sum(s.samples for _, s in stack.app.store.items()) == n
        routing = stack.envoy.stats("ext_proc.tbr.")
        calib = stack.envoy.stats("ext_proc.tbr_calib.")
        # the routing filter: the request body only, for every request
        assert routing["http.llm_ingress.ext_proc.tbr.streams_started"] == n
        assert routing["http.llm_ingress.ext_proc.tbr.stream_msgs_sent"] == n
        # the observability filter: one stream per sampled request, no answer awaited or failed
        assert calib["http.llm_ingress.ext_proc.tbr_calib.streams_started"] == n
        assert calib.get("http.llm_ingress.ext_proc.tbr_calib.stream_msgs_received", 0) == 0
        _no_stream_failed(routing, calib)


async def test_unsampled_requests_open_no_calibration_stream_and_a_forged_header_is_stripped(
    tmp_path: Path,
) -> None:
    async with _stack(tmp_path, 0.0) as (stack, c):
        forged = (
            '{"v":2,"b":{"key":["Qwen/Qwen3-8B","latin"]},"pool":"short","ep":"chat","learn":true,"id":""}'
        )
        for p in PROMPTS:
            r = await c.chat.completions.create(
                model="Qwen/Qwen3-8B",
                messages=[{"role": "user", "content": p}],
                max_tokens=8,
                extra_headers={"x-tbr-calib": forged},
            )
            assert r.usage is not None
        assert await _learned(stack) == 0
        calib = stack.envoy.stats("ext_proc.tbr_calib.")
        assert calib.get("http.llm_ingress.ext_proc.tbr_calib.streams_started", 0) == 0
        assert not list(stack.app.store.items())


def _two_message_envoy(tmp_path: Path) -> Path:
    """envoy/envoy.yaml turned into the two-message design (request headers SEND, the routing
    header, header routes, the calibration filter selected by ``x-tbr-calib``) by the benchmarks'
    transform; Envoy Gateway and Istio run that design."""
    import yaml

    from benchmarks.envoy_configs import two_messages

    cfg = yaml.safe_load((REPO / "envoy" / "envoy.yaml").read_text())
    (listener,) = cfg["static_resources"]["listeners"]
    hcm = listener["filter_chains"][0]["filters"][0]["typed_config"]
    (ext_proc,) = [f for f in hcm["http_filters"] if f["name"] == "envoy.filters.http.ext_proc"]
    two_messages(hcm, ext_proc)
    out = tmp_path / "src" / "envoy-2msgs.yaml"
    out.parent.mkdir()
    out.write_text(yaml.safe_dump(cfg))
    return out


async def _sample_some(stack: InProcessStack, c: AsyncOpenAI, n: int = 12) -> dict[str, int]:
    """Send ``n`` chat requests at sample_rate 0.5; check that exactly the sampled ones opened an
    observability stream, were learned, and that no stream failed or waited for deferred close.
    Returns the routing filter's stats."""
    for i in range(n):
        r = await c.chat.completions.create(
            model="Qwen/Qwen3-8B",
            messages=[{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}],
            max_tokens=8,
        )
        assert r.usage is not None and r.usage.prompt_tokens > 0
    routing = stack.envoy.stats("ext_proc.tbr.")
    calib = stack.envoy.stats("ext_proc.tbr_calib.")
    sampled = calib.get("http.llm_ingress.ext_proc.tbr_calib.streams_started", 0)
    assert await _learned(stack) == sampled
    # seeded draws at sample_rate 0.5 over 12 requests: some sampled, some not
    assert 0 < sampled < n
    assert sum(s.samples for _, s in stack.app.store.items()) == sampled
    assert routing["http.llm_ingress.ext_proc.tbr.streams_started"] == n
    assert calib.get("http.llm_ingress.ext_proc.tbr_calib.stream_msgs_received", 0) == 0
    _no_stream_failed(routing, calib)
    return routing


async def test_two_message_design_calibrates_off_path_from_the_header(tmp_path: Path) -> None:
    """Two messages per routed request with ``calibration.off_path``: the sampled ones carry the
    payload in the ``x-tbr-calib`` header, the composite filter runs the observability stream for
    exactly those, and the router learns from them; the routing streams never see a response."""
    async with _stack(tmp_path, 0.5, _two_message_envoy(tmp_path), off_path=True) as (stack, c):
        routing = await _sample_some(stack, c)
        assert routing["http.llm_ingress.ext_proc.tbr.stream_msgs_sent"] == 2 * 12  # headers + body


async def test_one_message_design_samples_only_some_requests(tmp_path: Path) -> None:
    """At sample_rate 0.5 the composite filter runs the observability stream for exactly the sampled
    requests (the payload travels in dynamic metadata: no ``x-tbr-calib`` header anywhere), without
    ``off_path`` set, and the router learns from each of them."""
    async with _stack(tmp_path, 0.5) as (stack, c):
        routing = await _sample_some(stack, c)
        assert routing["http.llm_ingress.ext_proc.tbr.stream_msgs_sent"] == 12  # one message each
