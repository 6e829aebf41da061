"""`tbr anchors`: `tbr plan`, FleetOpt and vllm-sr-sim's `optimize` on the same slice of the Azure trace."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from planner.cli import cmd_anchors
from planner.cli.cli_common import load_normalized
from planner.model.fleetopt import fleetopt
from planner.model.profiles import PROFILES, with_admission
from planner.report.anchors import ANCHOR_BOUNDARIES
from tests.shared_data import SHARED_DATA

AZURE_CONV = SHARED_DATA / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tbr")
    cmd_anchors.add_parser(p.add_subparsers(dest="command", required=True))
    return p


@pytest.mark.skipif(not AZURE_CONV.is_file(), reason="no Azure trace in the shared data")
def test_three_anchors_side_by_side(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out_json, doc = tmp_path / "anchors.json", tmp_path / "results.md"
    doc.write_text("# Results\n\nhand-kept text\n", encoding="utf-8")
    args = _parser().parse_args(
        ["anchors", "--trace", str(AZURE_CONV), "--rate", "5", "--min-requests", "2000", "--max-requests", "2000",
         "--profile", "a100-simcompat", "--json-out", str(out_json), "--update-doc", str(doc)]
    )  # fmt: skip
    assert args.func(args) == 0
    table = capsys.readouterr().out
    res = json.loads(out_json.read_text(encoding="utf-8"))
    assert set(res["plan"]) == set(res["fleetopt"]) == {"vllm", "paper"}
    assert res["srsim"] is not None and res["srsim"]["homogeneous_gpus"] >= 1
    rows = [x for x in table.splitlines() if x.startswith("| ") and "---" not in x]
    assert len(rows) == 1 + 2 + 2 + 1  # header, tbr plan x2, FleetOpt x2, vllm-sr-sim
    # the FleetOpt entries are planner.model.fleetopt on the CLI's own requests, rate, profile and SLO
    trace, _ = load_normalized(args)
    assert res["requests"] == len(trace) == 2000
    for adm in ("vllm", "paper"):
        prof = with_admission(PROFILES["a100-simcompat"], adm)
        direct = fleetopt(trace.input_tokens, trace.output_tokens, trace.rate_req_per_s, prof, 65536, 2.0,
                          boundaries=ANCHOR_BOUNDARIES, p_c=0.75)  # fmt: skip
        assert res["fleetopt"][adm]["homogeneous_gpus"] == direct.homogeneous.gpus
        assert direct.best is not None and res["fleetopt"][adm]["best"]["gpus"] == direct.best.gpus
    assert res["fleetopt"]["vllm"]["max_num_seqs_at_b"] == res["fleetopt"]["vllm"]["max_num_seqs_long"] == 256
    assert (res["fleetopt"]["paper"]["max_num_seqs_at_b"], res["fleetopt"]["paper"]["max_num_seqs_long"]) == (
        128,
        16,
    )
    # the doc section is written, the hand-kept text kept; --from-json re-renders the same table
    text = doc.read_text(encoding="utf-8")
    assert "hand-kept text" in text and "<!-- tbr:anchors:begin -->" in text and rows[1] in text
    again = _parser().parse_args(["anchors", "--trace", str(AZURE_CONV), "--rate", "5", "--profile", "a100-simcompat",
                                  "--from-json", str(out_json)])  # fmt: skip
    assert again.func(again) == 0
    assert capsys.readouterr().out == table
