"""FleetOpt's analytical optimum (planner/model/fleetopt.py) on toy profiles worked out by hand.

The toy profile has fixed 10 ms iterations (H = P = 0) and one prefill chunk per request, so a request
of 10 input and 100 output tokens holds a slot for 1 + 99 = 100 iterations = 1 s.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.model.costmodel import p99_wait_mgc_s
from planner.model.fleetopt import cost_cliff, fleetopt, size_pool
from planner.model.profiles import with_admission
from tests.planner.toy import toy_profile

I64 = np.int64


def _mix(n_short: int, n_long: int, n_border: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n_short requests of 10 + 100 tokens, n_border of 1,400 + 100, n_long of 4,900 + 100."""
    inp = np.array([10] * n_short + [1400] * n_border + [4900] * n_long, dtype=I64)
    return inp, np.full(inp.shape, 100, dtype=I64)


def test_size_pool_utilisation_cap_by_hand() -> None:
    # 4 slots at max_model_len 1,000 (KV 4,000), S = 1 s -> μ_inst = 4 req/s; λ = 10, loose SLO:
    # N = ceil(10 / (4 x 0.85)) = ceil(2.94) = 3, utilisation 10 / 12.
    prof = toy_profile(kv_capacity_tokens=4000, max_num_seqs_cap=4)
    inp, out = _mix(50, 0)
    pool = size_pool(10.0, prof, 1000, inp, out, slo_ttft_p99_s=100.0)
    assert (pool.instances, pool.slots) == (3, 4)
    assert pool.service_s == pytest.approx(1.0)
    assert pool.cs2 == pytest.approx(0.0)
    assert pool.utilization == pytest.approx(10 / 12)
    assert pool.slo_met


def test_size_pool_tight_slo_is_the_smallest_count_meeting_kimura() -> None:
    # prefill = one 10 ms iteration; the SLO of 20 ms leaves 10 ms of P99 wait
    prof = toy_profile(kv_capacity_tokens=4000, max_num_seqs_cap=4)
    inp, out = _mix(50, 0)
    pool = size_pool(10.0, prof, 1000, inp, out, slo_ttft_p99_s=0.02)
    n = pool.instances
    assert p99_wait_mgc_s(n * 4, 10.0, 1.0, 0.0) + 0.01 <= 0.02
    assert p99_wait_mgc_s((n - 1) * 4, 10.0, 1.0, 0.0) + 0.01 > 0.02
    assert n > 3 and pool.slo_met


def test_size_pool_unattainable_slo_is_reported() -> None:
    prof = toy_profile(kv_capacity_tokens=4000, max_num_seqs_cap=4)
    inp, out = _mix(50, 0)
    pool = size_pool(10.0, prof, 1000, inp, out, slo_ttft_p99_s=0.005)  # prefill alone is 10 ms
    assert not pool.slo_met and pool.p99_ttft_s > 0.005
    assert math.isfinite(pool.p99_ttft_s)


def test_cost_cliff_is_the_slot_ratio_under_the_paper_convention_and_one_under_vllm() -> None:
    # KV 8,000: 8 slots at B = 1,000, 1 slot at 8,000; equal iteration times (H = 0) -> cliff 8
    paper = toy_profile(kv_capacity_tokens=8000, max_num_seqs_cap=64)
    assert cost_cliff(paper, 1000, 8000, 10, 100) == pytest.approx(8.0)
    # vLLM admission: max_num_seqs (8) at any max_model_len -> the same slots on both sides -> 1
    vllm = with_admission(paper, "vllm", max_num_seqs=8)
    assert cost_cliff(vllm, 1000, 8000, 10, 100) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        cost_cliff(paper, 1000, 8000, 1000, 100)


def test_boundary_and_pool_sizes_by_hand() -> None:
    # 90 % of requests are 110 tokens, 10 % are 5,000; KV 8,000 (paper convention), long pool 8,000.
    # Homogeneous: 1 slot, S = 1 s, λ = 10 -> ceil(10 / 0.85) = 12 instances.
    # B = 1,000: short 8 slots, λ 9 -> ceil(9 / 6.8) = 2; long 1 slot, λ 1 -> ceil(1 / 0.85) = 2.
    # B = 4,000 serves the same requests with 2 slots: ceil(9 / 1.7) = 6 short -> B* = 1,000.
    prof = toy_profile(kv_capacity_tokens=8000, max_num_seqs_cap=64)
    inp, out = _mix(90, 10)
    r = fleetopt(inp, out, 10.0, prof, 8000, 100.0, boundaries=(1000, 4000), gammas=(1.0,))
    assert r.homogeneous.instances == 12
    best = r.best_routing
    assert best is not None and best is r.best
    assert (best.boundary_tokens, best.short.instances, best.long.instances) == (1000, 2, 2)
    assert best.alpha == pytest.approx(0.9)
    other = next(p for p in r.sweep if p.boundary_tokens == 4000)
    assert other.short.instances == 6
    assert r.step_in is None and r.step_out is not None
    assert (r.step_out.short_gpus_delta, r.step_out.long_gpus_delta, r.step_out.moved_share) == (4, 0, 0.0)
    assert r.cost_cliff is None  # no request in (500, 1000]
    assert r.homogeneous_usd_per_h == pytest.approx(12.0)


def test_compress_and_route_moves_the_borderline_share() -> None:
    # 20 borderline requests of 1,500 tokens in (B, 2B]: with p_c = 1 all are trimmed to B and the
    # short pool takes α' = F(B) + (F(2B) − F(B)) = 1; with p_c = 0 none: α' = F(B).
    prof = toy_profile(kv_capacity_tokens=8000, max_num_seqs_cap=64)
    inp, out = _mix(70, 10, n_border=20)
    full = fleetopt(inp, out, 10.0, prof, 8000, 100.0, boundaries=(1000,), gammas=(2.0,), p_c=1.0)
    g2 = next(p for p in full.sweep if p.gamma == 2.0)
    assert g2.alpha == pytest.approx(0.7)
    assert g2.alpha_prime == pytest.approx(0.9)  # the 5,000-token ones exceed 2B and stay long
    none = fleetopt(inp, out, 10.0, prof, 8000, 100.0, boundaries=(1000,), gammas=(2.0,), p_c=0.0)
    assert next(p for p in none.sweep if p.gamma == 2.0).alpha_prime == pytest.approx(0.7)
    # same seed, same answer; p_c = 0.5 compresses the seeded draw's share
    a = fleetopt(inp, out, 10.0, prof, 8000, 100.0, boundaries=(1000,), gammas=(2.0,), p_c=0.5, seed=3)
    b = fleetopt(inp, out, 10.0, prof, 8000, 100.0, boundaries=(1000,), gammas=(2.0,), p_c=0.5, seed=3)
    assert a == b
    draws = np.asarray(np.random.default_rng(3).random(inp.shape[0]) < 0.5)
    pa = next(p for p in a.sweep if p.gamma == 2.0)
    assert pa.alpha_prime == pytest.approx(0.7 + draws[70:90].sum() / 100)


def test_requests_longer_than_the_long_pool_are_left_out_and_bad_input_is_refused() -> None:
    prof = toy_profile(kv_capacity_tokens=8000, max_num_seqs_cap=64)
    inp = np.array([10, 10, 9000], dtype=I64)
    out = np.array([100, 100, 100], dtype=I64)
    r = fleetopt(inp, out, 3.0, prof, 8000, 100.0, boundaries=(1000,), gammas=(1.0,))
    assert r.homogeneous.lam_req_per_s == pytest.approx(2.0)
    with pytest.raises(ValueError):
        fleetopt(inp[:0], out[:0], 3.0, prof, 8000, 100.0)
    with pytest.raises(ValueError):
        fleetopt(inp, out, 0.0, prof, 8000, 100.0)
    with pytest.raises(ValueError):
        fleetopt(inp, out, 3.0, prof, 8000, 100.0, boundaries=(8000,))
    with pytest.raises(ValueError):
        fleetopt(inp, out, 3.0, prof, 8000, 100.0, p_c=1.5)
    with pytest.raises(ValueError):
        size_pool(1.0, prof, 1000, inp, out, 1.0, rho_max=0.0)
