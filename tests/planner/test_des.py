"""Discrete-event simulator: M/M/c agreement with Erlang-C, KV invariants, determinism, routing."""

from __future__ import annotations

import numpy as np
import pytest

from planner.costmodel import erlang_c
from planner.des import PoolSpec, simulate
from planner.profiles import PoolProfile
from planner.routers import make_router
from planner.trace import build_trace


def _profile(**kw: float) -> PoolProfile:
    base = dict(
        name="toy",
        model="toy",
        gpu="toy",
        tp=1,
        price_usd_per_gpu_h=1.0,
        kv_capacity_tokens=10_000_000,
        block_size_tokens=16,
        max_num_seqs_cap=8,
        w_s=0.01,
        h_s_per_kv_token=0.0,
        p_s_per_prefill_token=0.0,
        chunk_tokens=1_000_000,
    )
    base.update(kw)
    return PoolProfile(**base)  # type: ignore[arg-type]


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
    router = make_router("spillover", [400, 65536], spill_inflight_per_instance=6)
    a = simulate(trace, pools, router, seed=5).to_json()
    b = simulate(trace, pools, router, seed=5).to_json()
    c = simulate(trace, pools, router, seed=6).to_json()
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


def test_spillover_moves_short_requests_when_short_pool_is_busy() -> None:
    trace = build_trace(np.linspace(0, 0.01, 50), np.full(50, 100), np.full(50, 500))
    prof = _profile()
    pools = [PoolSpec("short", prof, 4096, 1), PoolSpec("long", prof, 65536, 1)]
    spill = simulate(trace, pools, make_router("spillover", [4096, 65536], spill_inflight_per_instance=10))
    plain = simulate(trace, pools, make_router("token-budget", [4096, 65536]))
    assert int((spill.pool == 1).sum()) == 40
    assert int((plain.pool == 1).sum()) == 0
    assert spill.summary()["fleet"]["p99_ttft_s"] < plain.summary()["fleet"]["p99_ttft_s"]


def test_queue_cap_rejects() -> None:
    trace = build_trace(np.zeros(30), np.full(30, 10), np.full(30, 100))
    res = simulate(
        trace, [PoolSpec("p", _profile(), 1000, 1, max_queue_per_instance=5)], make_router("homogeneous")
    )
    assert int(res.rejected.sum()) == 30 - 8 - 5
