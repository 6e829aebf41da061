"""PNG plots for `tbr plan --plot DIR` (matplotlib, Agg backend; the only module that writes files)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from planner.trace import Trace

__all__ = ["write_plots"]


def write_plots(out_dir: str | Path, trace: Trace, plan: dict[str, Any]) -> list[Path]:
    """Write ``length_cdf.png`` (CDF of L_total with B marked) and ``cost_vs_threshold.png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    paths = []
    x = np.sort(trace.budget_tokens)
    y = np.arange(1, x.size + 1) / x.size
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.plot(x, y)
    b = plan["short_max_tokens"]
    ax.axvline(b, color="red", linestyle="--", label=f"B = {b} (alpha = {plan['closed_form']['alpha']:.3f})")
    ax.set_xscale("log")
    ax.set_xlabel("L_total = input + output budget (tokens)")
    ax.set_ylabel("cumulative fraction")
    ax.legend()
    fig.tight_layout()
    paths.append(d / "length_cdf.png")
    fig.savefig(paths[-1])
    plt.close(fig)
    fig, ax = plt.subplots(figsize=(6, 4))
    sw = plan["sweep"]
    ax.plot(
        [s["threshold_tokens"] for s in sw],
        [s["analytical_usd_per_year"] / 1e6 for s in sw],
        "o-",
        label="M/G/c two-pool",
    )
    des = plan.get("des_sweep", [])
    if des:
        ax.plot(
            [r["threshold_tokens"] for r in des],
            [r["usd_per_year"] / 1e6 for r in des],
            "s",
            label="DES-verified",
        )
        ax.axhline(
            plan["des_homogeneous"]["usd_per_year"] / 1e6,
            color="gray",
            linestyle=":",
            label="homogeneous (DES)",
        )
    ax.set_xscale("log", base=2)
    ax.set_xlabel("threshold B (tokens)")
    ax.set_ylabel("$M / year")
    ax.legend()
    fig.tight_layout()
    paths.append(d / "cost_vs_threshold.png")
    fig.savefig(paths[-1])
    plt.close(fig)
    return paths
