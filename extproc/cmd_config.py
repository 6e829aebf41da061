"""``tbr config check PATH``: validate a router configuration file and print a summary."""

from __future__ import annotations

import argparse
import sys

from extproc.config import ConfigError, load_config


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``tbr config``."""
    p = subparsers.add_parser("config", help="configuration tools")
    sub = p.add_subparsers(dest="config_command", required=True)
    check = sub.add_parser("check", help="validate a configuration file")
    check.add_argument("path", help="YAML configuration file")
    check.set_defaults(func=run_check)


def run_check(args: argparse.Namespace) -> int:
    """Validate ``args.path``; exit 0 when valid, 2 with the errors on stderr otherwise."""
    try:
        cfg = load_config(args.path)
    except ConfigError as exc:
        print(f"{args.path}: {exc}", file=sys.stderr)
        return 2
    pools = ", ".join(
        f"{p.name} (max_model_len {p.max_model_len}, {cfg.routing_header}: {p.header_value})"
        for p in cfg.pools_by_size
    )
    print(f"{args.path}: OK; pools: {pools}; fallback: {cfg.fallback_pool.name}")
    return 0
