"""A length CDF as a *distribution*: fresh, independent requests for any pool and any run length.

A trace file is a finite sample: a long run can only repeat it (tiling). An empirical CDF (vllm-sr-sim's
``CdfWorkload`` input) is a distribution: a pool's steady-state run can draw as many new requests as
it needs. Tiling a small sample instead would replay the same few hundred long requests over and over,
so the run's P99 would be the P99 of that sample, not of the workload (on vllm-sr-sim's LMSYS CDF at
1,000 req/s a 60,000-request sample holds ~220 requests above 8K tokens).

Sampling follows :func:`planner.workload.trace_loaders.load_cdf` (and vllm-sr-sim's ``CdfWorkload``): a total
length is drawn uniformly among the integers of a CDF bin ``(t_{k-1}, t_k]`` chosen with probability
``F_k − F_{k−1}``; ``input = max(1, ⌊f·total⌋)``, ``output = max(1, total − input)``. A pool that serves
totals in ``(lo, hi]`` sees, by Poisson thinning, a Poisson stream at ``λ·P(lo < total <= hi)`` whose
totals follow the CDF restricted to ``(lo, hi]`` (each bin's mass scaled by the share of its integers
inside the range). Draws use numpy's PCG64 generator: same seed, same requests.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from planner.workload.trace import Trace, build_trace

__all__ = ["CdfSource"]


@dataclass(frozen=True)
class CdfSource:
    """An empirical total-token CDF ``points`` (``(tokens, F)`` ascending, last F = 1) offered at
    ``rate_req_per_s`` (Poisson), with ``input = input_fraction · total``. Picklable."""

    points: tuple[tuple[int, float], ...]
    rate_req_per_s: float
    input_fraction: float = 0.8

    def _bins(self, lo_tokens: int, hi_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per bin: first and last integer total inside ``(lo, hi]`` and the mass there."""
        thr = np.array([t for t, _ in self.points], dtype=np.int64)
        frac = np.array([f for _, f in self.points], dtype=np.float64)
        frac[-1] = 1.0
        first = np.concatenate(([1], thr[:-1] + 1))
        mass = np.diff(np.concatenate(([0.0], frac)))
        a = np.maximum(first, lo_tokens + 1)
        b = np.minimum(np.maximum(first, thr), hi_tokens)
        width = np.maximum(first, thr) - first + 1
        inside = np.clip(b - a + 1, 0, None)
        return a, b, mass * inside / width

    def share(self, lo_tokens: int = 0, hi_tokens: int = 2**62) -> float:
        """``P(lo < total <= hi)``: the fraction of requests a pool serving that range receives."""
        return float(self._bins(lo_tokens, hi_tokens)[2].sum())

    def sample_n(self, n_requests: int, seed: int) -> Trace:
        """``n_requests`` consecutive requests of the whole stream (Poisson at ``rate``, any length),
        arrivals from 0. Raises ``ValueError`` for ``n_requests < 1``."""
        if n_requests < 1:
            raise ValueError("n_requests must be >= 1")
        a, b, w = self._bins(0, 2**62)
        rng = np.random.Generator(np.random.PCG64(seed))
        arrival = np.cumsum(rng.exponential(1.0 / self.rate_req_per_s, n_requests))
        return build_trace(arrival, *self._lengths(rng, a, b, w, n_requests))

    def _lengths(
        self, rng: np.random.Generator, a: np.ndarray, b: np.ndarray, w: np.ndarray, n: int
    ) -> tuple[np.ndarray, np.ndarray]:
        k = rng.choice(len(w), size=n, p=w / w.sum())
        total = np.minimum(a[k] + (rng.random(n) * (b[k] - a[k] + 1)).astype(np.int64), b[k])
        inp = np.maximum(1, (total * self.input_fraction).astype(np.int64))
        return inp, np.maximum(1, total - inp)

    def sample(
        self,
        duration_s: float,
        seed: int,
        lo_tokens: int = 0,
        hi_tokens: int = 2**62,
        instances: int = 1,
        kept: int = 1,
    ) -> Trace:
        """The requests with ``lo < total <= hi`` arriving in ``[0, duration_s)``: a Poisson stream at
        ``rate · share`` (module docstring), re-based to the first. With ``instances``/``kept``, only
        round robin's share of the first ``kept`` of ``instances`` (:mod:`planner.des.pool_stream`): the
        stream's positions ``j mod instances < kept``, drawn directly (the gap from the last kept
        request of a rotation to the first of the next is a sum of ``instances − kept + 1``
        exponential gaps, a gamma variate), so memory follows the kept requests. Raises
        ``ValueError`` when no mass lies in the range."""
        a, b, w = self._bins(lo_tokens, hi_tokens)
        p = float(w.sum())
        if p <= 0.0:
            raise ValueError(f"the CDF has no mass in ({lo_tokens}, {hi_tokens}] tokens")
        rng = np.random.Generator(np.random.PCG64(seed))
        lam = self.rate_req_per_s * p
        kept = max(1, min(kept, instances))
        times = np.empty(0)
        start = 0.0
        while start < duration_s:
            blocks = max(16, math.ceil((duration_s - start) * lam / instances * 1.1) + 16)
            gaps = rng.exponential(1.0 / lam, (blocks, kept))
            gaps[:, 0] = rng.gamma(instances - kept + 1, 1.0 / lam, blocks)
            if times.size == 0:
                gaps[0, 0] = rng.exponential(1.0 / lam)
            t = start + np.cumsum(gaps.ravel())
            times = np.concatenate((times, t[t < duration_s]))
            start = float(t[-1])  # short draw (rare): the next rotation starts after this one's end
        if times.size < 2:
            times = np.array([0.0, duration_s / 2])
        return build_trace(times, *self._lengths(rng, a, b, w, times.size))
