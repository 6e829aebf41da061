"""Ratio snapshots on disk: atomic write, restore, corrupt file refused, a snapshot of an earlier
release (version 1, the ratio named ``*_bpt``) restored, and one of this release readable by it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from extproc.core.estimate.calibration import InMemoryRatioStore, RatioState
from extproc.service.snapshot import load_snapshot, save_snapshot


def test_snapshot_round_trip(tmp_path: Path) -> None:
    p = tmp_path / "ratios.json"
    store = InMemoryRatioStore(beta=0.9)
    store.observe(("m", "latin"), 4.5)
    save_snapshot(store, p)
    other = InMemoryRatioStore(beta=0.9)
    assert load_snapshot(other, p) == 1
    assert other.get(("m", "latin")) == store.get(("m", "latin"))
    assert not list(tmp_path.glob(".ratios-*")), "no temporary file left behind"
    p.write_text("{broken")
    with pytest.raises(ValueError):
        load_snapshot(other, p)
    p.write_text(
        '{"version": 1, "ratios": [{"model": "m", "category": "latin", "mean_bpt": -1, "dev_bpt": 0, "samples": 1}]}'
    )
    with pytest.raises(ValueError):
        load_snapshot(other, p)
    assert load_snapshot(other, tmp_path / "absent.json") is None


V1_SNAPSHOT = {
    "version": 1,
    "ratios": [
        {
            "model": "Qwen/Qwen3-8B",
            "category": "latin",
            "mean_bpt": 0.951,
            "dev_bpt": 0.02,
            "samples": 120,
            "low_bpt": 0.9,
        },
        {"model": "_other", "category": "han", "mean_bpt": 1.12, "dev_bpt": 0.05, "samples": 3},
    ],
}
"""A ``ratios.json`` as the release before wrote it (the learned ratio under its old names)."""


def test_a_snapshot_of_the_release_before_restores(tmp_path: Path) -> None:
    p = tmp_path / "ratios.json"
    p.write_text(json.dumps(V1_SNAPSHOT))
    store = InMemoryRatioStore(beta=0.9)
    assert load_snapshot(store, p) == 2
    assert store.get(("Qwen/Qwen3-8B", "latin")) == RatioState(0.951, 0.02, 120, 0.9)
    assert store.get(("_other", "han")) == RatioState(1.12, 0.05, 3, 0.0)


def test_a_snapshot_of_this_release_reads_under_both_names(tmp_path: Path) -> None:
    """Version 2 names the ratio for what it is and repeats the old names with the same values (one
    release), which is all the release before reads: a rollback restores the file."""
    p = tmp_path / "ratios.json"
    store = InMemoryRatioStore(beta=0.9)
    store.observe(("m", "latin"), 0.95)
    store.observe(("m", "latin"), 0.97)
    save_snapshot(store, p)
    doc = json.loads(p.read_text())
    assert doc["version"] == 2
    (row,) = doc["ratios"]
    state = store.get(("m", "latin"))
    assert state is not None
    assert (row["mean_ratio"], row["dev_ratio"], row["low_ratio"]) == (
        state.mean_ratio,
        state.dev_ratio,
        state.low_ratio,
    )
    old = {k: row[k] for k in ("model", "category", "mean_bpt", "dev_bpt", "samples", "low_bpt")}
    assert (old["mean_bpt"], old["dev_bpt"], old["low_bpt"]) == (
        state.mean_ratio,
        state.dev_ratio,
        state.low_ratio,
    )
    only_old = tmp_path / "old.json"
    only_old.write_text(json.dumps({"version": 1, "ratios": [old]}))
    again = InMemoryRatioStore(beta=0.9)
    assert load_snapshot(again, only_old) == 1
    assert again.get(("m", "latin")) == state
