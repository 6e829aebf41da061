"""The planner's `tbr` subcommands, run through argparse on a real (small) trace."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from planner.cli import cmd_plan, cmd_simulate
from tests.shared_data import AZURE_CONV

ROOT = Path(__file__).resolve().parents[3]
ROUTER_3POOLS = ROOT / "config" / "router-3pools.yaml"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tbr")
    sub = p.add_subparsers(dest="command", required=True)
    cmd_plan.add_parser(sub)
    cmd_simulate.add_parser(sub)
    return p


def _cdf(tmp_path: Path) -> Path:
    path = tmp_path / "cdf.json"
    path.write_text(json.dumps([[512, 0.5], [2048, 0.8], [8192, 0.97], [32768, 1.0]]))
    return path


def test_plan_json_on_cdf(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(
        [
            "plan",
            "--trace",
            str(_cdf(tmp_path)),
            "--rate",
            "20",
            "--min-requests",
            "2000",
            "--short-max-tokens",
            "8192",
            "--profile",
            "a100-simcompat",
            "--sweep",
            "2048",
            "--jobs",
            "1",
            "--json",
            "--plot",
            str(tmp_path / "plots"),
        ]
    )
    assert args.func(args) == 0
    res = json.loads(capsys.readouterr().out)
    cf = res["closed_form"]
    assert cf["alpha"] == pytest.approx(0.97, abs=0.02)
    assert cf["savings_closed_form"] == pytest.approx(cf["alpha"] * (1 - 1 / cf["rho"]))
    assert res["des_homogeneous"]["instances"] >= 1
    assert res["recommended_threshold_tokens"] in (2048, 8192)
    assert {r["threshold_tokens"] for r in res["des_sweep"]} == {2048, 8192}
    assert res["normalization"]["synthesized"].startswith("2000 requests")
    assert (tmp_path / "plots" / "length_cdf.png").stat().st_size > 1000
    assert (tmp_path / "plots" / "cost_vs_threshold.png").stat().st_size > 1000


@pytest.mark.skipif(not AZURE_CONV.is_file(), reason="../shared/data Azure trace not present")
def test_simulate_text_on_real_trace(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(
        [
            "simulate",
            "--trace",
            str(AZURE_CONV),
            "--rate",
            "50",
            "--min-requests",
            "5000",
            "--max-requests",
            "5000",
            "--profile",
            "a100-simcompat",
            "--router-config",
            str(ROUTER_3POOLS),
            "--pool",
            "short:3",
            "--pool",
            "medium:1",
            "--pool",
            "long:1",
        ]
    )
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "time-scaled inter-arrival gaps" in out and "-> 50 req/s)" in out
    assert "truncated to the first 5000 of 19366 requests" in out
    assert "short: max_inflight=256, max_waiting=8, max_kv_cache_usage=0.95" in out
    assert "short" in out and "medium" in out and "fleet: 5 instances" in out
    # vLLM's admission by default: a100-simcompat is an A100, so vLLM 0.32's 256 / 2048 in every pool
    assert "admission vllm: max_num_seqs short 256, medium 256, long 256; max_num_batched_tokens 2048" in out


def test_missing_trace_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["plan", "--trace", "/nonexistent.csv"])
    assert args.func(args) == 2
    assert "not found" in capsys.readouterr().err


@pytest.mark.skipif(not AZURE_CONV.is_file(), reason="../shared/data Azure trace not present")
def test_simulate_spill_sweep_per_instance(capsys: pytest.CaptureFixture[str]) -> None:
    """A max_waiting sweep through the router's policy at fixed sizes: an undersized short pool
    spills to the long pool on the scraped waiting signal, which cuts its P99 TTFT."""
    args = _parser().parse_args(
        [
            "simulate", "--trace", str(AZURE_CONV), "--rate", "30", "--min-requests", "3000",
            "--max-requests", "3000", "--profile", "a100-simcompat", "--pool", "short:8192:1",
            "--pool", "long:65536:1", "--spill-sweep", "max_waiting=1/inst,64/inst", "--json",
        ]
    )  # fmt: skip
    assert args.func(args) == 0
    rows = json.loads(capsys.readouterr().out)["rows"]
    assert [r["label"] for r in rows] == ["no spillover", "max_waiting=1/inst", "max_waiting=64/inst"]
    assert rows[0]["spilled_requests"] == 0
    for r in rows[1:]:
        assert r["spilled_requests"] > 0 and list(r["spills"]) == ["short->long (waiting)"]
        assert r["p99_ttft_s"] < rows[0]["p99_ttft_s"]
        assert r["pool_requests"]["long"] >= r["spilled_requests"] * 0.9  # 10% warm-up excluded


def test_plan_router_config_three_pools_sizes_with_spillover(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tbr plan --router-config` sizes the config's three pools, replays its spillover at those
    sizes and sizes the fleet with spillover on (never more GPUs than without)."""
    args = _parser().parse_args(
        [
            "plan", "--trace", str(_cdf(tmp_path)), "--rate", "20", "--min-requests", "4000",
            "--profile", "a100-simcompat", "--router-config", str(ROUTER_3POOLS), "--sweep",
            "--jobs", "1", "--spill-sweep", "max_kv_cache_usage=0.5", "--json",
        ]
    )  # fmt: skip
    assert args.func(args) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["short_max_tokens"], res["long_max_model_len"]) == (8192, 131072)
    fleet = res["fleet"]
    assert [p["name"] for p in fleet["pools"]] == ["short", "medium", "long"]
    tb = fleet["token_budget"]
    assert tb["spilled_requests"] == 0 and tb["slo_met"]
    assert [e["label"] for e in fleet["spillover"]] == ["router config", "max_kv_cache_usage=0.5"]
    for e in fleet["spillover"]:
        assert e["sized"]["gpus"] <= tb["gpus"]
        assert e["sized"]["slo_met"]


def test_estimator_replay_missing_corpus_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _parser().parse_args(
        ["plan", "--trace", str(_cdf(tmp_path)), "--no-des", "--estimator-replay", str(tmp_path / "nodata")]
    )
    assert args.func(args) == 2
    assert "prompt corpus not found" in capsys.readouterr().err


def test_bad_spill_sweep_and_router_config_exit_code(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "router.yaml"
    bad.write_text("pools: []\n")
    for extra in (["--spill-sweep", "max_waiting=abc"], ["--router-config", str(bad)]):
        args = _parser().parse_args(["plan", "--trace", str(_cdf(tmp_path)), "--no-des", *extra])
        assert args.func(args) == 2
    err = capsys.readouterr().err
    assert "not a number" in err and "pools" in err


def test_plan_emit_writes_what_the_router_and_vllm_accept(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tbr plan --emit DIR` (issue 32 item 4): the router config passes `tbr config check`, the pool
    sizes and vLLM arguments are the recommended plan's, and both admissions are sized."""
    import yaml

    from tbr.cmd_config import run_check

    out = tmp_path / "emit"
    args = _parser().parse_args(
        ["plan", "--trace", str(_cdf(tmp_path)), "--rate", "20", "--min-requests", "2000", "--short-max-tokens",
         "8192", "--profile", "a100-simcompat", "--sweep", "--jobs", "1", "--json", "--emit", str(out),
         "--emit-model", "meta-llama/Llama-3.1-70B-Instruct"]
    )  # fmt: skip
    assert args.func(args) == 0
    res = json.loads(capsys.readouterr().out)
    assert res["admission"] == "vllm" and res["max_num_seqs_cap"] == 256
    cmp_ = res["admission_compare"]
    assert cmp_["vllm"]["homogeneous"]["instances"] == res["des_homogeneous"]["instances"]
    assert cmp_["paper"]["max_num_seqs_cap"] == 128 and cmp_["paper"]["homogeneous"]["instances"] >= 1
    fleet = res["des"]["candidates"][str(res["recommended_threshold_tokens"])]  # JSON keys are strings
    assert run_check(argparse.Namespace(path=str(out / "router.yaml"))) == 0
    cfg = yaml.safe_load((out / "router.yaml").read_text())
    assert [p["max_model_len"] for p in cfg["pools"]] == [res["recommended_threshold_tokens"], 65536]
    assert cfg["pools"][0]["max_inflight"] == max(1, fleet["short_instances"]) * 256
    assert cfg["models"][0]["models"] == ["meta-llama/Llama-3.1-70B-Instruct"]
    flags = json.loads((out / "vllm-args.json").read_text())["pools"]
    assert flags[0]["args"][:4] == [
        "--max-model-len",
        str(res["recommended_threshold_tokens"]),
        "--max-num-seqs",
        "256",
    ]
    assert [f["instances"] for f in flags] == [
        max(1, fleet["short_instances"]),
        max(1, fleet["long_instances"]),
    ]
    timeouts = yaml.safe_load((out / "envoy-timeouts.yaml").read_text())
    assert (
        timeouts["routes"]["long"]["idle_timeout"] == "1380s"
    )  # envoy/README.md: 65536 / 50 + 60, whole minutes
    assert timeouts["routes"]["short"]["idle_timeout"] == "1380s"  # a misroute is retried on long
    kust = yaml.safe_load((out / "kustomization.yaml").read_text())
    ops = yaml.safe_load(kust["patches"][0]["patch"])
    assert kust["patches"][0]["target"]["name"] == "pool-short"
    assert ops[0] == {"op": "replace", "path": "/spec/replicas", "value": max(1, fleet["short_instances"])}
    # the text plan names its admission, both baselines, the deciding model and the vLLM flags
    from planner.report.plan_report import format_plan

    res["des"]["candidates"] = {int(k): v for k, v in res["des"]["candidates"].items()}
    text = format_plan(res, [])
    assert "admission vllm (vLLM's scheduler): max_num_seqs 256" in text
    assert "under both admissions" in text and "paper" in text.split("under both admissions")[1]
    assert "decided by the steady-state DES" in text
    assert f"{max(1, fleet['short_instances']):>5} x  --max-model-len" in text
