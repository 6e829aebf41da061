"""Live fleet advice in `tbr serve` (issue 33, item 1): counted from real gRPC ext_proc streams,
exported on /metrics and GET /advice, summed across replicas through a real redis-server."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from devstack.redis import RedisServer
from extproc.config import ConfigError, parse_config
from extproc.service.app import RouterApp
from extproc.service.fleet_advice import FleetAdvisor
from tests.service.streams import POOLS, TEXT_8000, admin_get, route_of
from tests.waiting import until_async

SHORT_TEXT = "Summarise the meeting notes in three bullet points. " * 4
LONG_TEXT = TEXT_8000 * 5  # ~10,000 tokens at the prior ratio: the long pool


def advice_config(**extra: object) -> dict[str, object]:
    return {
        "pools": POOLS,
        "advice": {"enabled": True, "recompute_interval_s": 0.001, "window_s": 600, "bucket_s": 1},
        **extra,
    }


async def test_advice_counts_the_routers_decisions_and_is_exported() -> None:
    cfg = parse_config(advice_config())
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        routed = [await route_of(app.grpc_port, SHORT_TEXT) for _ in range(6)]
        routed += [await route_of(app.grpc_port, LONG_TEXT) for _ in range(2)]
        assert routed == ["short"] * 6 + ["long"] * 2
        doc = (await admin_get(app.admin_port, "/advice")).json()
        metrics = (await admin_get(app.admin_port, "/metrics")).text
    assert doc["enabled"] is True and doc["replicas"] == 1
    pools = {p["pool"]: p for p in doc["pools"]}
    assert pools["short"]["requests"] == 6 and pools["long"]["requests"] == 2
    assert doc["alpha"] == pytest.approx(6 / 8)
    assert pools["long"]["budget_p99_tokens"] > 8192 >= pools["short"]["budget_p99_tokens"]
    for p in pools.values():
        assert p["desired_instances"] >= max(1, p["required_instances"])
    assert doc["rule"]["profiles"] == {"short": "llama3-70b-a100", "long": "llama3-70b-a100"}
    for pool in ("short", "long"):
        m = re.search(rf'^tbr_pool_desired_instances\{{pool="{pool}"\}} (\d+)\.0$', metrics, flags=re.M)
        assert m is not None and int(m.group(1)) >= 1
    assert re.search(r"^tbr_fleet_alpha_ratio 0\.75$", metrics, flags=re.M)
    assert "tbr_fleet_advice_replicas 1.0" in metrics


async def test_advice_off_answers_disabled_and_exports_nothing() -> None:
    async with RouterApp(parse_config({"pools": POOLS}), grpc_port=0, admin_port=0) as app:
        await route_of(app.grpc_port, SHORT_TEXT)
        assert (await admin_get(app.admin_port, "/advice")).json() == {"enabled": False}
        assert "tbr_pool_desired_instances" not in (await admin_get(app.admin_port, "/metrics")).text


def test_a_bad_profile_is_an_error_at_start_naming_it() -> None:
    with pytest.raises(ValueError, match="no-such-gpu"):
        FleetAdvisor(parse_config(advice_config(advice={"enabled": True, "default_profile": "no-such-gpu"})))
    with pytest.raises(ConfigError, match="unknown pool 'medium'"):
        parse_config(advice_config(advice={"enabled": True, "profiles": {"medium": "llama3-70b-a100"}}))
    with pytest.raises(ConfigError, match="bucket_s"):
        parse_config(advice_config(advice={"enabled": True, "window_s": 10, "bucket_s": 20}))


def test_the_advisor_recomputes_only_after_its_interval_on_a_fake_clock() -> None:
    now = [1000.0]
    cfg = parse_config({"pools": POOLS, "advice": {"enabled": True, "recompute_interval_s": 5}})
    adv = FleetAdvisor(cfg, clock=lambda: now[0])
    for i in range(100):
        now[0] = 1000.0 + i * 0.5
        adv.decision("short", 1500)
    first = adv.current()
    adv.decision("long", 20_000)
    assert adv.current() is first  # within the interval: the same advice
    now[0] += 5.0
    second = adv.current()
    assert second is not first and second.pool("long").requests == 1  # type: ignore[union-attr]
    short = second.pool("short")
    assert short is not None and short.arrival_rate_req_per_s == pytest.approx(100 / 54.5)  # 1000 → 1054.5


@pytest.mark.redis
async def test_replicas_share_their_windows_through_redis(redis_server: RedisServer) -> None:
    cfg = parse_config(
        advice_config(calibration={"redis_url": redis_server.url, "redis_sync_interval_s": 0.05})
    )
    async with (
        RouterApp(cfg, grpc_port=0, admin_port=0) as a,
        RouterApp(cfg, grpc_port=0, admin_port=0) as b,
    ):
        for _ in range(3):
            await route_of(a.grpc_port, SHORT_TEXT)
        for _ in range(2):
            await route_of(b.grpc_port, LONG_TEXT)
        await route_of(b.grpc_port, SHORT_TEXT)

        async def both_see_all() -> bool:
            for app in (a, b):
                doc = (await admin_get(app.admin_port, "/advice")).json()
                counts = {p["pool"]: p["requests"] for p in doc["pools"]}
                if doc["replicas"] != 2 or counts != {"short": 4, "long": 2}:
                    return False
            return True

        await until_async(both_see_all, what="both replicas see every decision")
        metrics = (await admin_get(a.admin_port, "/metrics")).text
    assert "tbr_fleet_advice_replicas 2.0" in metrics
    assert re.search(r'^tbr_fleet_window_sync_rows_total\{outcome="applied"\} [1-9]', metrics, flags=re.M)


def test_serve_refuses_an_unreadable_profile_file_with_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import logging

    from tbr.cli import main

    cfg = tmp_path / "router.yaml"
    profile = tmp_path / "gpu.yaml"
    profile.write_text("name: x\nbogus: 1\n")
    cfg.write_text(
        yaml.safe_dump({"pools": POOLS, "advice": {"enabled": True, "profiles": {"long": str(profile)}}})
    )
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        assert main(["serve", "--config", str(cfg)]) == 2
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
    err = capsys.readouterr().err
    assert "unknown fields bogus" in err and "Traceback" not in err
