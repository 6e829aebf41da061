"""Issue 12 item 2: Envoy's idle timeouts fit each pool's longest legitimate generation.

A non-streaming answer is silent until the generation ends. The rule (envoy/README.md,
"Timeouts"): a route's ``idle_timeout`` >= ``max_model_len / DECODE_TOKENS_PER_S + QUEUE_S`` of
the largest pool it can reach (a misroute retry goes to the next larger pool). A streaming request
(issue 34, item 8) sends a chunk per token: its routes carry ``QUEUE_S``. The slow test runs
a 320 s silent non-streaming answer through the real Envoy (before: 504 at 300 s).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from devstack.stack import Stack, StackOptions

pytestmark = pytest.mark.envoy

REPO = Path(__file__).resolve().parents[2]
DECODE_TOKENS_PER_S = 50.0
QUEUE_S = 60.0
SHIPPED = [
    (REPO / "envoy" / "envoy.yaml", REPO / "config" / "router.yaml"),
    (REPO / "envoy" / "envoy-3pools.yaml", REPO / "config" / "router-3pools.yaml"),
    (REPO / "deploy" / "overlays" / "standalone-envoy" / "envoy.yaml", REPO / "config" / "router.yaml"),
    (REPO / "envoy" / "envoy-2models.yaml", REPO / "config" / "router-2models.yaml"),
    (REPO / "deploy" / "overlays" / "two-models" / "envoy.yaml", REPO / "config" / "router-2models.yaml"),
]


def generation_idle_timeout_s(max_model_len: int) -> float:
    """The idle timeout (s) a route to a pool of ``max_model_len`` tokens needs: its longest
    legitimate non-streaming generation, ``max_model_len / DECODE_TOKENS_PER_S + QUEUE_S``
    (envoy/README.md, "Timeouts")."""
    return max_model_len / DECODE_TOKENS_PER_S + QUEUE_S


def _seconds(value: str) -> float:
    assert value.endswith("s"), value
    return float(value[:-1])


def _is_streaming(route: dict[str, Any]) -> bool:
    """The route matches ``tbr.stream: true`` (the router's mark of a request that asked for SSE)."""
    return any(
        m["path"] == [{"key": "stream"}] and m["value"] == {"bool_match": True}
        for m in route["match"].get("dynamic_metadata", [])
    )


def _reachable_clusters(route: dict[str, Any]) -> list[str]:
    r = route["route"]
    if "cluster" in r:
        return [r["cluster"]]
    groups = r["inline_cluster_specifier_plugin"]["extension"]["typed_config"]["priority_groups"]
    return [c["cluster_name"] for g in groups for c in g["clusters"]]


@pytest.mark.parametrize(("envoy_path", "router_path"), SHIPPED, ids=lambda p: str(Path(p).relative_to(REPO)))
def test_idle_timeouts_fit_the_longest_generation_of_every_reachable_pool(
    envoy_path: Path, router_path: Path
) -> None:
    envoy = yaml.safe_load(envoy_path.read_text(encoding="utf-8"))
    router = yaml.safe_load(router_path.read_text(encoding="utf-8"))
    limits = {f"{p['name']}_pool": int(p["max_model_len"]) for p in router["pools"]}
    hcm = envoy["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    needed = []
    streaming = []
    for vhost in hcm["route_config"]["virtual_hosts"]:
        for route in vhost["routes"]:
            assert _seconds(route["route"]["timeout"]) == 0.0  # no overall cap on a generation
            if _is_streaming(route):
                streaming.append(route["route"]["idle_timeout"])
                continue
            longest = max(limits[c] for c in _reachable_clusters(route))
            need_s = generation_idle_timeout_s(longest)
            assert _seconds(route["route"]["idle_timeout"]) >= need_s, (route["name"], need_s)
            needed.append(need_s)
    # Issue 34, item 8: every pool's streaming requests have their own route, whose idle timeout is
    # the queueing-and-prefill bound (a running generation sends a chunk per token).
    assert len(streaming) >= len(limits) - (0 if "envoy-2models" in envoy_path.name else 1)
    assert set(streaming) == {f"{QUEUE_S:.0f}s"}
    assert _seconds(hcm["stream_idle_timeout"]) >= max(needed)
    assert _seconds(hcm["request_timeout"]) == 0.0


@pytest.mark.slow
def test_a_320_s_silent_non_streaming_answer_arrives(tmp_path: Path) -> None:
    """Both pools take 320 s before their first (and only) byte, as a long non-streaming
    generation does; the client must get the 200, not Envoy's 504 "stream timeout"."""
    with Stack(tmp_path, StackOptions(pool_args=("--time-to-first-token-s", "320"))) as stack:
        r = httpx.post(
            f"{stack.base_url}/chat/completions",
            json={
                "model": "Qwen/Qwen3-8B",
                "messages": [{"role": "user", "content": "Write a long essay."}],
                "max_tokens": 8,
            },
            timeout=420.0,
        )
    assert r.status_code == 200, r.text[:300]
    assert r.json()["usage"]["completion_tokens"] == 8
    assert r.elapsed.total_seconds() >= 320.0
