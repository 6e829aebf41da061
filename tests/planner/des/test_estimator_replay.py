"""The planner replays real prompt text through the router's own estimator (no copy of it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from planner.des.estimator_replay import load_prompt_corpus, replay_estimates
from planner.workload.trace import TraceError, build_trace
from tests.shared_data import SHARED_DATA

DATA = SHARED_DATA


def test_planner_imports_no_grpc() -> None:
    """Every planner module (and the extproc parts it uses) imports without pulling in gRPC."""
    root = Path(__file__).resolve().parents[3]
    mods = sorted(
        ".".join(p.relative_to(root).with_suffix("").parts) for p in (root / "planner").rglob("*.py")
    )
    assert "planner.des.estimator_replay" in mods and "planner.model.advice" in mods
    code = (
        "import importlib, sys\n"
        f"for m in {mods!r}:\n"
        "    importlib.import_module(m.removesuffix('.__init__'))\n"
        "bad = sorted(k for k in sys.modules if k == 'grpc' or k.startswith('grpc.'))\n"
        "print(len(sys.modules)); assert not bad, bad\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr


def test_missing_corpus_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="prompt corpus not found"):
        load_prompt_corpus(tmp_path)


@pytest.mark.skipif(not (DATA / "text").is_dir(), reason="../shared/data/text corpus not present")
def test_replay_uses_router_estimator_and_calibrates() -> None:
    """Estimates come from extproc.core.estimate.estimator on real bodies: errors shrink once keys are warm, long
    trace requests borrow long prompts, and the result is deterministic per seed."""
    corpus = load_prompt_corpus(
        DATA, sources=("lmsys", "mt_bench_en", "wildchat_ru", "humaneval", "longbench_v2")
    )
    assert len(corpus.features) > 1_000
    assert list(corpus.prompt_tokens) == sorted(corpus.prompt_tokens)
    rng = np.random.default_rng(0)
    n = 2000
    inp = np.concatenate([rng.integers(20, 2000, n - 20), np.full(20, 60_000)])
    trace = build_trace(np.arange(n, dtype=np.float64) * 0.01, inp, np.full(n, 100))
    est, stats = replay_estimates(trace, corpus, seed=1)
    again, _ = replay_estimates(trace, corpus, seed=1)
    other, _ = replay_estimates(trace, corpus, seed=2)
    assert np.array_equal(est, again) and not np.array_equal(est, other)
    assert stats.requests == n and sum(stats.by_source.values()) == n
    rel = est / inp - 1.0
    # warm-up uses the conservative priors (over-estimates); the learned lower quantile is tighter
    assert np.median(np.abs(rel[:200])) > np.median(np.abs(rel[1000 : n - 20]))
    assert abs(float(np.median(rel[1000 : n - 20]))) < 0.15
    assert stats.by_source.get("longbench_v2", 0) >= 20  # 60k-token requests borrow long documents
