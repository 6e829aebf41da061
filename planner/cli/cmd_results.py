"""`tbr results --out docs/results.md`: regenerate the paper-comparison table."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    """Register ``results`` on the ``tbr`` subparsers."""
    p = subparsers.add_parser("results", help="regenerate docs/results.md (paper settings side by side)")
    p.add_argument("--out", default="docs/results.md")
    p.add_argument(
        "--json-out",
        default=None,
        help="also write the JSON; scenarios already in this file (same seed) are kept, not re-run",
    )
    p.add_argument("--only", nargs="*", default=None, help="run only these scenario keys (e.g. azure-paper)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--admission",
        choices=("vllm", "paper"),
        default="vllm",
        help="every fleet's admission: vllm (default, as tbr plan) or paper (floor(KV / max_model_len) slots)",
    )
    p.add_argument("--from-json", default=None, help="re-render from a previous --json-out (no simulation)")
    p.add_argument(
        "--compare-json",
        default=None,
        help="a --json-out of the other admission: section 9 then tables both admissions' fleets",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Generate the results file."""
    from planner.report.results import main_args

    return main_args(args)
