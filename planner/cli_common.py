"""Arguments and trace preparation shared by the planner's `tbr` subcommands."""

from __future__ import annotations

import argparse
import sys

from planner.profiles import PROFILES, PoolProfile
from planner.trace import NormalizationReport, Trace, build_trace, normalize
from planner.trace_loaders import load_trace

__all__ = ["add_trace_args", "load_normalized", "profile_arg"]


def add_trace_args(p: argparse.ArgumentParser) -> None:
    """``--trace`` (repeatable: traces are merged by arrival time), ``--format``, rate and size options."""
    p.add_argument("--trace", action="append", required=True, help="trace file (repeat to merge several)")
    p.add_argument("--format", choices=["azure", "mooncake", "burstgpt", "cdf", "decision-log"], default=None)
    p.add_argument("--rate", type=float, default=None, help="time-scale arrivals to this mean rate, req/s")
    p.add_argument("--min-requests", type=int, default=60_000, help="tile the trace up to this many requests")
    p.add_argument("--max-requests", type=int, default=None, help="truncate to this many requests")
    p.add_argument("--clip-max-total-tokens", type=int, default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--profile", choices=sorted(PROFILES), default="llama3-70b-a100")


def profile_arg(name: str) -> PoolProfile:
    """Profile by name (argparse already restricted the choices)."""
    return PROFILES[name]


def load_normalized(args: argparse.Namespace) -> tuple[Trace, NormalizationReport]:
    """Load every ``--trace``, merge them by arrival, then apply the requested normalisations."""
    traces = []
    reports = []
    for path in args.trace:
        t, r = load_trace(
            path, args.format, n_requests=args.min_requests, rate_req_per_s=args.rate or 1.0, seed=args.seed
        )
        traces.append(t)
        reports.append(r)
    if len(traces) == 1:
        trace, report = traces[0], reports[0]
    else:
        # Each trace keeps its own clock re-based to 0; merged by arrival (stable).
        cats = [c for t in traces for c in (t.categories[i] for i in t.category_ids.tolist())]
        trace = build_trace(
            [x for t in traces for x in t.arrival_s.tolist()],
            [x for t in traces for x in t.input_tokens.tolist()],
            [x for t in traces for x in t.output_tokens.tolist()],
            output_budget_tokens=[x for t in traces for x in t.output_budget_tokens.tolist()],
            categories=cats,
        )
        report = NormalizationReport(
            source=" + ".join(r.source for r in reports),
            fmt="+".join(r.fmt for r in reports),
            rows_read=sum(r.rows_read for r in reports),
        )
        for r in reports:
            for k, v in r.dropped.items():
                report.drop(k, v)
        report.notes.append(f"merged {len(traces)} traces by arrival time (each re-based to t=0)")
    trace = normalize(
        trace,
        report,
        target_rate_req_per_s=args.rate if report.fmt != "cdf" else None,
        min_requests=args.min_requests if report.fmt != "cdf" else None,
        max_requests=args.max_requests,
        clip_max_total_tokens=args.clip_max_total_tokens,
    )
    return trace, report


def fmt_s(x: float | None) -> str:
    """Seconds with 3 decimals, or '-'."""
    return "-" if x is None else f"{x:.3f}"


def eprint(msg: str) -> None:
    """Progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)
