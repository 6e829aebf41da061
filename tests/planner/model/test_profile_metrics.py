"""`tbr profile --from-metrics`: the iteration-time fit from vLLM's Prometheus histograms, offline.

Expositions written here follow vLLM 0.32's /metrics (names of vllm/v1/metrics/loggers.py). A fleet
with W = 5 ms, H = 1 µs/token and P = 20 µs/token, prefill chunk 2,048:

- interval 1: batch 2, 20 requests of 500 + 100 tokens: context 2·550 = 1,100 -> ITL 6.1 ms, prefill
  6.1 + 10 = 16.1 ms;
- interval 2: batch 10, 30 requests of 1,000 + 200 tokens: context 11,000 -> ITL 16 ms, prefill 36 ms.

Instance A's scrapes carry vLLM's per-step counters (generated tokens / engine steps = the batch);
instance B's do not, and its batch is the running gauge's mean.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from planner.cli import cmd_profile
from planner.model.profile_file import load_profile_file
from planner.model.profile_metrics import fit_from_snapshots, intervals, parse_exposition, read_snapshot

W, H, P = 0.005, 1e-6, 20e-6


def _histogram(name: str, count: float, total: float) -> str:
    return (
        f"# HELP {name} x\n# TYPE {name} histogram\n"
        f'{name}_bucket{{le="+Inf",model_name="m"}} {count}\n'
        f'{name}_count{{model_name="m"}} {count}\n{name}_sum{{model_name="m"}} {total}\n'
    )


def _exposition(reqs: float, tokens: float, itl_total: float, prompt: float, gen: float, prefill: float,
                running: float, steps: float | None = None) -> str:  # fmt: skip
    per_step = "" if steps is None else (
        _histogram("vllm:iteration_tokens_total", steps, gen + prompt)
        + f"# HELP vllm:generation_tokens x\n# TYPE vllm:generation_tokens counter\n"
        f'vllm:generation_tokens_total{{model_name="m"}} {gen}\n'
    )  # fmt: skip
    return per_step + (
        "# HELP vllm:num_requests_running x\n# TYPE vllm:num_requests_running gauge\n"
        f'vllm:num_requests_running{{model_name="m"}} {running}\n'
        "# HELP vllm:cache_config_info x\n# TYPE vllm:cache_config_info gauge\n"
        'vllm:cache_config_info{block_size="16",num_gpu_blocks="1000"} 1.0\n'
        + _histogram("vllm:inter_token_latency_seconds", tokens, itl_total)
        + _histogram("vllm:request_prompt_tokens", reqs, prompt)
        + _histogram("vllm:request_generation_tokens", reqs, gen)
        + _histogram("vllm:request_prefill_time_seconds", reqs, prefill)
    )


def _scrapes(tmp_path: Path) -> list[Path]:
    itl1, pre1 = W + H * 1100, W + H * 1100 + P * 500
    itl2, pre2 = W + H * 11000, W + H * 11000 + P * 1000
    # instance A: 2,000 tokens in 1,000 steps (batch 2); the gauge reads 0 (scraped when idle)
    s0 = _exposition(0, 0, 0, 0, 0, 0, 0, steps=0)
    # 20 requests x 99 inter-token gaps; then 30 x 199
    s1 = _exposition(20, 1980, 1980 * itl1, 20 * 500, 20 * 100, 20 * pre1, 0, steps=1000)
    s1g = _exposition(20, 1980, 1980 * itl1, 20 * 500, 20 * 100, 20 * pre1, 2)
    s2 = _exposition(50, 1980 + 5970, 1980 * itl1 + 5970 * itl2, 10000 + 30000, 2000 + 6000,
                     20 * pre1 + 30 * pre2, 10)  # fmt: skip
    s1b = s1g.replace(
        'vllm:num_requests_running{model_name="m"} 2', 'vllm:num_requests_running{model_name="m"} 10'
    )
    paths = []
    for i, text in enumerate((s0, s1, s1b, s2)):
        p = tmp_path / f"scrape{i}.txt"
        p.write_text(text, encoding="utf-8")
        paths.append(p)
    return paths


def test_intervals_and_fit_recover_the_constants(tmp_path: Path) -> None:
    s0, s1, s1b, s2 = (read_snapshot(str(p)) for p in _scrapes(tmp_path))
    assert s1.kv_capacity_tokens == 16_000 and s1.block_size_tokens == 16
    # instance A: an interval at batch 2 (from its step counters); instance B: batch 10 (gauge)
    a = intervals([s0, s1])
    assert len(a) == 1 and a[0].requests == 20 and a[0].running == 2
    assert a[0].itl_s == pytest.approx(W + H * 1100)
    assert a[0].batch_context_tokens == pytest.approx(1100)
    b = intervals([s1b, s2])
    assert b[0].batch_context_tokens == pytest.approx(10 * 1100)
    assert b[0].prefill_s == pytest.approx(W + H * 11000 + P * 1000)
    fit = fit_from_snapshots([[s0, s1], [s1b, s2]], chunk_tokens=2048)
    assert (fit.w_s, fit.h_s_per_kv_token, fit.p_s_per_prefill_token) == pytest.approx((W, H, P), rel=1e-6)
    assert fit.tpot_max_rel_error < 1e-9 and fit.rows == 4


def test_one_load_level_is_refused_and_a_single_scrape_counts_since_start(tmp_path: Path) -> None:
    s0, s1, _, _ = (read_snapshot(str(p)) for p in _scrapes(tmp_path))
    with pytest.raises(ValueError, match="different loads"):
        fit_from_snapshots([[s0, s1]], chunk_tokens=2048)
    since_start = intervals([s1])
    assert len(since_start) == 1 and since_start[0].requests == 20
    assert intervals([s1, s0]) == []  # counters went down: a restart, no interval


def test_bad_expositions_are_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no vLLM histogram"):
        parse_exposition("# TYPE x counter\nx_total 1\n", "t")
    with pytest.raises(ValueError, match="missing"):
        read_snapshot(str(tmp_path / "missing.txt"))


def test_cli_writes_a_profile_from_saved_scrapes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s0, s1, s1b, s2 = _scrapes(tmp_path)
    p = argparse.ArgumentParser(prog="tbr")
    cmd_profile.add_parser(p.add_subparsers(dest="command", required=True))
    out = tmp_path / "fleet.json"
    args = p.parse_args(["profile", "--from-metrics", f"{s0},{s1}", "--from-metrics", f"{s1b},{s2}",
                         "--out", str(out), "--chunk-tokens", "2048", "--price-usd-per-gpu-h", "2.5"])  # fmt: skip
    assert args.func(args) == 0, capsys.readouterr().err
    prof = load_profile_file(out)
    assert (prof.w_s, prof.h_s_per_kv_token, prof.p_s_per_prefill_token) == pytest.approx((W, H, P), rel=1e-6)
    assert (prof.kv_capacity_tokens, prof.admission, prof.price_usd_per_gpu_h) == (16_000, "vllm", 2.5)
    assert "2 intervals of 2 instance(s)" in prof.source
    bad = p.parse_args(["profile", "--from-metrics", str(s1), "--out", str(tmp_path / "x.json")])
    assert bad.func(bad) == 1
    assert "different loads" in capsys.readouterr().err


REAL = Path(__file__).parent / "data"


def test_saved_real_vllm_scrapes() -> None:
    """Three /metrics scrapes of a real vLLM 0.32 CPU server (tiny Qwen3, max_num_seqs 8, 512 KV blocks of
    128 tokens), taken before, between and after two bursts: 6 requests one at a time, then 3 rounds of
    4 at once (511-token prompts, 16 output tokens). Trimmed to the families the fit reads."""
    snaps = [read_snapshot(str(REAL / f"vllm032_scrape{i}.txt")) for i in range(3)]
    assert snaps[-1].kv_capacity_tokens == 512 * 128 and snaps[-1].block_size_tokens == 128
    assert snaps[-1].generated_tokens == 16 * (6 + 12)
    one, four = intervals(snaps)
    assert (one.requests, four.requests) == (6, 12)
    assert one.running == pytest.approx(1.0)  # 96 tokens in 96 steps
    assert 3.0 < four.running <= 4.0  # 4-wide rounds, each ramping up and draining
    assert (one.prompt_tokens, one.output_tokens) == (511, 16)
    fit = fit_from_snapshots([snaps], chunk_tokens=2048)
    assert fit.w_s > 0 and fit.h_s_per_kv_token >= 0 and fit.p_s_per_prefill_token >= 0
    assert (
        fit.tpot_max_rel_error < 0.2
    )  # the decode rows; the tiny model's step time barely grows with the batch
