"""Generate ``docs/results.md``: the paper's Table 2 and Table 6 settings, side by side.

For each setting: the paper's reported figure (method.md §7, secondary sources), our closed form
``α(1−1/ρ)``, our M/G/c sizing, our DES-verified sizing, and vllm-sr-sim's analytical sizing. The
gap sentences are generated from the computed numbers, not typed.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planner.plan import PlanInputs, run_plan
from planner.profiles import PROFILES
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


def generate(seed: int = 0, progress: bool = True) -> dict[str, Any]:
    """Run every scenario (closed form, M/G/c, DES, vllm-sr-sim); returns a JSON-ready dict."""
    out: dict[str, Any] = {"seed": seed, "scenarios": []}
    for sc in SCENARIOS:
        t0 = time.perf_counter()
        trace, rep = _load(sc.trace, sc.rate_req_per_s, sc.min_requests, seed)
        prof = PROFILES[sc.profile]
        plan = run_plan(
            PlanInputs(
                trace=trace,
                profile=prof,
                short_max_tokens=8192,
                long_max_model_len=65536,
                slo=Slo(2.0),
                seed=seed,
                sweep_des_top=0,
            )
        )
        row: dict[str, Any] = {"scenario": sc.__dict__, "plan": plan, "normalization": rep.lines()}
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


def render(data: dict[str, Any], command: str) -> str:
    """Markdown for ``docs/results.md`` from :func:`generate`'s output."""
    L = [
        "# Results: the paper's settings, reproduced",
        "",
        f"Generated by `{command}` (seed {data['seed']}); do not edit by hand. Paper figures are from",
        "method.md §7 (secondary sources [S1]/[S3]; the PDFs' tables were not accessible). SLO: P99 TTFT <= 2 s;",
        "B = 8,192 tokens (short pool max_model_len), long pool max_model_len 65,536; round-robin within each pool.",
        '"inst" = serving instances (one vLLM server); GPUs = inst x tensor-parallel degree.',
        "",
        "| setting | paper homog -> two-pool (saving) | α | ρ | closed form α(1−1/ρ) | ours M/G/c inst (saving) | ours DES inst (saving) | DES P99 TTFT homog / two-pool (s) | DES GPUs, $/yr homog -> two-pool | vllm-sr-sim GPUs (saving) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in data["scenarios"]:
        sc, p = row["scenario"], row["plan"]
        cf, h, d = p["closed_form"], p["des_homogeneous"], p["des_two_pool"]
        sr = row.get("srsim")
        srs = (
            f"{sr['homogeneous_gpus']} -> {sr['two_pool_gpus']} ({_pct(sr['savings'])})"
            if sr
            else "n/a (no profile for this GPU/model)"
        )
        L.append(
            f"| {sc['title']} | {sc['paper_homogeneous']} -> {sc['paper_two_pool']} ({sc['paper_savings']}) | {cf['alpha']:.4f} | "
            f"{cf['rho']:.2f} | {_pct(cf['savings_closed_form'])} | {cf['analytical_homogeneous_instances']} -> "
            f"{cf['analytical_short_instances'] + cf['analytical_long_instances']} ({_pct(cf['analytical_savings'])}) | "
            f"{h['instances']}{'' if h['slo_met'] else ' (SLO not met)'} -> {d['instances']}"
            f"{'' if d['slo_met'] else ' (SLO not met)'} ({_pct(d['savings_vs_homogeneous'])}) | "
            f"{h['summary']['fleet']['p99_ttft_s']:.2f} / {d['summary']['fleet']['p99_ttft_s']:.2f} | "
            f"{h['gpus']} -> {d['gpus']}; ${h['usd_per_year'] / 1e6:.2f}M -> ${d['usd_per_year'] / 1e6:.2f}M | {srs} |"
        )
    L += ["", "## Gaps, one sentence each", ""]
    for row in data["scenarios"]:
        sc, p = row["scenario"], row["plan"]
        cf, h, d = p["closed_form"], p["des_homogeneous"], p["des_two_pool"]
        paper_sav = 1 - sc["paper_two_pool"] / sc["paper_homogeneous"]
        rho_implied = 1 / (1 - paper_sav / cf["alpha"]) if paper_sav < cf["alpha"] else float("inf")
        L.append(
            f"- **{sc['title']}**: the paper's {_pct(paper_sav)} needs ρ = {rho_implied:.2f} at our α = {cf['alpha']:.4f}, "
            f"while this profile's ρ is {cf['rho']:.2f} (slots {cf['short_slots']} vs {cf['long_slots']}), so our closed form says "
            f"{_pct(cf['savings_closed_form'])} and the DES {_pct(d['savings_vs_homogeneous'])}; "
            + (
                "the DES agrees with the closed form because α≈1 makes the split a pure re-configuration of one mix "
                "(the long pool is nearly empty) and the SLO headroom is similar in both fleets."
                if abs(d["savings_vs_homogeneous"] - cf["savings_closed_form"]) < 0.08
                else "the DES differs from the closed form because per-pool SLO headroom, integer rounding and the long "
                "pool's heavier mix are not in α(1−1/ρ)."
            )
        )
        if not (h["slo_met"] and d["slo_met"]):
            L.append(
                "  The P99 TTFT SLO is unattainable for part of this traffic on this profile at any instance count the "
                "search tried (4x the M/G/c size): at P = "
                f"{PROFILES[sc['profile']].p_s_per_prefill_token * 1e6:.0f} µs per prefill token a single long prompt's "
                "prefill alone exceeds 2 s, so those counts are search caps, not sizes; the savings figure is not meaningful."
            )
        L.append(
            f"  Our homogeneous fleet needs {h['instances']} instances vs the paper's {sc['paper_homogeneous']}: μ_homog = "
            f"{cf['mu_homogeneous']:.2f} req/s/instance here vs 1000/358 = 2.79 implied by the paper (its per-request cost model "
            f"and trace preprocessing are not published)."
        )
        if row.get("srsim"):
            sr = row["srsim"]
            L.append(
                f"  vllm-sr-sim on the same CDF and A100 constants sizes {sr['homogeneous_gpus']} -> {sr['two_pool_gpus']} "
                f"(short {sr['short_gpus']}, long {sr['long_gpus']}); its long pool is calibrated only on requests above B "
                f"with a min-GPU floor and its M/G/c treats each KV slot as a server with full-batch service times, "
                f"so its counts differ from our iteration-level DES by the modelling choices, not by α or ρ."
            )
    L += [
        "",
        "## Why α(1−1/ρ) = ~75% while the paper's tables show 17–42%",
        "",
        "With B = 8,192 both traces have α ≈ 1 (Azure 2023: 99.9965% of requests ≤ 8K; LMSYS CDF: 99.65%), and the",
        "KV-slot gain at 8K vs 64K is 8× (ρ=4 is the paper's measured 11.2/2.8 req/s), so the closed form says 73–75%.",
        "Run with the paper's own simulator constants (rows 'vllm-sr-sim constants'), our DES reproduces the closed form,",
        "not the tables: nothing in a two-pool split at α≈1 produces 17–42% if ρ really is 4. The tables are instead",
        "consistent with an effective throughput gain ρ_eff = 1/(1 − saving/α) ≈ 1.2–1.7. Our roofline profile",
        "(8×A100, W = weight streaming, P = prefill FLOPs) yields exactly such a ρ: going from 20 to 164 slots raises",
        "throughput far less than 8× because prefill compute (P·input tokens per request) and the per-iteration weight",
        "read W do not shrink with concurrency, and the TTFT SLO caps how full a short instance can run. So the closed",
        "form is only as good as ρ: ρ must be the *measured* throughput ratio on the operator's mix under the SLO (what",
        "`tbr plan` computes from the profile and then verifies by DES), not the KV-slot ratio. A second, smaller effect",
        "visible in the v1 numbers (16.6% Azure) is the unit: v1 counts GPU instances after per-pool rounding and",
        "headroom, v2 GPU-hours; and the 'GPUs' in both tables are simulator instances priced at one A100-hour although",
        "their 1M-token KV needs 4–8 A100s of memory for Llama-3-70B (method.md §2).",
        "",
        "## Normalisation reports",
        "",
    ]
    for row in data["scenarios"]:
        L.append(f"- {row['scenario']['key']}: " + "; ".join(x.strip() for x in row["normalization"]))
    L += ["", "## Run times", ""]
    for row in data["scenarios"]:
        L.append(f"- {row['scenario']['key']}: {row['elapsed_s']:.0f} s")
    return "\n".join(L) + "\n"


def main_args(args: argparse.Namespace) -> int:
    """Entry used by ``tbr results``."""
    data = generate(seed=args.seed)
    md = render(data, f"tbr results --out {args.out}")
    Path(args.out).write_text(md, encoding="utf-8")
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps(data, sort_keys=True, indent=1, default=str), encoding="utf-8"
        )
    print(f"wrote {args.out}")
    return 0
