"""`tbr plan`: α, ρ, closed-form savings, DES-verified GPU counts, threshold sweep, $/yr."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from typing import Any

import numpy as np
import numpy.typing as npt

from extproc.config import RouterConfig
from planner.cli.cli_common import (
    add_router_config_args,
    add_trace_args,
    eprint,
    load_normalized,
    load_router_config,
    non_negative_float,
    positive_float,
    positive_int,
    profile_from_args,
    replay_for,
)
from planner.des import LB_POLICIES
from planner.des.plan import PlanInputs, closed_form, run_plan
from planner.des.sizing import Slo
from planner.model.profiles import PoolProfile
from planner.report.plan_report import format_plan
from planner.workload.trace import NormalizationReport, Trace, TraceError

__all__ = ["add_parser", "run"]


def _output_reserve(
    args: argparse.Namespace,
    trace: Trace,
    report: NormalizationReport,
    cfg: RouterConfig | None,
    est: npt.NDArray[np.int64] | None,
    short: int,
    long_: int,
) -> tuple[Trace, dict[str, Any] | None]:
    """The trace as the router would budget it (``--output-reserve``, else the router's policy);
    returns the trace and the replay's numbers (None when the trace keeps its own budgets).

    Raises:
        ValueError: a bad ``--output-reserve``.
    """
    from extproc.config import EstimatorConfig
    from planner.model.output_reserve import parse_output_reserve, replay_output_reserve

    est_cfg = cfg.estimator if cfg is not None else EstimatorConfig()
    if args.output_reserve is None:
        if report.fmt in ("decision-log", "cdf"):
            report.notes.append(
                "output reserve: the trace's own budgets (decision log: the router's recorded reserves; "
                "CDF: synthesised totals)"
            )
            return trace, None
        text = (
            "learned" if est_cfg.output_reserve.learned else f"fixed:{est_cfg.default_output_reserve_tokens}"
        )
    else:
        text = args.output_reserve
    policy, fixed = parse_output_reserve(text)
    new, rep = replay_output_reserve(
        trace,
        policy,
        threshold_tokens=short,
        long_max_model_len_tokens=long_,
        fixed_tokens=fixed,
        config=est_cfg.output_reserve.model_copy(update={"learned": True}),
        est_input_tokens=est,
    )
    report.notes.append(rep.line())
    return new, {
        "policy": rep.policy,
        "truncated": rep.truncated,
        "truncated_share": rep.truncated / max(1, rep.n),
        "alpha": rep.alpha,
        "alpha_oracle": rep.alpha_oracle,
        "mean_reserve_tokens": rep.mean_reserve_tokens,
    }


def add_parser(subparsers: Any) -> None:
    """Register ``plan`` on the ``tbr`` subparsers."""
    p = subparsers.add_parser(
        "plan",
        help="size homogeneous vs token-budget pools for a trace",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_trace_args(p)
    p.add_argument(
        "--short-max-tokens", type=positive_int, default=8192, help="B: short pool max_model_len, tokens"
    )
    p.add_argument(
        "--long-max-model-len", type=positive_int, default=65536, help="long pool max_model_len, tokens"
    )
    p.add_argument(
        "--slo-ttft-p99-s", type=positive_float, default=2.0, help="P99 time to first token, seconds"
    )
    p.add_argument(
        "--slo-tpot-p99-s", type=positive_float, default=None, help="P99 time per output token, seconds"
    )
    p.add_argument(
        "--sweep",
        type=positive_int,
        nargs="*",
        default=[2048, 4096, 8192, 16384, 32768],
        help="candidate thresholds B, tokens (each sized by DES unless it cannot beat a verified one)",
    )
    p.add_argument("--no-des", action="store_true", help="closed form and analytical sizing only")
    p.add_argument(
        "--size-tolerance",
        type=non_negative_float,
        default=0.01,
        help="stop the DES bisection within this fraction of the passing count (0 = exact)",
    )
    p.add_argument(
        "--lb",
        choices=LB_POLICIES,
        default="round_robin",
        help="load balancing inside every pool, the homogeneous baseline included",
    )
    p.add_argument(
        "--compare-lb",
        action="store_true",
        help="also re-size the homogeneous fleet and the recommended B under the other --lb policies",
    )
    p.add_argument(
        "--jobs",
        type=positive_int,
        default=min(2, os.cpu_count() or 1),
        help="worker processes for the DES sizing",
    )
    p.add_argument(
        "--mu-short-req-per-s",
        type=positive_float,
        default=None,
        help="given short-pool throughput per instance, req/s (e.g. the paper's 11.2); needs --mu-long-req-per-s",
    )
    p.add_argument(
        "--mu-long-req-per-s",
        type=positive_float,
        default=None,
        help="given long/homogeneous throughput per instance, req/s (e.g. the paper's 2.8)",
    )
    p.add_argument(
        "--no-compare-admission",
        action="store_true",
        help="skip re-sizing the homogeneous fleet and B under the other --admission (the plan prints both)",
    )
    p.add_argument("--verbose", action="store_true", help="one progress line per simulated size")
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
        "--output-reserve",
        default=None,
        metavar="fixed:N|learned|oracle",
        help="what the router reserves for the answer (planner/model/output_reserve.py): fixed:N tokens, the "
        "learned quantile replayed in arrival order, or the true output (oracle); default: the router's "
        "own policy (--router-config's estimator.output_reserve, else the router defaults; decision-log "
        "and CDF traces keep their own budgets)",
    )
    p.add_argument(
        "--no-spill-sizing",
        action="store_true",
        help="only replay spillover at the token-budget sizes (skip sizing with spillover on)",
    )
    p.add_argument("--plot", default=None, metavar="DIR", help="write length-CDF and cost-vs-threshold PNGs")
    p.add_argument(
        "--emit",
        default=None,
        metavar="DIR",
        help="write the recommended plan as deployable files: vLLM arguments per pool, the router's pools:, "
        "Envoy route timeouts, a Kustomize component with replicas (planner/report/emit.py)",
    )
    p.add_argument(
        "--emit-model",
        default=None,
        metavar="NAME",
        help="model name for --emit (the router's models: and the pods' --model); default: a MODEL placeholder",
    )
    p.add_argument("--json", action="store_true", help="print the plan as JSON instead of text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Run the plan; exit 2 on unusable input, 1 when the DES found no threshold meeting the SLO."""
    try:
        cfg, sweep = load_router_config(args)
        trace, report = load_normalized(args)
        eprint(f"trace ready: {len(trace)} requests at {trace.rate_req_per_s:.1f} req/s")
        est = replay_for(args, trace, report, cfg)
        profile = profile_from_args(args)
        other = profile_from_args(args, "paper" if profile.admission == "vllm" else "vllm")
    except (TraceError, ValueError) as exc:
        eprint(f"error: {exc}")
        return 2
    short, long_ = args.short_max_tokens, args.long_max_model_len
    if cfg is not None:
        lens = [p.max_model_len for p in cfg.pools_by_size]
        if len(lens) >= 2:
            short, long_ = lens[0], lens[-1]
            eprint(f"router config: two-pool baseline B = {short}, long max_model_len = {long_}")
    if (args.mu_short_req_per_s is None) != (args.mu_long_req_per_s is None):
        eprint("error: --mu-short-req-per-s and --mu-long-req-per-s go together")
        return 2
    if any(x is not None and x <= 0 for x in (args.mu_short_req_per_s, args.mu_long_req_per_s)):
        eprint("error: given throughputs must be > 0 req/s")
        return 2
    if short >= long_:
        eprint(
            f"error: B = {short} tokens is not below the largest pool's max_model_len {long_} "
            "(--short-max-tokens must be smaller than --long-max-model-len)"
        )
        return 2
    try:
        oracle_trace = trace
        trace, reserve_note = _output_reserve(args, trace, report, cfg, est, short, long_)
    except ValueError as exc:
        eprint(f"error: {exc}")
        return 2
    source = None
    if report.fmt == "cdf" and len(args.trace) == 1:
        from pathlib import Path

        from planner.workload.cdf_source import CdfSource
        from planner.workload.trace_loaders import read_cdf_points

        pts = tuple(read_cdf_points(Path(args.trace[0])))
        source = CdfSource(pts, args.rate or 1.0)
    inp = PlanInputs(
        source=source,
        trace=trace,
        profile=profile,
        other_admission_profile=other,
        short_max_tokens=short,
        long_max_model_len=long_,
        slo=Slo(args.slo_ttft_p99_s, args.slo_tpot_p99_s),
        seed=args.seed,
        sweep_thresholds=tuple(args.sweep),
        est_input_tokens=est,
        router_config=cfg,
        spill_sweep=tuple(sweep),
        size_with_spillover=not args.no_spill_sizing,
        size_rel_tol=max(0.0, args.size_tolerance),
        des=not args.no_des,
        lb=args.lb,
        lb_compare=args.compare_lb,
        admission_compare=not args.no_compare_admission,
        jobs=max(1, args.jobs),
        verbose=args.verbose,
        mu_short_req_per_s=args.mu_short_req_per_s,
        mu_long_req_per_s=args.mu_long_req_per_s,
        rate_req_per_s=args.rate,
        loaded_max_budget_tokens=report.max_budget_tokens,
    )
    t0 = time.perf_counter()
    res = run_plan(inp, progress=eprint)
    if reserve_note is not None:
        oracle = closed_form(dataclasses.replace(inp, trace=oracle_trace), short)
        res["output_reserve"] = {
            **reserve_note,
            "oracle": {
                k: oracle[k]
                for k in (
                    "alpha",
                    "rho",
                    "savings_closed_form",
                    "analytical_savings",
                    "analytical_short_instances",
                )
            },
        }
        res["output_reserve"]["oracle"]["analytical_long_instances"] = oracle["analytical_long_instances"]
    res["wall_s"] = time.perf_counter() - t0
    eprint(f"plan done in {res['wall_s']:.0f} s")
    res["normalization"] = report.to_dict()
    _write_files(args, trace, res, inp.profile)
    if args.json:
        print(json.dumps(res, sort_keys=True, indent=1))
    else:
        print(format_plan(res, report.lines()))
    return _exit_code(res)


def _write_files(args: argparse.Namespace, trace: Trace, res: dict[str, Any], profile: PoolProfile) -> None:
    """``--plot DIR`` (PNGs) and ``--emit DIR`` (the recommended plan's files, :mod:`planner.report.emit`)."""
    if args.plot:
        from planner.report.plots import write_plots

        name = " + ".join(os.path.basename(t) for t in args.trace)
        for path in write_plots(args.plot, trace, res, name):
            eprint(f"wrote {path}")
    if not args.emit:
        return
    if res.get("recommended_threshold_tokens") is None:
        eprint("--emit: no recommended plan, nothing written")
        return
    from planner.report.emit import emit_plan

    for path in emit_plan(res, profile, args.emit, args.emit_model):
        eprint(f"wrote {path}")


def _exit_code(res: dict[str, Any]) -> int:
    """1 when the DES ran and no threshold met the SLO in every pool (said on stderr), else 0."""
    des = res.get("des")
    if des and des.get("recommended_threshold_tokens") is None:
        eprint("no threshold meets the SLO in every pool (exit 1): see the causes above")
        return 1
    return 0
