"""A 20-second version of the soak (benchmarks/soak.py): selected only with ``pytest -m slow``
(it needs ~45 s with start-up and the throughput probe; the 10-minute run is the benchmark)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import soak

pytestmark = [pytest.mark.slow, pytest.mark.envoy]


def test_short_soak_has_no_errors_no_leaks(
    request: pytest.FixtureRequest, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if "slow" not in (request.config.getoption("-m") or ""):
        pytest.skip("slow soak: run with `pytest -m slow tests/hardening/test_soak_short.py`")
    rc = soak.main(
        [
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
    )
    out = capsys.readouterr().out
    assert "FAIL" not in out, out
    assert rc == 0
