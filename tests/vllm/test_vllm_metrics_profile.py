"""`tbr profile --from-metrics` against a real vLLM 0.32 CPU server (issue 32 item 2, the live-fleet path).

One tiny random-weight Qwen3 server (max_model_len 4,096, max_num_seqs 8, a small fixed KV). Its
``/metrics`` is scraped three times around two bounded bursts of traffic (6 requests one at a time,
then 3 rounds of 4 at once; 512-token prompts, 16 output tokens): two intervals at two batch sizes.
What is checked: vLLM exports every metric the fit reads under the names of planner/model/profile_metrics.py;
the per-step batch of each interval is what the client ran (about 1, then between 2 and 4); the CLI
fits a profile from the saved scrapes whose KV is the server's and whose W, H, P reproduce the ITL
(median error within 35 % on the shared, noisy 2-core box); and `tbr plan` accepts the file.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

from devstack.vllm_pool import FAMILY_MODEL_NAMES
from planner.cli.cmd_profile import WARMUP_REQUESTS, measure
from planner.model.profile_file import load_profile_file
from planner.model.profile_metrics import HISTOGRAMS, ITERATIONS, intervals, read_snapshot
from tests.vllm.conftest import CPU_BLOCK_TOKENS, DATA_DIR, PROFILE_KV_BLOCKS, profile_plan_parser

pytestmark = pytest.mark.vllm

AZURE_CONV = DATA_DIR / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"


def _save(url: str, path: Path) -> Path:
    path.write_text(httpx.get(f"{url}/metrics", timeout=10.0).text, encoding="utf-8")
    return path


def test_profile_from_real_vllm_metrics(
    profile_server: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = FAMILY_MODEL_NAMES["qwen3"]
    live = read_snapshot(profile_server)  # the live path: a URL scrape
    assert ITERATIONS in live.counts and live.generated_tokens is not None
    assert live.kv_capacity_tokens == PROFILE_KV_BLOCKS * CPU_BLOCK_TOKENS
    # the sweep's warm-up requests run before the first scrape, so the intervals hold only the sweep
    measure(profile_server, model, [64], [1], 4, repeats=0, timeout_s=120.0)
    files = [_save(profile_server, tmp_path / "scrape0.txt")]
    measure(profile_server, model, [512], [1], 16, repeats=6, timeout_s=120.0, warmup_requests=0)
    files.append(_save(profile_server, tmp_path / "scrape1.txt"))
    ms4 = measure(profile_server, model, [512], [4], 16, repeats=3, timeout_s=120.0, warmup_requests=0)
    files.append(_save(profile_server, tmp_path / "scrape2.txt"))
    snaps = [read_snapshot(str(f)) for f in files]
    for h in HISTOGRAMS[:1] + HISTOGRAMS[2:]:  # vLLM 0.32 exports all but the deprecated ITL name
        assert h in snaps[-1].counts, h
    assert snaps[-1].generated_tokens == pytest.approx(16 * (6 + 12) + 4 * WARMUP_REQUESTS)
    one, four = intervals(snaps)
    assert (one.requests, four.requests) == (6, 12)
    assert 0.8 <= one.running <= 1.2, one
    assert 2.0 <= four.running <= 4.0, four
    assert one.prompt_tokens == pytest.approx(512, abs=4) and one.output_tokens == 16

    out = tmp_path / "fleet.json"
    args = profile_plan_parser().parse_args(
        ["profile", "--from-metrics", ",".join(str(f) for f in files), "--out", str(out),
         "--max-num-seqs", "8", "--price-usd-per-gpu-h", "0.5"]
    )  # fmt: skip
    assert args.func(args) == 0, capsys.readouterr().err
    prof = load_profile_file(out)
    assert (prof.kv_capacity_tokens, prof.block_size_tokens) == (
        PROFILE_KV_BLOCKS * CPU_BLOCK_TOKENS,
        CPU_BLOCK_TOKENS,
    )
    assert prof.w_s > 0 and prof.h_s_per_kv_token >= 0 and prof.p_s_per_prefill_token >= 0
    median_itl_error = float(prof.source.split("ITL error median ")[1].split("%")[0]) / 100
    assert median_itl_error < 0.35, prof.source
    # the fitted decode step at the 4-wide interval against what the client measured there
    predicted = prof.w_s + prof.h_s_per_kv_token * four.batch_context_tokens
    measured = sorted(m.tpot_s for m in ms4)[len(ms4) // 2]
    assert predicted == pytest.approx(measured, rel=0.5), (predicted, measured)
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
    assert res["profile"] == prof.name and res["max_num_seqs_cap"] == 8
