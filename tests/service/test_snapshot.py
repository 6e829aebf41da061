"""Ratio snapshots on disk: atomic write, restore, corrupt file refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from extproc.core.calibration import InMemoryRatioStore
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
