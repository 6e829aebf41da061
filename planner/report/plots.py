"""PNG plots for `tbr plan --plot DIR` (matplotlib, Agg backend; the only module that writes files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from planner.workload.trace import Trace

__all__ = ["write_plots"]


def _tokens(x: float, _pos: int = 0) -> str:
    """Tick label in tokens: 512, 2K, 8K, 64K."""
    return f"{x / 1024:g}K" if x >= 1024 else f"{x:g}"


def write_plots(out_dir: str | Path, trace: Trace, plan: dict[str, Any], trace_name: str = "") -> list[Path]:
    """Write ``length_cdf.png`` (CDF of L_total, B and the recommended B marked) and
    ``cost_vs_threshold.png`` ($M/yr per threshold: M/G/c, DES-verified, homogeneous, recommended).

    Both are titled with ``trace_name``; token axes are labelled in tokens; legends sit outside
    the data. Returns the written paths.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    b = plan["short_max_tokens"]
    rec = plan.get("recommended_threshold_tokens")
    name = trace_name or "trace"
    x = np.sort(trace.budget_tokens)
    y = np.arange(1, x.size + 1) / x.size
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.step(x, y, where="post", label="share of requests with L_total <= x")
    ax.axvline(
        b, color="red", linestyle="--", label=f"B = {b:,} tokens (alpha = {plan['closed_form']['alpha']:.6f})"
    )
    if rec is not None and rec != b:
        ax.axvline(rec, color="green", linestyle="-", label=f"recommended B = {rec:,} tokens")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(_tokens))
    ax.set_xlabel("L_total = input + output budget (tokens)")
    ax.set_ylabel("cumulative share of requests")
    ax.set_title(f"Request length CDF: {name}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    paths.append(d / "length_cdf.png")
    fig.savefig(paths[-1])
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    sw = plan["sweep"]
    ax.plot(
        [s["threshold_tokens"] for s in sw],
        [s["analytical_usd_per_year"] / 1e6 for s in sw],
        "o-",
        label="two-pool, M/G/c (analytical)",
    )
    ok = [r for r in plan.get("des_sweep", []) if r.get("simulated", True) and r["slo_met"]]
    if ok:
        ax.plot(
            [r["threshold_tokens"] for r in ok],
            [r["usd_per_year"] / 1e6 for r in ok],
            "s",
            markersize=8,
            label="two-pool, DES-verified (SLO met)",
        )
    homog = plan.get("des_homogeneous")
    if homog is not None and homog["slo_met"]:
        ax.axhline(
            homog["usd_per_year"] / 1e6, color="gray", linestyle=":", label="homogeneous, DES-verified"
        )
    if rec is not None:
        ax.axvline(rec, color="green", linestyle="--", label=f"recommended B = {rec:,} tokens")
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_formatter(FuncFormatter(_tokens))
    ax.set_xlabel("threshold B = short pool max_model_len (tokens)")
    ax.set_ylabel("fleet cost ($M / year)")
    ax.set_title(f"Fleet cost vs threshold: {name}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    fig.tight_layout()
    paths.append(d / "cost_vs_threshold.png")
    fig.savefig(paths[-1])
    plt.close(fig)
    return paths
