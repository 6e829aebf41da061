"""Issue 35, item 2: the adaptive read decision learns as fast as reading every response on the
repository corpus, cold start included, while reading a small share (evaluation/read_replay.py)."""

from __future__ import annotations

from pathlib import Path

from evaluation.read_replay import compare


def test_adaptive_reads_learn_as_fast_as_reading_everything(data_dir: Path) -> None:
    report = compare("shared", str(data_dir), rates=(100.0,))
    every, adaptive = report["read_all"], report["adaptive_100rps"]
    assert every["read_share"] == 1.0
    assert adaptive["read_share"] < 0.1
    # the cold start and the rest of the replay: the estimate's error no worse than 1 point above
    for w_all, w_adaptive in zip(every["window_abs_err"], adaptive["window_abs_err"], strict=True):
        assert w_adaptive <= w_all + 0.01
    for b, m in adaptive["misroutes"].items():
        assert m["harmful"] <= every["misroutes"][b]["harmful"] + 2
        assert m["wasteful"] <= 1.1 * every["misroutes"][b]["wasteful"] + 5
    # the learned mean ratio is as accurate, tenth by tenth, cold start included
    for c_all, c_adaptive in zip(
        every["window_central_abs_err"], adaptive["window_central_abs_err"], strict=True
    ):
        assert c_adaptive <= c_all + 0.005
    # answers were known for the sources that hold them, and the output reserve learned from the
    # reads is no less safe than the one learned from every answer
    assert 0 < adaptive["answers_known"] < adaptive["n"]
    assert sum(adaptive["window_over_reserve"]) <= sum(every["window_over_reserve"])
    # the cold keys, the cold output classes and the requests a pool may cut were read
    assert {"cold", "output_cold", "truncation_possible"} <= set(adaptive["reasons"])


def test_same_seed_same_replay(data_dir: Path) -> None:
    a = compare("shared", str(data_dir), limit=1500, rates=(100.0,))
    b = compare("shared", str(data_dir), limit=1500, rates=(100.0,))
    assert a == b
