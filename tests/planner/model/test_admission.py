"""vLLM's admission (issue 32 item 1) against the paper's convention: defaults, DES, cost model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from planner.des import PoolSpec, simulate
from planner.des.plan import other_admission_profile
from planner.des.routers import make_router
from planner.model.costmodel import concurrency, instance_throughput_req_per_s, mix_stats
from planner.model.profiles import GIB, PROFILES, vllm_scheduler_defaults, with_admission
from planner.model.vllm_args import vllm_serve_args
from planner.workload.trace import build_trace
from tests.planner.toy import toy_profile


def test_vllm_defaults_follow_the_device_as_vllm_032_does() -> None:
    """vLLM 0.32 get_batch_defaults (OpenAI server): A100 256/2048 even at 80 GiB, H100 1024/8192,
    >= 160 GiB (MI300X's 192 GB) 1024/16384, a small GPU 256/2048."""
    a100 = vllm_scheduler_defaults(80 * GIB, "A100-80GB")
    h100 = vllm_scheduler_defaults(80 * GIB, "H100-80GB")
    mi300 = vllm_scheduler_defaults(192e9, "MI300X")
    small = vllm_scheduler_defaults(24 * GIB, "L4")
    assert (a100.max_num_seqs, a100.max_num_batched_tokens) == (256, 2048)
    assert (h100.max_num_seqs, h100.max_num_batched_tokens) == (1024, 8192)
    assert (mi300.max_num_seqs, mi300.max_num_batched_tokens) == (1024, 16384)
    assert (small.max_num_seqs, small.max_num_batched_tokens) == (256, 2048)


def test_with_admission_vllm_slots_do_not_depend_on_max_model_len() -> None:
    base = PROFILES["llama3-70b-a100"]
    v = with_admission(base, "vllm")
    assert v.admission == "vllm" and v.max_num_batched_tokens == 2048 and v.chunk_tokens == 2048
    # the paper's convention: a long instance gets floor(KV / 65536) slots; vLLM its max_num_seqs
    assert base.max_num_seqs(65536) == base.kv_capacity_tokens // 65536 < 256
    assert v.max_num_seqs(65536) == v.max_num_seqs(8192) == 256
    given = with_admission(base, "vllm", max_num_seqs=64, max_num_batched_tokens=4096)
    assert given.max_num_seqs(65536) == 64 and given.max_num_batched_tokens == 4096
    with pytest.raises(ValueError, match="exceeds the KV capacity"):
        v.max_num_seqs(v.kv_capacity_tokens + 1)
    with pytest.raises(ValueError, match="unknown admission"):
        with_admission(base, "fcfs")
    assert other_admission_profile(v) == base
    assert other_admission_profile(base) == v


def test_concurrency_is_bounded_by_kv_on_demand_under_vllm() -> None:
    """vLLM: n = min(max_num_seqs, floor(KV / mean context)); paper: floor(KV / max_model_len)."""
    prof = toy_profile(kv_capacity_tokens=10_000, max_num_seqs_cap=64)
    v = with_admission(prof, "vllm", max_num_batched_tokens=4096)
    mix = mix_stats(np.full(100, 400, dtype=np.int64), np.full(100, 200, dtype=np.int64), 4096)
    # mean context = 400 + 200/2 = 500 tokens -> 20 sequences fit the KV on demand
    assert concurrency(v, 2000, mix) == 20
    assert concurrency(prof, 2000, mix) == 5  # floor(10000 / 2000)
    assert instance_throughput_req_per_s(v, 2000, mix) == pytest.approx(
        4 * instance_throughput_req_per_s(prof, 2000, mix)
    )


def _trace(n: int, rate: float, inp: int, out: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(1.0 / rate, n))
    return build_trace(arr, np.full(n, inp, dtype=np.int64), np.full(n, out, dtype=np.int64))


def test_des_vllm_admits_past_the_papers_slots_and_the_queue_shrinks() -> None:
    """KV of 4 x max_model_len, short requests: the paper runs 4 at a time and queues; vLLM's
    scheduler admits up to max_num_seqs (16) because each request holds far less than max_model_len."""
    prof = toy_profile(kv_capacity_tokens=4 * 2000, max_num_seqs_cap=16, chunk_tokens=512)
    trace = _trace(4000, 60.0, 100, 10)  # 0.1 s service, 60 req/s: 6 busy on average
    paper = simulate(trace, [PoolSpec("p", prof, 2000, 1)], make_router("homogeneous"), check_invariants=True)
    vllm = simulate(
        trace,
        [PoolSpec("p", with_admission(prof, "vllm", max_num_batched_tokens=2048), 2000, 1)],
        make_router("homogeneous"),
        check_invariants=True,
    )
    assert vllm.summary()["pools"]["p"]["mean_running_per_instance"] > 4.5
    assert paper.summary()["pools"]["p"]["mean_running_per_instance"] <= 4.0 + 1e-9
    # 60 req/s is over the paper's 4 slots (40 req/s): its queue fills and rejects; vLLM keeps up
    assert paper.rejected.any() and not vllm.rejected.any()
    assert float(np.percentile(vllm.ttft_s, 99)) < float(np.nanpercentile(paper.ttft_s, 99))


def test_des_vllm_preempts_when_blocks_run_out_and_loses_nothing() -> None:
    """Many slots, a KV for ~6 whole requests: decodes fill the KV, the newest is recomputed; every
    request still finishes, and a preemption never repeats without progress (bounded events)."""
    prof = with_admission(
        toy_profile(kv_capacity_tokens=6 * 800, max_num_seqs_cap=32, h_s_per_kv_token=1e-6),
        "vllm",
        max_num_batched_tokens=1024,
    )
    rng = np.random.default_rng(5)
    n = 2000
    arr = np.cumsum(rng.exponential(1 / 6.0, n))
    trace = build_trace(arr, rng.integers(50, 400, n), rng.integers(100, 400, n))
    res = simulate(trace, [PoolSpec("p", prof, 800, 1, max_queue_per_instance=100_000)], make_router("homogeneous"),
                   check_invariants=True)  # fmt: skip
    assert int(res.preemptions.sum()) > 0
    assert not res.rejected.any() and not np.isnan(res.ttft_s).any()
    assert res.events < 40 * n


@pytest.mark.parametrize(("kv_blocks", "queue_s"), [(3, 0.049), (4, 0.009)])
def test_des_vllm_takes_kv_in_whole_blocks_at_the_next_step(kv_blocks: int, queue_s: float) -> None:
    """Blocks of 16 tokens, 10 ms steps. A (17-token prompt, 5 outputs) arrives at an idle instance and
    is scheduled at once: first token at 10 ms, done at 50 ms. B (the same) arrives at 1 ms. Both fit
    36 tokens, but each needs 2 blocks: with 3 blocks B waits until A has finished (50 ms, queue
    49 ms); with 4 it waits only for the next scheduler step (10 ms, queue 9 ms), as vLLM's engine
    core takes new requests between steps. The profile's KV holds one block more: vLLM keeps one
    out as its null block."""
    prof = with_admission(
        toy_profile(kv_capacity_tokens=16 * (kv_blocks + 1), block_size_tokens=16),
        "vllm",
        max_num_batched_tokens=64,
    )
    two = build_trace(
        np.array([0.0, 0.001]), np.array([17, 17], dtype=np.int64), np.array([5, 5], dtype=np.int64)
    )
    res = simulate(two, [PoolSpec("p", prof, 48, 1)], make_router("homogeneous"), check_invariants=True)
    assert res.queue_s is not None
    assert res.queue_s.tolist() == pytest.approx([0.0, queue_s])
    assert res.ttft_s.tolist() == pytest.approx([0.01, queue_s + 0.01])


def test_des_vllm_prefill_takes_what_the_token_budget_leaves() -> None:
    """max_num_batched_tokens 600, prompts of 1,000 tokens, P > 0: a lone prefill runs in chunks of
    at most 600 tokens (two iterations), and the budget is never exceeded (invariant check)."""
    prof = with_admission(
        toy_profile(p_s_per_prefill_token=1e-4, max_num_seqs_cap=8), "vllm", max_num_batched_tokens=600
    )
    one = build_trace(np.array([0.0]), np.array([1000], dtype=np.int64), np.array([2], dtype=np.int64))
    res = simulate(one, [PoolSpec("p", prof, 4000, 1)], make_router("homogeneous"), check_invariants=True)
    # two prefill iterations of W + P * 500 tokens each
    assert float(res.ttft_s[0]) == pytest.approx(2 * (0.01 + 1e-4 * 500))
    busy = _trace(3000, 5.0, 1000, 20)
    res = simulate(busy, [PoolSpec("p", prof, 4000, 1)], make_router("homogeneous"), check_invariants=True)
    assert not np.isnan(res.ttft_s).any()


def test_vllm_serve_args_carry_the_planned_admission() -> None:
    v = with_admission(PROFILES["llama3-70b-a100"], "vllm")
    args = vllm_serve_args(v, 8192)
    assert args[:4] == ["--max-model-len", "8192", "--max-num-seqs", "256"]
    assert "--max-num-batched-tokens" in args and args[args.index("--tensor-parallel-size") + 1] == "8"
    paper = vllm_serve_args(PROFILES["llama3-70b-a100"], 65536)
    assert paper[3] == str(PROFILES["llama3-70b-a100"].max_num_seqs(65536))
    assert "--max-num-batched-tokens" not in paper


def test_profile_file_round_trips_and_bad_files_name_the_field(tmp_path: Path) -> None:
    from planner.model.profile_file import load_profile_file, write_profile_file

    prof = PROFILES["llama3-70b-h100"]
    assert load_profile_file(write_profile_file(prof, tmp_path / "p.json")) == prof
    bad = tmp_path / "bad.json"
    bad.write_text('{"name": "x", "tp": 0, "price_usd_per_gpu_h": 1, "kv_capacity_tokens": 10, "w_s": 0.01, '
                   '"h_s_per_kv_token": 0, "p_s_per_prefill_token": 0, "colour": "red"}')  # fmt: skip
    with pytest.raises(ValueError, match=r"tp: .*greater than or equal to 1.*colour: Extra inputs"):
        load_profile_file(bad)
    (tmp_path / "junk.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"junk\.json"):
        load_profile_file(tmp_path / "junk.json")


def test_cli_profile_file_and_overrides_reach_the_plan(tmp_path: Path) -> None:
    """--profile-file with --price-usd-per-gpu-h / --gpus-per-instance / --kv-capacity-tokens: the
    admission is applied after them, and the other admission keeps them."""
    import argparse

    from planner.cli import cmd_plan
    from planner.cli.cli_common import profile_from_args
    from planner.model.profile_file import write_profile_file

    path = write_profile_file(PROFILES["llama3-70b-a100"], tmp_path / "mine.json")
    p = argparse.ArgumentParser()
    cmd_plan.add_parser(p.add_subparsers())
    args = p.parse_args(["plan", "--trace", "x.csv", "--profile-file", str(path), "--price-usd-per-gpu-h", "1.5",
                         "--gpus-per-instance", "4", "--kv-capacity-tokens", "500000"])  # fmt: skip
    v = profile_from_args(args)
    paper = profile_from_args(args, "paper")
    assert (v.admission, v.price_usd_per_gpu_h, v.tp, v.kv_capacity_tokens, v.max_num_seqs_cap) == (
        "vllm",
        1.5,
        4,
        500000,
        256,
    )
    assert (paper.admission, paper.price_usd_per_gpu_h, paper.max_num_seqs(65536)) == (
        "paper",
        1.5,
        500000 // 65536,
    )


def test_fit_recovers_known_iteration_constants() -> None:
    """Timings made from W = 20 ms, H = 2 µs/token, P = 50 µs/token (chunk 2048) are fitted back."""
    from planner.model.profile_fit import Measurement, fit_iteration_model

    w, h, p, out = 0.02, 2e-6, 5e-5, 32
    ms = []
    for c in (1, 2, 4, 8):
        for n in (64, 512, 3000):
            ctx = n + out / 2
            k = -(-n // 2048)
            ttft = k * w + k * h * ctx + p * n if c == 1 else 9.9  # only single-request TTFTs are used
            ms.append(Measurement(c, n, out, ttft, w + h * c * ctx))
    fit = fit_iteration_model(ms, 2048)
    assert (fit.w_s, fit.h_s_per_kv_token, fit.p_s_per_prefill_token) == pytest.approx((w, h, p), rel=1e-6)
    assert fit.tpot_max_rel_error < 1e-6 and fit.ttft_max_rel_error < 1e-6
    with pytest.raises(ValueError, match="too few measurements"):
        fit_iteration_model([m for m in ms if m.concurrency == 1], 2048)
