"""`tbr plan` logic: closed form, analytical M/G/c sizing, DES-verified sizing, threshold sweep.

Returns plain dicts (JSON-ready) so the CLI, the results generator and tests share one code path.
Nothing here prints or writes files.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

from extproc.config import RouterConfig
from planner.des import LB_POLICIES
from planner.des.fleet import FleetInputs, SpillSetting, plan_fleet, router_config_for
from planner.des.plan_des import DesRequest, PoolPlan, run_des
from planner.des.sizing import Slo
from planner.model.costmodel import (
    alpha_at_threshold,
    annual_cost_usd,
    concurrency,
    fluid_savings,
    instance_throughput_req_per_s,
    mix_stats,
    savings_closed_form,
    size_pool_mgc,
)
from planner.model.profiles import PROFILES, PoolProfile, with_admission
from planner.model.vllm_args import vllm_serve_args
from planner.workload.cdf_source import CdfSource
from planner.workload.trace import Trace

__all__ = ["PlanInputs", "closed_form", "other_admission_profile", "run_plan", "throughput_sizing"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class PlanInputs:
    """Everything a plan needs; ``est_input_tokens`` (shape ``(n,)``) makes routing use estimates.

    ``lb`` is the load balancing inside every pool (homogeneous baseline included); ``lb_compare``
    re-sizes under the other policies; ``jobs`` worker processes; ``mu_short_req_per_s`` /
    ``mu_long_req_per_s`` given per-instance throughputs (the paper's 11.2 / 2.8) for
    :func:`throughput_sizing` at the operator's ``rate_req_per_s`` (default: the trace's rate);
    ``loaded_max_budget_tokens`` the largest budget of the loaded trace
    before sampling (decides whether a long pool with no sampled request is needed); ``source`` the
    length CDF the trace was sampled from (pools then draw fresh requests for their whole runs);
    ``admission_compare`` re-sizes the homogeneous fleet and B under the other admission
    (:data:`planner.model.profiles.ADMISSION_MODES`) so the plan shows the baseline and saving under both,
    with ``other_admission_profile`` (default :func:`other_admission_profile` of ``profile``).
    """

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
    lb: str = "round_robin"
    lb_compare: bool = False
    jobs: int = 2
    verbose: bool = False
    mu_short_req_per_s: float | None = None
    mu_long_req_per_s: float | None = None
    rate_req_per_s: float | None = None
    loaded_max_budget_tokens: int | None = None
    source: CdfSource | None = None
    admission_compare: bool = False
    other_admission_profile: PoolProfile | None = None
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
        short_concurrency=concurrency(prof, threshold, mix_s) if short.any() else None,
        homogeneous_concurrency=concurrency(prof, inp.long_max_model_len, mix_all),
    )
    return out


def throughput_sizing(inp: PlanInputs, threshold: int) -> dict[str, Any] | None:
    """The paper's fluid sizing from given per-instance throughputs (method.md §5, [A1]):
    homogeneous ``⌈λ/μ_long⌉``, two-pool ``⌈αλ/μ_short⌉ + ⌈(1−α)λ/μ_long⌉`` (req/s per instance).

    None unless both ``mu_short_req_per_s`` and ``mu_long_req_per_s`` are given. Example: λ = 1,000,
    μ_long = 2.8 -> homogeneous ⌈357.1⌉ = 358.
    """
    mu_s, mu_l = inp.mu_short_req_per_s, inp.mu_long_req_per_s
    if mu_s is None or mu_l is None:
        return None
    lam = inp.rate_req_per_s or inp.trace.rate_req_per_s
    alpha = alpha_at_threshold(inp.trace.budget_tokens, threshold)
    homog = math.ceil(lam / mu_l - 1e-9)
    n_s = math.ceil(alpha * lam / mu_s - 1e-9)
    n_l = math.ceil((1.0 - alpha) * lam / mu_l - 1e-9)
    return {
        "lambda_req_per_s": lam,
        "mu_short_req_per_s": mu_s,
        "mu_long_req_per_s": mu_l,
        "rho": mu_s / mu_l,
        "homogeneous_instances": homog,
        "short_instances": n_s,
        "long_instances": n_l,
        "savings": 1.0 - (n_s + n_l) / homog if homog else 0.0,
        "savings_closed_form": savings_closed_form(alpha, mu_s / mu_l),
    }


def _pool_plans(inp: PlanInputs, threshold: int, cf: dict[str, Any]) -> tuple[PoolPlan, PoolPlan]:
    """Short/long pools at ``threshold``: each sized on the requests it *serves* (an under-estimate
    routed short whose true total exceeds B is rejected there and retried on the long pool)."""
    t = inp.trace
    short = _split(inp, threshold) & np.asarray(t.total_tokens <= threshold)
    top = max(int(t.budget_tokens.max()), inp.loaded_max_budget_tokens or 0)
    return (
        PoolPlan("short", threshold, short, cf["analytical_short_instances"], True, (0, threshold)),
        PoolPlan(
            "long",
            inp.long_max_model_len,
            ~short,
            cf["analytical_long_instances"],
            top > threshold,
            (threshold, 2**62),
        ),
    )


def run_plan(inp: PlanInputs, progress: Progress | None = None) -> dict[str, Any]:
    """Full plan: closed form at B, stability-checked steady-state DES sizing of the homogeneous
    fleet and of every candidate threshold, the recommendation, and (``lb_compare``) the same
    sizing under the other load-balancing policies. Raises ``ValueError`` when B is not below the
    long pool's ``max_model_len``."""
    b = inp.short_max_tokens
    if b >= inp.long_max_model_len:
        raise ValueError(
            f"B = {b} tokens is not below the largest pool's max_model_len {inp.long_max_model_len}: "
            "a short pool at or above the long pool's length is not a split"
        )
    cands = sorted({b, *(x for x in inp.sweep_thresholds if x < inp.long_max_model_len)})
    sweep = [closed_form(inp, x) for x in cands]
    cf = next(s for s in sweep if s["threshold_tokens"] == b)
    t = inp.trace
    too_long = float(np.mean(t.total_tokens > inp.long_max_model_len))
    out: dict[str, Any] = {
        "profile": inp.profile.name,
        "profile_source": inp.profile.source,
        "admission": inp.profile.admission,
        "max_num_seqs_cap": inp.profile.max_num_seqs_cap,
        "max_num_batched_tokens": inp.profile.max_num_batched_tokens,
        "kv_capacity_tokens": inp.profile.kv_capacity_tokens,
        "chunk_tokens": inp.profile.chunk_tokens,
        "gpus_per_instance": inp.profile.tp,
        "price_usd_per_gpu_h": inp.profile.price_usd_per_gpu_h,
        "short_max_tokens": b,
        "long_max_model_len": inp.long_max_model_len,
        "slo": {"ttft_p99_s": inp.slo.ttft_p99_s, "tpot_p99_s": inp.slo.tpot_p99_s},
        "requests": len(t),
        "lambda_req_per_s": t.rate_req_per_s,
        "closed_form": cf,
        "sweep": sweep,
        "throughput_sizing": throughput_sizing(inp, b),
        "too_long_share": too_long,
        "lb": inp.lb,
        "routing_uses_estimates": inp.est_input_tokens is not None,
    }
    if not inp.des:
        return out
    everyone = np.ones(len(t), dtype=np.bool_)
    req = DesRequest(
        trace=t,
        profile=inp.profile,
        slo=inp.slo,
        homogeneous=PoolPlan(
            "homogeneous", inp.long_max_model_len, everyone, cf["analytical_homogeneous_instances"]
        ),
        candidates={s["threshold_tokens"]: _pool_plans(inp, s["threshold_tokens"], s) for s in sweep},
        must_verify=(b,),
        lb=inp.lb,
        seed=inp.seed,
        rel_tol=inp.size_rel_tol,
        jobs=inp.jobs,
        verbose=inp.verbose,
        too_long_share=too_long,
        long_max_model_len=inp.long_max_model_len,
        source=inp.source if inp.est_input_tokens is None else None,
    )
    des = run_des(req, progress)
    out["des"] = des
    out["des_homogeneous"] = des["homogeneous"]
    out["des_two_pool"] = des["candidates"][b]
    out["des_sweep"] = [des["candidates"][x] for x in sorted(des["candidates"])]
    out["recommended_threshold_tokens"] = des["recommended_threshold_tokens"]
    out["vllm_flags"] = recommended_vllm_flags(inp, des)
    if inp.admission_compare:
        out["admission_compare"] = _admission_compare(inp, req, des, progress)
    if inp.lb_compare:
        out["lb_compare"] = _lb_compare(inp, req, des, progress)
    if inp.router_config is not None or inp.spill_sweep:
        out["fleet"] = _router_fleet(inp, des, progress)
    return out


def recommended_vllm_flags(inp: PlanInputs, des: dict[str, Any]) -> list[dict[str, Any]]:
    """Per pool of the recommended plan: ``{"pool", "max_model_len", "instances", "args"}`` with the
    ``vllm serve`` arguments (:func:`planner.model.vllm_args.vllm_serve_args`); empty without a recommendation.
    A pool sized to 0 instances is left out."""
    b = des.get("recommended_threshold_tokens")
    if b is None:
        return []
    fleet = des["candidates"][b]
    out = []
    for name, mml in (("short", int(b)), ("long", inp.long_max_model_len)):
        n = int(fleet[f"{name}_instances"])
        if n > 0:
            out.append({"pool": name, "max_model_len": mml, "instances": n,
                        "args": vllm_serve_args(inp.profile, mml)})  # fmt: skip
    return out


def other_admission_profile(profile: PoolProfile) -> PoolProfile:
    """``profile`` under the other admission: a ``vllm`` profile's shipped original (by name) under
    ``paper``, else the profile under ``vllm`` with vLLM's defaults for its GPU."""
    if profile.admission == "vllm":
        base = PROFILES.get(profile.name, profile)
        return with_admission(base, "paper")
    return with_admission(profile, "vllm")


def _admission_compare(
    inp: PlanInputs, req: DesRequest, des: dict[str, Any], progress: Progress | None
) -> dict[str, Any]:
    """The homogeneous fleet and B's two pools re-sized under the other admission (same trace, SLO,
    load balancing): ``{admission: {"homogeneous", "two_pool", "closed_form", "max_num_seqs_cap",
    "max_num_batched_tokens"}}`` for both, ``threshold_tokens`` = B."""
    b = inp.short_max_tokens
    other = inp.other_admission_profile or other_admission_profile(inp.profile)
    o_inp = replace(inp, profile=other, admission_compare=False)
    o_cf = closed_form(o_inp, b)
    o_req = replace(
        req,
        profile=other,
        homogeneous=replace(req.homogeneous, start_instances=o_cf["analytical_homogeneous_instances"]),
        candidates={b: _pool_plans(o_inp, b, o_cf)},
        must_verify=(b,),
    )
    if progress is not None:
        progress(f"admission {other.admission}: re-sizing the homogeneous fleet and B = {b}")
    o_des = run_des(o_req, progress)

    def entry(prof: PoolProfile, d: dict[str, Any], cf: dict[str, Any]) -> dict[str, Any]:
        return {
            "homogeneous": d["homogeneous"],
            "two_pool": d["candidates"][b],
            "closed_form": cf,
            "max_num_seqs_cap": prof.max_num_seqs_cap,
            "max_num_batched_tokens": prof.max_num_batched_tokens,
        }

    this_cf = closed_form(inp, b)
    return {
        "threshold_tokens": b,
        inp.profile.admission: entry(inp.profile, des, this_cf),
        other.admission: entry(other, o_des, o_cf),
    }


def _lb_compare(
    inp: PlanInputs, req: DesRequest, des: dict[str, Any], progress: Progress | None
) -> dict[str, Any]:
    """The homogeneous fleet and the recommended (else B's) two-pool fleet re-sized under each other
    load-balancing policy, starting from this plan's sizes."""
    b = des["recommended_threshold_tokens"] or inp.short_max_tokens
    d = des["candidates"][b]
    short, long_ = req.candidates[b]
    sized = replace(
        req,
        homogeneous=replace(req.homogeneous, start_instances=des["homogeneous"]["instances"]),
        candidates={
            b: (
                replace(short, start_instances=d["short_instances"]),
                replace(long_, start_instances=d["long_instances"]),
            )
        },
        must_verify=(b,),
    )
    out: dict[str, Any] = {"threshold_tokens": b}
    for policy in LB_POLICIES:
        if policy == inp.lb:
            out[policy] = {"homogeneous": des["homogeneous"], "two_pool": d}
            continue
        if progress is not None:
            progress(f"load balancing {policy}: re-sizing the homogeneous fleet and B = {b}")
        other = run_des(sized, progress, lb=policy)
        out[policy] = {"homogeneous": other["homogeneous"], "two_pool": other["candidates"][b]}
    return out


def _router_fleet(inp: PlanInputs, des: dict[str, Any], progress: Progress | None) -> dict[str, Any]:
    """The router-config fleet section (:func:`planner.des.fleet.plan_fleet`)."""
    b = inp.short_max_tokens
    cfg = inp.router_config or router_config_for([b, inp.long_max_model_len])
    d = des["candidates"][b]
    known = None
    if [p.max_model_len for p in cfg.pools_by_size] == [b, inp.long_max_model_len] and d["slo_met"]:
        known = [max(1, d["short_instances"]), max(1, d["long_instances"])]
    est = None if inp.est_input_tokens is None else inp.est_input_tokens + inp.trace.output_budget_tokens
    if progress is not None:
        progress(f"fleet of the router config: pools {[p.name for p in cfg.pools_by_size]}")
    return plan_fleet(
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
