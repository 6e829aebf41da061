"""Measure run costs per tokenizer family and write ``extproc/core/run_costs.json`` (docs/estimator.md §Run costs).

Method:

1. Segments: every message text (content, reasoning) of the broad corpus
   (:mod:`evaluation.broad_corpus`) and of a seeded sample of 3,000 requests of the shared data.
2. For each segment, :func:`extproc.core.runs.count_runs` gives runs and characters per run kind, and the
   tokenizer of each family (``llama3``, ``qwen3`` → family ``qwen``, ``cl100k``) gives its true token
   count (bare text, no template: framing is modelled per message, docs/estimator.md §Framing).
3. Non-negative least squares of ``tokens ≈ Σ a_k runs_k + b_k chars_k + g · gaps`` with rows weighted by
   ``1/√tokens`` (relative error, so long and short segments both count). Coefficients are tokens per run
   and per character.
4. Cold correction per (family, content kind): the ratio ``modelled / true`` of segments with ≥ 200 true
   tokens, at its 2nd percentile (the learned key starts from there: at most 2 % of such segments are
   under-budgeted before anything is learned), clipped to [0.6, 1.0]; kinds with fewer than 20 segments
   take the family's value over all segments.
   Families without a tokenizer here (``unknown``) take the element-wise maximum of the coefficients and
   the minimum cold correction.

Usage: ``python -m evaluation.fit_run_costs --corpus broad.jsonl --data ../shared/data
--out extproc/core/run_costs.json`` (a few minutes: the Qwen3 tokenizer is the slow part).
"""

from __future__ import annotations

import argparse
import json
import random
from pathlib import Path
from typing import Any

import numpy as np

from extproc.core.runs import CONTENT_KINDS, RUN_KINDS, RunCounts, content_kind, count_runs

__all__ = ["fit", "main", "segments"]

FAMILY_OF = {"llama3": "llama3", "qwen3": "qwen", "cl100k": "cl100k"}
COLD_PERCENTILE = 2.0
COLD_MIN_TOKENS = 200
COLD_MIN_SEGMENTS = 20
COLD_CLIP = (0.6, 1.0)


def segments(corpus: Path | None, data: Path | None, shared_sample: int = 3000) -> list[str]:
    """Message texts of the broad corpus and of a seeded sample of the shared data."""
    out: list[str] = []
    if corpus is not None:
        with corpus.open(encoding="utf-8") as fh:
            for line in fh:
                body = json.loads(line)
                for m in body.get("messages", ()):
                    for field in ("content", "reasoning_content", "reasoning"):
                        v = m.get(field)
                        if isinstance(v, str) and v:
                            out.append(v)
    if data is not None:
        from evaluation.corpus import load_requests

        reqs = load_requests(data)
        random.Random(0).shuffle(reqs)
        for r in reqs[:shared_sample]:
            out.extend(m["content"] for m in r.messages if m["content"])
    return out


def _features(texts: list[str]) -> np.ndarray:
    rows = []
    for t in texts:
        rc = count_runs(t)
        rows.append(np.concatenate([rc.runs, rc.chars, [rc.gaps]]))
    return np.array(rows)


def fit(texts: list[str], truth: dict[str, list[int]]) -> dict[str, Any]:
    """Coefficients and cold corrections per family (the JSON written by :func:`main`)."""
    from scipy.optimize import nnls

    x = _features(texts)
    k = len(RUN_KINDS)
    families: dict[str, Any] = {}
    for name, counts in truth.items():
        y = np.asarray(counts, dtype=float)
        m = y >= 20
        w = 1.0 / np.sqrt(y[m])
        coef, _ = nnls(x[m] * w[:, None], y[m] * w)
        pred = x @ coef
        kinds = []
        for row in x:
            contrib = row[:k] * coef[:k] + row[k : 2 * k] * coef[k : 2 * k]
            contrib[RUN_KINDS.index("space")] += row[-1] * coef[-1]
            kinds.append(content_kind(RunCounts(row[:k], row[k : 2 * k], row[-1]), contrib))
        ratio = pred / np.maximum(y, 1.0)
        big = y >= COLD_MIN_TOKENS
        overall = float(np.percentile(ratio[big], COLD_PERCENTILE))
        cold: dict[str, float] = {}
        for kind in CONTENT_KINDS:
            sel = big & (np.array(kinds) == kind)
            value = (
                float(np.percentile(ratio[sel], COLD_PERCENTILE))
                if sel.sum() >= COLD_MIN_SEGMENTS
                else overall
            )
            cold[kind] = round(min(max(value, COLD_CLIP[0]), COLD_CLIP[1]), 3)
        families[FAMILY_OF[name]] = {
            "per_run": dict(zip(RUN_KINDS, np.round(coef[:k], 4).tolist(), strict=True)),
            "per_char": dict(zip(RUN_KINDS, np.round(coef[k : 2 * k], 4).tolist(), strict=True)),
            "per_gap": round(float(coef[-1]), 4),
            "cold_ratio": cold,
            "segments": int(m.sum()),
        }
    fams = list(families.values())
    families["unknown"] = {
        "per_run": {r: max(f["per_run"][r] for f in fams) for r in RUN_KINDS},
        "per_char": {r: max(f["per_char"][r] for f in fams) for r in RUN_KINDS},
        "per_gap": max(f["per_gap"] for f in fams),
        "cold_ratio": {c: min(f["cold_ratio"][c] for f in fams) for c in CONTENT_KINDS},
        "segments": 0,
    }
    return {"version": 1, "families": families}


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--corpus", default=None)
    p.add_argument("--data", default="../shared/data")
    p.add_argument("--out", default="extproc/core/run_costs.json")
    p.add_argument("--truth-cache", default=None, help="JSON of per-segment true counts (reused if present)")
    a = p.parse_args(argv)
    from evaluation.groundtruth import load_counter

    texts = segments(Path(a.corpus) if a.corpus else None, Path(a.data) if a.data else None)
    cache = Path(a.truth_cache) if a.truth_cache else None
    if cache is not None and cache.exists():
        truth = json.loads(cache.read_text(encoding="utf-8"))
    else:
        truth = {}
        for name in FAMILY_OF:
            c = load_counter(name, a.data)
            truth[name] = [c.count_text(t) for t in texts]
        if cache is not None:
            cache.write_text(json.dumps(truth), encoding="utf-8")
    result = fit(texts, truth)
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"{len(texts)} segments -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
