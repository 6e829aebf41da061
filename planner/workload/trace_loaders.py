"""Readers for the trace formats the planner accepts, each validating a declared schema.

Formats (``--format``):

- ``azure``: Azure LLM inference 2023 CSV, columns ``TIMESTAMP,ContextTokens,GeneratedTokens``
  (``TIMESTAMP`` = ``YYYY-MM-DD HH:MM:SS.fffffff``, 7 fractional digits, parsed exactly).
- ``mooncake``: Mooncake FAST'25 JSONL, ``{"timestamp": ms, "input_length": int, "output_length": int}``.
- ``burstgpt``: BurstGPT CSV, ``Timestamp,Model,Request tokens,Response tokens,...`` (seconds); the
  ``Model`` column becomes the category; rows with 0 response tokens (failed requests) are dropped.
- ``cdf``: empirical CDF JSON ``[[tokens, cumulative_fraction], ...]`` (or ``{"cdf": [...]}``), the
  vllm-sr-sim format; requests are synthesised (Poisson arrivals, vllm-sr-sim's 80/20 input/output split).
- ``decision-log``: the router's JSON Lines decision log (schema in ``docs/planner.md``).

Every loader returns ``(Trace, NormalizationReport)``; a bad row is dropped and counted, never fatal.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
from collections.abc import Callable, Iterator
from datetime import date
from pathlib import Path
from typing import Any

import numpy as np

from extproc.core.route.decision import DecisionRecord, DecisionRecordError
from planner.workload.cdf_source import CdfSource
from planner.workload.trace import NormalizationReport, Trace, TraceError, build_trace

__all__ = [
    "FORMATS",
    "REQUIRED_FIELDS",
    "azure_timestamp_s",
    "detect_format",
    "load_cdf",
    "load_trace",
    "read_cdf_points",
]


def _int_field(row: dict[str, Any], key: str, report: NormalizationReport, *, minimum: int) -> int | None:
    """Return ``row[key]`` as an int >= ``minimum``, or count a drop reason and return ``None``."""
    raw = row.get(key)
    if raw is None or raw == "":
        report.drop(f"missing {key}")
        return None
    if isinstance(raw, bool):
        report.drop(f"non-numeric {key}")
        return None
    if isinstance(raw, int):
        val = raw
    else:
        try:
            f = float(raw)
        except (TypeError, ValueError):
            report.drop(f"non-numeric {key}")
            return None
        if not math.isfinite(f) or f != int(f):
            report.drop(f"non-integer {key}")
            return None
        val = int(f)
    if val < minimum:
        report.drop(f"{key} < {minimum}")
        return None
    return val


def azure_timestamp_s(text: str) -> float:
    """Parse ``YYYY-MM-DD HH:MM:SS[.fffffff]`` to seconds since 1970-01-01 (UTC assumed)."""
    day, clock = text.strip().split(" ")
    y, mo, d = (int(x) for x in day.split("-"))
    hh, mm, ss = clock.split(":")
    whole, _, frac = ss.partition(".")
    days = date(y, mo, d).toordinal() - date(1970, 1, 1).toordinal()
    secs = days * 86400 + int(hh) * 3600 + int(mm) * 60 + int(whole)
    return secs + (int(frac) / 10 ** len(frac) if frac else 0.0)


REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "azure": ("TIMESTAMP", "ContextTokens", "GeneratedTokens"),
    "mooncake": ("timestamp", "input_length", "output_length"),
    "burstgpt": ("Timestamp", "Request tokens", "Response tokens"),
    "decision-log": ("ts_s", "estimated_prompt_tokens", "output_reserve_tokens"),
}
"""Columns (CSV) or keys (JSON Lines) each format needs."""


def _csv_rows(path: Path, fmt: str) -> Iterator[dict[str, Any]]:
    """Rows of a CSV whose header has every column of ``REQUIRED_FIELDS[fmt]``.

    Raises :class:`TraceError` naming the missing columns and the header found.
    """
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        header = reader.fieldnames or []
        missing = [c for c in REQUIRED_FIELDS[fmt] if c not in header]
        if missing:
            raise TraceError(
                f"{path}: --format {fmt} needs column(s) {', '.join(missing)}; the header has "
                f"{', '.join(header)[:200] if header else 'nothing (empty file)'}"
            )
        yield from reader


def _jsonl_rows(path: Path, report: NormalizationReport) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                report.rows_read += 1
                report.drop("invalid JSON line")
                continue
            if not isinstance(obj, dict):
                report.rows_read += 1
                report.drop("JSON line is not an object")
                continue
            yield obj


def _load_azure(path: Path, report: NormalizationReport) -> Trace:
    ts: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    for row in _csv_rows(path, "azure"):
        report.rows_read += 1
        try:
            t = azure_timestamp_s(row.get("TIMESTAMP") or "")
        except (ValueError, TypeError):
            report.drop("unparseable TIMESTAMP")
            continue
        ci = _int_field(row, "ContextTokens", report, minimum=1)
        if ci is None:
            continue
        go = _int_field(row, "GeneratedTokens", report, minimum=1)
        if go is None:
            continue
        ts.append(t)
        inp.append(ci)
        out.append(go)
    return build_trace(ts, inp, out, absolute_clock=True)


def _load_mooncake(path: Path, report: NormalizationReport) -> Trace:
    ts: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    for row in _jsonl_rows(path, report):
        report.rows_read += 1
        t = _int_field(row, "timestamp", report, minimum=0)
        if t is None:
            continue
        ci = _int_field(row, "input_length", report, minimum=1)
        if ci is None:
            continue
        go = _int_field(row, "output_length", report, minimum=1)
        if go is None:
            continue
        ts.append(t / 1000.0)
        inp.append(ci)
        out.append(go)
    return build_trace(ts, inp, out)


def _load_burstgpt(path: Path, report: NormalizationReport) -> Trace:
    ts: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    cats: list[str] = []
    for row in _csv_rows(path, "burstgpt"):
        report.rows_read += 1
        try:
            t = float(row.get("Timestamp") or "nan")
        except ValueError:
            t = math.nan
        if not math.isfinite(t):
            report.drop("unparseable Timestamp")
            continue
        ci = _int_field(row, "Request tokens", report, minimum=1)
        if ci is None:
            continue
        go = _int_field(row, "Response tokens", report, minimum=0)
        if go is None:
            continue
        if go == 0:
            report.drop("Response tokens == 0 (failed request)")
            continue
        ts.append(t)
        inp.append(ci)
        out.append(go)
        cats.append(str(row.get("Model") or "_default"))
    return build_trace(ts, inp, out, categories=cats)


def _load_decision_log(path: Path, report: NormalizationReport) -> Trace:
    ts: list[float] = []
    inp: list[int] = []
    out: list[int] = []
    bud: list[int] = []
    est: list[int] = []
    cats: list[str] = []
    used_estimate = used_reserve = 0
    for row in _jsonl_rows(path, report):
        report.rows_read += 1
        try:
            rec = DecisionRecord.from_json(row)
        except DecisionRecordError as exc:
            report.drop(exc.reason)
            continue
        if rec.estimated_prompt_tokens is None:
            report.drop("missing estimated_prompt_tokens")
            continue
        if rec.output_reserve_tokens is None:
            report.drop("missing output_reserve_tokens")
            continue
        e, r = rec.estimated_prompt_tokens, rec.output_reserve_tokens
        if rec.prompt_tokens is None:
            p, used_estimate = max(1, e), used_estimate + 1
        elif rec.prompt_tokens < 1:
            report.drop("prompt_tokens < 1")
            continue
        else:
            p = rec.prompt_tokens
        if rec.completion_tokens is None:
            c, used_reserve = max(1, r), used_reserve + 1
        else:
            c = max(1, rec.completion_tokens)
        ts.append(rec.ts_s)
        inp.append(p)
        out.append(c)
        bud.append(max(r, 1))
        est.append(max(1, e))
        cats.append(rec.category or "_default")
    if used_estimate:
        report.notes.append(f"{used_estimate} rows had no prompt_tokens; used estimated_prompt_tokens")
    if used_reserve:
        report.notes.append(f"{used_reserve} rows had no completion_tokens; used output_reserve_tokens")
    return build_trace(
        ts, inp, out, output_budget_tokens=bud, categories=cats, est_input_tokens=est, absolute_clock=True
    )


def read_cdf_points(path: Path) -> list[tuple[int, float]]:
    """Read and validate an empirical CDF JSON: ``[[tokens, F], ...]`` or ``{"cdf": [...]}``.

    Returns points sorted by tokens with F non-decreasing in [0, 1] and the last F forced to 1.0
    (recorded by the caller). Raises :class:`TraceError` if the schema is violated.
    """
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise TraceError(f"cannot read CDF JSON {path}: {exc}") from exc
    pts = raw.get("cdf") if isinstance(raw, dict) else raw
    if not isinstance(pts, list) or not pts:
        raise TraceError(f"{path}: expected a non-empty list of [tokens, cumulative_fraction]")
    out: list[tuple[int, float]] = []
    for p in pts:
        if not (isinstance(p, list | tuple) and len(p) == 2):
            raise TraceError(f"{path}: CDF point {p!r} is not [tokens, fraction]")
        tok, frac = p
        if not isinstance(tok, int | float) or not isinstance(frac, int | float) or tok < 1:
            raise TraceError(f"{path}: CDF point {p!r} has a bad type or tokens < 1")
        if not 0.0 <= float(frac) <= 1.0 + 1e-9:
            raise TraceError(f"{path}: cumulative fraction {frac} outside [0, 1]")
        out.append((int(tok), float(frac)))
    for (t0, f0), (t1, f1) in itertools.pairwise(out):
        if t1 <= t0 or f1 < f0:
            raise TraceError(f"{path}: CDF must be strictly increasing in tokens, non-decreasing in F")
    return out


def load_cdf(
    path: Path,
    *,
    n_requests: int,
    rate_req_per_s: float,
    seed: int,
    input_fraction: float = 0.8,
) -> tuple[Trace, NormalizationReport]:
    """Synthesise ``n_requests`` from an empirical total-token CDF (vllm-sr-sim ``CdfWorkload``).

    Totals are drawn uniformly inside the CDF bin ``(prev, thresh]``; ``input = max(1,
    int(input_fraction * total))``, ``output = max(1, total - input)``; arrivals are Poisson at
    ``rate_req_per_s`` (drawn by :meth:`planner.workload.cdf_source.CdfSource.sample_n`, vectorised: 10⁶
    requests in well under a second). Deterministic for ``seed``. Raises :class:`TraceError` on a
    bad file.
    """
    report = NormalizationReport(source=str(path), fmt="cdf")
    pts = read_cdf_points(path)
    if pts[-1][1] < 1.0:
        report.notes.append(
            f"last cumulative fraction {pts[-1][1]:.6g} < 1; remaining mass put in the last bin"
        )
    trace = CdfSource(tuple(pts), rate_req_per_s, input_fraction).sample_n(n_requests, seed)
    report.rows_read = len(pts)
    report.rows_kept = n_requests
    report.max_budget_tokens = pts[-1][0]
    report.synthesized = (
        f"{n_requests} requests from {len(pts)} CDF points, Poisson arrivals at {rate_req_per_s:g} req/s, "
        f"input = {input_fraction:g} x total (seed {seed})"
    )
    return trace, report


FORMATS: dict[str, Callable[[Path, NormalizationReport], Trace]] = {
    "azure": _load_azure,
    "mooncake": _load_mooncake,
    "burstgpt": _load_burstgpt,
    "decision-log": _load_decision_log,
}


def detect_format(path: Path) -> str:
    """Guess the format from the first line: CSV header names, JSON keys or a JSON array (CDF)."""
    try:
        with path.open(encoding="utf-8") as fh:
            head = fh.readline()
    except OSError as exc:
        raise TraceError(f"cannot read {path}: {exc}") from exc
    if "ContextTokens" in head:
        return "azure"
    if "Request tokens" in head:
        return "burstgpt"
    if head.lstrip().startswith("[") or head.lstrip().startswith('{"cdf"') or path.suffix == ".json":
        return "cdf"
    if '"input_length"' in head:
        return "mooncake"
    if '"budget_tokens"' in head or '"estimated_prompt_tokens"' in head:
        return "decision-log"
    needs = "; ".join(f"{k}: {', '.join(v)}" for k, v in REQUIRED_FIELDS.items())
    raise TraceError(
        f"cannot detect the format of {path} from its first line ({head.strip()[:120]!r}); pass --format "
        f"(columns/keys each needs — {needs}; cdf: a JSON list of [tokens, cumulative_fraction])"
    )


def load_trace(
    path: str | Path, fmt: str | None = None, **cdf_kwargs: Any
) -> tuple[Trace, NormalizationReport]:
    """Load ``path`` in format ``fmt`` (detected when ``None``) into a :class:`Trace` plus its report.

    ``cdf_kwargs`` (``n_requests``, ``rate_req_per_s``, ``seed``) are used only for the ``cdf`` format.
    Raises :class:`TraceError` when the file is missing, the format unknown, or no row is valid.
    """
    p = Path(path)
    if not p.is_file():
        raise TraceError(f"trace file not found: {p}")
    fmt = fmt or detect_format(p)
    if fmt == "cdf":
        return load_cdf(
            p,
            n_requests=int(cdf_kwargs.get("n_requests", 50_000)),
            rate_req_per_s=float(cdf_kwargs.get("rate_req_per_s", 1.0)),
            seed=int(cdf_kwargs.get("seed", 0)),
        )
    if fmt not in FORMATS:
        raise TraceError(f"unknown trace format {fmt!r}; choose from {sorted([*FORMATS, 'cdf'])}")
    report = NormalizationReport(source=str(p), fmt=fmt)
    try:
        trace = FORMATS[fmt](p, report)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"{p}: not a readable {fmt} file: {exc}") from exc
    except TraceError as exc:
        if report.rows_read == 0 and "needs column" not in str(exc):
            raise TraceError(f"{p}: no data rows for --format {fmt} (empty or header-only file)") from exc
        if "needs column" in str(exc):
            raise
        drops = "; ".join(f"{n} rows: {reason}" for reason, n in sorted(report.dropped.items()))
        raise TraceError(
            f"{p}: no usable row for --format {fmt} ({report.rows_read} rows read; dropped {drops}); "
            f"this format needs {', '.join(REQUIRED_FIELDS[fmt])}"
        ) from exc
    report.rows_kept = len(trace)
    report.rate_before_req_per_s = trace.rate_req_per_s if len(trace) > 1 else None
    if int(np.sum(trace.arrival_s[1:] < trace.arrival_s[:-1])):  # pragma: no cover - build_trace sorts
        report.notes.append("rows were re-sorted by arrival time")
    return trace, report
