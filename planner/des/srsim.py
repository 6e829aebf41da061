"""Adapter to vllm-sr-sim (PyPI ``vllm-sr-sim``, import ``fleet_sim``) for side-by-side comparisons.

Optional: every function raises ``ImportError`` when the package is not installed. Used only by the
results generator and the benchmark, never by the planner's own model.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from planner.workload.trace import Trace

__all__ = ["cdf_from_trace", "package_cdf_path", "srsim_optimize", "srsim_sizing"]


def package_cdf_path(name: str) -> Path:
    """Path of a CDF JSON shipped inside the installed vllm-sr-sim (e.g. ``lmsys_cdf.json``)."""
    import fleet_sim

    return Path(fleet_sim.__file__).parent / "data" / name


def cdf_from_trace(trace: Trace, points: int = 200, tail_share: float = 0.01) -> list[list[float]]:
    """Empirical CDF of ``input + output`` in vllm-sr-sim's format ``[[tokens, F], ...]``.

    vllm-sr-sim samples uniformly inside each bin ``(previous tokens, tokens]``, so a wide bin
    spreads its mass over lengths the trace never had. The body uses ``points`` quantile points;
    the top ``tail_share`` of requests keeps every distinct length ``v`` as a point, each preceded
    by ``[v − 1, F(v − 1)]``, so a tail bin holds exactly the requests of one length and no mass is
    invented between the last points (Azure 2023: 0.0035 % above 8K, not a linear segment's 0.27 %).
    """
    lengths = np.sort(trace.total_tokens)
    n = lengths.size
    values, counts = np.unique(lengths, return_counts=True)
    cum = np.cumsum(counts) / n
    keep = set(np.searchsorted(cum, np.arange(1, points + 1) / points - 1e-12).tolist())
    keep |= set(np.nonzero(cum > 1.0 - tail_share)[0].tolist())
    keep.add(len(values) - 1)
    out: list[list[float]] = []
    for i in sorted(keep):
        v = int(values[i])
        if i > 0 and (not out or out[-1][0] < v - 1):
            # F(v - 1) = cumulative share of lengths <= v - 1 = cum of the previous distinct value
            out.append([v - 1, float(cum[i - 1])])
        out.append([v, float(cum[i])])
    out[-1][1] = 1.0
    return out


def srsim_sizing(
    cdf: list[Any], lam: float, b_short: int, long_max_ctx: int, slo_ttft_s: float
) -> dict[str, Any]:
    """vllm-sr-sim's analytical sizing with its A100 profile: homogeneous and two-pool GPU counts.

    Homogeneous: ``calibrate(cdf, long_max_ctx)`` + ``min_gpus_analytical``; two-pool:
    ``FleetOptimizer.sweep_analytical(gammas=[1.0])`` (no compression), then its fast slot-level DES
    (``_run_des``) for the P99 TTFT of that configuration.
    """
    from fleet_sim import A100_80GB, FleetOptimizer
    from fleet_sim.optimizer import analytical

    mu, cv2, ns, _ = analytical.calibrate(cdf, long_max_ctx, A100_80GB)
    homog = analytical.min_gpus_analytical(lam, mu, slo_ttft_s, cv2, n_slots=ns)
    opt = FleetOptimizer(
        gpu_short=A100_80GB,
        gpu_long=A100_80GB,
        B_short=b_short,
        t_slo_ms=slo_ttft_s * 1000,
        long_max_ctx=long_max_ctx,
        p_c=0.0,
    )
    sr = opt.sweep_analytical(cdf, lam, gammas=[1.0])[0]
    des = opt._run_des(cdf=cdf, lam=lam, gamma=1.0, n_s=sr.n_s, n_l=sr.n_l, n_req=20_000)
    return {
        "homogeneous_gpus": int(homog),
        "short_gpus": int(sr.n_s),
        "long_gpus": int(sr.n_l),
        "two_pool_gpus": int(sr.total_gpus),
        "savings": 1.0 - sr.total_gpus / homog if homog else math.nan,
        "des_p99_short_s": des.get("p99_short_ms", math.nan) / 1000,
        "des_p99_long_s": des.get("p99_long_ms", math.nan) / 1000,
        "mu_homogeneous": mu,
    }


def srsim_optimize(
    cdf: list[Any],
    lam: float,
    b_short: int,
    long_max_ctx: int,
    slo_ttft_s: float,
    *,
    p_c: float = 0.75,
    gamma_max: float = 2.0,
    n_sim_requests: int = 40_000,
    verify_top: int = 3,
) -> dict[str, Any]:
    """vllm-sr-sim's ``optimize`` (``FleetOptimizer.optimize``: analytical sweep of the C&R factor γ
    from 1.0 to ``gamma_max`` by 0.1, then its slot-level DES on the ``verify_top`` cheapest) with its
    A100 profile, as ``vllm-sr-sim optimize --cdf ... --lam ... --slo ... --b-short ...`` runs it.

    Returns ``{"homogeneous_gpus", "homogeneous_slots", "homogeneous_service_s" (its mean slot-holding
    time, s), "homogeneous_cs2", "best_analytical", "best_simulated", "best_routing"}``: each best a
    dict ``{"gamma", "n_s", "n_l", "total_gpus", "usd_per_h", "p99_ttft_short_s", "p99_ttft_long_s",
    "slo_met"}`` (``best_routing`` the analytical γ = 1.0 point; ``best_simulated`` None when nothing
    was verified). Raises ``ImportError`` without the package.
    """
    from fleet_sim import A100_80GB, FleetOptimizer
    from fleet_sim.optimizer import analytical

    mu, cv2, ns, _ = analytical.calibrate(cdf, long_max_ctx, A100_80GB)
    homog = analytical.min_gpus_analytical(lam, mu, slo_ttft_s, cv2, n_slots=ns)
    opt = FleetOptimizer(
        gpu_short=A100_80GB,
        gpu_long=A100_80GB,
        B_short=b_short,
        t_slo_ms=slo_ttft_s * 1000,
        long_max_ctx=long_max_ctx,
        p_c=p_c,
    )
    gammas = [round(1.0 + 0.1 * k, 1) for k in range(round((gamma_max - 1.0) / 0.1) + 1)]
    rep = opt.optimize(
        cdf=cdf, lam=lam, gammas=gammas, n_sim_requests=n_sim_requests, verify_top_n=verify_top, verbose=False
    )

    def row(r: Any) -> dict[str, Any] | None:
        if r is None:
            return None
        return {
            "gamma": float(r.gamma),
            "n_s": int(r.n_s),
            "n_l": int(r.n_l),
            "total_gpus": int(r.total_gpus),
            "usd_per_h": float(r.cost_per_hr),
            "p99_ttft_short_s": float(r.p99_ttft_short_ms) / 1000,
            "p99_ttft_long_s": float(r.p99_ttft_long_ms) / 1000,
            "slo_met": bool(r.slo_met),
        }

    routing = next((r for r in rep.analytical if r.gamma == 1.0), None)
    return {
        "homogeneous_gpus": int(homog),
        "homogeneous_usd_per_h": float(homog * A100_80GB.cost_per_hr),
        "homogeneous_slots": int(ns),
        "homogeneous_service_s": float(ns / mu),
        "homogeneous_cs2": float(cv2),
        "best_analytical": row(rep.best_analytical),
        "best_simulated": row(rep.best_simulated),
        "best_routing": row(routing),
        "gpu_usd_per_h": float(A100_80GB.cost_per_hr),
    }
