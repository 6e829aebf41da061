"""N-pool shortest fit and load-aware spillover (policy + load tracker, no gRPC)."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from extproc.config import ConfigError, PoolConfig, PoolHealthConfig, SpilloverConfig, parse_config
from extproc.core.route.load import UNAVAILABLE, LoadTracker, PoolHealth, PoolSignals
from extproc.core.route.policy import POOL_UNAVAILABLE, Policy
from extproc.service.load_metrics import LoadCollector


def pools(*limits: int) -> list[PoolConfig]:
    return [PoolConfig(name=f"p{n}", max_model_len=n, header_value=f"p{n}") for n in limits]


class Clock:
    def __init__(self) -> None:
        self.now_s = 100.0

    def __call__(self) -> float:
        return self.now_s


def tracker() -> tuple[LoadTracker, Clock, CollectorRegistry]:
    reg = CollectorRegistry()
    clock = Clock()
    load = LoadTracker(clock=clock)
    reg.register(LoadCollector(load))
    return load, clock, reg


@pytest.mark.parametrize(
    ("limits", "total", "want", "reason"),
    [
        pytest.param((4096, 65536), 4096, "p4096", "fits", id="two_pools_at_limit"),
        pytest.param((4096, 65536), 4097, "p65536", "fits", id="two_pools_over_short"),
        pytest.param((65536, 4096, 16384), 5000, "p16384", "fits", id="three_pools_any_order"),
        pytest.param((4096, 16384, 65536), 10, "p4096", "fits", id="three_pools_small"),
        pytest.param((4096, 16384, 65536), 70000, "p65536", "exceeds_all_pools", id="exceeds_all"),
        pytest.param((8192,), 100, "p8192", "fits", id="single_pool"),
    ],
)
def test_shortest_fit_over_n_pools(limits: tuple[int, ...], total: int, want: str, reason: str) -> None:
    d = Policy(pools(*limits)).choose(total)
    assert (d.pool.name, d.reason, d.preferred) == (want, reason, None)


def test_spillover_goes_to_next_larger_unsaturated_pool_and_never_smaller() -> None:
    load, _, reg = tracker()
    sp = SpilloverConfig(enabled=True, max_inflight_per_pool=2)
    policy = Policy(pools(4096, 16384, 65536), spillover=sp, load=load)
    for _ in range(2):
        load.acquire("p4096")
    d = policy.choose(100)
    assert (d.pool.name, d.reason, d.signal) == ("p16384", "spillover", "inflight")
    assert d.preferred is not None and d.preferred.name == "p4096"
    assert d.saturated == (("p4096", "inflight"),)
    # a request preferring the saturated medium pool goes up, never down to the idle short pool
    for _ in range(2):
        load.acquire("p16384")
    assert policy.choose(5000).pool.name == "p65536"
    assert policy.choose(100).pool.name == "p65536"
    # everything larger saturated too: stay on the preferred pool
    for _ in range(2):
        load.acquire("p65536")
    d = policy.choose(100)
    assert (d.pool.name, d.reason) == ("p4096", "all_saturated")
    assert d.saturated == (("p4096", "inflight"), ("p16384", "inflight"), ("p65536", "inflight"))
    # the largest pool is never spilled from
    assert policy.choose(20000).reason == "fits"
    assert reg.get_sample_value("tbr_pool_inflight_requests", {"pool": "p4096"}) == 2


def test_spillover_disabled_ignores_load() -> None:
    load, _, _ = tracker()
    policy = Policy(pools(4096, 65536), spillover=SpilloverConfig(max_inflight_per_pool=1), load=load)
    load.acquire("p4096")
    assert policy.choose(10).pool.name == "p4096"


def test_per_pool_threshold_overrides_default() -> None:
    load, _, _ = tracker()
    ps = pools(4096, 65536)
    ps[0] = ps[0].model_copy(update={"max_inflight": 1})
    policy = Policy(ps, spillover=SpilloverConfig(enabled=True, max_inflight_per_pool=100), load=load)
    load.acquire("p4096")
    assert policy.choose(10).reason == "spillover"


@pytest.mark.parametrize(
    ("signals", "age_s", "want"),
    [
        pytest.param((3.0, 0.1), 0.0, "waiting", id="waiting_at_threshold"),
        pytest.param((0.0, 0.95), 0.0, "kv_cache", id="kv_at_threshold"),
        pytest.param((2.0, 0.94), 0.0, None, id="below_both"),
        pytest.param((50.0, 1.0), 6.0, None, id="stale_ignored"),
        pytest.param((None, 0.99), 1.0, "kv_cache", id="no_waiting_metric"),
    ],
)
def test_scraped_signals_and_staleness(
    signals: tuple[float | None, float], age_s: float, want: str | None
) -> None:
    load, clock, reg = tracker()
    sp = SpilloverConfig(enabled=True, max_waiting=3, max_kv_cache_usage=0.95, max_staleness_s=5.0)
    policy = Policy(pools(4096, 65536), spillover=sp, load=load)
    load.record_signals("p4096", PoolSignals(signals[0], signals[1], clock.now_s))
    load.record_signals("p65536", PoolSignals(0.0, 0.0, clock.now_s + age_s))
    clock.now_s += age_s
    d = policy.choose(10)
    assert d.signal == (want or "")
    assert d.pool.name == ("p65536" if want else "p4096")
    stale = reg.get_sample_value("tbr_pool_stale_signal_checks_total", {"pool": "p4096"})
    assert (stale or 0) == (1 if age_s > 5.0 else 0)


def test_never_scraped_pool_counts_as_stale_not_saturated() -> None:
    load, _, reg = tracker()
    policy = Policy(pools(4096, 65536), spillover=SpilloverConfig(enabled=True, max_waiting=1), load=load)
    assert policy.choose(10).pool.name == "p4096"
    assert reg.get_sample_value("tbr_pool_stale_signal_checks_total", {"pool": "p4096"}) == 1


def test_inflight_accounting_never_negative() -> None:
    load, _, reg = tracker()
    load.acquire("a")
    load.move("a", "b")
    assert (load.inflight("a"), load.inflight("b")) == (0, 1)
    load.release("b")
    load.release("b")
    assert load.total_inflight() == 0
    assert reg.get_sample_value("tbr_pool_accounting_errors_total", {"pool": "b"}) == 1


BASE: dict[str, Any] = {
    "pools": [
        {"name": "short", "max_model_len": 8192, "header_value": "short"},
        {"name": "long", "max_model_len": 65536, "header_value": "long"},
    ]
}


@pytest.mark.parametrize(
    ("spillover", "pool_extra", "message"),
    [
        pytest.param({"enabled": True}, {}, "needs a threshold", id="enabled_without_threshold"),
        pytest.param({"enabled": True, "max_waiting": 2}, {}, "metrics_url", id="waiting_without_url"),
        pytest.param({"max_kv_cache_usage": 1.5}, {}, "spillover.max_kv_cache_usage", id="kv_over_one"),
        pytest.param({}, {"metrics_url": "ftp://x/metrics"}, "http", id="bad_metrics_url"),
        pytest.param({}, {"max_inflight": 0}, "max_inflight", id="zero_inflight"),
    ],
)
def test_spillover_config_errors(spillover: dict[str, Any], pool_extra: dict[str, Any], message: str) -> None:
    raw = {**BASE, "spillover": spillover, "pools": [{**BASE["pools"][0], **pool_extra}, BASE["pools"][1]]}
    with pytest.raises(ConfigError, match=message):
        parse_config(raw)


def test_three_pool_example_config_loads() -> None:
    from pathlib import Path

    from extproc.config import load_config

    cfg = load_config(Path(__file__).resolve().parents[3] / "config" / "router-3pools.yaml")
    assert [p.name for p in cfg.pools_by_size] == ["short", "medium", "long"]
    assert cfg.spillover.enabled and cfg.spillover.max_waiting == 8


# -- pool health (issue 34) -------------------------------------------------------------------------


def test_a_pool_that_is_down_is_skipped_with_or_without_spillover() -> None:
    load, clock, reg = tracker()
    health = PoolHealthConfig(max_staleness_s=5.0)
    for sp in (SpilloverConfig(), SpilloverConfig(enabled=True, max_inflight_per_pool=100)):
        policy = Policy(pools(4096, 16384, 65536), spillover=sp, load=load, health=health)
        load.record_health("p4096", PoolHealth(up=False, reason="http_503", at_s=clock.now_s))
        d = policy.choose(100)
        assert (d.pool.name, d.reason, d.signal) == ("p16384", POOL_UNAVAILABLE, UNAVAILABLE)
        assert d.preferred is not None and d.preferred.name == "p4096"
        assert d.saturated == (("p4096", UNAVAILABLE),)
        # the next larger pool down too: the one above it
        load.record_health("p16384", PoolHealth(up=False, reason="timeout", at_s=clock.now_s))
        d = policy.choose(100)
        assert (d.pool.name, d.reason) == ("p65536", POOL_UNAVAILABLE)
        assert d.saturated == (("p4096", UNAVAILABLE), ("p16384", UNAVAILABLE))
        # every larger pool down: it stays where it fits (nothing better to do)
        load.record_health("p65536", PoolHealth(up=False, reason="unreachable", at_s=clock.now_s))
        d = policy.choose(100)
        assert (d.pool.name, d.reason, d.signal) == ("p4096", "all_saturated", UNAVAILABLE)
        # a request only the largest pool fits is not moved; a request over every pool neither
        assert policy.choose(20000).pool.name == "p65536"
        assert policy.choose(10**6).reason == "exceeds_all_pools"
        # back up: shortest fit again
        for name in ("p4096", "p16384", "p65536"):
            load.record_health(name, PoolHealth(up=True, reason="healthy", at_s=clock.now_s))
        assert (policy.choose(100).pool.name, policy.choose(100).reason) == ("p4096", "fits")
    assert reg.get_sample_value("tbr_pool_up", {"pool": "p4096"}) == 1
    assert reg.get_sample_value("tbr_pool_health_reason", {"pool": "p4096", "reason": "healthy"}) == 1


def test_stale_or_disabled_health_does_not_keep_a_pool_down() -> None:
    load, clock, reg = tracker()
    load.record_health("p4096", PoolHealth(up=False, reason="http_500", at_s=clock.now_s))
    assert reg.get_sample_value("tbr_pool_up", {"pool": "p4096"}) == 0
    assert reg.get_sample_value("tbr_pool_health_reason", {"pool": "p4096", "reason": "http_500"}) == 1
    fresh = Policy(pools(4096, 65536), load=load, health=PoolHealthConfig(max_staleness_s=5.0))
    assert fresh.choose(100).reason == POOL_UNAVAILABLE
    clock.now_s += 5.1  # the checks stopped: the verdict is stale, the pool is judged up
    assert (fresh.choose(100).pool.name, fresh.choose(100).reason) == ("p4096", "fits")
    clock.now_s -= 5.1
    off = Policy(pools(4096, 65536), load=load, health=PoolHealthConfig(enabled=False))
    assert off.choose(100).reason == "fits"
    assert Policy(pools(4096, 65536), load=load).choose(100).reason == "fits"  # no health config


def test_down_pool_and_saturated_pool_together() -> None:
    load, clock, _ = tracker()
    sp = SpilloverConfig(enabled=True, max_inflight_per_pool=1)
    policy = Policy(pools(4096, 16384, 65536), spillover=sp, load=load, health=PoolHealthConfig())
    load.record_health("p4096", PoolHealth(up=False, reason="http_503", at_s=clock.now_s))
    load.acquire("p16384")  # the next larger pool is saturated: skipped as well
    d = policy.choose(100)
    assert (d.pool.name, d.reason) == ("p65536", POOL_UNAVAILABLE)
    assert d.saturated == (("p4096", UNAVAILABLE), ("p16384", "inflight"))
    load.record_health("p4096", PoolHealth(up=True, reason="healthy", at_s=clock.now_s))
    load.acquire("p4096")  # saturated (not down): ordinary spillover past both to the largest
    d = policy.choose(100)
    assert (d.pool.name, d.reason, d.signal) == ("p65536", "spillover", "inflight")
