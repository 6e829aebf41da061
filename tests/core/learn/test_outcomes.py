"""The outcome vocabularies: each Literal is exactly the label values docs/metrics.md documents."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from extproc.core.learn.outcomes import (
    CALIBRATION_OUTCOMES,
    MISROUTE_CALIBRATION_OUTCOMES,
    MISROUTE_OUTCOMES,
    STREAM_ENDS,
)

METRICS_DOC = Path(__file__).resolve().parents[3] / "docs" / "metrics.md"


def _row(metric: str) -> str:
    rows = [
        line
        for line in METRICS_DOC.read_text(encoding="utf-8").splitlines()
        if line.startswith(f"| `{metric}`")
    ]
    assert len(rows) == 1, metric
    return rows[0]


@pytest.mark.parametrize(
    ("metric", "values"),
    [
        ("tbr_calibration_events_total", CALIBRATION_OUTCOMES),
        ("tbr_misroutes_total", MISROUTE_OUTCOMES),
        ("tbr_misroute_calibration_total", MISROUTE_CALIBRATION_OUTCOMES),
        ("tbr_streams_total", STREAM_ENDS),
    ],
)
def test_every_outcome_is_documented_with_its_metric(metric: str, values: tuple[str, ...]) -> None:
    documented = set(re.findall(r"`([a-z_0-9]+)`", _row(metric)))
    assert len(set(values)) == len(values)
    assert set(values) <= documented, sorted(set(values) - documented)
