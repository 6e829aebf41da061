"""``tbr eval-output``: replay real answer lengths through the router's output reserve (issue 30).

Per data set and B in ``--thresholds``: truncation rate, α (share routed short) against the ideal α
(true prompt + true output known), harmful and wasteful (prompt-estimate misroutes, as
``tbr eval-estimator`` counts them), for the learned reserve online (from its cold priors) and cold
(priors only), and for reference the fixed default reserve and the oracle. Method:
:mod:`evaluation.output_eval`; data: :mod:`evaluation.output_pairs`,
:mod:`evaluation.reasoning_lengths`; results and the defaults' sweep: docs/estimator.md §Output half.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parser", "run"]

DATASETS = ("pairs", "azure_conv", "azure_code", "mooncake", "reasoning")
RESERVES = ("online", "cold", "fixed:1024", "oracle")


def add_parser(subparsers: Any) -> None:
    """Register ``eval-output``."""
    p = subparsers.add_parser(
        "eval-output",
        help="measure truncations and the share routed short under the learned output reserve",
        description=__doc__,
    )
    p.add_argument(
        "--data", default="../shared/data", help="shared data directory (text/, traces/, tokenizers/)"
    )
    p.add_argument(
        "--sets", default=",".join(DATASETS), help=f"comma-separated data sets ({', '.join(DATASETS)})"
    )
    p.add_argument("--thresholds", default="2048,4096,8192", help="comma-separated B values (tokens)")
    p.add_argument(
        "--reserves", default=",".join(RESERVES), help="comma-separated: online, cold, fixed:N, oracle"
    )
    p.add_argument("--seeds", default="0", help="orders of the conversation pairs and reasoning answers")
    p.add_argument(
        "--model",
        choices=("per-source", "one"),
        default="per-source",
        help="conversation pairs: one model key per source (each source's answers come from its own "
        "models, default) or one for all",
    )
    p.add_argument(
        "--client-max",
        type=float,
        default=0.0,
        help="share of requests given a client max_tokens (log-uniform 16-8192, seeded; default 0: none)",
    )
    p.add_argument(
        "--policy",
        choices=("strict", "risk"),
        default="strict",
        help="reserve of a request with a client maximum: the maximum (strict) or min(maximum, learned) (risk)",
    )
    p.add_argument(
        "--json-out", dest="json_path", default=None, help="also write all numbers to this JSON file"
    )
    p.set_defaults(func=run)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def _reasoning_answers() -> list[Any] | None:
    """The reasoning-answer table (:func:`evaluation.reasoning_lengths.default_path`: committed,
    or ``$TBR_REASONING_LENGTHS``), or None (and a line on stderr) when that file is absent."""
    from evaluation.reasoning_lengths import default_path, load_reasoning_answers

    table = default_path()
    if not table.is_file():
        print(
            f"(set reasoning skipped: no table at {table}: TBR_REASONING_LENGTHS names a missing "
            "file; python -m evaluation.reasoning_lengths builds it)\n",
            file=sys.stderr,
        )
        return None
    return list(load_reasoning_answers(table))


def _runs(
    name: str, data: Path, seeds: list[int], model: str, cache: dict[str, Any]
) -> list[tuple[int | None, Any]]:
    """The (seed, items) replays of one data set (``cache`` keeps the parsed pairs); none for a set
    whose table is absent."""
    from evaluation.output_eval import build_output_items, reasoning_items
    from evaluation.output_pairs import load_output_pairs, load_trace_pairs

    if name == "pairs":
        if "pairs" not in cache:
            from tokenizers import Tokenizer

            tok = Tokenizer.from_file(str(data / "tokenizers" / "llama3" / "tokenizer.json"))
            cache["pairs"] = load_output_pairs(data, tok)
        key = None if model == "per-source" else "one"
        return [
            (s, build_output_items(cache["pairs"], seed=s, estimate_prompts=True, model_key=key))
            for s in seeds
        ]
    if name == "reasoning":
        answers = _reasoning_answers()
        return [] if answers is None else [(s, reasoning_items(answers, seed=s)) for s in seeds]
    return [(None, build_output_items(load_trace_pairs(data, name), seed=None, estimate_prompts=False))]


def run(args: argparse.Namespace) -> int:
    """Run the replay; returns 0, or 2 on bad arguments or missing data."""
    from evaluation.output_eval import replay_output, with_client_max
    from extproc.config import OutputReserveConfig

    try:
        thresholds, seeds = _ints(args.thresholds), _ints(args.seeds)
    except ValueError:
        print("error: --thresholds and --seeds must be comma-separated integers", file=sys.stderr)
        return 2
    sets = [s.strip() for s in args.sets.split(",") if s.strip()]
    reserves = [r.strip() for r in args.reserves.split(",") if r.strip()]
    if not thresholds or not seeds or any(s not in DATASETS for s in sets):
        print(f"error: --sets must be among {', '.join(DATASETS)}", file=sys.stderr)
        return 2
    data = Path(args.data)
    if any(s != "reasoning" for s in sets) and not (data / "traces").is_dir():
        print(f"error: no shared data at {data} (text/, traces/, tokenizers/)", file=sys.stderr)
        return 2
    cfg = OutputReserveConfig(learned=True)
    report: dict[str, Any] = {"thresholds": thresholds, "config": cfg.model_dump(mode="json"), "sets": {}}
    print(
        f"# Output reserve on real answers: B = {thresholds}, seeds {seeds}, client max_tokens on "
        f"{args.client_max:.0%} of requests, policy {args.policy}\n"
    )
    print(
        "| set | reserve | seed | n | "
        + " | ".join(f"B={b}: truncated / α ÷ ideal (α, ideal) / harmful, wasteful" for b in thresholds)
        + " |"
    )
    print("|---|---|---|---:|" + "---|" * len(thresholds))
    cache: dict[str, Any] = {}
    for name in sets:
        runs = _runs(name, data, seeds, args.model, cache)
        rows = []
        if args.client_max > 0.0:
            runs = [(s, with_client_max(items, args.client_max, seed=s or 0)) for s, items in runs]
        for seed, items in runs:
            for reserve in reserves:
                cells, outs = [], []
                for b in thresholds:
                    o = replay_output(items, b, reserve, config=cfg, policy=args.policy)
                    outs.append(o.to_dict())
                    cells.append(
                        f"{o.truncation_rate:.3%} / **{o.alpha_ratio:.3f}** ({o.alpha:.3f}, {o.ideal_alpha:.3f})"
                        f" / {o.harmful}, {o.wasteful}"
                    )
                n = outs[0]["n"] if outs else 0
                print(
                    f"| {name} | {reserve} | {'-' if seed is None else seed} | {n} | "
                    + " | ".join(cells)
                    + " |"
                )
                sys.stdout.flush()
                rows.append({"seed": seed, "reserve": reserve, "outcomes": outs})
        report["sets"][name] = rows
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0
