"""``tbr eval-estimator``: replay real multilingual chat requests through the router's estimator.

Prints markdown tables (per strategy, per category, per source group, hindsight check and,
with ``--sweep``, the parameter sweep) and optionally writes every number as JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    """Register ``eval-estimator``."""
    p = subparsers.add_parser(
        "eval-estimator",
        help="measure token-estimation fidelity and misroutes on real multilingual requests",
        description=__doc__,
    )
    p.add_argument("--data", default="../shared/data", help="shared data directory (text/, tokenizers/)")
    p.add_argument(
        "--tokenizer",
        default="llama3,qwen3",
        help="comma-separated ground-truth tokenizers: llama3, qwen3, cl100k, o200k, mistral "
        "(mistral: shared data only) (default llama3,qwen3)",
    )
    p.add_argument("--thresholds", default="2048,4096,8192", help="comma-separated B values (tokens)")
    p.add_argument("--seed", type=int, default=0, help="seed of the order, reserves and serialisations")
    p.add_argument(
        "--limit", type=int, default=0, help="replay only the first N requests of the seeded order"
    )
    p.add_argument("--sweep", action="store_true", help="also print the parameter sweep (slow)")
    p.add_argument(
        "--seeds",
        default="",
        help="also replay the defaults with each of these comma-separated seeds (robustness table)",
    )
    p.add_argument(
        "--ground-truth",
        choices=("tokenizer", "derived"),
        default="tokenizer",
        help="prompt tokens from the real tokenizers + chat templates (default), or from "
        "derived/request_token_counts.csv (same numbers, tested; seconds instead of minutes)",
    )
    p.add_argument("--paper-gamma", type=float, default=1.0, help="γ of the paper baseline (default 1.0)")
    p.add_argument("--json", action="store_true", help="print all numbers as JSON instead of the text report")
    p.add_argument(
        "--json-out", dest="json_path", default=None, help="also write all numbers to this JSON file"
    )
    p.add_argument(
        "--corpus",
        default=None,
        help="JSONL of OpenAI request bodies (chat or completions; optional metadata.kind) to evaluate "
        "cold and online per content kind, over --seeds (default 0); 'shared' = the shared data",
    )
    p.set_defaults(func=run)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def run_corpus(args: argparse.Namespace, names: list[str], thresholds: list[int], seeds: list[int]) -> int:
    """``--corpus``: cold and online per tokenizer, per seed (overall) and per content kind (first seed)."""
    from evaluation.broad import (
        body_items,
        body_truth,
        evaluate_modes,
        load_bodies,
        render_modes,
        render_seed_summary,
    )
    from evaluation.groundtruth import SERVED_MODELS

    shared = args.corpus == "shared"
    if shared:
        from evaluation.corpus import load_derived_counts, load_requests
        from evaluation.replay import ReplayItem, build_items

        requests = load_requests(args.data)
        derived = load_derived_counts(args.data)
    else:
        try:
            bodies = load_bodies(args.corpus)
        except (OSError, ValueError) as exc:
            print(f"error: cannot read {args.corpus}: {exc}", file=sys.stderr)
            return 2
    report: dict[str, Any] = {"corpus": args.corpus, "thresholds": thresholds, "tokenizers": {}}
    print(f"# Estimator on {args.corpus}: cold and online, seeds {seeds}, B = {thresholds}\n")
    for name in names:
        model = SERVED_MODELS[name]
        column = f"{name}_prompt_tokens"
        if shared and column in next(iter(derived.values())):
            truth = [int(derived[(r.source, r.req_id)][column]) for r in requests]
        elif shared:  # a tokenizer the data's derived counts do not have (o200k): count here
            from evaluation.groundtruth import load_counter

            truth = load_counter(name, args.data).prompt_tokens_many(requests)
        else:
            truth = body_truth(name, bodies, args.data)
        per_seed = []
        for k, seed in enumerate(seeds):
            if shared:
                raw = build_items(requests, truth, model=model, seed=seed, limit=args.limit)
                items = [
                    ReplayItem("", i.req_id, i.body, i.features, i.prompt_tokens, i.max_tokens) for i in raw
                ]
            else:
                items = body_items(bodies, truth, model=model, seed=seed)
            result = evaluate_modes(items, thresholds)
            per_seed.append({"seed": seed, **result})
            print(render_modes(f"{name}, seed {seed}", result, thresholds, per_kind=k == 0))
            sys.stdout.flush()
        report["tokenizers"][name] = per_seed
    print("## Over all seeds\n")
    print(render_seed_summary(report, thresholds))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=1, default=float), encoding="utf-8")
    return 0


def run(args: argparse.Namespace) -> int:
    """Run the evaluation; returns 0, or 2 on bad arguments / missing data."""
    from evaluation.corpus import load_derived_counts, load_requests
    from evaluation.evaluate import baseline_strategies, evaluate, ours, seed_rows, sweep
    from evaluation.groundtruth import SERVED_MODELS, TOKENIZERS, load_counter
    from evaluation.replay import build_items
    from evaluation.report import render_markdown, render_seeds, render_sweep

    try:
        thresholds = _ints(args.thresholds)
        seeds = _ints(args.seeds)
    except ValueError:
        print("error: --thresholds and --seeds must be comma-separated integers", file=sys.stderr)
        return 2
    names = [t.strip() for t in args.tokenizer.split(",") if t.strip()]
    unknown = [t for t in names if t not in TOKENIZERS]
    if unknown or not names or not thresholds:
        print(f"error: tokenizers must be among {', '.join(TOKENIZERS)}", file=sys.stderr)
        return 2
    if args.corpus:
        return run_corpus(args, names, thresholds, seeds or [args.seed])
    data = Path(args.data)
    if not (data / "text").is_dir() or not (data / "tokenizers").is_dir():
        print(f"error: {data} has no text/ and tokenizers/ (pass --data)", file=sys.stderr)
        return 2
    requests = load_requests(data)
    report: dict[str, Any] = {
        "seed": args.seed,
        "thresholds": thresholds,
        "ground_truth": args.ground_truth,
        "tokenizers": {},
    }

    def say(text: str) -> None:  # the text report; with --json only the JSON report is printed
        if not args.json:
            print(text)

    say(
        f"# Estimator evaluation: {len(requests)} real requests, seed {args.seed}, B = {thresholds}, "
        f"ground truth: {args.ground_truth}\n"
    )
    derived = load_derived_counts(data) if args.ground_truth == "derived" else None
    for name in names:
        t0 = time.perf_counter()
        if derived is not None:
            truth = [int(derived[(r.source, r.req_id)][f"{name}_prompt_tokens"]) for r in requests]
        else:
            truth = load_counter(name, data).prompt_tokens_many(requests)
        items = build_items(requests, truth, model=SERVED_MODELS[name], seed=args.seed, limit=args.limit)
        t1 = time.perf_counter()
        summary = evaluate(items, thresholds, [ours(), *baseline_strategies(args.paper_gamma)])
        summary["ground_truth_s"] = round(t1 - t0, 1)
        summary["replay_s"] = round(time.perf_counter() - t1, 1)
        say(render_markdown(name, summary, thresholds))
        if seeds:
            by_seed = seed_rows(requests, truth, SERVED_MODELS[name], seeds, thresholds, args.limit)
            summary["seeds"] = by_seed
            say(render_seeds(name, by_seed, thresholds))
        if args.sweep:
            rows = sweep(items, thresholds)
            summary["sweep"] = rows
            say(render_sweep(name, rows, thresholds))
        report["tokenizers"][name] = summary
        sys.stdout.flush()
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=1, default=float), encoding="utf-8")
    if args.json:
        print(json.dumps(report, indent=1, default=float))
    return 0
