"""`tbr` command line: one argparse parser, one module per subcommand.

Each module named in :data:`SUBCOMMAND_MODULES` exposes ``add_parser(subparsers) -> None``; the
parser it adds sets ``func`` to a ``run(args) -> int`` callable. Modules are imported only when the
parser is built, so ``tbr --help`` stays cheap and the planner never imports gRPC.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

SUBCOMMAND_MODULES: list[str] = [
    "tbr.cmd_serve",
    "tbr.cmd_config",
    "tbr.cmd_demo",
    "mockpool.cmd",
    "tbr.cmd_eval",
    "planner.cmd_plan",
    "planner.cmd_plan_models",
    "planner.cmd_simulate",
    "planner.cmd_results",
]


def build_parser() -> argparse.ArgumentParser:
    """Return the ``tbr`` parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="tbr", description="Token Budget Router")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMAND_MODULES:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tbr`` console script; returns the process exit code."""
    args = build_parser().parse_args(argv)
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
