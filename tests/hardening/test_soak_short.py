"""A 20-second version of the soak (benchmarks/soak.py): selected only with ``pytest -m slow``
(it needs ~45 s with start-up and the throughput probe; the 10-minute run is the benchmark)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.slow, pytest.mark.envoy]


def test_short_soak_has_no_errors_no_leaks(request: pytest.FixtureRequest, tmp_path: Path) -> None:
    if "slow" not in (request.config.getoption("-m") or ""):
        pytest.skip("slow soak: run with `pytest -m slow tests/hardening/test_soak_short.py`")
    argv = [
        "--duration-s",
        "20",
        "--window-s",
        "10",
        "--probe-s",
        "5",
        "--sample-s",
        "2",
        "--work-dir",
        str(tmp_path),
    ]
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", *argv],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "FAIL" not in done.stdout, done.stdout + done.stderr
    assert done.returncode == 0, done.stdout + done.stderr
