"""`tbr anchors`: `tbr plan`, FleetOpt's closed form and vllm-sr-sim's `optimize` side by side."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from planner.cli.cli_common import (
    add_trace_args,
    eprint,
    load_normalized,
    positive_float,
    positive_int,
    profile_from_args,
)
from planner.workload.trace import TraceError

__all__ = ["add_parser", "run"]

SECTION = "anchors"
"""The docs/results.md section ``--update-doc`` writes (kept by ``tbr results``)."""


def add_parser(subparsers: Any) -> None:
    """Register ``anchors`` on the ``tbr`` subparsers."""
    p = subparsers.add_parser(
        "anchors",
        help="tbr plan, FleetOpt's closed form and vllm-sr-sim optimize on the same trace, profile, SLO, rate",
    )
    add_trace_args(p)
    p.add_argument("--short-max-tokens", type=positive_int, default=8192, help="B, tokens")
    p.add_argument("--long-max-model-len", type=positive_int, default=65536)
    p.add_argument("--slo-ttft-p99-s", type=positive_float, default=2.0)
    p.add_argument("--p-c", type=float, default=0.75, help="share of borderline prompts C&R may trim (0..1)")
    p.add_argument("--jobs", type=positive_int, default=2)
    p.add_argument("--no-srsim", action="store_true", help="leave vllm-sr-sim out")
    p.add_argument("--json-out", default=None, help="also write the numbers as JSON")
    p.add_argument("--from-json", default=None, help="re-render a previous --json-out (no sizing)")
    p.add_argument(
        "--update-doc", default=None, metavar="MD", help="write the table into this file's anchors section"
    )
    p.set_defaults(func=run)


def _command(args: argparse.Namespace) -> str:
    traces = " ".join(f"--trace {Path(t).name}" for t in args.trace)
    return (
        f"tbr anchors {traces} --rate {args.rate:g} --profile {args.profile} --admission {args.admission} "
        f"--short-max-tokens {args.short_max_tokens} --slo-ttft-p99-s {args.slo_ttft_p99_s:g} --p-c {args.p_c:g}"
    )


def run(args: argparse.Namespace) -> int:
    """Run the three anchors; print the Markdown table (and write ``--json-out`` / ``--update-doc``)."""
    from planner.report.anchors import run_anchors

    if not 0.0 <= args.p_c <= 1.0:
        eprint(f"error: --p-c must be in [0, 1], got {args.p_c}")
        return 2
    if args.from_json:
        try:
            res = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        except (OSError, ValueError) as e:
            eprint(f"error: {e}")
            return 2
        return _emit(args, res)
    try:
        trace, report = load_normalized(args)
        prof = profile_from_args(args)
    except (TraceError, ValueError, OSError) as e:
        eprint(f"error: {e}")
        return 2
    for line in report.lines():
        eprint(line)
    try:
        res = run_anchors(
            trace,
            prof,
            short_max_tokens=args.short_max_tokens,
            long_max_model_len=args.long_max_model_len,
            slo_ttft_p99_s=args.slo_ttft_p99_s,
            seed=args.seed,
            jobs=args.jobs,
            p_c=args.p_c,
            srsim=not args.no_srsim,
            progress=lambda m: eprint(f"  {m}"),
        )
    except ValueError as e:
        eprint(f"error: {e}")
        return 2
    return _emit(args, res)


def _emit(args: argparse.Namespace, res: dict[str, Any]) -> int:
    """Print the table; write ``--json-out`` and ``--update-doc``."""
    from planner.report.anchors import render_anchors

    md = render_anchors(res, _command(args) if args.rate else "tbr anchors")
    print(md)
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps(res, sort_keys=True, indent=1, default=str), encoding="utf-8"
        )
    if args.update_doc:
        from planner.report.doc_sections import replace_section

        doc = Path(args.update_doc)
        text = doc.read_text(encoding="utf-8") if doc.is_file() else ""
        doc.write_text(replace_section(text, SECTION, md), encoding="utf-8")
        eprint(f"wrote the {SECTION} section of {doc}")
    return 0
