"""Text rendering of :func:`planner.des.plan.run_plan` for `tbr plan`: units on every column.

Units: tokens (B, max_model_len), req/s (λ, and μ per instance), seconds (TTFT/TPOT), instances
(one vLLM server of ``tp`` GPUs), GPUs, US dollars per year.
"""

from __future__ import annotations

import math
from typing import Any

from planner.report.fleet_report import format_fleet

__all__ = ["fmt_alpha", "format_plan"]


def fmt_alpha(alpha: float, compact: bool = False) -> str:
    """α with enough digits to tell it from 1 (0.999948 is not 1.0000): at least 4 decimals, and
    two significant digits of ``1 − α``; exactly 1 prints ``1 (every request)`` (``1`` if compact)."""
    if alpha >= 1.0:
        return "1" if compact else "1 (every request)"
    digits = max(4, 1 - math.floor(math.log10(1.0 - alpha)))
    return f"{alpha:.{digits}f}"


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def _usd(x: float) -> str:
    return f"${x / 1e6:,.2f}M"


def _pool_row(label: str, b: str, p: dict[str, Any], tp: int, price: float) -> str:
    blk = p.get("block") or {}
    load = p.get("load") or {}
    n = int(p["instances"])
    verdict = p["verdict"] if not p.get("note") else p["note"]
    halves = f"{_s(blk.get('p99_ttft_s'))} / {_s(blk.get('p99_ttft_upper_s'))}"
    lam = load.get("lam_req_per_s")
    mu = load.get("mu_req_per_s")
    return (
        f"  {label:<12}{b:>8}{(f'{lam:,.3f}' if lam is not None else '-'):>11}{(f'{mu:.2f}' if mu else '-'):>9}"
        f"{load.get('min_stable_instances', '-'):>8}{n:>7}{n * tp:>7}{_usd(n * tp * price * 8760):>10}"
        f"{halves:>15}{_s(blk.get('p99_tpot_s')):>8}{blk.get('simulated_requests', 0):>11,}  {verdict}"
    )


def _des_table(res: dict[str, Any]) -> list[str]:
    des = res["des"]
    tp, price = res["gpus_per_instance"], res["price_usd_per_gpu_h"]
    rec = des["recommended_threshold_tokens"]
    lines = [
        "DES at steady state (sizes below ⌊λ/μ⌋+1 are unstable and not simulated; each run lasts a warm-up",
        "of 2 x (longest service time + SLO) + 5 relaxation times, then 10 batches of at least max(longest",
        "service time + SLO, 2 relaxation times); a size passes only if its batch P99s do not drift upward",
        "and the P99 TTFT plus its one-sided 95 % batch-means bound meets the SLO, in two independent runs):",
        f"  {'pool':<12}{'B':>8}{'λ':>11}{'μ/inst':>9}{'stable':>8}{'inst':>7}{'GPUs':>7}{'$/yr':>10}"
        f"{'P99 TTFT':>15}{'P99':>8}{'simulated':>11}  verdict",
        f"  {'':<12}{'tokens':>8}{'req/s':>11}{'req/s':>9}{'>= inst':>8}{'':>7}{'':>7}{'':>10}"
        f"{'/ bound, s':>15}{'TPOT s':>8}{'requests':>11}",
    ]
    h = des["homogeneous"]
    lines.append(_pool_row("homogeneous", "-", h["pools"]["homogeneous"], tp, price))
    for b, f in sorted(des["candidates"].items(), key=lambda kv: int(kv[0])):
        mark = "  <- recommended" if rec is not None and int(b) == rec else ""
        if not f.get("simulated", True):
            lines.append(f"  B={int(b):<10}{'':>8}  {f['causes'][0]}")
            continue
        for name in ("short", "long"):
            lines.append(_pool_row(f"B={int(b)} {name}", str(int(b)) if name == "short" else "-", f["pools"][name],
                                   tp, price))  # fmt: skip
        saving = f.get("savings_vs_homogeneous")
        lines.append(
            f"  {'= two-pool':<12}{'':>8}{'':>11}{'':>9}{'':>8}{f['instances']:>7}{f['gpus']:>7}"
            f"{_usd(f['usd_per_year']):>10}  {'SLO met' if f['slo_met'] else 'SLO MISSED'}"
            + (f", saving {saving:.1%} vs homogeneous" if saving is not None else "")
            + mark
        )
    return lines


def _verdict_lines(res: dict[str, Any]) -> list[str]:
    des = res["des"]
    h = des["homogeneous"]
    rec = des["recommended_threshold_tokens"]
    lines = []
    if not h["slo_met"]:
        lines.append("homogeneous baseline does NOT meet the SLO: " + "; ".join(h["causes"]))
    if rec is None:
        lines.append("no threshold meets the SLO in every pool; no saving can be claimed. Causes:")
        lines += [f"  - {c}" for c in des["no_recommendation"]]
        return lines
    f = des["candidates"][rec]
    txt = (
        f"recommended B = {rec} tokens (cheapest threshold whose every pool met the SLO): short "
        f"{f['short_instances']} + long {f['long_instances']} = {f['instances']} instances, {f['gpus']} GPUs, "
        f"{_usd(f['usd_per_year'])}/yr"
    )
    if h["slo_met"]:
        txt += (
            f"; homogeneous {h['instances']} instances, {_usd(h['usd_per_year'])}/yr; saving "
            f"{f['savings_vs_homogeneous']:.1%} = {_usd(h['usd_per_year'] - f['usd_per_year'])}/yr"
        )
    lines.append(txt)
    cf = next((x for x in res.get("sweep", []) if x["threshold_tokens"] == rec), None)
    if cf is not None:
        lines.append(
            f"decided by the steady-state DES (every pool simulated to its verdict); the M/G/c sizing "
            f"({cf['analytical_short_instances']} + {cf['analytical_long_instances']} instances at B = {rec}) only "
            "started its search, and the closed form α(1−1/ρ) sized nothing"
        )
    return lines


def _lb_lines(res: dict[str, Any]) -> list[str]:
    cmp_ = res.get("lb_compare")
    if not cmp_:
        return []
    b = cmp_["threshold_tokens"]
    lines = [
        f"load balancing inside each pool (homogeneous and B = {b} re-sized under each policy):",
        f"  {'policy':<14}{'homogeneous inst':>18}{'two-pool inst':>15}{'saving':>9}",
    ]
    for policy in ("round_robin", "least_loaded", "p2c"):
        r = cmp_.get(policy)
        if r is None:
            continue
        h, d = r["homogeneous"], r["two_pool"]
        ok = h["slo_met"] and d["slo_met"]
        saving = f"{1 - d['instances'] / h['instances']:.1%}" if ok else "-"
        mark = " (this plan)" if policy == res["lb"] else ""
        lines.append(
            f"  {policy:<14}{h['instances']:>18}{d['instances']:>15}{saving:>9}{mark}"
            + ("" if ok else "  (a fleet missed the SLO)")
        )
    return lines


def _admission_line(res: dict[str, Any]) -> str:
    """What the plan assumes about admission, and how to get the other convention."""
    cf = res["closed_form"]
    if res.get("admission") == "vllm":
        return (
            f"admission vllm (vLLM's scheduler): max_num_seqs {res['max_num_seqs_cap']}, max_num_batched_tokens "
            f"{res['max_num_batched_tokens']:,}, {res['kv_capacity_tokens']:,} KV tokens per instance taken on demand, "
            f"recompute preemption, chunked prefill; at full batch the KV holds short {cf.get('short_concurrency')} / "
            f"homogeneous {cf.get('homogeneous_concurrency')} sequences of the mix. --admission paper assumes "
            f"floor(KV / max_model_len) slots instead (the paper's convention)"
        )
    return (
        f"admission paper (an assumption: every sequence holds a whole max_model_len of KV): "
        f"floor(KV / max_model_len) slots = {cf['short_slots']} at B, {cf['long_slots']} at the long "
        f"max_model_len; vLLM itself admits up to its max_num_seqs with KV on demand (--admission vllm)"
    )


def _admission_compare_lines(res: dict[str, Any]) -> list[str]:
    cmp_ = res.get("admission_compare")
    if not cmp_:
        return []
    b = cmp_["threshold_tokens"]
    lines = [
        f"homogeneous baseline and saving at B = {b:,} under both admissions (same trace, SLO, load balancing):",
        f"  {'admission':<18}{'max_num_seqs long/short':>24}{'batched tok':>12}{'homogeneous':>13}{'two-pool':>10}"
        f"{'DES saving':>11}{'M/G/c saving':>14}{'a(1-1/rho)':>12}",
    ]
    for mode in ("vllm", "paper"):
        r = cmp_.get(mode)
        if r is None:
            continue
        h, d, cf = r["homogeneous"], r["two_pool"], r["closed_form"]
        ok = h["slo_met"] and d["slo_met"]
        mark = " (this plan)" if mode == res.get("admission") else ""
        mnbt = r["max_num_batched_tokens"]
        budget = f"{mnbt:,}" if mnbt else "off"
        homog = h["instances"] if h["slo_met"] else "missed"
        two = d["instances"] if d["slo_met"] else "missed"
        saving = f"{1 - d['instances'] / h['instances']:.1%}" if ok else "-"
        seqs = f"{cf['long_slots']} / {cf['short_slots']}"
        lines.append(
            f"  {mode + mark:<18}{seqs:>24}{budget:>12}{homog:>13}{two:>10}{saving:>11}"
            f"{cf['analytical_savings']:>14.1%}{cf['savings_closed_form']:>12.1%}"
        )
    return lines


def _vllm_flag_lines(res: dict[str, Any]) -> list[str]:
    flags = res.get("vllm_flags")
    if not flags:
        return []
    lines = ["vLLM arguments of the recommended plan (vllm serve MODEL ...; replicas = instances):"]
    for f in flags:
        lines.append(f"  {f['pool']:<12}{f['instances']:>5} x  {' '.join(f['args'])}")
    return lines


def format_plan(res: dict[str, Any], report_lines: list[str]) -> str:
    """Human-readable plan (the normalisation report first)."""
    cf = res["closed_form"]
    lines = [*report_lines, ""]
    slo = f"P99 TTFT <= {res['slo']['ttft_p99_s']:g} s"
    if res["slo"]["tpot_p99_s"] is not None:
        slo += f", P99 TPOT <= {res['slo']['tpot_p99_s']:g} s"
    lines += [
        f"profile {res['profile']}: {res['gpus_per_instance']} GPU(s) per instance, ${res['price_usd_per_gpu_h']}/GPU-h",
        f"SLO {slo} in every pool; B = {res['short_max_tokens']:,} tokens (short pool max_model_len); long pool "
        f"max_model_len {res['long_max_model_len']:,} tokens",
        f"load {res['lambda_req_per_s']:,.1f} req/s, {res['requests']:,} requests in the base trace; load balancing "
        f"inside each pool: {res['lb']}",
        _admission_line(res),
        f"alpha = F(B) = {fmt_alpha(cf['alpha'])} (share of requests whose input + output budget <= B)",
    ]
    rv = res.get("output_reserve")
    if rv:
        o = rv["oracle"]
        lines.append(
            f"output reserve {rv['policy']} (what the router reserves; mean {rv['mean_reserve_tokens']:,.0f} tokens): "
            f"alpha {fmt_alpha(cf['alpha'])}, alpha(1-1/rho) {cf['savings_closed_form']:.1%}, M/G/c saving "
            f"{cf['analytical_savings']:.1%}, {rv['truncated']} requests truncated ({rv['truncated_share']:.3%}); "
            f"oracle (true output known): alpha {fmt_alpha(o['alpha'])}, alpha(1-1/rho) "
            f"{o['savings_closed_form']:.1%}, M/G/c saving {o['analytical_savings']:.1%}"
        )
    if res.get("too_long_share"):
        lines.append(
            f"WARNING: {res['too_long_share']:.4%} of requests exceed the long pool's max_model_len "
            f"{res['long_max_model_len']:,}: no fleet can serve them"
        )
    lines.append(
        f"profile throughputs: mu_short {cf['mu_short']:.2f}, mu_homogeneous {cf['mu_homogeneous']:.2f} req/s per "
        f"instance at full batch; rho = {cf['rho']:.2f} (sequences at full batch "
        f"{cf.get('short_concurrency', cf['short_slots'])} vs {cf.get('homogeneous_concurrency', cf['long_slots'])}); "
        f"alpha(1-1/rho) = {cf['savings_closed_form']:.1%}; M/G/c sizing "
        f"{cf['analytical_homogeneous_instances']} -> {cf['analytical_short_instances']} + "
        f"{cf['analytical_long_instances']} instances ({cf['analytical_savings']:.1%})"
    )
    ts = res.get("throughput_sizing")
    if ts:
        lines.append(
            f"given throughputs: mu_short {ts['mu_short_req_per_s']:g}, mu_long {ts['mu_long_req_per_s']:g} req/s per "
            f"instance (rho {ts['rho']:.2f}): homogeneous ceil({ts['lambda_req_per_s']:,.0f}/{ts['mu_long_req_per_s']:g}) = "
            f"{ts['homogeneous_instances']} instances; two-pool {ts['short_instances']} + {ts['long_instances']} = "
            f"{ts['short_instances'] + ts['long_instances']} ({ts['savings']:.1%}); alpha(1-1/rho) = "
            f"{ts['savings_closed_form']:.1%}"
        )
    lines.append("")
    lines.append(
        f"{'B (tokens)':>11}{'alpha':>12}{'rho':>7}{'a(1-1/r)':>10}{'M/G/c inst':>12}{'DES inst':>10}{'DES $/yr':>11}"
        f"{'saving':>8}"
    )
    des = res.get("des", {}).get("candidates", {})
    for s in res["sweep"]:
        d = des.get(s["threshold_tokens"])
        inst = d["instances"] if d and d.get("simulated", True) and d["slo_met"] else "-"
        usd = _usd(d["usd_per_year"]) if d and d.get("simulated", True) and d["slo_met"] else "-"
        sav = f"{d['savings_vs_homogeneous']:.1%}" if d and "savings_vs_homogeneous" in d else "-"
        lines.append(
            f"{s['threshold_tokens']:>11,}{fmt_alpha(s['alpha'], compact=True):>12}{s['rho']:>7.2f}{s['savings_closed_form']:>10.1%}"
            f"{s['analytical_short_instances'] + s['analytical_long_instances']:>12}{inst:>10}{usd:>11}{sav:>8}"
        )
    if "des" in res:
        lines.append("")
        lines += _des_table(res)
        lines.append("")
        lines += _verdict_lines(res)
        for extra in (_vllm_flag_lines(res), _admission_compare_lines(res)):
            if extra:
                lines += ["", *extra]
        lb = _lb_lines(res)
        if lb:
            lines += ["", *lb]
    if "fleet" in res:
        lines.append("")
        lines.extend(format_fleet(res["fleet"], res["des_homogeneous"]))
    return "\n".join(lines)
