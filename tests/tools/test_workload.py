"""Demo workload: deterministic, covers every category, real data read in place or the built-in sample."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tbr.demo.builtin_sample import generated_long_document
from tbr.demo.workload import DEMO_CATEGORIES, build_workload, long_prompt, short_prompt
from tests.shared_data import SHARED_DATA

DATA_DIR = SHARED_DATA


def test_builtin_sample_when_data_is_absent(tmp_path: Path) -> None:
    w = build_workload(tmp_path / "missing", n_requests=60, seed=3)
    assert w.builtin and w.data_dir is None
    assert len(w.requests) == 60
    assert set(Counter(r.category for r in w.requests)) == set(DEMO_CATEGORIES)
    assert {r.source for r in w.requests} <= {"builtin", "builtin_generated"}
    assert any(r.tools for r in w.requests)
    assert any(r.stream for r in w.requests) and any(not r.stream for r in w.requests)
    assert any(r.max_tokens is None for r in w.requests) and any(r.max_tokens for r in w.requests)


def test_same_seed_same_requests(tmp_path: Path) -> None:
    a = build_workload(tmp_path, n_requests=40, seed=5)
    b = build_workload(tmp_path, n_requests=40, seed=5)
    c = build_workload(tmp_path, n_requests=40, seed=6)
    assert a.requests == b.requests
    assert a.requests != c.requests
    assert len({r.request_id for r in a.requests}) == 40


def test_generated_long_document_size_and_determinism() -> None:
    doc = generated_long_document(50_000, seed=1)
    assert 50_000 <= len(doc.encode("utf-8")) < 52_000
    assert doc == generated_long_document(50_000, seed=1)


@pytest.mark.data
def test_real_workload_mix() -> None:
    if not (DATA_DIR / "text").is_dir():
        pytest.skip(f"{DATA_DIR} not present (real prompts are not shipped with the repo)")
    w = build_workload(DATA_DIR, n_requests=200, seed=0)
    assert not w.builtin
    cats = Counter(r.category for r in w.requests)
    assert cats == {c: round(200 * s) for c, s in DEMO_CATEGORIES.items()}
    sources = {r.source for r in w.requests}
    assert {"bfcl", "longbench_v2", "humaneval", "alignbench_zh", "wildchat_ru"} <= sources
    # LongBench documents fit the long pool by the derived Qwen3 counts (≤ 65536 − 2048 tokens).
    docs = [r for r in w.requests if r.category == "long_doc"]
    assert docs and all(len(json.dumps(r.messages, ensure_ascii=False).encode()) > 40_000 for r in docs)
    assert short_prompt(DATA_DIR)[0] == "sharegpt_first_turn"
    assert long_prompt(DATA_DIR)[0] == "longbench_v2"
