"""``tbr plan-models``: size each model's own pools from the router's decision log.

With pool sets per model (``models:`` in the router config, docs/endpoints.md), every model has
its own short and long pool, so each set is planned on its own traffic. The decision log is split
by the set that owns each record's ``pool`` (so requests for unknown models count where they were
routed), each share is planned by :func:`planner.des.plan.run_plan` with that set's limits (B = its
smallest pool's ``max_model_len``, long = its largest), and one plan per model set is printed.
Records whose pool belongs to no set (a config changed since) are dropped and counted.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import Any

from extproc.config import RouterConfig, load_config
from planner.cli.cli_common import add_trace_args, eprint, load_normalized, positive_float, profile_from_args
from planner.des.plan import PlanInputs, run_plan
from planner.des.sizing import Slo
from planner.report.plan_report import format_plan
from planner.workload.trace import TraceError

__all__ = ["add_parser", "run", "split_decision_log"]


def add_parser(subparsers: Any) -> None:
    """Register ``plan-models`` on the ``tbr`` subparsers."""
    p = subparsers.add_parser(
        "plan-models", help="size each model's pools from the decision log (router config with models:)"
    )
    add_trace_args(p)
    p.add_argument("--router-config", required=True, metavar="YAML", help="router config with models:")
    p.add_argument("--slo-ttft-p99-s", type=positive_float, default=2.0)
    p.add_argument("--slo-tpot-p99-s", type=positive_float, default=None)
    p.add_argument("--no-des", action="store_true", help="closed form and analytical sizing only")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run, format="decision-log")


def split_decision_log(path: Path, cfg: RouterConfig, out_dir: Path) -> tuple[dict[str, Path], int]:
    """Write the records of each pool set to ``out_dir/<set>.jsonl``.

    Returns ``({set name: path}, records dropped)`` (sets without records are left out).

    Raises:
        TraceError: the log cannot be read.
    """
    owner = {pool: name for name, pools in cfg.pool_groups.items() for pool in pools}
    files: dict[str, list[str]] = {}
    dropped = 0
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise TraceError(f"cannot read decision log {path}: {exc}") from exc
    for line in lines:
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            dropped += 1
            continue
        pool = rec.get("pool") if isinstance(rec, dict) else None
        name = owner.get(pool) if isinstance(pool, str) else None
        if name is None:
            dropped += 1
            continue
        files.setdefault(name, []).append(line)
    out: dict[str, Path] = {}
    for name, rows in files.items():
        out[name] = out_dir / f"{name}.jsonl"
        out[name].write_text("\n".join(rows) + "\n", encoding="utf-8")
    return out, dropped


def run(args: argparse.Namespace) -> int:
    """Plan every model set; exit 2 on unusable input."""
    try:
        cfg = load_config(args.router_config)
    except ValueError as exc:
        eprint(f"error: {exc}")
        return 2
    by_name = {p.name: p for p in cfg.pools}
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="tbr-plan-models-") as tmp:
        try:
            if len(args.trace) != 1:
                raise TraceError("plan-models reads one decision log (--trace)")
            shares, dropped = split_decision_log(Path(args.trace[0]), cfg, Path(tmp))
        except TraceError as exc:
            eprint(f"error: {exc}")
            return 2
        if dropped:
            eprint(f"{dropped} decision-log lines skipped (unreadable, or a pool in no set)")
        for name, path in shares.items():
            limits = sorted(by_name[p].max_model_len for p in cfg.pool_groups[name])
            if len(limits) < 2:
                eprint(f"model set {name}: a single pool, nothing to size by budget")
                continue
            sub = argparse.Namespace(**{**vars(args), "trace": [str(path)], "format": "decision-log"})
            try:
                trace, report = load_normalized(sub)
                profile = profile_from_args(args)
            except (TraceError, ValueError) as exc:
                eprint(f"model set {name}: {exc}")
                continue
            eprint(f"model set {name}: {len(trace)} requests at {trace.rate_req_per_s:.2f} req/s")
            res = run_plan(
                PlanInputs(
                    trace=trace,
                    profile=profile,
                    short_max_tokens=limits[0],
                    long_max_model_len=limits[-1],
                    slo=Slo(args.slo_ttft_p99_s, args.slo_tpot_p99_s),
                    seed=args.seed,
                    sweep_thresholds=(limits[0],),
                    sweep_des_top=0,
                    des=not args.no_des,
                ),
                progress=eprint,
            )
            res["normalization"] = report.to_dict()
            results[name] = (res, report.lines())
    if not results:
        eprint("error: no model set had traffic to plan")
        return 2
    if args.json:
        print(json.dumps({n: r for n, (r, _) in results.items()}, sort_keys=True, indent=1))
    else:
        for name, (res, lines) in results.items():
            print(f"==== model set {name} ({', '.join(cfg.pool_groups[name])}) ====")
            print(format_plan(res, lines))
            print()
    return 0
