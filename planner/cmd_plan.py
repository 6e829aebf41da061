"""`tbr plan`: α, ρ, closed-form savings, DES-verified GPU counts, threshold sweep, $/yr."""

from __future__ import annotations

import argparse
import json
from typing import Any

from planner.cli_common import (
    add_router_config_args,
    add_trace_args,
    eprint,
    fmt_s,
    load_normalized,
    load_router_config,
    profile_arg,
    replay_for,
)
from planner.fleet_report import format_fleet
from planner.plan import PlanInputs, run_plan
from planner.sizing import Slo
from planner.trace import TraceError

__all__ = ["add_parser", "format_plan", "run"]


def add_parser(subparsers: Any) -> None:
    """Register ``plan`` on the ``tbr`` subparsers."""
    p = subparsers.add_parser("plan", help="size homogeneous vs token-budget pools for a trace")
    add_trace_args(p)
    p.add_argument("--short-max-tokens", type=int, default=8192, help="B: short pool max_model_len, tokens")
    p.add_argument("--long-max-model-len", type=int, default=65536)
    p.add_argument("--slo-ttft-p99-s", type=float, default=2.0)
    p.add_argument("--slo-tpot-p99-s", type=float, default=None)
    p.add_argument(
        "--sweep", type=int, nargs="*", default=[2048, 4096, 8192, 16384, 32768], help="thresholds, tokens"
    )
    p.add_argument(
        "--sweep-des-top", type=int, default=1, help="DES-verify this many cheapest sweep points besides B"
    )
    p.add_argument("--no-des", action="store_true", help="closed form and analytical sizing only")
    p.add_argument(
        "--size-tolerance",
        type=float,
        default=0.01,
        help="stop the DES bisection within this fraction of the passing count (0 = exact, as tbr results)",
    )
    p.add_argument(
        "--estimator-replay",
        default=None,
        metavar="DATA_DIR",
        help="route on the router's estimates, replaying real prompt text from DATA_DIR (../shared/data)",
    )
    p.add_argument(
        "--replay-tokenizer",
        choices=["auto", "llama3", "qwen3", "cl100k"],
        default="auto",
        help="ground-truth tokens for the replay (auto: from the profile's model)",
    )
    add_router_config_args(p)
    p.add_argument(
        "--no-spill-sizing",
        action="store_true",
        help="only replay spillover at the token-budget sizes (skip sizing with spillover on)",
    )
    p.add_argument("--plot", default=None, metavar="DIR", help="write length-CDF and cost-vs-threshold PNGs")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def format_plan(res: dict[str, Any], report_lines: list[str]) -> str:
    """Human-readable plan (the normalisation report first)."""
    cf = res["closed_form"]
    lines = [*report_lines, ""]
    lines.append(
        f"profile {res['profile']} ({res['gpus_per_instance']} GPU/instance, ${res['price_usd_per_gpu_h']}/GPU-h); "
        f"B = {res['short_max_tokens']}, long max_model_len = {res['long_max_model_len']}, "
        f"SLO P99 TTFT <= {res['slo']['ttft_p99_s']} s; {res['requests']} requests at {cf['lambda_req_per_s']:.1f} req/s"
    )
    lines.append(
        f"alpha = F(B) = {cf['alpha']:.4f}; rho = mu_short/mu_homog = {cf['mu_short']:.2f}/{cf['mu_homogeneous']:.2f} = "
        f"{cf['rho']:.2f} (slots {cf['short_slots']} vs {cf['long_slots']})"
    )
    lines.append(
        f"closed form alpha(1-1/rho) = {cf['savings_closed_form']:.1%}; fluid (per-pool rates) = {cf['savings_fluid']:.1%}; "
        f"M/G/c sizing: {cf['analytical_homogeneous_instances']} -> {cf['analytical_short_instances']} + "
        f"{cf['analytical_long_instances']} instances ({cf['analytical_savings']:.1%})"
    )
    if "des_homogeneous" in res:
        h, d = res["des_homogeneous"], res["des_two_pool"]
        lines.append("")
        lines.append(
            f"{'fleet':<14}{'inst':>6}{'GPUs':>7}{'$/yr':>14}{'P50 TTFT':>10}{'P99 TTFT':>10}{'P99 TPOT':>10}{'preempt‰':>10}{'reject':>8}"
        )
        for name, r in (("homogeneous", h), ("two-pool", d)):
            f = r["summary"]["fleet"]
            lines.append(
                f"{name:<14}{r['instances']:>6}{r['gpus']:>7}{r['usd_per_year']:>14,.0f}{fmt_s(f['p50_ttft_s']):>10}"
                f"{fmt_s(f['p99_ttft_s']):>10}{fmt_s(f['p99_tpot_s']):>10}{f['preemptions_per_1000']:>10.2f}{f['rejection_rate']:>8.4f}"
            )
        for name, r in (("homogeneous", h), ("two-pool", d)):
            if not r["slo_met"]:
                lines.append(
                    f"WARNING: {name} did not meet the SLO at the search cap ({r['instances']} instances)"
                )
        lines.append(
            f"DES: short {d['short_instances']} + long {d['long_instances']} instances; saving "
            f"{d['savings_vs_homogeneous']:.1%} = ${h['usd_per_year'] - d['usd_per_year']:,.0f}/yr"
        )
    lines.append("")
    lines.append(
        f"{'B':>7}{'alpha':>8}{'rho':>6}{'a(1-1/r)':>10}{'M/G/c inst':>12}{'DES inst':>10}{'DES $/yr':>14}"
    )
    des = {r["threshold_tokens"]: r for r in res.get("des_sweep", [])}
    for s in res["sweep"]:
        d = des.get(s["threshold_tokens"])
        lines.append(
            f"{s['threshold_tokens']:>7}{s['alpha']:>8.4f}{s['rho']:>6.2f}{s['savings_closed_form']:>10.1%}"
            f"{s['analytical_short_instances'] + s['analytical_long_instances']:>12}"
            f"{(d['instances'] if d else '-'):>10}{(format(d['usd_per_year'], ',.0f') if d else '-'):>14}"
        )
    if "recommended_threshold_tokens" in res:
        lines.append(
            f"recommended B = {res['recommended_threshold_tokens']} (cheapest DES-verified threshold meeting the SLO)"
        )
    if "fleet" in res:
        lines.append("")
        lines.extend(format_fleet(res["fleet"], res["des_homogeneous"]))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the plan; exit 2 on unusable input."""
    try:
        cfg, sweep = load_router_config(args)
        trace, report = load_normalized(args)
        eprint(f"trace ready: {len(trace)} requests at {trace.rate_req_per_s:.1f} req/s")
        est = replay_for(args, trace, report, cfg)
    except (TraceError, ValueError) as exc:
        eprint(f"error: {exc}")
        return 2
    short, long_ = args.short_max_tokens, args.long_max_model_len
    if cfg is not None:
        lens = [p.max_model_len for p in cfg.pools_by_size]
        if len(lens) >= 2:
            short, long_ = lens[0], lens[-1]
            eprint(f"router config: two-pool baseline B = {short}, long max_model_len = {long_}")
    inp = PlanInputs(
        trace=trace,
        profile=profile_arg(args.profile, args.max_num_batched_tokens),
        short_max_tokens=short,
        long_max_model_len=long_,
        slo=Slo(args.slo_ttft_p99_s, args.slo_tpot_p99_s),
        seed=args.seed,
        sweep_thresholds=tuple(args.sweep),
        sweep_des_top=args.sweep_des_top,
        est_input_tokens=est,
        router_config=cfg,
        spill_sweep=tuple(sweep),
        size_with_spillover=not args.no_spill_sizing,
        size_rel_tol=max(0.0, args.size_tolerance),
        des=not args.no_des,
    )
    res = run_plan(inp, progress=eprint)
    res["normalization"] = report.to_dict()
    if args.plot:
        from planner.plots import write_plots

        for path in write_plots(args.plot, trace, res):
            eprint(f"wrote {path}")
    if args.json:
        print(json.dumps(res, sort_keys=True, indent=1))
    else:
        print(format_plan(res, report.lines()))
    return 0
