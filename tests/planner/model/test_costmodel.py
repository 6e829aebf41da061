"""Closed-form functions against hand-worked examples."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.model.costmodel import (
    alpha_at_threshold,
    annual_cost_usd,
    erlang_c,
    fluid_savings,
    instance_throughput_req_per_s,
    mix_stats,
    p99_wait_mgc_s,
    savings_closed_form,
    size_pool_mgc,
)
from planner.model.profiles import (
    A100_80GB,
    LLAMA3_70B,
    PROFILES,
    PoolProfile,
    kv_bytes_per_token,
    kv_capacity_tokens,
    max_num_seqs,
)


def _toy_profile(**kw: float) -> PoolProfile:
    base = dict(
        name="toy",
        model="toy",
        gpu="toy",
        tp=1,
        price_usd_per_gpu_h=1.0,
        kv_capacity_tokens=4 * 1000,
        block_size_tokens=16,
        max_num_seqs_cap=4,
        w_s=0.01,
        h_s_per_kv_token=0.0,
        p_s_per_prefill_token=0.0,
        chunk_tokens=10_000,
    )
    base.update(kw)
    return PoolProfile(**base)  # type: ignore[arg-type]


def test_savings_closed_form_hand_example() -> None:
    # α = 0.8, ρ = 4: 0.8 * (1 - 1/4) = 0.6 ; the paper's "ρ=4, α≈1 -> ~75%".
    assert savings_closed_form(0.8, 4.0) == pytest.approx(0.6)
    assert savings_closed_form(1.0, 4.0) == pytest.approx(0.75)
    with pytest.raises(ValueError):
        savings_closed_form(1.2, 4.0)
    with pytest.raises(ValueError):
        savings_closed_form(0.5, 0.0)


def test_alpha_counts_input_plus_output_inclusive() -> None:
    budgets = np.array([100, 8192, 8193, 20000], dtype=np.int64)
    assert alpha_at_threshold(budgets, 8192) == 0.5


def test_fluid_savings_reduces_to_closed_form_when_long_rate_equals_homogeneous() -> None:
    # μ_h = 2.8, μ_s = 4 * 2.8, μ_l = 2.8, α = 0.9 -> 0.9 * 0.75 = 0.675
    assert fluid_savings(0.9, 2.8, 11.2, 2.8) == pytest.approx(0.675)
    # Long requests twice as expensive as the average: G_d = 0.9/11.2 + 0.1/1.4 -> 1 - G_d*2.8 = 0.575
    assert fluid_savings(0.9, 2.8, 11.2, 1.4) == pytest.approx(1 - (0.9 / 11.2 + 0.1 / 1.4) * 2.8)


def test_kv_sizing_llama3_70b_on_8_a100() -> None:
    # 2 * 80 layers * 8 KV heads * 128 dims * 2 bytes = 327,680 B per token.
    assert kv_bytes_per_token(LLAMA3_70B) == 327_680
    # 8 x 80 GiB x 0.9 = 618,475,290,624 B; minus 141.2e9 B weights, minus 8 x 4 GiB reserve
    free = 8 * 80 * 2**30 * 0.9 - 70.6e9 * 2 - 8 * 4 * 2**30
    expect = int(free // 327_680)
    expect -= expect % 16
    got = kv_capacity_tokens(
        LLAMA3_70B, A100_80GB, tp=8, gpu_memory_utilization=0.9, non_kv_reserve_bytes_per_gpu=4 * 2**30
    )
    assert got == expect == 1_351_664
    with pytest.raises(ValueError):  # 70B BF16 does not fit on one A100
        kv_capacity_tokens(
            LLAMA3_70B, A100_80GB, tp=1, gpu_memory_utilization=0.9, non_kv_reserve_bytes_per_gpu=0
        )


def test_max_num_seqs_paper_numbers() -> None:
    # 65,536 blocks x 16 tokens: 16 sequences at 64K, 128 at 8K (docs/method.md §2 "16 vs 128").
    assert max_num_seqs(1_048_576, 65_536, 256) == 16
    assert max_num_seqs(1_048_576, 8_192, 256) == 128
    assert max_num_seqs(1_048_576, 1_024, 256) == 256
    with pytest.raises(ValueError):
        max_num_seqs(1000, 2000, 256)


def test_erlang_c_and_mm1_quantile() -> None:
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(1, 0.5) == pytest.approx(0.5)
    assert erlang_c(3, 3.5) == 1.0
    # M/M/1, λ=0.5, μ=1: P(W>t) = 0.5 e^{-0.5 t} exactly -> t99 = ln(50)/0.5
    assert p99_wait_mgc_s(1, 0.5, 1.0, cs2=1.0) == pytest.approx(math.log(50) / 0.5)
    assert p99_wait_mgc_s(1, 1.0, 1.0) == math.inf
    assert p99_wait_mgc_s(64, 1.0, 1.0) == 0.0


def test_instance_throughput_hand_example() -> None:
    # W = 10 ms, H = P = 0, 4 slots, every request 1 prefill iteration + 99 decode iterations = 100
    prof = _toy_profile()
    mix = mix_stats(np.array([50] * 10, dtype=np.int64), np.array([100] * 10, dtype=np.int64), 10_000)
    assert mix.mean_iters == 100
    assert mix.cs2_iters == 0
    assert instance_throughput_req_per_s(prof, 1000, mix) == pytest.approx(4.0)


def test_size_pool_mgc_matches_hand_computation() -> None:
    prof = _toy_profile()
    mix = mix_stats(np.array([50] * 10, dtype=np.int64), np.array([100] * 10, dtype=np.int64), 10_000)
    # μ per instance 4 req/s; λ = 10 req/s needs > 2.5 instances; check the SLO arithmetic of N = 3
    sized = size_pool_mgc(10.0, prof, 1000, mix, slo_ttft_p99_s=0.5)
    n = sized.instances
    w = p99_wait_mgc_s(4, 10.0 / n, 1.0, 0.0)
    assert w + 0.01 <= 0.5
    assert p99_wait_mgc_s(4, 10.0 / (n - 1), 1.0, 0.0) + 0.01 > 0.5
    assert sized.utilization == pytest.approx(10.0 / (4 * n))


def test_annual_cost() -> None:
    # 10 instances x 8 GPUs x $2.21 x 8760 h
    assert annual_cost_usd(10, PROFILES["llama3-70b-a100"]) == pytest.approx(10 * 8 * 2.21 * 8760)


def test_plan_sizes_pools_on_served_requests_when_estimates_misroute() -> None:
    """Under-estimated requests routed short but too long for it are retried long (not rejected), and
    the DES sizing counts them in the long pool, so the plan still meets the SLO."""
    from planner.des.plan import PlanInputs, run_plan
    from planner.des.sizing import Slo
    from planner.model.profiles import PROFILES
    from planner.workload.trace import build_trace

    rng = np.random.default_rng(4)
    n = 1200
    arr = np.cumsum(rng.exponential(1 / 20.0, n))
    inp = np.where(rng.random(n) < 0.05, 7000, 500).astype(np.int64)
    out = np.where(inp == 7000, 2000, 100).astype(np.int64)
    est = np.where(inp == 7000, 3000, inp).astype(np.int64)  # budget 5000 <= 8192: routed short
    trace = build_trace(arr, inp, out)
    res = run_plan(
        PlanInputs(
            trace=trace,
            profile=PROFILES["a100-simcompat"],
            short_max_tokens=8192,
            long_max_model_len=65536,
            slo=Slo(2.0),
            sweep_thresholds=(),
            est_input_tokens=est,
            jobs=1,
        )
    )
    d = res["des_two_pool"]
    assert d["slo_met"] and d["long_instances"] >= 1
    long_ = d["pools"]["long"]
    assert long_["load"]["lam_req_per_s"] == pytest.approx(trace.rate_req_per_s * float((inp == 7000).mean()))
    for pool in d["pools"].values():
        assert pool["block"]["rejection_rate"] == 0.0
