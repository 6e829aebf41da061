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

__all__ = ["cdf_from_trace", "package_cdf_path", "srsim_sizing"]


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
