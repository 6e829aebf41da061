"""The calibration learners: the weighted lower quantile and its snapshot (the ``bytes`` baseline's
arithmetic is tested in tests/evaluation/test_bytes_model.py)."""

from __future__ import annotations

import pytest

from extproc.config import CalibrationConfig
from extproc.core.estimate.calibration import InMemoryRatioStore, LearnerParams, RatioState, learn
from extproc.service.snapshot import load_snapshot, save_snapshot


def test_quantile_learner_tracks_the_weighted_lower_quantile() -> None:
    """The SGD tracker settles where the weighted share of residuals below it is α."""
    params = LearnerParams(beta=0.99, quantile=0.1, quantile_step=0.02, initial_margin=0.15)
    state: RatioState | None = None
    # deterministic cyclic "ratios": 10 % at 3.0, the rest spread 4.0..5.0
    values = [3.0] + [4.0 + k / 9 for k in range(9)]
    for i in range(20000):
        state = learn(state, values[(i * 7) % 10], params)
    assert state is not None
    below = sum(v < state.low_ratio for v in values) / len(values)
    assert below == pytest.approx(0.1, abs=0.1)
    assert 2.9 < state.low_ratio < 4.1
    assert state.low_ratio < state.mean_ratio


def test_store_from_config_and_snapshot_keep_the_quantile(tmp_path: object) -> None:
    from pathlib import Path

    cal = CalibrationConfig()
    store = InMemoryRatioStore.from_config(cal)
    assert store.params == LearnerParams()  # server's InMemoryRatioStore(beta=…) gets the same defaults
    for c in (4.0, 4.5, 5.0, 3.5):
        store.observe(("m", "latin"), c, 0.5)
    path = Path(str(tmp_path)) / "r.json"
    save_snapshot(store, path)
    other = InMemoryRatioStore(beta=cal.ema_beta)
    assert load_snapshot(other, path) == 1
    assert other.get(("m", "latin")) == store.get(("m", "latin"))
