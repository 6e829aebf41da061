"""Generate ``docs/results.md``: the paper's Table 2 and Table 6 settings, side by side.

For each setting: the paper's reported figure (method.md §7, secondary sources), our closed form
``α(1−1/ρ)``, our M/G/c sizing, our DES-verified sizing, and vllm-sr-sim's analytical sizing. The
gap sentences are generated from the computed numbers, not typed.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from planner.costmodel import ttft_floor_s
from planner.plan import PlanInputs, run_plan
from planner.profiles import PROFILES, PoolProfile
from planner.sizing import Slo
from planner.trace import NormalizationReport, Trace, build_trace, normalize
from planner.trace_loaders import load_trace

__all__ = ["Scenario", "generate", "render"]

AZURE_DIR = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "traces" / "azure_llm_2023"


@dataclass(frozen=True)
class Scenario:
    """One row group: trace, rate, profile, and the paper's numbers (None when not reported)."""

    key: str
    title: str
    trace: str
    rate_req_per_s: float
    profile: str
    paper_homogeneous: int | None
    paper_two_pool: int | None
    paper_savings: str
    min_requests: int
    paper_unit_gpus: int = 1
    paper_unit: str = "paper 'GPU'"


SCENARIOS = [
    Scenario(
        "azure-paper",
        "Table 2, Azure, Llama-3-70B/A100, vllm-sr-sim constants",
        "azure",
        1000,
        "a100-simcompat",
        358,
        208,
        "41.9% (v2) / 16.6% (v1)",
        40_000,
    ),
    Scenario(
        "azure-roofline",
        "Table 2, Azure, Llama-3-70B on 8xA100 (roofline profile)",
        "azure",
        1000,
        "llama3-70b-a100",
        358,
        208,
        "41.9% (v2) / 16.6% (v1)",
        40_000,
    ),
    Scenario(
        "lmsys-paper",
        "Table 2, LMSYS-like, Llama-3-70B/A100, vllm-sr-sim constants",
        "lmsys",
        1000,
        "a100-simcompat",
        358,
        246,
        "31.3% (v2) / 38.5% (v1)",
        40_000,
    ),
    Scenario(
        "lmsys-roofline",
        "Table 2, LMSYS-like, Llama-3-70B on 8xA100 (roofline profile)",
        "lmsys",
        1000,
        "llama3-70b-a100",
        358,
        246,
        "31.3% (v2) / 38.5% (v1)",
        40_000,
    ),
    Scenario(
        "qwen-mi300x",
        "Table 6, Azure, Qwen3-235B-A22B FP8 on 8xMI300X, 10,000 req/s",
        "azure",
        10_000,
        "qwen3-235b-mi300x",
        1576,
        1096,
        "30.5% GPUs; $50.6M -> $35.2M",
        100_000,
        8,
        "8-GPU node",
    ),
]


def _load(kind: str, rate: float, min_requests: int, seed: int) -> tuple[Trace, NormalizationReport]:
    if kind == "lmsys":
        from planner.srsim import package_cdf_path

        return load_trace(
            package_cdf_path("lmsys_cdf.json"), "cdf", n_requests=min_requests, rate_req_per_s=rate, seed=seed
        )
    parts = [load_trace(AZURE_DIR / f"AzureLLMInferenceTrace_{n}.csv") for n in ("code", "conv")]
    # both files share one clock (2023-11-16), so merge on absolute time: re-read offsets from the data
    t0s = [_first_ts(AZURE_DIR / f"AzureLLMInferenceTrace_{n}.csv") for n in ("code", "conv")]
    base = min(t0s)
    trace = build_trace(
        [x + (t0 - base) for (t, _), t0 in zip(parts, t0s, strict=True) for x in t.arrival_s.tolist()],
        [x for t, _ in parts for x in t.input_tokens.tolist()],
        [x for t, _ in parts for x in t.output_tokens.tolist()],
    )
    rep = NormalizationReport(
        source=str(AZURE_DIR / "AzureLLMInferenceTrace_{code,conv}.csv"),
        fmt="azure",
        rows_read=sum(r.rows_read for _, r in parts),
    )
    rep.notes.append("code + conv merged on their shared clock")
    return normalize(trace, rep, target_rate_req_per_s=rate, min_requests=min_requests), rep


def _first_ts(path: Path) -> float:
    from planner.trace_loaders import _azure_ts_s

    with path.open(encoding="utf-8") as fh:
        fh.readline()
        return _azure_ts_s(fh.readline().split(",")[0])


def _floors(trace: Trace, prof: PoolProfile, b: int) -> dict[str, Any]:
    """P99 of the no-queue TTFT floor (:func:`ttft_floor_s`) per fleet/pool, and the long share."""
    fl = ttft_floor_s(prof, trace.input_tokens, trace.output_tokens)
    long_ = np.asarray(trace.budget_tokens > b)
    out: dict[str, Any] = {"homogeneous": float(np.percentile(fl, 99)), "long_share": float(long_.mean())}
    for name, m in (("short", ~long_), ("long", long_)):
        out[name] = float(np.percentile(fl[m], 99)) if m.any() else None
    return out


def _plan(trace: Trace, prof: PoolProfile, slo_s: float, seed: int) -> dict[str, Any]:
    return run_plan(
        PlanInputs(
            trace=trace,
            profile=prof,
            short_max_tokens=8192,
            long_max_model_len=65536,
            slo=Slo(slo_s),
            seed=seed,
            sweep_des_top=0,
        )
    )


def generate(seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Run every scenario (closed form, M/G/c, DES, vllm-sr-sim); returns a JSON-ready dict.

    A scenario whose 2 s SLO is unattainable in some pool is re-run at the smallest attainable SLO
    (the largest per-pool P99 TTFT floor x 1.25, rounded up to 0.5 s) under ``relaxed``.
    """
    out: dict[str, Any] = {"seed": seed, "scenarios": []}
    for sc in SCENARIOS:
        t0 = time.perf_counter()
        trace, rep = _load(sc.trace, sc.rate_req_per_s, sc.min_requests, seed)
        prof = PROFILES[sc.profile]
        plan = _plan(trace, prof, 2.0, seed)
        row: dict[str, Any] = {"scenario": sc.__dict__, "plan": plan, "normalization": rep.lines()}
        row["ttft_floor_p99_s"] = fl = _floors(trace, prof, 8192)
        if not (plan["des_homogeneous"]["slo_met"] and plan["des_two_pool"]["slo_met"]):
            worst = max(v for k, v in fl.items() if k != "long_share" and v is not None)
            slo = math.ceil(worst * 1.25 * 2) / 2
            row["relaxed"] = {"slo_ttft_p99_s": slo, "plan": _plan(trace, prof, slo, seed)}
        if sc.profile == "a100-simcompat":
            from planner.srsim import cdf_from_trace, package_cdf_path, srsim_sizing

            cdf = (
                json.loads(package_cdf_path("lmsys_cdf.json").read_text())
                if sc.trace == "lmsys"
                else cdf_from_trace(trace)
            )
            row["srsim"] = srsim_sizing(cdf, sc.rate_req_per_s, 8192, 65536, 2.0)
        row["elapsed_s"] = time.perf_counter() - t0
        if progress:
            print(f"{sc.key}: done in {row['elapsed_s']:.0f} s", flush=True)
        out["scenarios"].append(row)
    return out


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
        "method.md §7 (secondary sources [S1]/[S3]; the PDFs' tables were not accessible). SLO: P99 TTFT <= 2 s",
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
        L.append(f"- {row['scenario']['key']}: " + "; ".join(x.strip() for x in row["normalization"]))
    L += ["", "## Run times (wall-clock of this generation)", ""]
    for row in data["scenarios"]:
        L.append(f"- {row['scenario']['key']}: {row['elapsed_s']:.0f} s")
    return "\n".join(L) + "\n"


def main_args(args: argparse.Namespace) -> int:
    """Entry used by ``tbr results``."""
    if getattr(args, "from_json", None):
        data = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
    else:
        data = generate(seed=args.seed)
    md = render(data, f"tbr results --out {args.out}")
    Path(args.out).write_text(md, encoding="utf-8")
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps(data, sort_keys=True, indent=1, default=str), encoding="utf-8"
        )
    print(f"wrote {args.out}")
    return 0
