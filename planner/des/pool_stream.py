"""The request stream of one pool run, and round robin's share of it for a few of the pool's instances.

Round robin sends the pool's ``j``-th request to instance ``j mod N``; the router does not look at the
instances' state, so each instance evolves on its own stream. The first ``k`` instances of an
``N``-instance pool therefore receive exactly the requests with ``j mod N < k``, and simulating ``k``
instances on those requests gives *exactly* the outcomes those ``k`` instances have in the full pool
(requests rejected before load balancing, longer than the pool's ``max_model_len``, are the one
exception: they do not advance the rotation). The pool's P99 TTFT is then estimated from ``k``
instances over the full steady-state duration, at ``k/N`` of the cost. Other load-balancing policies
couple the instances and are always simulated whole.

Two sources: a trace tiled period by period (:func:`tiled_stream`, the replication ``r`` starting at
another phase of the trace), or fresh draws from a length CDF (:meth:`planner.workload.cdf_source.CdfSource.sample`).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from planner.workload.trace import Trace

__all__ = ["rr_indices", "tiled_stream"]


def rr_indices(count: int, instances: int, kept: int) -> npt.NDArray[np.int64]:
    """Stream positions ``j < count`` with ``j mod instances < kept`` (ascending), shape ``(m,)``."""
    kept = max(1, min(kept, instances))
    blocks = -(-count // instances)
    j = (
        np.arange(blocks, dtype=np.int64)[:, None] * instances + np.arange(kept, dtype=np.int64)[None, :]
    ).ravel()
    return j[j < count]


def tiled_stream(
    trace: Trace, period_s: float, offset_s: float, duration_s: float, instances: int = 1, kept: int = 1
) -> Trace:
    """``trace`` repeated every ``period_s`` seconds, the requests arriving in ``[t0, t0 + duration_s)``
    with ``t0`` = its first arrival + ``offset_s``, re-based to 0; only round robin's share of the
    first ``kept`` of ``instances`` (module docstring). Memory is proportional to the kept requests.

    Raises ``ValueError`` when ``period_s`` is not longer than the trace's span.
    """
    arr = trace.arrival_s
    m = len(trace)
    if m == 0:
        return trace
    if period_s <= float(arr[-1] - arr[0]):
        raise ValueError("period_s must be longer than the trace's span")

    def count_before(t: float) -> int:
        c = max(0, math.floor((t - float(arr[0])) / period_s))
        return c * m + int(np.searchsorted(arr, t - c * period_s, side="left"))

    t0 = float(arr[0]) + offset_s
    i0, i1 = count_before(t0), count_before(t0 + duration_s)
    i = i0 + rr_indices(i1 - i0, instances, kept)
    if i.size == 0:
        i = np.array([i0], dtype=np.int64)
    rows, copies = i % m, i // m
    t = arr[rows] + copies * period_s
    return Trace(
        arrival_s=t - t[0],
        input_tokens=trace.input_tokens[rows],
        output_tokens=trace.output_tokens[rows],
        output_budget_tokens=trace.output_budget_tokens[rows],
        category_ids=trace.category_ids[rows],
        categories=trace.categories,
        est_input_tokens=None if trace.est_input_tokens is None else trace.est_input_tokens[rows],
        origin_s=None,
    )
