"""`tbr plan --output-reserve`: the planner routes on what the router reserves (planner/model/output_reserve.py)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from extproc.config import OutputReserveConfig
from planner.cli import cmd_plan
from planner.model.output_reserve import parse_output_reserve, replay_output_reserve
from planner.workload.trace import Trace, build_trace
from tests.shared_data import AZURE_CONV


def _trace() -> Trace:
    # prompts of 1,400 tokens; answers of 50 tokens, and every 100th of 1,000 tokens
    n = 2000
    out = [1000 if i % 100 == 0 else 50 for i in range(n)]
    return build_trace(np.arange(n, dtype=np.float64) * 0.1, [1400] * n, out)


def test_parse() -> None:
    assert parse_output_reserve("oracle") == ("oracle", None)
    assert parse_output_reserve("learned") == ("learned", None)
    assert parse_output_reserve("fixed:1024") == ("fixed", 1024)
    for bad in ("fixed:0", "fixed:x", "p99", ""):
        with pytest.raises(ValueError):
            parse_output_reserve(bad)


def test_fixed_and_oracle_reserves_and_truncations() -> None:
    trace = _trace()
    oracle, rep = replay_output_reserve(
        trace, "oracle", threshold_tokens=2048, long_max_model_len_tokens=65536
    )
    assert rep.truncated == 0 and rep.alpha == rep.alpha_oracle == pytest.approx(0.99)
    assert np.array_equal(oracle.output_budget_tokens, trace.output_tokens)
    fixed, rep = replay_output_reserve(
        trace,
        "fixed",
        threshold_tokens=2048,
        long_max_model_len_tokens=65536,
        fixed_tokens=500,
    )
    # every request is routed short (1400 + 500 <= 2048); the 1,000-token answers are cut at 648
    assert rep.alpha == 1.0 and rep.truncated == 20
    assert int(fixed.output_tokens.max()) == 648
    assert np.all(fixed.output_budget_tokens == 500)
    with pytest.raises(ValueError):
        replay_output_reserve(trace, "fixed", threshold_tokens=2048, long_max_model_len_tokens=65536)


def test_learned_reserve_learns_the_trace_and_is_deterministic() -> None:
    trace = _trace()
    cfg = OutputReserveConfig(learned=True)
    a, rep = replay_output_reserve(
        trace,
        "learned",
        threshold_tokens=2048,
        long_max_model_len_tokens=65536,
        config=cfg,
    )
    b, _ = replay_output_reserve(
        trace,
        "learned",
        threshold_tokens=2048,
        long_max_model_len_tokens=65536,
        config=cfg,
    )
    assert np.array_equal(a.output_budget_tokens, b.output_budget_tokens)
    # 1 % of answers overflow the 648 tokens of room: more than the 0.1 % budget, so after the first
    # truncations the learner reserves their length and routes the class long
    assert a.output_budget_tokens[-1] > 648 and rep.truncated <= 10 and rep.alpha < 0.5
    # answers that all fit: it learns them and routes short
    n = 2000
    short_answers = build_trace(np.arange(n, dtype=np.float64), [1400] * n, [40 + i % 60 for i in range(n)])
    c, rep = replay_output_reserve(
        short_answers, "learned", threshold_tokens=2048, long_max_model_len_tokens=65536, config=cfg
    )
    assert c.output_budget_tokens[0] > 648 >= c.output_budget_tokens[-1]
    assert rep.alpha > 0.9 and rep.truncated == 0


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tbr")
    sub = p.add_subparsers(dest="command", required=True)
    cmd_plan.add_parser(sub)
    return p


@pytest.mark.skipif(not AZURE_CONV.is_file(), reason="../shared/data Azure trace not present")
@pytest.mark.parametrize("reserve", ["learned", "fixed:1024", "oracle"])
def test_plan_prints_the_router_reserve_next_to_the_oracle(
    reserve: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args = _parser().parse_args(
        [
            "plan",
            "--trace",
            str(AZURE_CONV),
            "--short-max-tokens",
            "2048",
            "--min-requests",
            "1",
            "--no-des",
            "--sweep",
            "4096",
            "--output-reserve",
            reserve,
            "--json",
        ]
    )
    assert args.func(args) == 0
    res = json.loads(capsys.readouterr().out)
    rv = res["output_reserve"]
    assert rv["policy"] == reserve
    assert rv["alpha"] == pytest.approx(res["closed_form"]["alpha"])
    assert rv["oracle"]["alpha"] == pytest.approx(rv["alpha_oracle"]) == pytest.approx(0.8535, abs=0.001)
    if reserve == "oracle":
        assert rv["alpha"] == pytest.approx(rv["oracle"]["alpha"]) and rv["truncated"] == 0
    elif reserve == "fixed:1024":
        assert rv["alpha"] == pytest.approx(0.508, abs=0.002)  # issue 30: 50.8 % with the shipped reserve
    else:
        assert rv["alpha"] > 0.9 * rv["oracle"]["alpha"] and rv["truncated_share"] <= 0.001


def test_plan_rejects_a_bad_reserve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "t.csv"
    trace.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n"
        "2023-11-16 18:15:50.9951690,396,109\n"
    )
    args = _parser().parse_args(["plan", "--trace", str(trace), "--no-des", "--output-reserve", "p99"])
    assert args.func(args) == 2
    assert "--output-reserve must be" in capsys.readouterr().err
