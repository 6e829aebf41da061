"""Markdown rendering of :func:`planner.results.generate` output for ``docs/results.md``.

Every sentence is built from the computed numbers (per-pool DES summaries, closed form, TTFT floors),
none is typed by hand.
"""

from __future__ import annotations

import re
from typing import Any

from planner.profiles import PROFILES
from planner.trace import display_path

__all__ = ["render"]

# Report lines of older JSON runs carry the absolute trace path of the machine that ran them.
_TRACE_PATH = re.compile(r"^trace (\S+) \(format")


def _pct(x: float) -> str:
    return f"{x:.1%}"


def _table_row(title: str, sc: dict[str, Any], p: dict[str, Any], sr: dict[str, Any] | None) -> str:
    cf, h, d = p["closed_form"], p["des_homogeneous"], p["des_two_pool"]
    srs = (
        f"{sr['homogeneous_gpus']} -> {sr['two_pool_gpus']} ({_pct(sr['savings'])})"
        if sr
        else "n/a (no profile for this GPU/model)"
    )
    return (
        f"| {title} | {sc['paper_homogeneous']} -> {sc['paper_two_pool']} ({sc['paper_savings']}) | {cf['alpha']:.4f} | "
        f"{cf['rho']:.2f} | {_pct(cf['savings_closed_form'])} | {cf['analytical_homogeneous_instances']} -> "
        f"{cf['analytical_short_instances'] + cf['analytical_long_instances']} ({_pct(cf['analytical_savings'])}) | "
        f"{h['instances']}{'' if h['slo_met'] else ' (SLO not met)'} -> {d['instances']}"
        f"{'' if d['slo_met'] else ' (SLO not met)'} ({_pct(d['savings_vs_homogeneous'])}) | "
        f"{h['summary']['fleet']['p99_ttft_s']:.2f} / {d['summary']['fleet']['p99_ttft_s']:.2f} | "
        f"{h['gpus']} -> {d['gpus']}; ${h['usd_per_year'] / 1e6:.2f}M -> ${d['usd_per_year'] / 1e6:.2f}M | {srs} |"
    )


def _gpus(n: int) -> str:
    return f"{n} GPU" if n == 1 else f"{n} GPUs"


def _des_vs_closed_form(p: dict[str, Any]) -> str:
    """Why the DES saving differs from (or matches) α(1−1/ρ), from the DES's own per-pool numbers."""
    cf, h, d = p["closed_form"], p["des_homogeneous"], p["des_two_pool"]
    hp = h["summary"]["pools"]["homogeneous"]
    sp = d["summary"]["pools"]["short"]
    lp = d["summary"]["pools"].get("long", {"requests": 0, "utilization": 0.0})
    n_h, n_s, n_l = h["instances"], d["short_instances"], d["long_instances"]
    c_h, c_s = cf["long_slots"], cf["short_slots"]
    m_h, m_s = hp["mean_running_per_instance"], sp["mean_running_per_instance"]
    gain = n_h * cf["alpha"] / n_s if n_s else float("nan")
    gap = d["savings_vs_homogeneous"] - cf["savings_closed_form"]
    txt = (
        f"at the DES sizes the homogeneous fleet runs {m_h:.1f} sequences per instance of its {c_h} slots and the "
        f"short pool {m_s:.1f} of {c_s}, so the short pool's realised throughput gain is n_homog·α/n_short = "
        f"{n_h}·{cf['alpha']:.4f}/{n_s} = {gain:.2f} against ρ = {cf['rho']:.2f}"
    )
    if gain >= 0.85 * cf["rho"]:
        txt += " (it reaches the closed form's gain)"
    elif m_s < 0.5 * c_s:
        txt += (
            "; the P99 TTFT SLO, not the KV slots, caps concurrency (ρ is a full-batch throughput ratio the SLO never "
            "lets a short instance reach), so the short configuration's extra slots go unused"
        )
    else:
        txt += "; the SLO headroom keeps the short pool below full batch"
    short_req_share = sp["requests"] / max(1, hp["requests"])
    if n_s > n_h * short_req_share:
        txt += (
            f"; the short pool even needs {n_s - round(n_h * short_req_share)} more instance(s) than the homogeneous "
            f"fleet would for the same requests, because its larger max_num_seqs lets bursts into one batch (P99 TPOT "
            f"{sp['p99_tpot_s']:.3f} vs {hp['p99_tpot_s']:.3f} s) where the {c_h}-slot cap queues them"
        )
    if lp["requests"] or n_l:
        share = lp["requests"] / max(1, hp["requests"])
        txt += (
            f"; the long pool needs {n_l} instance(s) ({n_l / max(1, d['instances']):.1%} of the two-pool fleet) for "
            f"{lp['requests']} measured requests ({share:.3%} of traffic, utilisation {lp['utilization']:.0%})"
        )
        if not d["slo_met"]:
            txt += ", a search cap because its SLO is unattainable (below)"
        elif n_l <= 1:
            txt += ", integer rounding: a pool has at least one instance"
        elif lp["utilization"] < 0.5:
            txt += ", mostly SLO headroom: its long prefills meet the P99 TTFT only at low utilisation"
    if abs(gap) < 0.08:
        txt += f"; net, the DES is within {abs(gap) * 100:.1f} points of the closed form"
    else:
        txt += (
            f"; net, the DES is {abs(gap) * 100:.1f} points {'below' if gap < 0 else 'above'} the closed form"
        )
    return txt + "."


def _gap_lines(row: dict[str, Any]) -> list[str]:
    sc, p = row["scenario"], row["plan"]
    cf, h, d = p["closed_form"], p["des_homogeneous"], p["des_two_pool"]
    prof = PROFILES[sc["profile"]]
    paper_sav = 1 - sc["paper_two_pool"] / sc["paper_homogeneous"]
    rho_implied = 1 / (1 - paper_sav / cf["alpha"]) if paper_sav < cf["alpha"] else float("inf")
    out = [
        f"- **{sc['title']}**: the paper's {_pct(paper_sav)} needs ρ = {rho_implied:.2f} at our α = {cf['alpha']:.4f}, "
        f"while this profile's ρ is {cf['rho']:.2f} (slots {cf['short_slots']} vs {cf['long_slots']}), so our closed form "
        f"says {_pct(cf['savings_closed_form'])} and the DES {_pct(d['savings_vs_homogeneous'])}; "
        + _des_vs_closed_form(p)
    ]
    fl = row.get("ttft_floor_p99_s")
    if not (h["slo_met"] and d["slo_met"]) and fl:
        bad = [k for k in ("short", "long") if fl.get(k) is not None and fl[k] > 2.0]
        if not h["slo_met"]:
            bad.insert(0, "homogeneous")
        where = " and ".join(f"the {k} pool" for k in bad) or "some pool"
        worst = max(v for k, v in fl.items() if k != "long_share" and v is not None)
        line = (
            f"  **The 2 s P99 TTFT SLO is unattainable here** in {where}: the P99 of its requests' TTFT floor (prefill "
            f"alone: one request per instance, no queue, P = {prof.p_s_per_prefill_token * 1e6:.0f} µs per prefill token) "
            f"is {worst:.2f} s, so no instance count meets 2 s and the counts above are the search cap (4x the M/G/c size), "
            f"not sizes. The homogeneous fleet's floor is only {fl['homogeneous']:.2f} s because the long requests are "
            f"{fl['long_share']:.2%} of its traffic (under 1%, outside its P99). The smallest attainable per-pool SLO "
            f"is about {worst:.2f} s"
        )
        rl = row.get("relaxed")
        if rl:
            rp = rl["plan"]
            rh, rd = rp["des_homogeneous"], rp["des_two_pool"]
            line += (
                f"; the next row sizes both fleets at P99 TTFT <= {rl['slo_ttft_p99_s']:g} s: {rh['instances']} -> "
                f"{rd['instances']} instances ({_pct(rd['savings_vs_homogeneous'])})"
                + ("" if rh["slo_met"] and rd["slo_met"] else ", still not met")
            )
        out.append(line + ".")
    unit = sc.get("paper_unit_gpus", 1)
    unit_name = sc.get("paper_unit", "paper 'GPU'")
    paper_units = sc["paper_homogeneous"] / unit
    out.append(
        f"  Our DES homogeneous fleet needs {h['instances']} instances ({h['gpus']} GPUs) vs the paper's "
        f"{sc['paper_homogeneous']} GPUs: μ_homog = {cf['mu_homogeneous']:.2f} req/s per instance ({_gpus(prof.tp)}) here vs "
        f"{sc['rate_req_per_s']:g}/{paper_units:g} = {sc['rate_req_per_s'] / paper_units:.2f} req/s per {unit_name} implied "
        f"by the paper (its per-request cost model and trace preprocessing are not published)."
    )
    sr = row.get("srsim")
    if sr:
        out.append(
            f"  vllm-sr-sim on the same CDF and A100 constants sizes {sr['homogeneous_gpus']} -> {sr['two_pool_gpus']} "
            f"(short {sr['short_gpus']}, long {sr['long_gpus']}); its long pool is calibrated only on requests above B "
            f"with a min-GPU floor and its M/G/c treats each KV slot as a server with full-batch service times, "
            f"so its counts differ from our iteration-level DES by the modelling choices, not by α or ρ."
        )
    return out


def _why_section(data: dict[str, Any]) -> list[str]:
    rows = {r["scenario"]["key"]: r for r in data["scenarios"]}
    paper = [r for r in data["scenarios"] if r["scenario"]["profile"] == "a100-simcompat"]
    roof = [r for r in data["scenarios"] if r["scenario"]["profile"] != "a100-simcompat"]
    figures = {"Azure v2": 0.419, "Azure v1": 0.166, "LMSYS v2": 0.313, "LMSYS v1": 0.385, "MI300X": 0.305}
    alpha_of = {
        "Azure": rows.get("azure-paper"),
        "LMSYS": rows.get("lmsys-paper"),
        "MI300X": rows.get("qwen-mi300x"),
    }
    effs = []
    eff_values = []
    for name, sav in figures.items():
        r = alpha_of[name.split()[0]]
        if r is not None:
            a = r["plan"]["closed_form"]["alpha"]
            eff_values.append(1 / (1 - sav / a))
            effs.append(f"{name} {_pct(sav)} -> ρ_eff {eff_values[-1]:.2f}")
    lo, hi = (min(eff_values), max(eff_values)) if eff_values else (float("nan"), float("nan"))
    below = [
        r["scenario"]["key"]
        for r in roof
        if r["plan"]["des_two_pool"]["savings_vs_homogeneous"]
        < r["plan"]["closed_form"]["savings_closed_form"] - 0.02
    ]
    roof_rho = [r["plan"]["closed_form"]["rho"] for r in roof]
    L = [
        "## Why α(1−1/ρ) = ~75% while the paper's tables show 17–42%",
        "",
        "Every number in this section is computed from the rows above.",
        "",
        "- α at B = 8,192: "
        + "; ".join(
            f"{r['scenario']['title'].split(',')[1].strip()} {r['plan']['closed_form']['alpha']:.4%}"
            for r in paper
        )
        + ". Both traces are almost entirely short, so α(1−1/ρ) ≈ 1 − 1/ρ.",
        "- With the paper's own simulator constants (rows 'vllm-sr-sim constants'), ρ = "
        + ", ".join(f"{r['plan']['closed_form']['rho']:.2f}" for r in paper)
        + " (KV slots "
        + ", ".join(
            f"{r['plan']['closed_form']['short_slots']} vs {r['plan']['closed_form']['long_slots']}"
            for r in paper
        )
        + "), the closed form says "
        + ", ".join(_pct(r["plan"]["closed_form"]["savings_closed_form"]) for r in paper)
        + " and our DES "
        + ", ".join(_pct(r["plan"]["des_two_pool"]["savings_vs_homogeneous"]) for r in paper)
        + ": the DES reproduces the closed form, not the tables.",
        "- The tables' savings correspond to an effective gain ρ_eff = 1/(1 − saving/α): "
        + "; ".join(effs)
        + ".",
        "- The roofline profiles (W = weight streaming per iteration, P = prefill FLOPs) give ρ = "
        + ", ".join(f"{r['plan']['closed_form']['rho']:.2f} ({r['scenario']['key']})" for r in roof)
        + ": prefill compute and the per-iteration weight read do not shrink with concurrency, so more KV slots raise "
        "throughput far less than the slot ratio. Their DES savings are "
        + ", ".join(
            f"{_pct(r['plan']['des_two_pool']['savings_vs_homogeneous'])} ({r['scenario']['key']})"
            for r in roof
        )
        + "; "
        + (
            "where the DES falls below the closed form ("
            + ", ".join(below)
            + ") the per-row sentences show why (SLO-capped concurrency, the long pool)."
            if below
            else "the DES matches or beats the closed form in every roofline row."
        ),
        "- So the closed form is only as good as ρ, and ρ must be the throughput ratio *measured on the operator's mix "
        "under the SLO* (what `tbr plan` verifies by DES), not the KV-slot ratio. The paper's ρ = 4 (11.2/2.8 req/s) "
        f"with α ≈ 1 cannot produce its tables' savings; they imply ρ_eff of {lo:.2f}–{hi:.2f}, the same order as "
        f"the roofline ρ ({min(roof_rho, default=float('nan')):.2f}–{max(roof_rho, default=float('nan')):.2f}) of an "
        "instance whose prefill compute and weight reads do not scale with its slots.",
    ]
    return L


def render(data: dict[str, Any], command: str) -> str:
    """Markdown for ``docs/results.md`` from :func:`generate`'s output."""
    L = [
        "# Results: the paper's settings, reproduced",
        "",
        f"Generated by `{command}` (seed {data['seed']}); do not edit by hand. Paper figures are from",
        "docs/method.md §7 (secondary sources [S1]/[S3]; the PDFs' tables were not accessible). SLO: P99 TTFT <= 2 s",
        "in every pool unless the row says otherwise;",
        "B = 8,192 tokens (short pool max_model_len), long pool max_model_len 65,536; round-robin within each pool.",
        '"inst" = serving instances (one vLLM server); GPUs = inst x tensor-parallel degree.',
        "",
        "| setting | paper homog -> two-pool (saving) | α | ρ | closed form α(1−1/ρ) | ours M/G/c inst (saving) | ours DES inst (saving) | DES P99 TTFT homog / two-pool (s) | DES GPUs, $/yr homog -> two-pool | vllm-sr-sim GPUs (saving) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in data["scenarios"]:
        L.append(_table_row(row["scenario"]["title"], row["scenario"], row["plan"], row.get("srsim")))
        rl = row.get("relaxed")
        if rl:
            t = f"{row['scenario']['title']}, SLO P99 TTFT <= {rl['slo_ttft_p99_s']:g} s (2 s unattainable)"
            L.append(_table_row(t, row["scenario"], rl["plan"], None))
    L += ["", "## Gaps, one sentence each", ""]
    for row in data["scenarios"]:
        L += _gap_lines(row)
    L += ["", *_why_section(data), "", "## Normalisation reports", ""]
    for row in data["scenarios"]:
        lines = [
            _TRACE_PATH.sub(lambda m: f"trace {display_path(m.group(1))} (format", x.strip())
            for x in row["normalization"]
        ]
        L.append(f"- {row['scenario']['key']}: " + "; ".join(lines))
    L += ["", "## Run times (wall-clock of this generation)", ""]
    for row in data["scenarios"]:
        L.append(f"- {row['scenario']['key']}: {row['elapsed_s']:.0f} s")
    return "\n".join(L) + "\n"
