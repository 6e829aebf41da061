"""The planner's `tbr` subcommands, run through argparse on a real (small) trace."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from planner import cmd_plan, cmd_simulate

AZURE_CONV = (
    Path(__file__).resolve().parents[2]
    / ".."
    / "shared"
    / "data"
    / "traces"
    / "azure_llm_2023"
    / "AzureLLMInferenceTrace_conv.csv"
)


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
            "--sweep-des-top",
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
            "--pool",
            "short:8192:3",
            "--pool",
            "long:65536:1",
            "--router",
            "spillover",
            "--spill-inflight",
            "100",
        ]
    )
    assert args.func(args) == 0
    out = capsys.readouterr().out
    assert "time-scaled inter-arrival gaps" in out and "-> 50 req/s)" in out
    assert "truncated to the first 5000 of 19366 requests" in out
    assert "short" in out and "long" in out and "fleet: 4 instances" in out


def test_missing_trace_exit_code(capsys: pytest.CaptureFixture[str]) -> None:
    args = _parser().parse_args(["plan", "--trace", "/nonexistent.csv"])
    assert args.func(args) == 2
    assert "not found" in capsys.readouterr().err
