"""`tbr plan` logic: closed form, analytical M/G/c sizing, DES-verified sizing, threshold sweep.

Returns plain dicts (JSON-ready) so the CLI, the results generator and tests share one code path.
Nothing here prints or writes files.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from extproc.config import RouterConfig
from planner.costmodel import (
    alpha_at_threshold,
    annual_cost_usd,
    fluid_savings,
    instance_throughput_req_per_s,
    mix_stats,
    savings_closed_form,
    size_pool_mgc,
)
from planner.des import PoolSpec, simulate
from planner.fleet import FleetInputs, SpillSetting, plan_fleet, router_config_for
from planner.profiles import PoolProfile
from planner.routers import make_router
from planner.sizing import Slo, meets_slo, size_pool_des
from planner.trace import Trace

__all__ = ["PlanInputs", "closed_form", "des_two_pool", "run_plan"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PlanInputs:
    """Everything a plan needs; ``est_input_tokens`` (shape ``(n,)``) makes routing use estimates."""

    trace: Trace
    profile: PoolProfile
    short_max_tokens: int
    long_max_model_len: int
    slo: Slo
    seed: int = 0
    sweep_thresholds: tuple[int, ...] = (2048, 4096, 8192, 16384, 32768)
    sweep_des_top: int = 2
    est_input_tokens: npt.NDArray[np.int64] | None = None
    router_config: RouterConfig | None = None
    spill_sweep: tuple[SpillSetting, ...] = ()
    size_with_spillover: bool = True
    size_rel_tol: float = 0.0
    des: bool = True
    extra: dict[str, Any] = field(default_factory=dict)


def _split(inp: PlanInputs, threshold: int) -> npt.NDArray[np.bool_]:
    """Mask of requests the router sends to the short pool (estimated budget <= threshold)."""
    t = inp.trace
    budget = (
        t.budget_tokens if inp.est_input_tokens is None else inp.est_input_tokens + t.output_budget_tokens
    )
    return np.asarray(budget <= threshold)


def closed_form(inp: PlanInputs, threshold: int) -> dict[str, Any]:
    """α, μ's, ρ, ``α(1−1/ρ)``, the fluid savings, and analytical (M/G/c) pool sizes at ``threshold``.

    ρ = μ_short(short mix at max_model_len = threshold) / μ_homogeneous(full mix at the long
    max_model_len), the paper's "throughput gain of the short configuration" (docs/method.md §4).
    """
    t, prof = inp.trace, inp.profile
    lam = t.rate_req_per_s
    short = _split(inp, threshold)
    alpha = alpha_at_threshold(t.budget_tokens, threshold)
    mix_all = mix_stats(t.input_tokens, t.output_tokens, prof.chunk_tokens)
    mu_h = instance_throughput_req_per_s(prof, inp.long_max_model_len, mix_all)
    out: dict[str, Any] = {
        "threshold_tokens": threshold,
        "alpha": alpha,
        "lambda_req_per_s": lam,
        "mu_homogeneous": mu_h,
    }
    homog = size_pool_mgc(lam, prof, inp.long_max_model_len, mix_all, slo_ttft_p99_s=inp.slo.ttft_p99_s)
    out["analytical_homogeneous_instances"] = homog.instances
    if short.any():
        mix_s = mix_stats(t.input_tokens[short], t.output_tokens[short], prof.chunk_tokens)
        mu_s = instance_throughput_req_per_s(prof, threshold, mix_s)
        s_size = size_pool_mgc(lam * short.mean(), prof, threshold, mix_s, slo_ttft_p99_s=inp.slo.ttft_p99_s)
    else:
        mu_s, s_size = mu_h, None
    if (~short).any():
        mix_l = mix_stats(t.input_tokens[~short], t.output_tokens[~short], prof.chunk_tokens)
        mu_l = instance_throughput_req_per_s(prof, inp.long_max_model_len, mix_l)
        l_size = size_pool_mgc(
            lam * (~short).mean(), prof, inp.long_max_model_len, mix_l, slo_ttft_p99_s=inp.slo.ttft_p99_s
        )
    else:
        mu_l, l_size = mu_h, None
    rho = mu_s / mu_h
    n_s = s_size.instances if s_size else 0
    n_l = l_size.instances if l_size else 0
    out.update(
        mu_short=mu_s,
        mu_long=mu_l,
        rho=rho,
        savings_closed_form=savings_closed_form(alpha, rho),
        savings_fluid=fluid_savings(alpha, mu_h, mu_s, mu_l),
        analytical_short_instances=n_s,
        analytical_long_instances=n_l,
        analytical_savings=1.0 - (n_s + n_l) / homog.instances if homog.instances else 0.0,
        analytical_usd_per_year=annual_cost_usd(n_s + n_l, prof),
        analytical_homogeneous_usd_per_year=annual_cost_usd(homog.instances, prof),
        short_slots=prof.max_num_seqs(threshold),
        long_slots=prof.max_num_seqs(inp.long_max_model_len),
    )
    return out


def _stepper(progress: Progress | None, label: str) -> Callable[[int, bool], None] | None:
    """Adapter from sizing steps to progress lines."""
    if progress is None:
        return None
    report = progress
    last = [time.perf_counter()]

    def step(k: int, ok: bool) -> None:
        now = time.perf_counter()
        report(f"{label}: {k} instances -> {'ok' if ok else 'miss'} ({now - last[0]:.0f} s)")
        last[0] = now

    return step


def _homogeneous_des(inp: PlanInputs, start: int, progress: Progress | None) -> dict[str, Any]:
    prof = inp.profile
    n, block = size_pool_des(
        inp.trace,
        prof,
        inp.long_max_model_len,
        inp.slo,
        start_instances=start,
        seed=inp.seed,
        on_step=_stepper(progress, "homogeneous"),
        rel_tol=inp.size_rel_tol,
    )
    res = simulate(
        inp.trace,
        [PoolSpec("homogeneous", prof, inp.long_max_model_len, n)],
        make_router("homogeneous"),
        seed=inp.seed,
    )
    return {
        "instances": n,
        "gpus": n * prof.tp,
        "usd_per_year": annual_cost_usd(n, prof),
        "slo_met": meets_slo(block, inp.slo),
        "summary": res.summary(),
    }


def des_two_pool(
    inp: PlanInputs, threshold: int, cf: dict[str, Any], progress: Progress | None
) -> dict[str, Any]:
    """Size the short and long pools on their sub-traces by DES, then verify the fleet jointly."""
    prof, t = inp.profile, inp.trace
    # sized on the requests each pool *serves*: an under-estimate routed short whose true total
    # exceeds the short max_model_len is rejected there (vLLM's 400) and retried on the long pool
    short = _split(inp, threshold) & np.asarray(t.total_tokens <= threshold)
    sizes = []
    slo_met = True
    for name, mask, mml, start in (
        ("short", short, threshold, cf["analytical_short_instances"]),
        ("long", ~short, inp.long_max_model_len, cf["analytical_long_instances"]),
    ):
        if not mask.any():
            sizes.append(0)
            continue
        sub = t.subset(mask)
        n, block = size_pool_des(
            sub,
            prof,
            mml,
            inp.slo,
            start_instances=max(1, start),
            seed=inp.seed,
            on_step=_stepper(progress, f"B={threshold} {name}"),
            rel_tol=inp.size_rel_tol,
        )
        sizes.append(n)
        slo_met = slo_met and meets_slo(block, inp.slo)
    n_s, n_l = sizes
    pools = [
        PoolSpec("short", prof, threshold, max(1, n_s)),
        PoolSpec("long", prof, inp.long_max_model_len, max(1, n_l)),
    ]
    est = None if inp.est_input_tokens is None else inp.est_input_tokens + t.output_budget_tokens
    res = simulate(
        t,
        pools,
        make_router("token-budget", [threshold, inp.long_max_model_len]),
        est_budget_tokens=est,
        seed=inp.seed,
    )
    out: dict[str, Any] = {
        "threshold_tokens": threshold,
        "short_instances": n_s,
        "long_instances": n_l,
        "instances": n_s + n_l,
        "gpus": (n_s + n_l) * prof.tp,
        "usd_per_year": annual_cost_usd(n_s + n_l, prof),
        "slo_met": slo_met,
        "summary": res.summary(),
    }
    return out


def run_plan(inp: PlanInputs, progress: Progress | None = None) -> dict[str, Any]:
    """Full plan: closed form at B, homogeneous and two-pool DES sizing, threshold sweep, recommendation."""
    b = inp.short_max_tokens
    cands = sorted({b, *(x for x in inp.sweep_thresholds if x < inp.long_max_model_len)})
    sweep = [closed_form(inp, x) for x in cands]
    cf = next(s for s in sweep if s["threshold_tokens"] == b)
    out: dict[str, Any] = {
        "profile": inp.profile.name,
        "profile_source": inp.profile.source,
        "gpus_per_instance": inp.profile.tp,
        "price_usd_per_gpu_h": inp.profile.price_usd_per_gpu_h,
        "short_max_tokens": b,
        "long_max_model_len": inp.long_max_model_len,
        "slo": {"ttft_p99_s": inp.slo.ttft_p99_s, "tpot_p99_s": inp.slo.tpot_p99_s},
        "requests": len(inp.trace),
        "closed_form": cf,
        "sweep": sweep,
        "routing_uses_estimates": inp.est_input_tokens is not None,
    }
    if not inp.des:
        return out
    homog = _homogeneous_des(inp, cf["analytical_homogeneous_instances"], progress)
    out["des_homogeneous"] = homog
    verify = [
        b,
        *[
            s["threshold_tokens"]
            for s in sorted(sweep, key=lambda s: s["analytical_usd_per_year"])
            if s["threshold_tokens"] != b
        ][: inp.sweep_des_top],
    ]
    des_runs = {}
    for x in verify:
        cfx = next(s for s in sweep if s["threshold_tokens"] == x)
        des_runs[x] = des_two_pool(inp, x, cfx, progress)
        des_runs[x]["savings_vs_homogeneous"] = 1.0 - des_runs[x]["instances"] / homog["instances"]
    out["des_two_pool"] = des_runs[b]
    out["des_sweep"] = [des_runs[x] for x in sorted(des_runs)]
    best = min(des_runs.values(), key=lambda r: (r["usd_per_year"], r["threshold_tokens"]))
    out["recommended_threshold_tokens"] = best["threshold_tokens"]
    if inp.router_config is not None or inp.spill_sweep:
        cfg = inp.router_config or router_config_for([b, inp.long_max_model_len])
        d = des_runs[b]
        known = None
        if [p.max_model_len for p in cfg.pools_by_size] == [b, inp.long_max_model_len] and d["slo_met"]:
            known = [max(1, d["short_instances"]), max(1, d["long_instances"])]
        est = None if inp.est_input_tokens is None else inp.est_input_tokens + inp.trace.output_budget_tokens
        if progress is not None:
            progress(f"fleet of the router config: pools {[p.name for p in cfg.pools_by_size]}")
        out["fleet"] = plan_fleet(
            FleetInputs(
                trace=inp.trace,
                profile=inp.profile,
                slo=inp.slo,
                config=cfg,
                seed=inp.seed,
                est_budget_tokens=est,
                sweep=inp.spill_sweep,
                size_with_spillover=inp.size_with_spillover,
                token_budget_sizes=known,
            ),
            progress,
        )
    return out
