"""`tbr autoscale`: the closed-loop comparison of autoscaling policies in the simulator (issue 33).

Builds a workload from a trace (a day shaped by the Azure 2024 weekday profile, or a burst:
:mod:`planner.workload.daily_trace`), runs static peak sizing, queue-length and KV-usage scaling (as KEDA
users configure them) and scaling on the router's advice (:mod:`planner.des.autoscale_experiment`), and
prints GPU-hours, SLO attainment per 5-minute window and scale events per policy; ``--plot DIR``
writes the instances over time per pool, ``--json`` the summaries.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from planner.cli.cli_common import non_negative_float, positive_float
from planner.des.autoscale import POLICIES
from planner.des.autoscale_experiment import Experiment, ExperimentResult, run_experiment
from planner.model.profiles import PROFILES
from planner.workload.daily_trace import burst_rate, daily_rate, time_scaled
from planner.workload.trace import TraceError
from planner.workload.trace_loaders import load_trace

__all__ = ["add_parser", "format_table", "run", "write_plot"]


def add_parser(subparsers: Any) -> None:
    """Register ``autoscale`` on the ``tbr`` subparsers."""
    p = subparsers.add_parser(
        "autoscale",
        help="compare autoscaling policies in closed loop (static, queue, KV usage, router advice)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--trace", required=True, help="trace whose requests make the workload (azure, mooncake, ...)"
    )
    p.add_argument("--format", default=None, help="trace format; None = detected")
    p.add_argument("--workload", choices=["daily", "burst"], default="daily")
    p.add_argument(
        "--peak-rate", type=positive_float, default=20.0, help="daily: rate at the peak hour, req/s"
    )
    p.add_argument("--start-hour", type=non_negative_float, default=0.0, help="daily: first hour (UTC)")
    p.add_argument("--hours", type=positive_float, default=24.0, help="length of the workload, hours")
    p.add_argument(
        "--base-rate", type=positive_float, default=10.0, help="burst: rate outside the burst, req/s"
    )
    p.add_argument("--burst-factor", type=positive_float, default=2.5, help="burst: rate multiplier")
    p.add_argument("--burst-start-s", type=positive_float, default=3600.0)
    p.add_argument(
        "--burst-s", type=positive_float, default=900.0, help="burst: length at full rate, seconds"
    )
    p.add_argument("--profile", choices=sorted(PROFILES), default="llama3-70b-a100")
    p.add_argument("--short-max-tokens", type=int, default=8192, help="B: the short pool's max_model_len")
    p.add_argument("--long-max-model-len", type=int, default=65536)
    p.add_argument("--slo-ttft-p99-s", type=positive_float, default=2.0)
    p.add_argument("--headroom", type=non_negative_float, default=0.1, help="advice: load growth to absorb")
    p.add_argument("--cold-start-s", type=non_negative_float, default=300.0, help="scale-up delay, seconds")
    p.add_argument("--interval-s", type=positive_float, default=30.0, help="autoscaler period, seconds")
    p.add_argument("--scale-down-window-s", type=non_negative_float, default=1800.0, help="cooldown, seconds")
    p.add_argument("--queue-target", type=positive_float, default=4.0, help="queue: waiting per instance")
    p.add_argument("--kv-target", type=positive_float, default=0.7, help="kv: KV cache usage")
    p.add_argument(
        "--policies", default=",".join(POLICIES), help="comma-separated, from " + ", ".join(POLICIES)
    )
    p.add_argument("--plot", default=None, metavar="DIR", help="write autoscale_<workload>.png there")
    p.add_argument(
        "--update-doc",
        default=None,
        metavar="MD",
        help="write the table (and the plot's link, relative to MD) into MD's section autoscale-<workload>",
    )
    p.add_argument("--json", action="store_true", help="print the summaries as JSON")
    p.set_defaults(func=run)


def format_table(res: ExperimentResult, title: str) -> str:
    """The Markdown table: one row per policy."""
    lines = [
        f"{title}",
        "",
        "| policy | GPU-hours | 5-min windows meeting the SLO | scale events (short / long) | "
        "peak instances (short / long) | P99 TTFT short / long (s) | rejected |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for policy, s in res.summaries.items():
        p99 = s["p99_ttft_s"]
        lines.append(
            f"| {policy} | {s['gpu_hours']:,.1f} | {100 * s['slo_windows_met']:.1f} % of {s['windows']} | "
            f"{s['scale_events']['short']} / {s['scale_events']['long']} | "
            f"{s['peak_instances']['short']} / {s['peak_instances']['long']} | "
            f"{_s(p99['short'])} / {_s(p99['long'])} | {s['rejected']:,} |"
        )
    return "\n".join(lines)


def _s(x: float | None) -> str:
    return "∞ (rejections)" if x is None else f"{x:.2f}"


def write_plot(res: ExperimentResult, path: Path, title: str) -> Path:
    """Instances over time per pool (one panel per pool, one line per policy), PNG at ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [p.name for p in res.pools]
    fig, axes = plt.subplots(len(names), 1, figsize=(9, 2.6 * len(names)), sharex=True)
    for ax, name in zip(axes, names, strict=True):
        for policy, run in res.runs.items():
            tl = run.timeline[name]
            ax.step([t / 3600 for t, _, _ in tl], [c for _, c, _ in tl], where="post", label=policy)
        ax.set_ylabel(f"{name} instances")
        ax.grid(True, alpha=0.3)
    axes[0].set_title(title)
    axes[-1].set_xlabel("hours")
    axes[0].legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def run(args: argparse.Namespace) -> int:
    """Build the workload, run the comparison, print it. Exit 0, or 1 on a bad trace or option."""
    policies = [x for x in args.policies.split(",") if x]
    unknown = [x for x in policies if x not in POLICIES]
    if unknown or not policies:
        print(
            f"tbr autoscale: unknown policy {', '.join(unknown) or '(none)'}; choose from {POLICIES}",
            file=sys.stderr,
        )
        return 1
    try:
        base, _ = load_trace(args.trace, args.format)
    except TraceError as exc:
        print(f"tbr autoscale: {exc}", file=sys.stderr)
        return 1
    duration_s = args.hours * 3600.0
    if args.workload == "daily":
        rate = daily_rate(args.peak_rate, start_hour=args.start_hour, duration_s=duration_s)
        title = f"daily shape (Azure 2024 weekday profile), peak {args.peak_rate:g} req/s, {args.hours:g} h"
    else:
        rate = burst_rate(args.base_rate, args.burst_factor, burst_start_s=args.burst_start_s,
                          burst_s=args.burst_s, duration_s=duration_s)  # fmt: skip
        title = f"burst: {args.base_rate:g} req/s, x{args.burst_factor:g} for {args.burst_s:g} s"
    workload = time_scaled(base, rate)
    exp = Experiment(
        workload=workload,
        base=base,
        profile=PROFILES[args.profile],
        short_max_model_len=args.short_max_tokens,
        long_max_model_len=args.long_max_model_len,
        slo_ttft_p99_s=args.slo_ttft_p99_s,
        headroom=args.headroom,
        cold_start_s=args.cold_start_s,
        interval_s=args.interval_s,
        scale_down_window_s=args.scale_down_window_s,
        queue_target=args.queue_target,
        kv_target=args.kv_target,
        policies=policies,
    )
    try:
        res = run_experiment(exp)
    except ValueError as exc:
        print(f"tbr autoscale: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"title": title, "requests": len(workload), "corrections": res.corrections,
                          "summaries": res.summaries}, indent=2))  # fmt: skip
    else:
        print(f"{len(workload):,} requests; capacity correction {json.dumps(res.corrections)}")
        print(format_table(res, title))
    plot = None
    if args.plot:
        plot = write_plot(res, Path(args.plot) / f"autoscale_{args.workload}.png", title)
        print(f"wrote {plot}", file=sys.stderr)
    if args.update_doc:
        _update_doc(Path(args.update_doc), args, res, title, len(workload), plot)
    return 0


def _command_line(args: argparse.Namespace) -> str:
    keys = ["workload", "hours", "peak_rate", "start_hour", "base_rate", "burst_factor", "burst_start_s",
            "burst_s", "profile", "short_max_tokens", "slo_ttft_p99_s", "headroom", "cold_start_s",
            "interval_s", "scale_down_window_s", "queue_target", "kv_target"]  # fmt: skip
    if args.workload == "daily":
        keys = [k for k in keys if not k.startswith(("base_rate", "burst"))]
    else:
        keys = [k for k in keys if k not in ("peak_rate", "start_hour")]
    opts = " ".join(f"--{k.replace('_', '-')} {getattr(args, k)}" for k in keys)
    return f"tbr autoscale --trace {Path(args.trace).name} {opts}"


def _update_doc(doc: Path, args: argparse.Namespace, res: ExperimentResult, title: str, n: int,
                plot: Path | None) -> None:  # fmt: skip
    from planner.report.doc_sections import replace_section

    corr = res.corrections["short"]
    lines = [
        format_table(res, f"**{title}** ({n:,} requests; `{_command_line(args)}`)"),
        "",
        f"Short pool's capacity correction: {corr['ratio']:.2f}"
        + (
            f" (DES {corr['des_instances']} / M/G/c {corr['mgc_instances']} instances at "
            f"{corr['rate_req_per_s']:.1f} req/s)."
            if "des_instances" in corr
            else "."
        ),
    ]
    if plot is not None:
        lines += [
            "",
            f"![instances over time per pool, {args.workload}]({os.path.relpath(plot, doc.parent)})",
        ]
    text = doc.read_text(encoding="utf-8") if doc.is_file() else ""
    doc.write_text(replace_section(text, f"autoscale-{args.workload}", "\n".join(lines)), encoding="utf-8")
