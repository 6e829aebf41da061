"""The engine check's pieces without a server (issue 32 item 3): the scaled slice, the comparison, the
per-sequence / prefill-attention / per-request terms in the fit and in the DES. The replay against
real vLLM is tests/vllm/test_vllm_engine_check.py."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np
import pytest

from planner.cli import cmd_engine_check
from planner.des.engine_check import (
    compare,
    scaled_profile,
    scaled_slice,
    simulate_workload,
    slowest_requests,
    speed_matched,
)
from planner.model.costmodel import ttft_floor_s
from planner.model.profile_fit import Measurement, fit_iteration_model
from planner.workload.trace import build_trace
from tests.planner.toy import toy_profile


def test_scaled_slice_scales_tokens_and_rate_and_clips_to_max_model_len() -> None:
    trace = build_trace([0.0, 1.0, 3.0, 4.0], [100, 3001, 7, 900], [40, 500, 1, 3])
    sl = scaled_slice(trace, requests=3, offset=1, token_scale=0.5, rate_req_per_s=2.0, max_model_len=1500)
    assert sl.input_tokens.tolist() == [1499, 4, 450]  # 1500.5 clipped to leave one output token
    assert sl.output_tokens.tolist() == [1, 1, 2]  # 250 cut to fit 1,500; 0.5 -> at least 1
    assert sl.arrival_s.tolist() == pytest.approx([0.0, 1.0, 1.5])  # 3 requests / 1.5 s = 2 req/s
    with pytest.raises(ValueError, match="< 2 requests"):
        scaled_slice(trace, requests=5, offset=3, rate_req_per_s=1.0, max_model_len=4096)


def test_compare_rows_and_targets() -> None:
    meas = {"ttft_p50_s": 0.1, "ttft_p99_s": 1.0, "output_tokens_per_s": 100.0, "requests_per_s": 1.0,
            "preemptions": 0}  # fmt: skip
    sim = {"ttft_p50_s": 0.12, "ttft_p99_s": 1.3, "output_tokens_per_s": 90.0, "requests_per_s": 1.0,
           "preemptions": 2}  # fmt: skip
    rows = {r.metric: r for r in compare(meas, sim)}
    assert rows["ttft_p50_s"].rel_diff == pytest.approx(0.2) and rows["ttft_p50_s"].within is False
    assert rows["ttft_p99_s"].within is False and rows["output_tokens_per_s"].within is True
    assert rows["preemptions"].target is None and math.isinf(rows["preemptions"].rel_diff)


def test_fit_recovers_per_sequence_attention_and_overhead_terms() -> None:
    """Timings made from W 5 ms, S 0.4 ms/sequence, H 0.1 µs/token, P 20 µs/token, A 40 ns/token²,
    R 9 ms (chunk 2,048) are fitted back exactly."""
    w, s, h, p, a, r, out = 0.005, 0.0004, 1e-7, 2e-5, 4e-8, 0.009, 32
    ms = []
    for c in (1, 4, 8):
        for n in (64, 512, 1024, 2048):
            ctx = n + out / 2
            ttft = r + w + s + h * ctx + p * n + a * n * n / 2 if c == 1 else 9.9
            ms.append(Measurement(c, n, out, ttft, w + s * c + h * c * ctx))
    fit = fit_iteration_model(ms, 2048)
    got = (fit.w_s, fit.s_s_per_running_seq, fit.h_s_per_kv_token, fit.p_s_per_prefill_token,
           fit.a_s_per_prefill_context_token, fit.request_overhead_s)  # fmt: skip
    assert got == pytest.approx((w, s, h, p, a, r), rel=1e-5)


def test_des_iteration_has_the_per_sequence_attention_and_overhead_terms() -> None:
    """One request of 1,000 prompt tokens and 3 output tokens alone: TTFT = R + W + S + A·1000²/2 =
    5 + 10 + 2 + 5 ms; then 2 decode iterations of W + S = 12 ms each."""
    prof = toy_profile(
        s_s_per_running_seq=0.002, a_s_per_prefill_context_token=1e-8, request_overhead_s=0.005
    )
    trace = build_trace([0.0, 10.0], [1000, 1000], [3, 3])
    m = simulate_workload(trace, prof, 4096)
    assert m["ttft_p50_s"] == pytest.approx(0.022)
    assert m["span_s"] == pytest.approx(10.0 + 0.017 + 2 * 0.012)
    assert ttft_floor_s(prof, np.array([1000]), np.array([3]))[0] == pytest.approx(0.022)


def test_engine_check_refuses_a_slice_without_requests(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "one.csv"
    trace.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    p = argparse.ArgumentParser(prog="tbr")
    cmd_engine_check.add_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(
        ["engine-check", "--url", "http://127.0.0.1:9", "--model", "m", "--trace", str(trace), "--rate", "1",
         "--max-model-len", "4096", "--max-num-seqs", "8", "--max-num-batched-tokens", "2048"]
    )  # fmt: skip
    assert args.func(args) == 2
    assert "< 2 requests" in capsys.readouterr().err


def test_speed_matched_recovers_an_engine_twice_as_slow() -> None:
    """Metrics of a run on the profile with every time constant doubled: matching the mean time per
    output token from the undoubled profile finds the factor 2 and the same TTFTs."""
    prof = toy_profile(s_s_per_running_seq=0.002, h_s_per_kv_token=1e-6, max_num_seqs_cap=4)
    rng = np.random.default_rng(0)
    trace = build_trace(np.sort(rng.uniform(0, 20, 60)), rng.integers(10, 500, 60), rng.integers(2, 40, 60))
    slow = simulate_workload(trace, scaled_profile(prof, 2.0), 4096)
    factor, matched = speed_matched(trace, prof, 4096, slow["tpot_mean_s"])
    assert factor == pytest.approx(2.0, rel=1e-3)
    assert matched["ttft_p99_s"] == pytest.approx(slow["ttft_p99_s"], rel=1e-2)
    assert speed_matched(trace, prof, 4096, math.nan)[0] == 1.0


def test_format_table_units() -> None:
    meas = {"ttft_p50_s": 0.02, "ttft_p99_s": 1.0, "output_tokens_per_s": 125.5, "requests_per_s": 1.5,
            "preemptions": 3, "tpot_mean_s": 0.007}  # fmt: skip
    rows = [r.__dict__ for r in compare(meas, meas)]
    res = {
        "rate_req_per_s": 1.5,
        "load_average_1m": 4.4,
        "speed_factor": 1.0,
        "rows": rows,
        "rows_speed_matched": rows,
        "slowest": [{"request": 7, "prompt_tokens": 2044, "measured_ttft_s": 0.44, "simulated_ttft_s": 0.59}],
    }
    text = "\n".join(cmd_engine_check.format_table([res]))
    assert "#7 (2044 tokens) 0.44 s / 0.59 s" in text
    assert "125.5 " in text and "125.5 s" not in text and "0.02 s" in text and "±15% ok" in text


def test_simulated_ttft_splits_into_queue_prefill_and_overhead() -> None:
    """Toy 10 ms steps, R 5 ms, one slot: A (arrives 0) prefills in one step and decodes 4 more;
    B arrives at 1 ms and waits for A's last step (50 ms): queue 49 ms, prefill 10 ms, TTFT 64 ms.
    The parts are vLLM's request_queue_time / request_prefill_time and the overhead outside them."""
    prof = toy_profile(max_num_seqs_cap=1, request_overhead_s=0.005)
    trace = build_trace([0.0, 0.001], [100, 100], [5, 5])
    m = simulate_workload(trace, prof, 4096)
    assert m["queue_mean_s"] == pytest.approx((0.0 + 0.049) / 2)
    assert m["prefill_mean_s"] == pytest.approx(0.01)
    assert m["overhead_s"] == 0.005
    assert m["ttft_per_request_s"] == pytest.approx([0.015, 0.064])
    assert m["ttft_mean_s"] == pytest.approx(m["queue_mean_s"] + m["prefill_mean_s"] + m["overhead_s"])


def test_speed_matched_takes_the_overhead_measured_during_the_replay() -> None:
    """R changes no schedule: with R measured as 20 ms instead of the profile's 5 ms every TTFT moves
    by 15 ms, the factor stays; a negative or NaN measurement keeps the profile's R."""
    prof = toy_profile(s_s_per_running_seq=0.002, max_num_seqs_cap=4, request_overhead_s=0.005)
    rng = np.random.default_rng(1)
    trace = build_trace(np.sort(rng.uniform(0, 10, 30)), rng.integers(10, 500, 30), rng.integers(2, 40, 30))
    slow = simulate_workload(trace, scaled_profile(prof, 1.5), 4096)
    f_plain, plain = speed_matched(trace, prof, 4096, slow["tpot_mean_s"])
    f_r, with_r = speed_matched(trace, prof, 4096, slow["tpot_mean_s"], measured_overhead_s=0.02)
    assert f_r == pytest.approx(f_plain) and with_r["overhead_s"] == 0.02
    assert with_r["ttft_p50_s"] - plain["ttft_p50_s"] == pytest.approx(0.02 - 0.005 * f_plain)
    assert speed_matched(trace, prof, 4096, slow["tpot_mean_s"], measured_overhead_s=math.nan)[1] == plain


def test_slowest_requests_are_the_measured_longest_ttfts() -> None:
    trace = build_trace([0.0, 1.0, 2.0, 3.0], [10, 20, 30, 40], [1, 1, 1, 1])
    meas = {"ttft_per_request_s": [0.1, math.nan, 0.9, 0.5]}
    sim = {"ttft_per_request_s": [0.2, 0.3, 0.4, 0.6]}
    got = slowest_requests(trace, meas, sim, count=2)
    assert [(x["request"], x["prompt_tokens"]) for x in got] == [(2, 30), (3, 40)]
    assert (got[0]["measured_ttft_s"], got[0]["simulated_ttft_s"]) == (0.9, 0.4)
