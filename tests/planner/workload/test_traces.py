"""Trace loaders on the real files in ../shared/data (skipped when absent) and on small bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from planner.model.costmodel import alpha_at_threshold
from planner.workload.trace import NormalizationReport, TraceError, normalize
from planner.workload.trace_loaders import load_trace
from tests.shared_data import SHARED_DATA

DATA = SHARED_DATA / "traces"
AZURE = DATA / "azure_llm_2023"
MOONCAKE = DATA / "mooncake_fast25" / "conversation_trace.jsonl"

needs_data = pytest.mark.skipif(not DATA.is_dir(), reason=f"real traces not found at {DATA} (../shared/data)")


@needs_data
@pytest.mark.parametrize(
    ("name", "rows", "le_2k", "le_8k", "rate"),
    [
        pytest.param("conv", 19_366, 16_528, 19_365, 5.5304, id="azure-conv"),
        pytest.param("code", 8_819, 5_452, 8_819, 2.5667, id="azure-code"),
    ],
)
def test_azure_2023_exact_counts(name: str, rows: int, le_2k: int, le_8k: int, rate: float) -> None:
    trace, report = load_trace(AZURE / f"AzureLLMInferenceTrace_{name}.csv")
    assert len(trace) == rows == report.rows_read == report.rows_kept
    assert report.dropped == {}
    assert int((trace.total_tokens <= 2048).sum()) == le_2k  # docs/data.md §4.2
    assert int((trace.total_tokens <= 8192).sum()) == le_8k
    assert trace.rate_req_per_s == pytest.approx(rate, abs=5e-4)
    assert np.all(np.diff(trace.arrival_s) >= 0)


@needs_data
def test_mooncake_counts() -> None:
    trace, report = load_trace(MOONCAKE)
    assert report.fmt == "mooncake"
    assert len(trace) == 12_031
    assert int((trace.total_tokens <= 8192).sum()) == 6_461
    assert int(trace.total_tokens.max()) == 126_527


def test_cdf_from_installed_vllm_sr_sim_is_deterministic() -> None:
    fleet_sim = pytest.importorskip("fleet_sim")
    path = Path(fleet_sim.__file__).parent / "data" / "azure_cdf.json"
    a, rep = load_trace(path, n_requests=20_000, rate_req_per_s=100.0, seed=3)
    b, _ = load_trace(path, n_requests=20_000, rate_req_per_s=100.0, seed=3)
    assert np.array_equal(a.input_tokens, b.input_tokens) and np.array_equal(a.arrival_s, b.arrival_s)
    assert rep.synthesized is not None and "20000 requests" in rep.synthesized
    # The sampled totals follow the CDF: F(2048) of azure_cdf.json, within sampling error.
    points = json.loads(path.read_text())
    f2048 = dict((int(t), f) for t, f in points)[2048]
    assert alpha_at_threshold(a.total_tokens, 2048) == pytest.approx(f2048, abs=0.01)
    assert a.rate_req_per_s == pytest.approx(100.0, rel=0.03)


def test_bad_cdf_is_rejected(tmp_path: Path) -> None:
    p = tmp_path / "bad.json"
    p.write_text("[[100, 0.5], [50, 0.7]]")
    with pytest.raises(TraceError):
        load_trace(p, fmt="cdf")


def test_decision_log_schema_and_report(tmp_path: Path) -> None:
    rows = [
        {
            "ts_s": 100.0,
            "request_id": "a",
            "model": "m",
            "category": "code",
            "pool": "short",
            "reason": "budget",
            "estimated_prompt_tokens": 900,
            "output_reserve_tokens": 512,
            "budget_tokens": 1412,
            "prompt_tokens": 1000,
            "completion_tokens": 200,
        },
        {
            "ts_s": 101.0,
            "request_id": "b",
            "model": "m",
            "category": "prose",
            "pool": "long",
            "reason": "budget",
            "estimated_prompt_tokens": 9000,
            "output_reserve_tokens": 1024,
            "budget_tokens": 10024,
            "prompt_tokens": None,
            "completion_tokens": None,
        },
        {"ts_s": "yesterday", "estimated_prompt_tokens": 1, "output_reserve_tokens": 1},
        {"ts_s": 102.0, "estimated_prompt_tokens": -5, "output_reserve_tokens": 1},
    ]
    p = tmp_path / "decisions.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n")
    trace, report = load_trace(p)
    assert report.fmt == "decision-log"
    assert len(trace) == 2 and report.rows_read == 5
    assert report.dropped == {
        "invalid JSON line": 1,
        "missing or non-numeric ts_s": 1,
        "estimated_prompt_tokens < 0": 1,
    }
    assert trace.input_tokens.tolist() == [1000, 9000]
    assert trace.output_tokens.tolist() == [200, 1024]
    assert trace.budget_tokens.tolist() == [1512, 10024]
    assert trace.est_input_tokens is not None and trace.est_input_tokens.tolist() == [900, 9000]
    assert trace.categories == ("code", "prose")
    text = "\n".join(report.lines())
    assert "1 rows had no prompt_tokens" in text and "dropped 1 rows: invalid JSON line" in text


def test_burstgpt_drops_failed_requests(tmp_path: Path) -> None:
    p = tmp_path / "burst.csv"
    p.write_text(
        "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"
        "118,GPT-4,417,276,693,Conversation log\n"
        "x,GPT-4,1,1,2,API log\n"
    )
    trace, report = load_trace(p)
    assert len(trace) == 2
    assert report.dropped == {"Response tokens == 0 (failed request)": 1, "unparseable Timestamp": 1}
    assert trace.categories == ("ChatGPT", "GPT-4")
    assert trace.arrival_s.tolist() == [0.0, 113.0]


def test_normalize_reports_every_change() -> None:
    from planner.workload.trace import build_trace

    t = build_trace([0.0, 1.0, 2.0, 3.0], [100, 200, 30_000, 50], [10, 20, 5_000, 5])
    rep = NormalizationReport(source="mem", fmt="test")
    out = normalize(t, rep, target_rate_req_per_s=100.0, min_requests=10, clip_max_total_tokens=8192)
    assert rep.clipped_rows == 1 and int(out.total_tokens.max()) <= 8192
    assert rep.tiled == 3 and len(out) == 12
    assert out.rate_req_per_s == pytest.approx(100.0)
    lines = "\n".join(rep.lines())
    assert "clipped 1 rows" in lines and "tiled 3" in lines and "time-scaled" in lines


def test_missing_file_is_a_clear_error() -> None:
    with pytest.raises(TraceError, match="not found"):
        load_trace("/nonexistent/trace.csv")
