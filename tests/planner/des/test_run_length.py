"""Run length from the relaxation time, batch-means verdicts, fresh CDF draws, verified search (issue 13)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from planner.des.result import BATCHES
from planner.des.sizing import PoolJob, Slo, pool_trace, size_pool
from planner.des.steady import (
    T95_ONE_SIDED,
    PoolLoad,
    p99_upper_s,
    relaxation_time_s,
    run_length,
    verdict,
)
from planner.workload.cdf_source import CdfSource
from planner.workload.trace import NormalizationReport, Trace, build_trace
from planner.workload.trace_loaders import load_cdf
from tests.planner.toy import toy_profile

POINTS = ((512, 0.5), (2048, 0.8), (8192, 0.97), (32768, 1.0))


def test_relaxation_time_grows_like_one_over_one_minus_root_rho_squared() -> None:
    load = PoolLoad(lam_req_per_s=90.0, mu_req_per_s=1.0, service_p99_s=5.0, min_stable_instances=91,
                    service_cs2=1.0, service_max_s=8.0)  # fmt: skip
    for n in (100, 120, 200):
        rho = 90.0 / n
        assert relaxation_time_s(load, n) == pytest.approx(1.0 / (1.0 - math.sqrt(rho)) ** 2)
    assert relaxation_time_s(load, 90) == math.inf
    lengths = [run_length(load, 2.0, n) for n in (95, 100, 120, 200)]
    assert [x.duration_s for x in lengths] == sorted((x.duration_s for x in lengths), reverse=True)
    far = lengths[-1]
    # far from saturation the service tail sets the batch: BATCHES x (S_tail + SLO) after the warm-up
    assert far.steady_duration_s == pytest.approx(
        2 * 10.0 + 5 * far.relaxation_s + BATCHES * max(10.0, 2 * far.relaxation_s, 1000 / 90.0)
    )
    near = run_length(load, 2.0, 91, max_requests=1_000_000)
    assert near.capped and near.requests <= 1_000_000 + 1


def test_batch_means_verdicts() -> None:
    base = {"requests": 50_000, "rejection_rate": 0.0, "p99_ttft_s": 1.0, "p99_ttft_first_half_s": 1.0,
            "p99_ttft_second_half_s": 1.0}  # fmt: skip
    steady = [1.0, 1.1, 0.9, 1.0, 1.05, 0.95, 1.0, 1.1, 0.9, 1.0][:BATCHES]
    assert verdict({**base, "p99_ttft_batches_s": steady}, 2.0) == "meets"
    growing = list(np.linspace(0.2, 1.8, BATCHES))
    assert verdict({**base, "p99_ttft_batches_s": growing}, 2.0) == "not converged"
    noisy = [0.3, 6.0, 0.3, 0.3, 5.0, 0.3, 0.3, 4.0, 0.3, 0.3][:BATCHES]
    block = {**base, "p99_ttft_batches_s": noisy}
    upper = p99_upper_s(block)
    assert upper == pytest.approx(1.0 + T95_ONE_SIDED * float(np.std(noisy, ddof=1)) / math.sqrt(BATCHES))
    assert upper is not None and upper > 2.0 and verdict(block, 2.0) == "misses"


def test_cdf_source_draws_the_restricted_distribution_like_load_cdf() -> None:
    src = CdfSource(POINTS, 1000.0)
    assert src.share() == pytest.approx(1.0)
    assert src.share(8192) == pytest.approx(0.03)
    assert src.share(0, 2048) == pytest.approx(0.8)
    ref, _ = load_cdf_points_trace(200_000)
    long_ = src.sample(200.0, seed=3, lo_tokens=8192)
    assert long_.total_tokens.min() > 8192 and long_.total_tokens.max() <= 32768
    assert long_.rate_req_per_s == pytest.approx(30.0, rel=0.05)
    ref_long = ref.total_tokens[ref.total_tokens > 8192]
    assert np.median(long_.total_tokens) == pytest.approx(np.median(ref_long), rel=0.03)
    again = src.sample(200.0, seed=3, lo_tokens=8192)
    assert np.array_equal(again.arrival_s, long_.arrival_s) and np.array_equal(
        again.input_tokens, long_.input_tokens
    )
    with pytest.raises(ValueError, match="no mass"):
        src.sample(10.0, seed=0, lo_tokens=40_000)


def load_cdf_points_trace(n: int) -> tuple[Trace, NormalizationReport]:
    import json
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "cdf.json"
        path.write_text(json.dumps([list(p) for p in POINTS]))
        return load_cdf(path, n_requests=n, rate_req_per_s=1000.0, seed=0)


def test_a_cdf_pool_draws_fresh_requests_for_its_whole_run_instead_of_replaying_a_sample() -> None:
    """A 220-request sample tiled for a long run replays the same requests; the CDF source draws new ones."""
    src = CdfSource(POINTS, 1000.0)
    small = src.sample(7.0, seed=1, lo_tokens=8192)
    job = PoolJob("long", small, 7.0, 30.0, toy_profile(), 65536, Slo(2.0), start_instances=1)
    length = run_length(PoolLoad(30.0, 1.0, 1.0, 31), 2.0, 40)
    tiled = pool_trace(job, length)
    fresh = pool_trace(PoolJob(**{**job.__dict__, "source": src, "range_tokens": (8192, 2**62)}), length)
    assert len(np.unique(tiled.input_tokens)) <= len(small)
    assert len(np.unique(fresh.input_tokens)) > 3 * len(small)
    assert fresh.arrival_s[-1] <= length.duration_s and tiled.arrival_s[-1] <= length.duration_s


def test_search_verifies_the_answer_with_a_replication_and_its_predecessor_fails() -> None:
    """Toy pool (4 slots x 10 ms x 50 iterations = 8 req/s per instance) at 30 req/s."""
    rng = np.random.default_rng(0)
    arr = np.cumsum(rng.exponential(1.0 / 30.0, 4000))
    trace = build_trace(arr, np.full(4000, 10), rng.integers(10, 90, 4000))
    job = PoolJob("toy", trace, trace.duration_s * 1.0003, 30.0, toy_profile(max_num_seqs_cap=4), 1000,
                  Slo(0.5), start_instances=1)  # fmt: skip
    res = size_pool(job)
    n = res["instances"]
    assert res["verdict"] == "meets"
    by = {(s["instances"], s["replication"]): s["verdict"] for s in res["steps"]}
    assert by[(n, 0)] == "meets" and by[(n, 1)] == "meets"
    assert by.get((n - 1, 0), "unstable") != "meets"
    assert all(v == "meets" for (k, _), v in by.items() if k > n)
    again = size_pool(job)
    assert again["instances"] == n and [s["verdict"] for s in again["steps"]] == [
        s["verdict"] for s in res["steps"]
    ]


def test_round_robin_share_of_k_instances_is_exact() -> None:
    """Under round robin the first k of N instances see requests j mod N < k: simulating just them
    gives the same TTFTs they have in the full pool (tiled trace and CDF draws alike)."""
    from planner.des import PoolSpec, simulate
    from planner.des.pool_stream import rr_indices, tiled_stream
    from planner.des.routers import make_router

    prof = toy_profile(max_num_seqs_cap=2)
    rng = np.random.default_rng(1)
    base = build_trace(np.cumsum(rng.exponential(1 / 20.0, 600)), np.full(600, 10), rng.integers(5, 60, 600))
    period = base.duration_s + 0.05
    for n, k in ((6, 2), (5, 5), (7, 1)):
        full = tiled_stream(base, period, 3.3, 80.0)
        sub = tiled_stream(base, period, 3.3, 80.0, n, k)
        assert np.array_equal(sub.input_tokens, full.input_tokens[rr_indices(len(full), n, k)])
        r_full = simulate(full, [PoolSpec("p", prof, 1000, n)], make_router("homogeneous"))
        r_sub = simulate(sub, [PoolSpec("p", prof, 1000, k)], make_router("homogeneous"))
        assert np.allclose(r_sub.ttft_s, r_full.ttft_s[rr_indices(len(full), n, k)])
    src = CdfSource(POINTS, 50.0)
    drawn = src.sample(2000.0, seed=4, instances=10, kept=3)
    gaps = np.diff(drawn.arrival_s)
    assert len(drawn) / drawn.duration_s == pytest.approx(50.0 * 3 / 10, rel=0.05)
    # within a rotation: exponential gaps (mean 1/λ); across: gamma with 10 − 3 + 1 = 8 gaps
    assert np.mean(gaps[0::3][:-1]) + np.mean(gaps[1::3]) + np.mean(gaps[2::3]) == pytest.approx(
        10 / 50.0, rel=0.05
    )
