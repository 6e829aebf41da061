"""Shared fixtures: the shared data directory (tests skip when it is absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

from evaluation.corpus import ReplayRequest, load_requests
from tests.shared_data import SHARED_DATA

DATA = SHARED_DATA


@pytest.fixture(scope="session")
def data_dir() -> Path:
    if not (DATA / "text").is_dir() or not (DATA / "tokenizers").is_dir():
        pytest.skip(f"shared data not found at {DATA} (real prompts and tokenizers are needed)")
    return DATA


@pytest.fixture(scope="session")
def requests_all(data_dir: Path) -> list[ReplayRequest]:
    return load_requests(data_dir)
