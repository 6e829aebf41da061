"""Discrete-event simulator: M/M/c agreement with Erlang-C, KV invariants, determinism, routing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from extproc.config import RouterConfig, parse_config
from planner.des import PoolSpec, simulate
from planner.des.routers import PolicyRouter, make_router
from planner.model.costmodel import erlang_c
from planner.model.profiles import PoolProfile
from planner.workload.trace import build_trace
from tests.planner.toy import toy_profile


def _profile(**kw: float) -> PoolProfile:
    return toy_profile(**kw)


def _poisson_trace(n: int, rate: float, mean_out: float, seed: int, in_tokens: int = 10):
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(1.0 / rate, n))
    out = rng.geometric(1.0 / mean_out, n).astype(np.int64)
    return build_trace(arr, np.full(n, in_tokens, dtype=np.int64), out)


def test_mmc_wait_matches_erlang_c() -> None:
    """H = P = 0 makes every slot an independent server: one instance is M/G/c with c = 8.

    Service = l_out iterations of W = 10 ms with l_out geometric (mean 50) -> exponential-like,
    mean 0.5 s (C_s^2 = 0.98). λ = 12.8 req/s -> utilisation 0.8. Erlang-C: P(wait) and mean wait
    ``C/(cμ−λ)``. Tolerance: 10% relative on P(wait), 15% on the mean wait (150k requests, seeded; at 40k the run-to-run spread of the mean wait is ~20%).
    """
    c, mean_out, w = 8, 50.0, 0.01
    mu = 1.0 / (mean_out * w)
    lam = 0.8 * c * mu
    trace = _poisson_trace(150_000, lam, mean_out, seed=7)
    res = simulate(
        trace, [PoolSpec("p", _profile(), 1000, 1)], make_router("homogeneous"), warmup_fraction=0.1
    )
    k0 = int(0.1 * len(trace))
    wait = res.ttft_s[k0:] - w  # one prefill iteration of W before the first token
    pw = erlang_c(c, lam / mu)
    mean_wait = pw / (c * mu - lam)
    assert float(np.mean(wait > 1e-9)) == pytest.approx(pw, rel=0.10)
    assert float(np.mean(wait)) == pytest.approx(mean_wait, rel=0.15)


def test_kv_invariants_and_preemption_under_pressure() -> None:
    """KV for ~3 full requests while max_num_seqs is 8: the batch must preempt, never lose a request."""
    prof = _profile(kv_capacity_tokens=3 * 700, max_num_seqs_cap=8, chunk_tokens=256, h_s_per_kv_token=1e-6)
    rng = np.random.default_rng(3)
    n = 3000
    arr = np.cumsum(rng.exponential(1 / 8.0, n))
    inp = rng.integers(50, 400, n)
    out = rng.integers(50, 300, n)
    trace = build_trace(arr, inp, out)
    pool = PoolSpec("p", prof, 700, 1, max_num_seqs=8, max_queue_per_instance=100_000)
    res = simulate(trace, [pool], make_router("homogeneous"), check_invariants=True)
    assert int(res.preemptions.sum()) > 0
    assert not res.rejected.any()
    assert not np.isnan(res.ttft_s).any()  # every request produced its first token
    assert np.all(res.ttft_s >= 0)
    s = res.summary()["pools"]["p"]
    assert s["preemptions_per_1000"] > 0
    assert 0 < s["utilization"] <= 1.0 + 1e-9


def test_same_seed_is_byte_identical_and_seed_matters() -> None:
    trace = _poisson_trace(5000, 200.0, 30.0, seed=1, in_tokens=300)
    prof = _profile(h_s_per_kv_token=2e-7, p_s_per_prefill_token=1e-5, chunk_tokens=128)
    pools = [PoolSpec("short", prof, 2048, 3, lb="p2c"), PoolSpec("long", prof, 65536, 2, lb="p2c")]
    cfg = _spill_cfg([2048, 65536], max_inflight_per_pool=18, max_waiting=2)

    def run(seed: int) -> str:
        router = make_router("spillover", pools=cfg.pools_by_size, spillover=cfg.spillover)
        return simulate(trace, pools, router, seed=seed).to_json()

    a, b, c = run(5), run(5), run(6)
    assert a == b
    assert a != c


def test_token_budget_routing_and_misroute_retry() -> None:
    """Budget over the short pool's max_model_len goes long; an under-estimate is retried long."""
    trace = build_trace([0.0, 0.1, 0.2], [100, 5000, 3000], [100, 100, 2000])
    prof = _profile()
    pools = [PoolSpec("short", prof, 4096, 1), PoolSpec("long", prof, 65536, 1)]
    router = make_router("token-budget", [4096, 65536])
    est = np.array([200, 5100, 3500], dtype=np.int64)  # third request's true budget is 5000
    res = simulate(trace, pools, router, est_budget_tokens=est, warmup_fraction=0.0)
    assert res.pool.tolist() == [0, 1, 1]
    assert res.misrouted.tolist() == [False, False, True]
    no_retry = simulate(
        trace, pools, router, est_budget_tokens=est, retry_misrouted=False, warmup_fraction=0.0
    )
    assert no_retry.rejected.tolist() == [False, False, True]


def _spill_cfg(lens: list[int], **spillover: float) -> RouterConfig:
    """A router config (the router's own schema) with pools p<len> and spillover enabled."""
    pools = [
        {
            "name": f"p{m}",
            "max_model_len": m,
            "header_value": f"p{m}",
            "metrics_url": f"http://p{m}.test/metrics",
        }
        for m in lens
    ]
    return parse_config({"pools": pools, "spillover": {"enabled": True, **spillover}})


def test_spillover_by_router_inflight_count_moves_short_requests_to_next_larger_pool() -> None:
    """The router's in-flight rule (pool total, ``>=``): with max_inflight 10 on the short pool and
    50 simultaneous short requests (limit 10 on every pool): 10 short, then 10 to the next larger
    pool, then 10 to the largest, then every pool is saturated and the rest stay on the preferred
    pool (the router's ``all_saturated``)."""
    trace = build_trace(np.linspace(0, 0.01, 50), np.full(50, 100), np.full(50, 500))
    prof = _profile()
    pools = [PoolSpec(f"p{m}", prof, m, 1) for m in (4096, 16384, 65536)]
    cfg = _spill_cfg([4096, 16384, 65536], max_inflight_per_pool=10)
    router = make_router("spillover", pools=cfg.pools_by_size, spillover=cfg.spillover)
    spill = simulate(trace, pools, router)
    plain = simulate(trace, pools, make_router("token-budget", [4096, 16384, 65536]))
    assert [int((spill.pool == i).sum()) for i in range(3)] == [30, 10, 10]
    assert int((plain.pool == 0).sum()) == 50
    assert spill.summary()["fleet"]["p99_ttft_s"] < plain.summary()["fleet"]["p99_ttft_s"]
    assert isinstance(router, PolicyRouter)
    assert router.spillover_counts() == {
        ("p4096", "p16384", "inflight"): 10,
        ("p4096", "p65536", "inflight"): 10,
    }
    assert router.load.total_inflight() == 0  # every acquire was released by the DES


def test_spillover_on_scraped_waiting_uses_last_scrape_only() -> None:
    """``max_waiting`` is judged on the last scrape (every scrape_interval_s of simulated time), as in
    the router: a burst inside one scrape interval is not seen, the next interval's is."""
    prof = _profile(max_num_seqs_cap=1)
    # burst of 20 at t=0 (first scrape sees an empty pool), then 20 more at t=1.5 (scrape at t=1.5
    # sees the backlog of the first burst: 1 request per 0.5 s service -> still waiting)
    arr = np.concatenate([np.linspace(0.0, 0.001, 20), np.linspace(1.5, 1.501, 20)])
    trace = build_trace(arr, np.full(40, 10), np.full(40, 50))
    pools = [PoolSpec("p4096", prof, 4096, 1), PoolSpec("p65536", prof, 65536, 1)]
    cfg = _spill_cfg([4096, 65536], max_waiting=3, scrape_interval_s=1.0)
    res = simulate(trace, pools, make_router("spillover", pools=cfg.pools_by_size, spillover=cfg.spillover))
    assert int((res.pool[:20] == 1).sum()) == 0
    assert int((res.pool[20:] == 1).sum()) == 20


def test_queue_cap_rejects() -> None:
    trace = build_trace(np.zeros(30), np.full(30, 10), np.full(30, 100))
    res = simulate(
        trace, [PoolSpec("p", _profile(), 1000, 1, max_queue_per_instance=5)], make_router("homogeneous")
    )
    assert int(res.rejected.sum()) == 30 - 8 - 5


def test_max_num_batched_tokens_limits_concurrent_prefill() -> None:
    """vLLM's per-iteration token budget: with 2,048 tokens and 1,000-token prefill chunks only two
    prompts prefill at once (checked as an invariant every step), so a burst's TTFT grows; without
    the budget all eight prefill together."""
    prof = _profile(chunk_tokens=1000, p_s_per_prefill_token=1e-5, max_num_seqs_cap=8)
    trace = build_trace(np.zeros(8), np.full(8, 3000), np.full(8, 20))
    pool = [PoolSpec("p", prof, 8192, 1)]
    free = simulate(trace, pool, make_router("homogeneous"), warmup_fraction=0.0)
    capped_prof = replace(prof, max_num_batched_tokens=2048)
    capped = simulate(
        trace, [PoolSpec("p", capped_prof, 8192, 1)], make_router("homogeneous"), warmup_fraction=0.0,
        check_invariants=True,
    )  # fmt: skip
    assert np.allclose(free.ttft_s, free.ttft_s[0])  # all prefilled together
    assert len(set(np.round(capped.ttft_s, 9).tolist())) == 4  # two at a time: four waves
    assert float(np.max(capped.ttft_s)) > float(np.max(free.ttft_s))


def test_load_balancing_policies_spread_a_burst_and_unknown_policy_is_refused() -> None:
    """A burst of 12 equal requests on 3 one-slot instances: round robin and least-loaded give each
    instance 4 (so 3 start at once and the last 3 wait 3 service times); p2c may pile up more."""
    prof = _profile(max_num_seqs_cap=1)
    trace = build_trace(np.zeros(12), np.full(12, 10), np.full(12, 50))
    waves = {}
    for lb in ("round_robin", "least_loaded", "p2c"):
        res = simulate(
            trace, [PoolSpec("p", prof, 1000, 3, lb=lb)], make_router("homogeneous"), check_invariants=True
        )
        waves[lb] = len(set(np.round(res.ttft_s, 9).tolist()))
    assert waves["round_robin"] == waves["least_loaded"] == 4
    assert waves["p2c"] >= 4
    with pytest.raises(ValueError, match="load balancing"):
        PoolSpec("p", prof, 1000, 3, lb="random")
