"""Does the adaptive read decision learn as fast as reading every response? (issue 35, item 2)

The same seeded replay of real requests (:func:`evaluation.replay.build_items`, or the broad corpus's
bodies) through the router's own :class:`~extproc.core.estimate.estimator.Estimator` twice, from a cold start:

* ``read_all``: every response is learned from (the shipped default before issue 35);
* ``adaptive``: after routing each request as the router does (the byte bound of
  :mod:`extproc.core.estimate.screen` where it decides, else the exact estimate; pools of ``limits_tokens``),
  :class:`~extproc.core.learn.read_decision.ResponseReadPolicy` with the shipped parameters decides whether
  its response is read; only those are learned from. Requests arrive at ``rate_rps`` on a virtual
  clock (the decision's budget is reads per key per second).

Both report, per tenth of the replay (the first tenth is the cold start), the mean |routing estimate
− true| / true of the exact estimate and the harmful / wasteful misroutes at each threshold B
(:func:`evaluation.metrics.misroutes`), and the share of responses read. Deterministic for a seed.

Run: ``python -m evaluation.read_replay --corpus shared`` (the repository's shared corpus, ground
truth from its derived counts) or ``--corpus <broad.jsonl>`` (bodies counted by the real tokenizer).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.metrics import misroutes
from evaluation.replay import ReplayItem, ReplayResult
from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.estimate.screen import route_budget
from extproc.core.learn.read_decision import ReadPolicyParams, ResponseReadPolicy, truncation_possible

__all__ = ["ReadReplay", "compare", "render_rows", "replay_reads", "summarise_reads"]

LIMITS_TOKENS = (8192, 65536)
"""Pools of config/router.yaml (``max_model_len``)."""


@dataclass
class ReadReplay:
    """One replay: the arrays of :class:`~evaluation.replay.ReplayResult` plus what was read."""

    result: ReplayResult
    read: np.ndarray
    reasons: dict[str, int]


def replay_reads(
    items: list[ReplayItem],
    *,
    adaptive: bool,
    rate_rps: float = 100.0,
    seed: int = 0,
    params: ReadPolicyParams | None = None,
) -> ReadReplay:
    """Replay ``items`` from a cold start, learning from every response or from those the adaptive
    decision reads (module docstring). ``rate_rps``: requests per second on the virtual clock."""
    cal = CalibrationConfig()
    est = Estimator(estimator=EstimatorConfig(), calibration=cal, store=InMemoryRatioStore.from_config(cal))
    policy = ResponseReadPolicy(params if params is not None else ReadPolicyParams())
    rng = random.Random(seed)
    n = len(items)
    true_prompt = np.zeros(n, dtype=np.int64)
    est_prompt = np.zeros(n, dtype=np.int64)
    central = np.zeros(n, dtype=np.int64)
    reserve = np.zeros(n, dtype=np.int64)
    read = np.zeros(n, dtype=bool)
    categories: list[str] = []
    reasons: Counter[str] = Counter()
    for i, item in enumerate(items):
        now_s = i / rate_rps
        budget = est.estimate(item.features)
        true_prompt[i] = item.prompt_tokens
        est_prompt[i] = budget.prompt_tokens
        central[i] = budget.central_prompt_tokens
        reserve[i] = budget.output_reserve_tokens * budget.n_sequences
        categories.append(budget.key[1])
        if adaptive:
            routed = route_budget(est, item.features, LIMITS_TOKENS)
            fits = [b for b in LIMITS_TOKENS if routed.total_tokens <= b]
            pool_len = fits[0] if fits else LIMITS_TOKENS[-1]
            ratio = est.store.get(routed.key) if not routed.screened else None
            decision = policy.decide(
                routed.key,
                ratio_samples=ratio.samples if ratio is not None else 0,
                output_samples=None,
                truncation=truncation_possible(
                    prompt_tokens=routed.prompt_tokens,
                    output_reserve_tokens=routed.output_reserve_tokens,
                    client_max_output_tokens=item.max_tokens,
                    pool_max_model_len=pool_len,
                    larger_pool=pool_len != LIMITS_TOKENS[-1],
                ),
                required=False,
                now_s=now_s,
                draw=rng.random(),
            )
            reasons[decision.reason] += 1
            if not decision.read:
                continue
        read[i] = True
        obs = est.observe(budget, item.prompt_tokens)
        if adaptive:
            policy.observed(budget.key, obs.rel_error if obs is not None else None, now_s)
    empty = np.zeros(n, dtype=np.int64)
    result = ReplayResult(
        "adaptive" if adaptive else "read_all",
        categories,
        categories,
        true_prompt,
        est_prompt,
        central,
        reserve,
        np.zeros(n, dtype=bool),
        empty,
        empty,
        {},
    )
    return ReadReplay(result, read, dict(reasons))


def summarise_reads(rr: ReadReplay, thresholds: list[int], windows: int = 10) -> dict[str, Any]:
    """Share read, and per tenth of the replay: mean |estimate − true| / true and misroutes per B."""
    res = rr.result
    n = len(res.true_prompt)
    edges = np.linspace(0, n, windows + 1).astype(int)
    err = np.abs(res.est_prompt - res.true_prompt) / np.maximum(res.true_prompt, 1)
    out: dict[str, Any] = {"n": n, "read_share": float(rr.read.mean()) if n else 0.0, "reasons": rr.reasons}
    out["window_abs_err"] = [float(err[a:b].mean()) if b > a else 0.0 for a, b in itertools.pairwise(edges)]
    out["misroutes"] = {}
    for b in thresholds:
        rows = []
        for lo, hi in itertools.pairwise(edges):
            mask = np.zeros(n, dtype=bool)
            mask[lo:hi] = True
            m = misroutes(res, b, mask)
            rows.append([m.harmful, m.wasteful])
        whole = misroutes(res, b, np.ones(n, dtype=bool))
        out["misroutes"][str(b)] = {"per_window": rows, "harmful": whole.harmful, "wasteful": whole.wasteful}
    return out


def _items(corpus: str, data: str, tokenizer: str, seed: int, limit: int) -> list[ReplayItem]:
    from evaluation.groundtruth import SERVED_MODELS

    model = SERVED_MODELS[tokenizer]
    if corpus == "shared":
        from evaluation.corpus import load_derived_counts, load_requests
        from evaluation.replay import build_items

        requests = load_requests(data)
        derived = load_derived_counts(data)
        truth = [int(derived[(r.source, r.req_id)][f"{tokenizer}_prompt_tokens"]) for r in requests]
        return build_items(requests, truth, model=model, seed=seed, limit=limit)
    from evaluation.broad import body_items, body_truth, load_bodies

    bodies = load_bodies(corpus)
    items = body_items(bodies, body_truth(tokenizer, bodies, data), model=model, seed=seed)
    return items[:limit] if limit else items


def compare(
    corpus: str,
    data: str,
    *,
    tokenizer: str = "llama3",
    seed: int = 0,
    limit: int = 0,
    rates: tuple[float, ...] = (10.0, 100.0, 1000.0),
    thresholds: tuple[int, ...] = (2048, 4096, 8192),
) -> dict[str, Any]:
    """Read-all against the adaptive decision at each of ``rates`` (req/s) on ``corpus`` ('shared' or
    a JSONL of bodies): ``{"corpus", "tokenizer", "seed", "read_all": summary, "adaptive_<r>rps":
    summary, ...}`` (:func:`summarise_reads`).

    Raises:
        OSError, ValueError, KeyError: the corpus or its ground truth cannot be loaded.
    """
    items = _items(corpus, data, tokenizer, seed, limit)
    report: dict[str, Any] = {"corpus": corpus, "tokenizer": tokenizer, "seed": seed}
    report["read_all"] = summarise_reads(replay_reads(items, adaptive=False), list(thresholds))
    for rate in rates:
        rr = replay_reads(items, adaptive=True, rate_rps=rate, seed=seed)
        report[f"adaptive_{rate:g}rps"] = summarise_reads(rr, list(thresholds))
    return report


def render_rows(report: dict[str, Any]) -> list[str]:
    """Markdown rows ``| corpus | reads | share read | first tenth | tenths 2–5 | tenths 6–10 |
    misroutes harmful/wasteful per B |`` of one :func:`compare` report."""
    rows = []
    name = "repository" if report["corpus"] == "shared" else Path(report["corpus"]).name
    for key, v in report.items():
        if not (isinstance(v, dict) and "read_share" in v):
            continue
        reads = (
            "every response"
            if key == "read_all"
            else f"adaptive, {key.split('_')[1].removesuffix('rps')} req/s"
        )
        w = v["window_abs_err"]
        mis = " / ".join(f"{m['harmful']}/{m['wasteful']}" for m in v["misroutes"].values())
        rows.append(
            f"| {name} ({v['n']:,}) | {reads} | {v['read_share']:.1%} | {w[0]:.1%} | "
            f"{sum(w[1:5]) / max(len(w[1:5]), 1):.1%} | {sum(w[5:]) / max(len(w[5:]), 1):.1%} | {mis} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print read-all against adaptive as JSON (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="shared", help="'shared' or a JSONL of request bodies")
    ap.add_argument("--data", default="../shared/data", help="shared data directory")
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--rates", default="10,100,1000", help="request rates (req/s) of the adaptive replays")
    ap.add_argument("--thresholds", default="2048,4096,8192")
    args = ap.parse_args(argv)
    try:
        report = compare(
            args.corpus,
            args.data,
            tokenizer=args.tokenizer,
            seed=args.seed,
            limit=args.limit,
            rates=tuple(float(x) for x in args.rates.split(",")),
            thresholds=tuple(int(x) for x in args.thresholds.split(",")),
        )
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: cannot load {args.corpus}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1))
    print("\n".join(render_rows(report)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
