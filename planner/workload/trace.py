"""Trace model shared by every loader: arrival time, input tokens, output tokens, optional category.

A :class:`Trace` is a set of parallel numpy arrays sorted by arrival time (seconds, first arrival at 0).
Every change a loader or :func:`normalize` makes is counted in a :class:`NormalizationReport`, which the
CLI prints with every result (nothing changes silently).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

__all__ = [
    "NormalizationReport",
    "Trace",
    "TraceError",
    "base_period_s",
    "merge_traces",
    "normalize",
    "tile_periods",
]


class TraceError(ValueError):
    """A trace file cannot be used at all (missing file, no valid row, unknown format)."""


def display_path(source: str) -> str:
    """A trace path as a reader can use it: ``<site-packages>/...`` for files shipped in an installed
    package, else relative to the working directory when that is no longer, else normalised."""
    norm = os.path.normpath(source)
    marker = f"{os.sep}site-packages{os.sep}"
    if marker in norm:
        return "<site-packages>/" + norm.split(marker, 1)[1]
    try:
        rel = os.path.relpath(norm)
    except ValueError:
        return norm
    return rel if len(rel) <= len(norm) else norm


@dataclass
class NormalizationReport:
    """What happened between the file on disk and the :class:`Trace` the planner used.

    Counts are in rows (requests). ``dropped`` maps a reason to the number of rows dropped for it.
    ``time_scale`` multiplies every inter-arrival gap (1.0 = untouched); ``token_scale`` multiplies
    every token count (1.0 = untouched); ``tiled`` is how many back-to-back copies of the trace were
    concatenated to reach a minimum request count.
    """

    source: str
    fmt: str
    rows_read: int = 0
    dropped: dict[str, int] = field(default_factory=dict)
    clipped_rows: int = 0
    clip_max_total_tokens: int | None = None
    token_scale: float = 1.0
    time_scale: float = 1.0
    rate_before_req_per_s: float | None = None
    rate_after_req_per_s: float | None = None
    tiled: int = 1
    synthesized: str | None = None
    notes: list[str] = field(default_factory=list)
    rows_kept: int = 0
    max_budget_tokens: int | None = None
    """Largest ``input + output budget`` of the loaded trace before truncation (a CDF's last point)."""

    def drop(self, reason: str, n: int = 1) -> None:
        """Count ``n`` rows dropped for ``reason``."""
        self.dropped[reason] = self.dropped.get(reason, 0) + n

    def lines(self) -> list[str]:
        """Human-readable report, one fact per line."""
        out = [
            f"trace {display_path(self.source)} (format {self.fmt}): {self.rows_read} rows read, {self.rows_kept} used"
        ]
        if self.synthesized:
            out.append(f"  synthesized: {self.synthesized}")
        for reason, n in sorted(self.dropped.items()):
            out.append(f"  dropped {n} rows: {reason}")
        if self.clipped_rows:
            out.append(f"  clipped {self.clipped_rows} rows to total <= {self.clip_max_total_tokens} tokens")
        if self.token_scale != 1.0:
            out.append(f"  rescaled all token counts x{self.token_scale:g}")
        if self.tiled > 1:
            out.append(f"  tiled {self.tiled} back-to-back copies to reach the requested request count")
        if self.time_scale != 1.0:
            out.append(
                f"  time-scaled inter-arrival gaps x{self.time_scale:.6g} "
                f"({self.rate_before_req_per_s:.5g} -> {self.rate_after_req_per_s:.5g} req/s)"
            )
        elif self.rate_before_req_per_s is not None:
            out.append(f"  arrival rate {self.rate_before_req_per_s:.5g} req/s (not time-scaled)")
        out.extend(f"  note: {n}" for n in self.notes)
        if len(out) == 1:
            out.append("  unchanged")
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form (keys sorted by the caller's serializer)."""
        return {
            "source": self.source,
            "format": self.fmt,
            "rows_read": self.rows_read,
            "rows_kept": self.rows_kept,
            "dropped": dict(sorted(self.dropped.items())),
            "clipped_rows": self.clipped_rows,
            "clip_max_total_tokens": self.clip_max_total_tokens,
            "token_scale": self.token_scale,
            "time_scale": self.time_scale,
            "rate_before_req_per_s": self.rate_before_req_per_s,
            "rate_after_req_per_s": self.rate_after_req_per_s,
            "tiled": self.tiled,
            "synthesized": self.synthesized,
            "notes": list(self.notes),
        }


@dataclass(frozen=True)
class Trace:
    """Requests of one workload, sorted by arrival.

    Arrays all have shape ``(n,)``:

    - ``arrival_s`` float seconds since the first arrival (non-decreasing, starts at 0);
    - ``input_tokens`` prompt tokens (>= 1);
    - ``output_tokens`` generated tokens actually produced (>= 1);
    - ``output_budget_tokens`` the declared output reserve (``max_tokens``) the router adds to the
      prompt estimate; equals ``output_tokens`` when the source does not record it;
    - ``category_ids`` index into ``categories`` (all 0 with ``categories == ("_default",)`` if unknown);
    - ``est_input_tokens`` the router's own prompt estimate when the source has it (decision log), or
      ``None``;
    - ``origin_s`` the absolute time of the first arrival (unix seconds) when the source has a wall
      clock, else ``None``: traces that share a clock are merged on it (:func:`merge_traces`).
    """

    arrival_s: FloatArray
    input_tokens: IntArray
    output_tokens: IntArray
    output_budget_tokens: IntArray
    category_ids: IntArray
    categories: tuple[str, ...]
    est_input_tokens: IntArray | None = None
    origin_s: float | None = None

    def __len__(self) -> int:
        return int(self.arrival_s.shape[0])

    @property
    def budget_tokens(self) -> IntArray:
        """``L_total = input + output budget`` per request (docs/method.md §3.1), tokens."""
        return self.input_tokens + self.output_budget_tokens

    @property
    def total_tokens(self) -> IntArray:
        """Actual ``input + output`` tokens per request."""
        return self.input_tokens + self.output_tokens

    @property
    def duration_s(self) -> float:
        """Time between first and last arrival, seconds."""
        return float(self.arrival_s[-1] - self.arrival_s[0]) if len(self) > 1 else 0.0

    @property
    def rate_req_per_s(self) -> float:
        """Mean arrival rate ``N / (t_last - t_first)`` (docs/data.md §4.1 definition), req/s."""
        d = self.duration_s
        return len(self) / d if d > 0 else float("inf")

    def subset(self, mask: npt.NDArray[np.bool_]) -> Trace:
        """Rows where ``mask`` is true, arrival times kept (not re-based)."""
        return Trace(
            arrival_s=self.arrival_s[mask],
            input_tokens=self.input_tokens[mask],
            output_tokens=self.output_tokens[mask],
            output_budget_tokens=self.output_budget_tokens[mask],
            category_ids=self.category_ids[mask],
            categories=self.categories,
            est_input_tokens=None if self.est_input_tokens is None else self.est_input_tokens[mask],
            origin_s=self.origin_s,
        )


def build_trace(
    arrival_s: list[float] | FloatArray,
    input_tokens: list[int] | IntArray,
    output_tokens: list[int] | IntArray,
    *,
    output_budget_tokens: list[int] | IntArray | None = None,
    categories: list[str] | None = None,
    est_input_tokens: list[int] | IntArray | None = None,
    absolute_clock: bool = False,
) -> Trace:
    """Build a :class:`Trace` from row-wise values: stable-sorts by arrival and re-bases time to 0.

    ``absolute_clock``: the arrivals are wall-clock times, so the first one is kept as ``origin_s``.
    Raises :class:`TraceError` when there are no rows or the columns differ in length.
    """
    arr = np.asarray(arrival_s, dtype=np.float64)
    n = arr.shape[0]
    if n == 0:
        raise TraceError("trace has no valid rows")
    inp = np.asarray(input_tokens, dtype=np.int64)
    out = np.asarray(output_tokens, dtype=np.int64)
    bud = out.copy() if output_budget_tokens is None else np.asarray(output_budget_tokens, dtype=np.int64)
    est = None if est_input_tokens is None else np.asarray(est_input_tokens, dtype=np.int64)
    cols = [inp, out, bud] + ([] if est is None else [est])
    if any(c.shape[0] != n for c in cols) or (categories is not None and len(categories) != n):
        raise TraceError("trace columns have different lengths")
    if categories is None:
        names: tuple[str, ...] = ("_default",)
        cat_ids = np.zeros(n, dtype=np.int64)
    else:
        names = tuple(sorted(set(categories)))
        index = {c: i for i, c in enumerate(names)}
        cat_ids = np.fromiter((index[c] for c in categories), dtype=np.int64, count=n)
    order = np.argsort(arr, kind="stable")
    arr = arr[order]
    origin = float(arr[0]) if absolute_clock else None
    arr = arr - arr[0]
    return Trace(
        arrival_s=arr,
        input_tokens=inp[order],
        output_tokens=out[order],
        output_budget_tokens=bud[order],
        category_ids=cat_ids[order],
        categories=names,
        est_input_tokens=None if est is None else est[order],
        origin_s=origin,
    )


def merge_traces(traces: list[Trace]) -> tuple[Trace, str]:
    """Merge traces by arrival time; returns the merged trace and a note saying how.

    When every trace has a wall clock (``origin_s``), each keeps its offset from the earliest, so
    requests interleave as they really did (e.g. Azure 2023 code + conv: 8.0225 req/s together);
    otherwise each is re-based to t = 0. Categories are merged by name.
    """
    shared = all(t.origin_s is not None for t in traces)
    base = min(t.origin_s or 0.0 for t in traces) if shared else 0.0
    offsets = [(t.origin_s or 0.0) - base if shared else 0.0 for t in traces]
    cats = [t.categories[i] for t in traces for i in t.category_ids.tolist()]
    merged = build_trace(
        np.concatenate([t.arrival_s + off for t, off in zip(traces, offsets, strict=True)]),
        np.concatenate([t.input_tokens for t in traces]),
        np.concatenate([t.output_tokens for t in traces]),
        output_budget_tokens=np.concatenate([t.output_budget_tokens for t in traces]),
        categories=cats,
        est_input_tokens=(
            np.concatenate([t.est_input_tokens for t in traces if t.est_input_tokens is not None])
            if all(t.est_input_tokens is not None for t in traces)
            else None
        ),
    )
    if shared:
        merged = replace(merged, origin_s=base)
        return merged, f"merged {len(traces)} traces on their shared wall clock"
    return merged, f"merged {len(traces)} traces by arrival time (each re-based to t=0: no shared clock)"


def base_period_s(trace: Trace) -> float:
    """Repeat period of a base trace when tiled back to back: its span plus one mean gap, seconds."""
    n = len(trace)
    if n < 2:
        return 1.0
    return trace.duration_s + trace.duration_s / (n - 1)


def tile_periods(trace: Trace, period_s: float, copies: int) -> Trace:
    """``copies`` back-to-back repetitions of ``trace``, copy ``i`` shifted by ``i * period_s`` seconds.

    Used to lengthen a pool's sub-trace while keeping its arrival pattern: ``period_s`` is the period
    of the base trace the sub-trace was taken from. Raises ``ValueError`` for ``copies < 1``.
    """
    if copies < 1:
        raise ValueError("copies must be >= 1")
    shift = np.repeat(np.arange(copies, dtype=np.float64) * period_s, len(trace))
    return Trace(
        arrival_s=np.tile(trace.arrival_s, copies) + shift,
        input_tokens=np.tile(trace.input_tokens, copies),
        output_tokens=np.tile(trace.output_tokens, copies),
        output_budget_tokens=np.tile(trace.output_budget_tokens, copies),
        category_ids=np.tile(trace.category_ids, copies),
        categories=trace.categories,
        est_input_tokens=None if trace.est_input_tokens is None else np.tile(trace.est_input_tokens, copies),
        origin_s=trace.origin_s,
    )


def normalize(
    trace: Trace,
    report: NormalizationReport,
    *,
    target_rate_req_per_s: float | None = None,
    min_requests: int | None = None,
    max_requests: int | None = None,
    clip_max_total_tokens: int | None = None,
    token_scale: float = 1.0,
) -> Trace:
    """Apply the requested normalisations in a fixed order and record each in ``report``.

    Order: token rescale -> clip ``input+output`` to ``clip_max_total_tokens`` (output first, then
    input) -> tile back-to-back copies until ``min_requests`` -> truncate to ``max_requests`` ->
    time-scale gaps so the mean rate is ``target_rate_req_per_s``. Tiling keeps each copy's gaps and
    puts one mean gap between copies. Raises :class:`TraceError` for non-positive scales or rates.
    """
    if len(trace):
        report.max_budget_tokens = max(report.max_budget_tokens or 0, int(trace.budget_tokens.max()))
    inp = trace.input_tokens.copy()
    out = trace.output_tokens.copy()
    bud = trace.output_budget_tokens.copy()
    est = None if trace.est_input_tokens is None else trace.est_input_tokens.copy()
    arr = trace.arrival_s.copy()
    cats = trace.category_ids.copy()
    if token_scale <= 0:
        raise TraceError(f"token_scale must be > 0, got {token_scale}")
    if token_scale != 1.0:
        inp = np.maximum(1, np.rint(inp * token_scale)).astype(np.int64)
        out = np.maximum(1, np.rint(out * token_scale)).astype(np.int64)
        bud = np.maximum(1, np.rint(bud * token_scale)).astype(np.int64)
        if est is not None:
            est = np.maximum(1, np.rint(est * token_scale)).astype(np.int64)
        report.token_scale = token_scale
    if clip_max_total_tokens is not None:
        over = (inp + np.maximum(out, bud)) > clip_max_total_tokens
        report.clip_max_total_tokens = clip_max_total_tokens
        report.clipped_rows = int(over.sum())
        if over.any():
            inp = np.minimum(inp, clip_max_total_tokens - 1)
            out = np.minimum(out, clip_max_total_tokens - inp)
            bud = np.minimum(bud, clip_max_total_tokens - inp)
    n0 = arr.shape[0]
    rate0 = n0 / (arr[-1] - arr[0]) if n0 > 1 and arr[-1] > arr[0] else None
    if min_requests is not None and n0 < min_requests:
        k = -(-min_requests // n0)
        gap = (arr[-1] - arr[0]) / max(1, n0 - 1) if n0 > 1 else 1.0
        span = arr[-1] - arr[0] + gap
        arr = np.concatenate([arr + i * span for i in range(k)])
        inp, out, bud, cats = (np.tile(x, k) for x in (inp, out, bud, cats))
        est = None if est is None else np.tile(est, k)
        report.tiled = k
    if max_requests is not None and arr.shape[0] > max_requests:
        report.notes.append(f"truncated to the first {max_requests} of {arr.shape[0]} requests")
        arr = arr[:max_requests]
        inp, out, bud, cats = (x[:max_requests] for x in (inp, out, bud, cats))
        est = None if est is None else est[:max_requests]
    n = arr.shape[0]
    rate = n / (arr[-1] - arr[0]) if n > 1 and arr[-1] > arr[0] else None
    report.rate_before_req_per_s = rate0 if rate0 is not None else rate
    if target_rate_req_per_s is not None:
        if target_rate_req_per_s <= 0:
            raise TraceError(f"target rate must be > 0, got {target_rate_req_per_s}")
        if rate is None:
            raise TraceError("cannot time-scale a trace whose arrivals all share one timestamp")
        scale = rate / target_rate_req_per_s
        arr = (arr - arr[0]) * scale
        report.time_scale = scale
        report.rate_before_req_per_s = rate
        report.rate_after_req_per_s = target_rate_req_per_s
    elif n > 1 and rate is None:
        raise TraceError(
            f"all {n} arrivals share one timestamp: the trace has no arrival rate "
            "(a rate needs distinct arrival times; use a trace with them, or a CDF with --rate)"
        )
    report.rows_kept = n
    return Trace(
        arrival_s=arr,
        input_tokens=inp,
        output_tokens=out,
        output_budget_tokens=bud,
        category_ids=cats,
        categories=trace.categories,
        est_input_tokens=est,
        origin_s=trace.origin_s,
    )
