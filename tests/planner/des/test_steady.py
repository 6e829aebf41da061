"""Steady state before any SLO verdict; plan recommendations, given throughputs, trace merging,
CDF tails and input errors (issue 13)."""

from __future__ import annotations

import argparse
import bisect
import json
from pathlib import Path

import numpy as np
import pytest

from planner.cli import cmd_plan, cmd_simulate
from planner.des.plan import PlanInputs, run_plan
from planner.des.sizing import PoolJob, Slo, size_pool
from planner.des.srsim import cdf_from_trace
from planner.des.steady import pool_load, verdict
from planner.model.profiles import PoolProfile
from planner.report.plan_report import fmt_alpha
from planner.workload.trace import build_trace, merge_traces
from planner.workload.trace_loaders import load_trace
from tests.planner.toy import toy_profile
from tests.shared_data import AZURE_CONV

AZURE = AZURE_CONV.parent
needs_azure = pytest.mark.skipif(not AZURE.is_dir(), reason=f"Azure 2023 traces not found at {AZURE}")


def _profile(**kw: float) -> PoolProfile:
    return toy_profile(**{"max_num_seqs_cap": 4, **kw})


def _poisson(n: int, rate: float, out_tokens: int, seed: int = 0, in_tokens: int = 10):
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(1.0 / rate, n))
    return build_trace(arr, np.full(n, in_tokens), np.full(n, out_tokens))


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tbr")
    sub = p.add_subparsers(dest="command", required=True)
    cmd_plan.add_parser(sub)
    cmd_simulate.add_parser(sub)
    return p


def test_unstable_sizes_are_never_simulated_and_a_filling_queue_does_not_pass() -> None:
    """Toy pool: 4 slots x 10 ms x 50 iterations -> μ = 8 req/s per instance; λ = 30 req/s needs
    at least ⌊30/8⌋ + 1 = 4 instances. The search never simulates fewer; a hand-made run at 3
    instances (load 1.25) shows the second half's P99 far above the first and is not converged."""
    prof = _profile()
    trace = _poisson(3000, 30.0, 50)
    load = pool_load(trace, 30.0, prof, 1000)
    assert load.mu_req_per_s == pytest.approx(8.0)
    assert load.min_stable_instances == 4
    job = PoolJob("toy", trace, trace.duration_s * 1.0005, 30.0, prof, 1000, Slo(2.0), start_instances=1)
    res = size_pool(job)
    assert res["verdict"] == "meets"
    assert min(s["instances"] for s in res["steps"]) >= 4
    assert all(s["p99_ttft_first_half_s"] is not None for s in res["steps"])
    from planner.des.sizing import run_pool
    from planner.des.steady import RunLength

    block = run_pool(job, 3, RunLength(200.0, 20.0, 6000))
    assert block["p99_ttft_second_half_s"] > 1.5 * block["p99_ttft_first_half_s"]
    assert block["verdict"] in ("not converged", "misses")
    grow = {"requests": 5000, "rejection_rate": 0.0, "p99_ttft_s": 1.0}
    assert (
        verdict({**grow, "p99_ttft_first_half_s": 0.5, "p99_ttft_second_half_s": 1.5}, 2.0) == "not converged"
    )
    assert verdict({**grow, "p99_ttft_first_half_s": 0.9, "p99_ttft_second_half_s": 1.0}, 2.0) == "meets"


def test_plan_with_no_attainable_candidate_says_why_and_claims_no_saving() -> None:
    """A 5 ms SLO under a 10 ms iteration: every pool's TTFT floor is above it, nothing is simulated."""
    res = run_plan(
        PlanInputs(
            trace=_poisson(2000, 20.0, 20),
            profile=_profile(),
            short_max_tokens=512,
            long_max_model_len=4096,
            slo=Slo(0.005),
            sweep_thresholds=(256,),
            jobs=1,
        )
    )
    assert res["recommended_threshold_tokens"] is None
    assert any("TTFT floor" in c for c in res["des"]["no_recommendation"])
    assert all("savings_vs_homogeneous" not in f for f in res["des_sweep"])
    assert all(not s["steps"] for s in res["des_homogeneous"]["pools"].values())


def test_long_pool_without_sampled_requests_is_still_sized_and_costed() -> None:
    trace = _poisson(2000, 20.0, 20)
    common = dict(
        trace=trace, profile=_profile(), short_max_tokens=512, long_max_model_len=4096, slo=Slo(2.0),
        sweep_thresholds=(), jobs=1,
    )  # fmt: skip
    needed = run_plan(PlanInputs(**common, loaded_max_budget_tokens=3000))
    d = needed["des_two_pool"]
    assert d["long_instances"] == 1 and "no sampled request" in d["pools"]["long"]["note"]
    assert d["instances"] == d["short_instances"] + 1
    assert d["usd_per_year"] == pytest.approx(d["instances"] * 8760.0)
    none = run_plan(PlanInputs(**common))
    assert none["des_two_pool"]["long_instances"] == 0
    assert none["des_two_pool"]["pools"]["long"]["note"] == "no long traffic in this trace"


def test_given_throughputs_give_the_papers_358_baseline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cdf = tmp_path / "cdf.json"
    cdf.write_text(json.dumps([[512, 0.5], [2048, 0.8], [8192, 0.97], [32768, 1.0]]))
    args = _parser().parse_args(
        ["plan", "--trace", str(cdf), "--rate", "1000", "--min-requests", "20000", "--no-des",
         "--mu-short-req-per-s", "11.2", "--mu-long-req-per-s", "2.8"]
    )  # fmt: skip
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "homogeneous ceil(1,000/2.8) = 358 instances" in out


def test_b_at_or_above_the_largest_pool_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cdf = tmp_path / "cdf.json"
    cdf.write_text(json.dumps([[512, 0.5], [32768, 1.0]]))
    args = _parser().parse_args(["plan", "--trace", str(cdf), "--short-max-tokens", "65536", "--no-des"])
    assert args.func(args) == 2
    assert "not below the largest pool's max_model_len 65536" in capsys.readouterr().err


def test_simulate_refuses_an_unstable_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cdf = tmp_path / "cdf.json"
    cdf.write_text(json.dumps([[512, 0.5], [2048, 1.0]]))
    args = _parser().parse_args(
        ["simulate", "--trace", str(cdf), "--rate", "1000", "--min-requests", "5000", "--profile",
         "a100-simcompat", "--pool", "short:8192:5", "--pool", "long:65536:1"]
    )  # fmt: skip
    assert args.func(args) == 1
    assert "pool short is unstable" in capsys.readouterr().err


def test_trace_errors_name_the_column_and_the_dropped_rows(tmp_path: Path) -> None:
    from planner.workload.trace import TraceError

    header_only = tmp_path / "h.csv"
    header_only.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(TraceError, match="no data rows"):
        load_trace(header_only, "azure")
    missing = tmp_path / "m.csv"
    missing.write_text("TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    with pytest.raises(TraceError, match="needs column\\(s\\) ContextTokens"):
        load_trace(missing, "azure")
    with pytest.raises(TraceError, match=r"2 rows read; dropped 2 rows: invalid JSON line"):
        load_trace(missing, "mooncake")


def test_alpha_is_printed_with_enough_digits() -> None:
    assert fmt_alpha(0.999948) == "0.999948"
    assert fmt_alpha(0.9) == "0.9000"
    assert fmt_alpha(1.0).startswith("1")


@needs_azure
def test_merged_traces_keep_their_shared_clock_and_cdf_tail_is_exact() -> None:
    parts = [load_trace(AZURE / f"AzureLLMInferenceTrace_{n}.csv")[0] for n in ("code", "conv")]
    merged, note = merge_traces(parts)
    assert "shared wall clock" in note
    assert merged.rate_req_per_s == pytest.approx(8.0225, abs=5e-4)
    cdf = cdf_from_trace(merged)
    ts = [p[0] for p in cdf]
    k = bisect.bisect_left(ts, 8192)
    (t0, f0), (t1, f1) = cdf[k - 1], cdf[k]
    above = 1.0 - (f0 + (f1 - f0) * (8192 - t0) / (t1 - t0))
    assert above == pytest.approx(float((merged.total_tokens > 8192).mean()), abs=1e-9)
    assert above < 1e-4


def test_load_balancing_is_an_input_and_the_plan_shows_how_the_answer_moves() -> None:
    """Every policy sizes the homogeneous baseline and both pools with the same policy."""
    res = run_plan(
        PlanInputs(
            trace=_poisson(3000, 30.0, 50),
            profile=_profile(),
            short_max_tokens=512,
            long_max_model_len=4096,
            slo=Slo(1.0),
            sweep_thresholds=(),
            jobs=1,
            lb="p2c",
            lb_compare=True,
            loaded_max_budget_tokens=3000,
        )
    )
    cmp_ = res["lb_compare"]
    assert res["des"]["lb"] == "p2c"
    assert set(cmp_) == {"threshold_tokens", "round_robin", "least_loaded", "p2c"}
    for policy in ("round_robin", "least_loaded", "p2c"):
        assert cmp_[policy]["homogeneous"]["slo_met"] and cmp_[policy]["two_pool"]["slo_met"]
        assert cmp_[policy]["homogeneous"]["instances"] >= 4  # ⌊30/8⌋ + 1
    # p2c balances worse than round robin on equal requests: never fewer instances
    assert cmp_["p2c"]["homogeneous"]["instances"] >= cmp_["round_robin"]["homogeneous"]["instances"]
