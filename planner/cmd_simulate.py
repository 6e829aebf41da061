"""`tbr simulate`: run one fleet configuration through the DES and print its metrics."""

from __future__ import annotations

import argparse
import json
from typing import Any

from planner.cli_common import add_trace_args, eprint, fmt_s, load_normalized, profile_arg
from planner.des import PoolSpec, simulate
from planner.routers import ROUTERS, make_router
from planner.trace import TraceError

__all__ = ["add_parser", "parse_pool", "run"]


def parse_pool(text: str) -> tuple[str, int, int]:
    """``NAME:MAX_MODEL_LEN:INSTANCES`` -> tuple; raises ``argparse.ArgumentTypeError`` if malformed."""
    parts = text.split(":")
    try:
        name, mml, n = parts[0], int(parts[1]), int(parts[2])
    except (IndexError, ValueError) as exc:
        raise argparse.ArgumentTypeError(f"pool must be NAME:MAX_MODEL_LEN:INSTANCES, got {text!r}") from exc
    return name, mml, n


def add_parser(subparsers: Any) -> None:
    """Register ``simulate`` on the ``tbr`` subparsers."""
    p = subparsers.add_parser("simulate", help="simulate one fleet configuration")
    add_trace_args(p)
    p.add_argument(
        "--pool",
        type=parse_pool,
        action="append",
        required=True,
        help="NAME:MAX_MODEL_LEN:INSTANCES (repeat)",
    )
    p.add_argument("--router", choices=sorted(ROUTERS), default="token-budget")
    p.add_argument(
        "--spill-inflight", type=float, default=0.0, help="spillover: in-flight per instance threshold"
    )
    p.add_argument("--lb", choices=["round_robin", "p2c"], default="round_robin")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Simulate; exit 2 on unusable input."""
    try:
        trace, report = load_normalized(args)
    except TraceError as exc:
        eprint(f"error: {exc}")
        return 2
    prof = profile_arg(args.profile)
    specs = sorted(
        (PoolSpec(n, prof, mml, k, lb=args.lb) for n, mml, k in args.pool), key=lambda s: s.max_model_len
    )
    router = make_router(args.router, [s.max_model_len for s in specs], args.spill_inflight)
    res = simulate(trace, specs, router, seed=args.seed, progress=True).summary()
    res["normalization"] = report.to_dict()
    if args.json:
        print(json.dumps(res, sort_keys=True, indent=1))
        return 0
    print("\n".join(report.lines()))
    print(
        f"{'pool':<10}{'inst':>6}{'reqs':>9}{'P50 TTFT':>10}{'P99 TTFT':>10}{'P99 TPOT':>10}{'preempt‰':>10}{'reject':>8}{'util':>7}"
    )
    for name, b in res["pools"].items():
        print(
            f"{name:<10}{b['instances']:>6}{b['requests']:>9}{fmt_s(b['p50_ttft_s']):>10}{fmt_s(b['p99_ttft_s']):>10}"
            f"{fmt_s(b['p99_tpot_s']):>10}{b['preemptions_per_1000']:>10.2f}{b['rejection_rate']:>8.4f}{b['utilization']:>7.2f}"
        )
    f = res["fleet"]
    print(
        f"fleet: {f['instances']} instances, {f['gpus']} GPUs, ${f['usd_per_year']:,.0f}/yr, P99 TTFT {fmt_s(f['p99_ttft_s'])} s"
    )
    return 0
