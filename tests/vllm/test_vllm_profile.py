"""`tbr profile` against a real vLLM 0.32 CPU server (issue 32 item 2), then `tbr plan` on its file.

One tiny random-weight Qwen3 server (max_model_len 4,096, max_num_seqs 8, a small fixed KV via
``--num-gpu-blocks-override``). The sweep is bounded (2 prompt lengths x concurrency 1 and 4, one
round: 10 requests of 16 output tokens). What is checked: the KV capacity read from
``vllm:cache_config_info`` is the override's blocks x the CPU backend's 128-token blocks; the fitted W, H, P are non-negative with
W > 0 and reproduce the measured decode times (median error within 35 % on a shared, noisy 2-core
box); and `tbr plan --profile-file` sizes the Azure trace with the fitted profile.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devstack.vllm_pool import FAMILY_MODEL_NAMES
from planner.model.profile_file import load_profile_file
from tests.vllm.conftest import CPU_BLOCK_TOKENS, DATA_DIR, PROFILE_KV_BLOCKS, profile_plan_parser

pytestmark = pytest.mark.vllm

AZURE_CONV = DATA_DIR / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"


def test_profile_fits_real_vllm_and_plan_uses_it(
    profile_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "tiny-qwen3.json"
    args = profile_plan_parser().parse_args(
        ["profile", "--url", profile_server, "--model", FAMILY_MODEL_NAMES["qwen3"], "--out", str(out),
         "--prompt-tokens", "64", "1024", "--concurrency", "1", "4", "--output-tokens", "16", "--repeats", "1",
         "--price-usd-per-gpu-h", "0.5", "--gpus-per-instance", "1", "--max-num-seqs", "8"]
    )  # fmt: skip
    assert args.func(args) == 0, capsys.readouterr().err
    prof = load_profile_file(out)
    assert (prof.kv_capacity_tokens, prof.block_size_tokens) == (
        PROFILE_KV_BLOCKS * CPU_BLOCK_TOKENS,
        CPU_BLOCK_TOKENS,
    )
    assert prof.w_s > 0 and prof.h_s_per_kv_token >= 0 and prof.p_s_per_prefill_token >= 0
    assert (prof.price_usd_per_gpu_h, prof.tp, prof.max_num_seqs_cap) == (0.5, 1, 8)
    median_tpot_error = float(prof.source.split("TPOT error median ")[1].split("%")[0]) / 100
    assert median_tpot_error < 0.35, prof.source
    if not AZURE_CONV.is_file():
        pytest.skip("no Azure trace in the shared data")
    capsys.readouterr()
    plan = profile_plan_parser().parse_args(
        ["plan", "--trace", str(AZURE_CONV), "--rate", "2", "--min-requests", "2000", "--max-requests", "2000",
         "--clip-max-total-tokens", "4000", "--short-max-tokens", "1024", "--long-max-model-len", "4096",
         "--profile-file", str(out), "--slo-ttft-p99-s", "30", "--no-des", "--json"]
    )  # fmt: skip
    assert plan.func(plan) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["profile"] == prof.name and res["kv_capacity_tokens"] == PROFILE_KV_BLOCKS * CPU_BLOCK_TOKENS
    assert (res["admission"], res["max_num_seqs_cap"]) == ("vllm", 8)  # the server's, not a GPU default
    assert res["closed_form"]["analytical_homogeneous_instances"] >= 1
