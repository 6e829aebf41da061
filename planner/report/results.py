"""Generate ``docs/results.md``: the paper's Table 2 and Table 6 settings, side by side.

For each setting: the paper's reported figure (docs/method.md §7, secondary sources), our closed form
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

from planner.des.plan import PlanInputs, run_plan
from planner.des.sizing import Slo
from planner.model.costmodel import ttft_floor_s
from planner.model.profiles import ADMISSION_MODES, PROFILES, PoolProfile, with_admission
from planner.report.doc_sections import carry_sections
from planner.report.results_report import render
from planner.workload.cdf_source import CdfSource
from planner.workload.trace import NormalizationReport, Trace, build_trace, normalize
from planner.workload.trace_loaders import load_trace, read_cdf_points

__all__ = ["Scenario", "generate", "render"]

AZURE_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data" / "traces" / "azure_llm_2023"


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
        from planner.des.srsim import package_cdf_path

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
    from planner.workload.trace_loaders import azure_timestamp_s

    with path.open(encoding="utf-8") as fh:
        fh.readline()
        return azure_timestamp_s(fh.readline().split(",")[0])


def _floors(trace: Trace, prof: PoolProfile, b: int) -> dict[str, Any]:
    """P99 of the no-queue TTFT floor (:func:`ttft_floor_s`) per fleet/pool, and the long share."""
    fl = ttft_floor_s(prof, trace.input_tokens, trace.output_tokens)
    long_ = np.asarray(trace.budget_tokens > b)
    out: dict[str, Any] = {"homogeneous": float(np.percentile(fl, 99)), "long_share": float(long_.mean())}
    for name, m in (("short", ~long_), ("long", long_)):
        out[name] = float(np.percentile(fl[m], 99)) if m.any() else None
    return out


def _source(kind: str, rate: float) -> CdfSource | None:
    """The LMSYS-like setting is a CDF: its pools draw fresh requests for their whole runs."""
    if kind != "lmsys":
        return None
    from planner.des.srsim import package_cdf_path

    return CdfSource(tuple(read_cdf_points(package_cdf_path("lmsys_cdf.json"))), rate)


def _plan(
    trace: Trace, prof: PoolProfile, slo_s: float, seed: int, rate: float, source: CdfSource | None = None
) -> dict[str, Any]:
    return run_plan(
        PlanInputs(
            source=source,
            trace=trace,
            profile=prof,
            short_max_tokens=8192,
            long_max_model_len=65536,
            slo=Slo(slo_s),
            seed=seed,
            sweep_thresholds=(),
            mu_short_req_per_s=11.2,
            mu_long_req_per_s=2.8,
            rate_req_per_s=rate,
            jobs=2,
        ),
        progress=lambda m: print(f"  {m}", flush=True),
    )


def scenario_profile(sc: Scenario, admission: str) -> PoolProfile:
    """The scenario's shipped profile under ``admission`` (one of :data:`ADMISSION_MODES`): ``vllm``
    (``tbr plan``'s default: vLLM's ``max_num_seqs`` / ``max_num_batched_tokens`` defaults for the GPU,
    KV on demand) or ``paper`` (the shipped profile as is). Raises ``ValueError`` for another mode."""
    if admission not in ADMISSION_MODES:
        raise ValueError(f"unknown admission {admission!r}; choose from {ADMISSION_MODES}")
    base = PROFILES[sc.profile]
    return base if admission == base.admission else with_admission(base, admission)


def generate(
    seed: int = 0,
    progress: bool = True,
    json_out: str | None = None,
    only: list[str] | None = None,
    admission: str = "vllm",
) -> dict[str, Any]:
    """Run every scenario (closed form, M/G/c, DES, vllm-sr-sim); returns a JSON-ready dict.

    A scenario whose 2 s SLO is unattainable in some pool (a P99 TTFT floor above it) is re-run at the
    smallest attainable SLO (the largest per-pool P99 TTFT floor x 1.25, rounded up to 0.5 s, never
    below 2 s) under ``relaxed``; a fleet that misses for another reason (a run that cannot converge
    within the request cap) is reported as it is. With
    ``json_out`` the JSON so far is written after each scenario; when that file already holds
    scenarios of the same seed they are kept and not re-run (resume). ``only`` restricts the run to
    these scenario keys. ``admission`` is every fleet's admission (:func:`scenario_profile`); a
    resumed file must have been written under the same admission.
    """
    out: dict[str, Any] = {"seed": seed, "admission": admission, "scenarios": []}
    if json_out and Path(json_out).is_file():
        old = json.loads(Path(json_out).read_text(encoding="utf-8"))
        if old.get("seed") == seed and old.get("admission", "paper") == admission:
            out["scenarios"] = old["scenarios"]
    done = {r["scenario"]["key"] for r in out["scenarios"]}
    for sc in SCENARIOS:
        if sc.key in done or (only and sc.key not in only):
            continue
        t0 = time.perf_counter()
        trace, rep = _load(sc.trace, sc.rate_req_per_s, sc.min_requests, seed)
        prof = scenario_profile(sc, admission)
        source = _source(sc.trace, sc.rate_req_per_s)
        plan = _plan(trace, prof, 2.0, seed, sc.rate_req_per_s, source)
        row: dict[str, Any] = {"scenario": sc.__dict__, "plan": plan, "normalization": rep.lines()}
        row["ttft_floor_p99_s"] = fl = _floors(trace, prof, 8192)
        causes = [c for f in (plan["des_homogeneous"], plan["des_two_pool"]) for c in f.get("causes", [])]
        if any("unattainable" in c for c in causes):
            worst = max(v for k, v in fl.items() if k != "long_share" and v is not None)
            slo = max(2.0, math.ceil(worst * 1.25 * 2) / 2)
            relaxed = _plan(trace, prof, slo, seed, sc.rate_req_per_s, source)
            row["relaxed"] = {"slo_ttft_p99_s": slo, "plan": relaxed}
        if sc.profile == "a100-simcompat":
            from planner.des.srsim import cdf_from_trace, package_cdf_path, srsim_sizing

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
        if json_out:
            Path(json_out).write_text(
                json.dumps(out, sort_keys=True, indent=1, default=str), encoding="utf-8"
            )
    return out


def main_args(args: argparse.Namespace) -> int:
    """Entry used by ``tbr results``."""
    if getattr(args, "from_json", None):
        data = json.loads(Path(args.from_json).read_text(encoding="utf-8"))
        done = {r["scenario"]["key"] for r in data["scenarios"]}
        data["missing"] = [sc.key for sc in SCENARIOS if sc.key not in done]
    else:
        data = generate(
            seed=args.seed,
            json_out=args.json_out,
            only=getattr(args, "only", None),
            admission=getattr(args, "admission", "vllm"),
        )
        done = {r["scenario"]["key"] for r in data["scenarios"]}
        data["missing"] = [sc.key for sc in SCENARIOS if sc.key not in done]
    order = [sc.key for sc in SCENARIOS]
    data["scenarios"].sort(key=lambda r: order.index(r["scenario"]["key"]))
    other = None
    if getattr(args, "compare_json", None):
        other = json.loads(Path(args.compare_json).read_text(encoding="utf-8"))
    adm = data.get("admission", "paper")
    md = render(data, f"tbr results --admission {adm} --out {args.out}", other)
    if Path(args.out).is_file():  # keep the sections other commands write (tbr autoscale)
        md = carry_sections(Path(args.out).read_text(encoding="utf-8"), md)
    Path(args.out).write_text(md, encoding="utf-8")
    if args.json_out:
        Path(args.json_out).write_text(
            json.dumps(data, sort_keys=True, indent=1, default=str), encoding="utf-8"
        )
    print(f"wrote {args.out}")
    return 0
