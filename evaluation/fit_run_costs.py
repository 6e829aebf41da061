"""Measure run costs per tokenizer family and write ``extproc/core/text/run_costs.json`` (docs/estimator.md §Run costs).

Method:

1. Segments: every message text (content, reasoning) of the broad corpus
   (:mod:`evaluation.broad_corpus`), of a seeded sample of 3,000 requests of the shared data, and, for
   the scripts neither has (Gurmukhi, Odia, Myanmar), the names of languages, territories and scripts
   in the ``pa``, ``or`` and ``my`` locales of the Unicode CLDR (Unicode License v3) as shipped in the
   ``babel`` wheel (BSD-3-Clause), 40 names per segment (skipped when babel is not installed), and 40
   seeded sequences of emoji (:func:`emoji_segments`).
2. For each segment, :func:`extproc.core.text.runs.count_runs` gives runs and characters per run kind, and the
   tokenizer of each family (``llama3``, ``qwen3`` → family ``qwen``, ``cl100k``, ``o200k``, ``mistral``:
   :mod:`evaluation.groundtruth`) gives its true token count (bare text, no template: framing is
   modelled per message, docs/estimator.md §Framing).
3. Non-negative least squares of ``tokens ≈ Σ a_k runs_k + b_k chars_k + g · gaps`` with rows weighted by
   ``1/√tokens`` (relative error, so long and short segments both count), on the segments of the
   sources that are not held out (a run kind that fewer than 5 fitted segments carry gets its held-out
   segments back, so that no kind is left without text): a source (a broad-corpus ``metadata.source`` with its ``kind``, a
   shared-data source, a CLDR locale) is held out when the first byte of the SHA-1 of its name is
   below 51 (about one in five, fixed by the names, not chosen; never a CLDR locale, the only text of
   its script). Coefficients are tokens per run and
   per character. The printed report compares the modelled/true ratio of fitted and held-out segments
   per content kind.
4. Cold correction per (family, content kind): the ratio ``modelled / true`` of segments with ≥ 200 true
   tokens, at its 2nd percentile (the learned key starts from there: at most 2 % of such segments are
   under-budgeted before anything is learned), clipped to [0.6, 1.0]; kinds with fewer than 20 such
   segments or fewer than 3 sources (a single source, e.g. a CLDR name list, says little about prose)
   take the family's value over all segments. A non-ASCII kind a family's fit leaves at zero cost (no
   text of it, or its tokens absorbed by neighbouring kinds) takes the largest costs another family
   measured for it, else :data:`UNMEASURED_TOKENS_PER_CHAR` per character: no kind is ever free. Cold corrections use every segment (fitted and held out):
   they are the guard against under-budgeting, and more segments make the percentile firmer.
   Families without a tokenizer here (``unknown``) take the element-wise maximum of the coefficients and
   the minimum cold correction.

Usage: ``python -m evaluation.fit_run_costs --corpus broad.jsonl --data ../shared/data
--out extproc/core/text/run_costs.json [--truth-cache FILE]`` (a few minutes: the Qwen3 tokenizer is the
slow part; the cache keeps true counts by family and SHA-1 of the text).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
from pathlib import Path
from typing import Any

import numpy as np

from extproc.core.text.runs import CONTENT_KINDS, RUN_KINDS, RunCounts, content_kind, count_runs

__all__ = ["fit", "main", "segments"]

FAMILY_OF = {"llama3": "llama3", "qwen3": "qwen", "cl100k": "cl100k", "o200k": "o200k", "mistral": "mistral"}
CLDR_LOCALES = ("pa", "or", "my")
"""Locales whose CLDR names give text for scripts the corpora lack (Gurmukhi, Odia, Myanmar)."""
_CLDR_NAMES_PER_SEGMENT = 40
COLD_PERCENTILE = 2.0
COLD_MIN_TOKENS = 200
COLD_MIN_SEGMENTS = 20
COLD_MIN_SOURCES = 3
COLD_CLIP = (0.6, 1.0)
UNMEASURED_TOKENS_PER_CHAR = 3.0
"""Cost of a non-ASCII character no family measured: one token per UTF-8 byte of a BMP character, the
most a byte-level BPE spends on it."""
_NON_ASCII_KINDS = [
    RUN_KINDS.index(r) for r in RUN_KINDS[RUN_KINDS.index("latin_ext") : RUN_KINDS.index("other") + 1]
]


def held_out(source: str) -> bool:
    """True for the sources kept out of the coefficient fit (module docstring, step 3). CLDR locales
    and the emoji sequences are never held out: each is the only text of its kind."""
    return not source.startswith(("cldr_", "unicode_")) and hashlib.sha1(source.encode()).digest()[0] < 51


def segments(corpus: Path | None, data: Path | None, shared_sample: int = 3000) -> list[tuple[str, str]]:
    """``(source, text)`` of each message text of the broad corpus, of a seeded sample of the shared
    data and of the CLDR locales (module docstring, step 1)."""
    out: list[tuple[str, str]] = []
    if corpus is not None:
        with corpus.open(encoding="utf-8") as fh:
            for line in fh:
                body = json.loads(line)
                meta = body.get("metadata") or {}
                source = f"{meta.get('source', '')}/{meta.get('kind', '')}"
                for m in body.get("messages", ()):
                    for field in ("content", "reasoning_content", "reasoning"):
                        v = m.get(field)
                        if isinstance(v, str) and v:
                            out.append((source, v))
    if data is not None:
        from evaluation.corpus import load_requests

        reqs = load_requests(data)
        random.Random(0).shuffle(reqs)
        for r in reqs[:shared_sample]:
            out.extend((r.source, m["content"]) for m in r.messages if m["content"])
    out.extend(cldr_segments())
    out.extend(emoji_segments())
    return out


EMOJI_BLOCKS = ((0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF))
"""Unicode blocks of pictographs, emoticons, transport and supplemental symbols."""


def emoji_segments(n: int = 40) -> list[tuple[str, str]]:
    """``("unicode_emoji", text)``: seeded sequences of emoji from :data:`EMOJI_BLOCKS`, 1–4 together,
    separated by spaces (chat text mixes words with the common emoji only, which would leave emoji-dense
    text under-measured)."""
    rng = random.Random(0)
    pool = [chr(c) for lo, hi in EMOJI_BLOCKS for c in range(lo, hi + 1)]
    return [
        (
            "unicode_emoji",
            " ".join("".join(rng.choice(pool) for _ in range(rng.randint(1, 4))) for _ in range(80)),
        )
        for _ in range(n)
    ]


def cldr_segments() -> list[tuple[str, str]]:
    """``("cldr_<locale>", text)`` segments of :data:`CLDR_LOCALES` (empty without babel)."""
    try:
        from babel import Locale
    except ImportError:
        return []
    out = []
    for code in CLDR_LOCALES:
        loc = Locale.parse(code)
        names = [
            v for attr in ("languages", "territories", "scripts") for v in dict(getattr(loc, attr)).values()
        ]
        names = [v for v in names if isinstance(v, str)]
        for i in range(0, len(names), _CLDR_NAMES_PER_SEGMENT):
            out.append((f"cldr_{code}", "\n".join(names[i : i + _CLDR_NAMES_PER_SEGMENT])))
    return out


def _features(texts: list[str]) -> np.ndarray:
    rows = []
    for t in texts:
        rc = count_runs(t)
        rows.append(np.concatenate([rc.runs, rc.chars, [rc.gaps]]))
    return np.array(rows)


def fit(
    texts: list[str],
    truth: dict[str, list[int]],
    fitted: np.ndarray | None = None,
    sources: list[str] | None = None,
) -> dict[str, Any]:
    """Coefficients and cold corrections per family (the JSON written by :func:`main`).

    Args:
        texts: the segments; ``truth``: true tokens of each, per tokenizer name (:data:`FAMILY_OF`).
        fitted: bool array over ``texts``, the segments the coefficients are fitted on (default all).
        sources: the source of each text (cold corrections per kind need ≥ 3 sources).
    """
    from scipy.optimize import nnls

    x = _features(texts)
    k = len(RUN_KINDS)
    use = np.ones(len(texts), dtype=bool) if fitted is None else fitted.copy()
    # Never hold out the last text of a run kind: a kind carried (≥ 10 % of the characters) by fewer
    # than 5 fitted segments gets all its segments back (else its cost would be fitted as zero).
    total_chars = np.maximum(x[:, k : 2 * k].sum(axis=1), 1.0)
    for j in range(k):
        carrying = x[:, k + j] >= 0.1 * total_chars
        if (carrying & use).sum() < 5 and (carrying & ~use).any():
            use |= carrying
    sources_of = np.asarray(sources if sources is not None else [""] * len(texts))
    families: dict[str, Any] = {}
    coefs: dict[str, np.ndarray] = {}
    for name, counts in truth.items():
        y = np.asarray(counts, dtype=float)
        m = (y >= 20) & use
        w = 1.0 / np.sqrt(y[m])
        coefs[name], _ = nnls(x[m] * w[:, None], y[m] * w)
    # A non-ASCII kind a family's fit leaves at zero cost (no text of it, or its tokens absorbed by
    # neighbouring kinds, as Qwen's emoji by spaces) is never free: it takes the largest costs another
    # family measured for it, else the byte-level ceiling.
    for j in _NON_ASCII_KINDS:
        measured = [c for c in coefs.values() if c[j] > 0.0 or c[k + j] > 0.0]
        for coef in coefs.values():
            if coef[j] == 0.0 and coef[k + j] == 0.0:
                if measured:
                    coef[j] = max(c[j] for c in measured)
                    coef[k + j] = max(c[k + j] for c in measured)
                else:
                    coef[k + j] = UNMEASURED_TOKENS_PER_CHAR
    for name, counts in truth.items():
        y = np.asarray(counts, dtype=float)
        m = (y >= 20) & use
        coef = coefs[name]
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
                if sel.sum() >= COLD_MIN_SEGMENTS and len(set(sources_of[sel].tolist())) >= COLD_MIN_SOURCES
                else overall
            )
            cold[kind] = round(min(max(value, COLD_CLIP[0]), COLD_CLIP[1]), 3)
        families[FAMILY_OF[name]] = {
            "per_run": dict(zip(RUN_KINDS, np.round(coef[:k], 4).tolist(), strict=True)),
            "per_char": dict(zip(RUN_KINDS, np.round(coef[k : 2 * k], 4).tolist(), strict=True)),
            "per_gap": round(float(coef[-1]), 4),
            "cold_ratio": cold,
            "segments": int(m.sum()),
            "held_out_segments": int(((y >= 20) & ~use).sum()),
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


def holdout_report(
    texts: list[str], truth: dict[str, list[int]], fitted: np.ndarray, table: dict[str, Any]
) -> str:
    """Median and 10th/90th percentiles of modelled/true per content kind, fitted vs held-out segments
    of ≥ 50 true tokens, per family (markdown)."""
    from extproc.core.text.run_costs import RunCosts

    x = _features(texts)
    k = len(RUN_KINDS)
    lines = [
        "|family|content kind|fitted n|fitted p10 / p50 / p90|held-out n|held-out p10 / p50 / p90|",
        "|---|---|---:|---|---:|---|",
    ]
    for name, counts in truth.items():
        row = table["families"][FAMILY_OF[name]]
        rc = RunCosts(
            FAMILY_OF[name],
            np.array([row["per_run"][r] for r in RUN_KINDS]),
            np.array([row["per_char"][r] for r in RUN_KINDS]),
            float(row["per_gap"]),
            {},
        )
        y = np.asarray(counts, dtype=float)
        ratio, kinds = [], []
        for i, xi in enumerate(x):
            tokens, kind = rc.text_tokens(RunCounts(xi[:k], xi[k : 2 * k], xi[-1]))
            ratio.append(tokens / max(y[i], 1.0))
            kinds.append(kind)
        r, kd = np.array(ratio), np.array(kinds)
        for kind in sorted(set(kinds)):
            cells = []
            for part in (fitted, ~fitted):
                sel = part & (kd == kind) & (y >= 50)
                q = np.percentile(r[sel], [10, 50, 90]) if sel.any() else None
                cells += [str(int(sel.sum())), " / ".join(f"{v:.2f}" for v in q) if q is not None else "–"]
            lines.append(f"|{FAMILY_OF[name]}|{kind}|" + "|".join(cells) + "|")
    return "\n".join(lines) + "\n"


_TABLE_RUN_KINDS = (
    "letter", "letter_euro", "letter_other", "latin_ext", "digit", "punct", "blob", "space", "newline",
    "cyrillic", "arabic", "devanagari", "gurmukhi", "oriya", "myanmar", "han", "kana", "hangul", "emoji",
)  # fmt: skip


def tables(table: dict[str, Any]) -> str:
    """The markdown tables of docs/estimator.md (cold corrections per content kind and family, selected
    coefficients) from a ``run_costs.json`` object."""
    fams = list(table["families"])
    rows = ["|content kind|" + "|".join(fams) + "|", "|---|" + "---:|" * len(fams)]
    for kind in CONTENT_KINDS:
        rows.append(
            f"|{kind}|" + "|".join(f"{table['families'][f]['cold_ratio'][kind]:.3f}" for f in fams) + "|"
        )
    rows += [
        "",
        "|run kind|" + "|".join(f"{f} per run / per char" for f in fams) + "|",
        "|---|" + "---:|" * len(fams),
    ]
    for kind in _TABLE_RUN_KINDS:
        cells = [
            f"{table['families'][f]['per_run'][kind]:.3f} / {table['families'][f]['per_char'][kind]:.3f}"
            for f in fams
        ]
        rows.append(f"|{kind}|" + "|".join(cells) + "|")
    rows.append("|gaps (per gap)|" + "|".join(f"{table['families'][f]['per_gap']:.3f}" for f in fams) + "|")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Command line (module docstring)."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--corpus", default=None)
    p.add_argument("--data", default="../shared/data")
    p.add_argument("--out", default="extproc/core/text/run_costs.json")
    p.add_argument(
        "--truth-cache", default=None, help="JSON of true counts by family and text SHA-1 (reused)"
    )
    p.add_argument("--report", default=None, help="write the fitted vs held-out table (markdown) here")
    p.add_argument("--tables", default=None, help="only print the docs tables of this run_costs.json")
    a = p.parse_args(argv)
    if a.tables:
        print(tables(json.loads(Path(a.tables).read_text(encoding="utf-8"))), end="")
        return 0
    from evaluation.groundtruth import load_counter

    pairs = segments(Path(a.corpus) if a.corpus else None, Path(a.data) if a.data else None)
    texts = [t for _, t in pairs]
    fitted = np.array([not held_out(src) for src, _ in pairs])
    keys = [hashlib.sha1(t.encode("utf-8", "surrogatepass")).hexdigest() for t in texts]
    cache = Path(a.truth_cache) if a.truth_cache else None
    known: dict[str, dict[str, int]] = {}
    if cache is not None and cache.exists():
        known = json.loads(cache.read_text(encoding="utf-8"))
    truth: dict[str, list[int]] = {}
    for name in FAMILY_OF:
        have = known.setdefault(name, {})
        missing = [i for i, key in enumerate(keys) if key not in have]
        if missing:
            c = load_counter(name, a.data)
            for i in missing:
                have[keys[i]] = c.count_text(texts[i])
        truth[name] = [have[key] for key in keys]
    if cache is not None:
        cache.write_text(json.dumps(known), encoding="utf-8")
    result = fit(texts, truth, fitted, [src for src, _ in pairs])
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    if a.report:
        Path(a.report).write_text(holdout_report(texts, truth, fitted, result), encoding="utf-8")
    print(f"{len(texts)} segments ({int((~fitted).sum())} held out) -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
