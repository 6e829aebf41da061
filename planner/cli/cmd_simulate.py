"""`tbr simulate`: run one fleet configuration through the DES and print its metrics.

Pools come from ``--pool NAME:MAX_MODEL_LEN:INSTANCES`` or, with ``--router-config``, from the
router's ``pools[]`` with ``--pool NAME:INSTANCES``; the router config's ``spillover:`` is then
applied by the router's own policy. ``--spill-sweep`` replays each threshold at the given sizes.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from extproc.config import RouterConfig
from planner.cli.cli_common import (
    add_router_config_args,
    add_trace_args,
    eprint,
    load_normalized,
    load_router_config,
    positive_float,
    profile_from_args,
    replay_for,
)
from planner.des import LB_POLICIES, PoolSpec, simulate
from planner.des.fleet import FleetInputs, describe_spillover, router_config_for, run_fleet, spill_config
from planner.des.routers import ROUTERS, make_router
from planner.des.sizing import Slo
from planner.report.fleet_report import format_rows
from planner.report.simulate_report import format_simulation, pool_guards, steady_verdict
from planner.workload.trace import TraceError

__all__ = ["add_parser", "parse_pool", "run"]


def parse_pool(text: str) -> tuple[str, int | None, int]:
    """``NAME:MAX_MODEL_LEN:INSTANCES`` or ``NAME:INSTANCES`` -> ``(name, max_model_len or None, n)``.

    Raises ``argparse.ArgumentTypeError`` if malformed.
    """
    parts = text.split(":")
    try:
        if len(parts) == 2:
            return parts[0], None, int(parts[1])
        name, mml, n = parts[0], int(parts[1]), int(parts[2])
    except (IndexError, ValueError) as exc:
        raise argparse.ArgumentTypeError(
            f"pool must be NAME:MAX_MODEL_LEN:INSTANCES (or NAME:INSTANCES with --router-config), got {text!r}"
        ) from exc
    if n < 1 or mml < 1 or len(parts) != 3:
        raise argparse.ArgumentTypeError(f"pool {text!r}: counts must be positive")
    return name, mml, n


def add_parser(subparsers: Any) -> None:
    """Register ``simulate`` on the ``tbr`` subparsers."""
    p = subparsers.add_parser(
        "simulate",
        help="simulate one fleet configuration",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_trace_args(p)
    p.add_argument(
        "--pool",
        type=parse_pool,
        action="append",
        required=True,
        help="NAME:MAX_MODEL_LEN:INSTANCES, or NAME:INSTANCES with --router-config (repeat)",
    )
    p.add_argument(
        "--router",
        choices=sorted(ROUTERS),
        default=None,
        help="default: token-budget, or the router config's policy (spillover when enabled)",
    )
    add_router_config_args(p)
    p.add_argument(
        "--estimator-replay",
        default=None,
        metavar="DATA_DIR",
        help="route on the router's estimates, replaying real prompt text from DATA_DIR",
    )
    p.add_argument(
        "--replay-tokenizer",
        choices=["auto", "llama3", "qwen3", "cl100k"],
        default="auto",
        help="ground-truth tokens for the replay (auto: from the profile's model)",
    )
    p.add_argument(
        "--slo-ttft-p99-s", type=positive_float, default=2.0, help="P99 time to first token, seconds"
    )
    p.add_argument(
        "--slo-tpot-p99-s", type=positive_float, default=None, help="P99 time per output token, seconds"
    )
    p.add_argument("--lb", choices=LB_POLICIES, default="round_robin", help="load balancing inside each pool")
    p.add_argument(
        "--allow-unstable",
        action="store_true",
        help="simulate even when a pool's arrival rate is at or above its capacity (λ >= N·μ)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    p.set_defaults(func=run)


def _fleet_config(args: argparse.Namespace, cfg: RouterConfig | None) -> tuple[RouterConfig, list[int]]:
    """Router config + instances per pool (``pools_by_size`` order). Raises ``ValueError``."""
    if cfg is None:
        if any(m is None for _, m, _ in args.pool):
            raise ValueError(
                "--pool NAME:INSTANCES needs --router-config (else NAME:MAX_MODEL_LEN:INSTANCES)"
            )
        pools = sorted(args.pool, key=lambda x: x[1])
        cfg = router_config_for([m for _, m, _ in pools])
        data = cfg.model_dump(mode="json")
        for d, (name, _, _) in zip(data["pools"], pools, strict=True):
            d["name"] = d["header_value"] = name
        from extproc.config import parse_config

        cfg = parse_config(data)
        return cfg, [n for _, _, n in pools]
    given = {name: (m, n) for name, m, n in args.pool}
    sizes = []
    for p in cfg.pools_by_size:
        if p.name not in given:
            raise ValueError(
                f"--pool {p.name}:INSTANCES missing (router config pools: "
                f"{', '.join(x.name for x in cfg.pools_by_size)})"
            )
        m, n = given.pop(p.name)
        if m is not None and m != p.max_model_len:
            raise ValueError(
                f"--pool {p.name}: max_model_len {m} differs from the router config's {p.max_model_len}"
            )
        sizes.append(n)
    if given:
        raise ValueError(f"--pool {', '.join(given)}: not in the router config")
    return cfg, sizes


def run(args: argparse.Namespace) -> int:
    """Simulate; exit 2 on unusable input."""
    try:
        cfg_in, sweep = load_router_config(args)
        cfg, sizes = _fleet_config(args, cfg_in)
        trace, report = load_normalized(args)
        est = replay_for(args, trace, report, cfg_in)
        prof = profile_from_args(args)
    except (TraceError, ValueError) as exc:
        eprint(f"error: {exc}")
        return 2
    est_budget = None if est is None else est + trace.output_budget_tokens
    if sweep:
        inp = FleetInputs(
            trace, prof, Slo(args.slo_ttft_p99_s), cfg, seed=args.seed, est_budget_tokens=est_budget
        )
        settings = [("configured" if cfg.spillover.enabled else "no spillover", cfg)]
        settings += [(s.label, spill_config(cfg, s, sizes)) for s in sweep]
        rows = []
        for label, scfg in settings:
            eprint(f"simulating {label}: {describe_spillover(scfg)}")
            rows.append(run_fleet(inp, scfg, sizes, label))
        if args.json:
            print(json.dumps({"rows": rows, "normalization": report.to_dict()}, sort_keys=True, indent=1))
            return 0
        print("\n".join(report.lines()))
        print("\n".join(format_rows(rows, [p.name for p in cfg.pools_by_size])))
        return 0
    specs = [
        PoolSpec(p.name, prof, p.max_model_len, n, lb=args.lb)
        for p, n in zip(cfg.pools_by_size, sizes, strict=True)
    ]
    slo = Slo(args.slo_ttft_p99_s, args.slo_tpot_p99_s)
    guards = pool_guards(trace, specs, est_budget, slo)
    unstable = [g for g in guards if g["unstable"]]
    if unstable and not args.allow_unstable:
        print("\n".join(report.lines()))
        for g in unstable:
            eprint(
                f"pool {g['pool']} is unstable: λ = {g['lam_req_per_s']:.3f} req/s >= N·μ = {g['instances']} x "
                f"{g['mu_req_per_s']:.3f} req/s (load {g['utilization']:.2f}); it needs at least "
                f"{g['min_stable_instances']} instances. Not simulated (--allow-unstable simulates anyway)."
            )
        return 1
    name = args.router or ("spillover" if cfg.spillover.enabled else "token-budget")
    router = make_router(
        name, [s.max_model_len for s in specs], pools=cfg.pools_by_size, spillover=cfg.spillover
    )
    res = simulate(
        trace, specs, router, est_budget_tokens=est_budget, seed=args.seed, progress=not args.json
    ).summary()
    res["normalization"] = report.to_dict()
    for g in guards:
        b = res["pools"][g["pool"]]
        b["load"] = g
        b["trace_requests"] = len(trace)
        b["verdict"] = steady_verdict(b, g, slo)
    res["slo"] = {"ttft_p99_s": slo.ttft_p99_s, "tpot_p99_s": slo.tpot_p99_s}
    res["admission"] = {
        "mode": prof.admission,
        "max_num_seqs": {s.name: s.slots for s in specs},
        "max_num_batched_tokens": prof.max_num_batched_tokens,
    }
    res["all_pools_meet_slo"] = all(b["verdict"] == "meets" for b in res["pools"].values())
    if args.json:
        print(json.dumps(res, sort_keys=True, indent=1))
        return 0
    print("\n".join(report.lines()))
    adm = res["admission"]
    print(
        f"admission {adm['mode']}: max_num_seqs "
        + ", ".join(f"{k} {v}" for k, v in adm["max_num_seqs"].items())
        + f"; max_num_batched_tokens {adm['max_num_batched_tokens'] or 'off'}"
    )
    if name == "spillover":
        print(describe_spillover(cfg))
    print("\n".join(format_simulation(res, slo)))
    return 0
