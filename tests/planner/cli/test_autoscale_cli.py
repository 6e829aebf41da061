"""`tbr autoscale` (issue 33, item 3): the command runs the comparison, writes its plot and its
section of a results file, and refuses bad options with one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from planner.report.doc_sections import carry_sections, replace_section
from tbr.cli import main
from tests.shared_data import SHARED_DATA

CONV = SHARED_DATA / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"


def test_sections_are_replaced_in_place_and_carried_over() -> None:
    text = "# Results\n\nbody\n"
    once = replace_section(text, "autoscale-daily", "table 1")
    assert once.endswith("<!-- tbr:autoscale-daily:begin -->\ntable 1\n<!-- tbr:autoscale-daily:end -->\n")
    twice = replace_section(once, "autoscale-daily", "table 2")
    assert "table 1" not in twice and twice.count("autoscale-daily:begin") == 1
    regenerated = carry_sections(twice, "# Results\n\nnew body\n")
    assert "new body" in regenerated and "table 2" in regenerated
    assert carry_sections(twice, twice) == twice


@pytest.mark.skipif(not CONV.is_file(), reason=f"{CONV} absent")
def test_the_command_prints_the_table_writes_the_plot_and_the_section(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "results.md"
    doc.write_text("# Results\n")
    rc = main(["autoscale", "--trace", str(CONV), "--workload", "burst", "--hours", "0.5", "--base-rate", "6",
               "--burst-start-s", "600", "--burst-s", "300", "--policies", "static,advice",
               "--plot", str(tmp_path / "img"), "--update-doc", str(doc)])  # fmt: skip
    assert rc == 0
    out = capsys.readouterr().out
    assert "| static |" in out and "| advice |" in out and "| queue |" not in out
    assert (tmp_path / "img" / "autoscale_burst.png").stat().st_size > 10_000
    text = doc.read_text()
    assert (
        "<!-- tbr:autoscale-burst:begin -->" in text
        and "![instances over time per pool, burst](img/autoscale_burst.png)" in text
    )
    assert "tbr autoscale --trace AzureLLMInferenceTrace_conv.csv --workload burst" in text


def test_bad_options_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["autoscale", "--trace", str(tmp_path / "missing.csv")]) == 1
    assert "trace file not found" in capsys.readouterr().err
    assert main(["autoscale", "--trace", str(tmp_path / "missing.csv"), "--policies", "cpu"]) == 1
    assert "unknown policy cpu" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["autoscale", "--trace", "x", "--cold-start-s", "-1"])
