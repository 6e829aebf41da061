"""`tbr engine-check` against a real vLLM 0.32 CPU server (issue 32 item 3): the simulator vs the engine.

One tiny random-weight Qwen3 server: max_model_len 3,072, max_num_seqs 8, max_num_batched_tokens
2,048, a small KV (``--num-gpu-blocks-override 25`` of the CPU backend's 128-token blocks: 3,200
tokens, of which vLLM keeps one out as its null block: 3,072 usable, max_model_len; a full batch of
the scaled Azure prompts runs out of blocks and vLLM preempts), tokens
streamed every 16 (``--stream-interval``: the first token at once, so TTFT is unchanged, while the
API server's per-token work no longer competes with the engine for the core). It runs at ``nice -10``
when the test may (root): the box's 2 cores are shared with other work, and what is measured is the
engine, not its neighbours.

`tbr engine-check` fits the profile (the `tbr profile` sweep) and replays the first 100 requests of the
Azure 2023 conversation trace, token counts halved, at a light load (1.5 req/s) and above saturation
(6 req/s offered; ~5 served), then simulates the same requests on the fitted profile. What is asserted is the agreement
docs/planner.md §Checked against the real engine documents for this noisy box (throughput within the
issue's 15 %; TTFT, when the engine ran near its profile's speed, within the measured bounds there),
preemptions at the high load on both sides and within 2 of the measured count at both loads. The table,
with the TTFT's parts (vLLM's queue and prefill times, the overhead outside the engine) and the
longest TTFTs, is printed pass or fail.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Iterator

import pytest

from devstack.procs import LOOPBACK, free_port
from devstack.vllm_pool import FAMILY_MODEL_NAMES, VllmPoolSpec, VllmSetup, vllm_pool_process
from planner.cli import cmd_engine_check
from tests.stacks import logs_shown
from tests.vllm.conftest import DATA_DIR

pytestmark = pytest.mark.vllm

AZURE_CONV = DATA_DIR / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
BLOCKS = 25
MAX_MODEL_LEN = 3072
MAX_NUM_SEQS = 8
MAX_NUM_BATCHED_TOKENS = 2048
LIGHT_REQ_PER_S, HEAVY_REQ_PER_S = 1.5, 6.0

THROUGHPUT_BOUND = 0.15
"""Issue 32's target for output tokens/s and req/s, met on this box (docs/planner.md)."""
TTFT_P50_BOUND = 0.35
"""P50 TTFT on the speed-matched column (the engine's speed and the per-request overhead R measured
during the replay): within ±35 %. Three runs after the model's fixes gave −3 %..+29 % (docs/planner.md):
issue 32's 15 % held in two of them; the rest is R, whose mean over a replay takes in the stalls of a
shared box outside the engine (one request of 96 tokens waited 0.39 s in one run)."""
TTFT_P99_FACTOR = 3.0
"""P99 of 100 requests is their second-longest TTFT, at the light load one prompt waiting for free KV
blocks: within a factor 3 of the measured one (after the fixes: −65 %..+25 %; docs/planner.md)."""
SPEED_RANGE = (0.67, 1.5)
"""TTFT is asserted only when the engine ran within this factor of its profile's speed during the
replay: beyond it the box's other work stalled the engine in bursts (one run: 1.79x, 4.0 of 6 req/s
served, P50 TTFT 0.49 s), which a uniform speed factor cannot stand for; throughput is still asserted.
At saturation the engine runs slower per step than the sweep measured even on a quiet box (a CI run
at load 3.2: 1.28x, where the speed-matched column still gave P50 −0.7 %, P99 −4.1 %, throughput
+2.0 %), so the range is wide enough to hold that."""


@pytest.fixture(scope="module")
def server(vllm_setup: VllmSetup, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    spec = VllmPoolSpec(
        "engine-check",
        port,
        MAX_MODEL_LEN,
        vllm_setup.model_dirs["qwen3"],
        family="qwen3",
        cpu=0,
        max_num_seqs=MAX_NUM_SEQS,
        extra_args=(
            "--num-gpu-blocks-override",
            str(BLOCKS),
            "--max-num-batched-tokens",
            str(MAX_NUM_BATCHED_TOKENS),
            "--stream-interval",
            "16",
        ),
        nice=-10 if os.geteuid() == 0 else 0,
    )
    proc = vllm_pool_process(spec, vllm_setup.python, log_dir=tmp_path_factory.mktemp("engine-check-logs"))
    with proc, logs_shown([proc]):
        yield f"http://{LOOPBACK}:{port}"


def test_simulator_agrees_with_real_vllm(server: str, capsys: pytest.CaptureFixture[str]) -> None:
    if not AZURE_CONV.is_file():
        pytest.skip("no Azure trace in the shared data")
    p = argparse.ArgumentParser(prog="tbr")
    cmd_engine_check.add_parser(p.add_subparsers(dest="command", required=True))
    args = p.parse_args(
        ["engine-check", "--url", server, "--model", FAMILY_MODEL_NAMES["qwen3"], "--trace", str(AZURE_CONV),
         "--requests", "100", "--token-scale", "0.5", "--rate", str(LIGHT_REQ_PER_S), str(HEAVY_REQ_PER_S),
         "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", str(MAX_NUM_SEQS),
         "--max-num-batched-tokens", str(MAX_NUM_BATCHED_TOKENS),
         "--prompt-tokens", "64", "512", "1024", "2048", "--concurrency", "1", "4", "8", "--repeats", "2",
         "--json"]
    )  # fmt: skip
    assert args.func(args) == 0, capsys.readouterr().err
    out = json.loads(capsys.readouterr().out)
    light, heavy = out["results"]
    with capsys.disabled():  # the comparison table in the test's output, pass or fail
        print("\n" + "\n".join(cmd_engine_check.format_table(out["results"])))
        print(
            json.dumps(
                {k: out["profile"][k] for k in sorted(out["profile"]) if k.endswith("_s") or "_s_" in k}
            )
        )
    assert out["profile"]["kv_capacity_tokens"] == BLOCKS * 128
    for res in (light, heavy):
        # the scheduler model, checked at the speed and per-request overhead the engine really had
        # during this replay (the speed-matched column): the fitted profile's own error moves with the
        # shared box's load
        rows = {r["metric"]: r for r in res["rows_speed_matched"]}
        report = json.dumps({k: v for k, v in res.items() if k not in ("measured", "simulated",
                            "simulated_speed_matched")}, indent=1)  # fmt: skip
        for key in ("output_tokens_per_s", "requests_per_s"):
            assert abs(rows[key]["rel_diff"]) <= THROUGHPUT_BOUND, report
        if not SPEED_RANGE[0] <= res["speed_factor"] <= SPEED_RANGE[1]:
            # said, not warned: pytest turns warnings into errors (pyproject filterwarnings)
            print(
                f"TTFT not asserted at {res['rate_req_per_s']} req/s: the engine ran "
                f"{res['speed_factor']:.2f}x its profile's time per step (box under other load)",
                file=sys.stderr,
            )
            continue
        assert abs(rows["ttft_p50_s"]["rel_diff"]) <= TTFT_P50_BOUND, report
        ratio = rows["ttft_p99_s"]["simulated"] / rows["ttft_p99_s"]["measured"]
        assert 1 / TTFT_P99_FACTOR <= ratio <= TTFT_P99_FACTOR, report
    # near saturation the engine runs out of KV blocks and preempts; the simulator too, about as often
    # at the engine's speed (measured 4-5, simulated 4-6 in the runs of docs/planner.md)
    assert heavy["measured"]["preemptions"] > 0 and heavy["simulated_speed_matched"]["preemptions"] > 0
    for res in (light, heavy):
        assert abs(res["simulated_speed_matched"]["preemptions"] - res["measured"]["preemptions"]) <= 2
    # the heavy load is near saturation: its output rate is well above the light one's
    assert heavy["measured"]["output_tokens_per_s"] > 1.8 * light["measured"]["output_tokens_per_s"]
