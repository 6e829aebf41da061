"""Outcome of one simulator run: per-request arrays and per-pool totals, summarised after warm-up."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["BATCHES", "SimResult"]

BATCHES = 10
"""Batches of the measured window for batch means (10 to 30: Schmeiser 1982, "Batch size effects in
the analysis of simulation output", Operations Research 30(3)); a summary has them when each batch
holds >= 100 requests."""


@dataclass(frozen=True)
class SimResult:
    """Per-request outcomes (arrays shape ``(n,)``) and per-pool totals of one run.

    ``ttft_s``/``tpot_s`` are NaN for rejected requests (and ``tpot_s`` for 1-token outputs);
    ``pool`` is the pool that served the request (−1 if rejected); ``preemptions`` per request;
    ``queue_s`` the wait from arrival to first admission (vLLM's ``request_queue_time``; NaN if
    rejected), so ``ttft_s − queue_s`` is the prefill plus the profile's per-request overhead.
    """

    pool_names: tuple[str, ...]
    instances: tuple[int, ...]
    gpus: tuple[int, ...]
    price_usd_per_h: tuple[float, ...]
    arrival_s: npt.NDArray[np.float64]
    ttft_s: npt.NDArray[np.float64]
    tpot_s: npt.NDArray[np.float64]
    pool: npt.NDArray[np.int64]
    preemptions: npt.NDArray[np.int64]
    rejected: npt.NDArray[np.bool_]
    misrouted: npt.NDArray[np.bool_]
    busy_s: tuple[float, ...]
    mean_running: tuple[float, ...]
    makespan_s: float
    warmup_fraction: float
    events: int
    queue_s: npt.NDArray[np.float64] | None = None

    def summary(self) -> dict[str, Any]:
        """Fleet and per-pool metrics after excluding the first ``warmup_fraction`` of arrivals.

        Latencies in seconds (P50/P99, numpy linear percentiles); the steady-state checks of
        :mod:`planner.des.steady` use ``p99_ttft_first_half_s``/``p99_ttft_second_half_s`` (the measured
        requests split in arrival order), ``p99_ttft_fifths_s`` and ``p99_ttft_batches_s`` (the P99 of
        each of :data:`BATCHES` equal-count batches in arrival order: the batch-means input of
        :func:`planner.des.steady.verdict`); ``preemptions_per_1000`` = preemption
        events per 1,000 measured requests (the paper's ‰); rates are fractions of measured requests.
        """
        n = self.arrival_s.shape[0]
        m = np.arange(n) >= int(n * self.warmup_fraction)

        def block(sel: npt.NDArray[np.bool_]) -> dict[str, Any]:
            cnt = int(sel.sum())
            ttft = self.ttft_s[sel & ~np.isnan(self.ttft_s)]
            tpot = self.tpot_s[sel & ~np.isnan(self.tpot_s)]

            def pct(a: npt.NDArray[np.float64], q: float) -> float | None:
                return float(np.percentile(a, q)) if a.size else None

            half = ttft.size // 2
            fifths = np.array_split(ttft, 5) if ttft.size >= 5 else []
            batches = np.array_split(ttft, BATCHES) if ttft.size >= 100 * BATCHES else []
            return {
                "requests": cnt,
                "p50_ttft_s": pct(ttft, 50),
                "p99_ttft_s": pct(ttft, 99),
                "p99_ttft_first_half_s": pct(ttft[:half], 99),
                "p99_ttft_second_half_s": pct(ttft[half:], 99) if half else None,
                "p99_ttft_fifths_s": [pct(x, 99) for x in fifths],
                "p99_ttft_batches_s": [pct(x, 99) for x in batches],
                "p50_tpot_s": pct(tpot, 50),
                "p99_tpot_s": pct(tpot, 99),
                "preemptions_per_1000": 1000.0 * float(self.preemptions[sel].sum()) / cnt if cnt else 0.0,
                "rejection_rate": float(self.rejected[sel].sum()) / cnt if cnt else 0.0,
                "misroute_rate": float(self.misrouted[sel].sum()) / cnt if cnt else 0.0,
            }

        out: dict[str, Any] = {"fleet": block(m), "pools": {}}
        out["fleet"]["instances"] = int(sum(self.instances))
        out["fleet"]["gpus"] = int(sum(self.gpus))
        out["fleet"]["usd_per_year"] = float(sum(self.price_usd_per_h)) * 8760.0
        for i, name in enumerate(self.pool_names):
            b = block(m & (self.pool == i))
            b["instances"] = self.instances[i]
            b["gpus"] = self.gpus[i]
            denom = self.instances[i] * self.makespan_s
            b["utilization"] = self.busy_s[i] / denom if denom > 0 else 0.0
            b["mean_running_per_instance"] = self.mean_running[i] / denom if denom > 0 else 0.0
            out["pools"][name] = b
        out["events"] = self.events
        out["makespan_s"] = self.makespan_s
        return out

    def to_json(self) -> str:
        """Canonical JSON of :meth:`summary` (sorted keys) — the determinism contract."""
        return json.dumps(self.summary(), sort_keys=True)
