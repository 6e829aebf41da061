"""Load generators: Debian ``wrk`` 4.1 (closed loop, max throughput) and ``hey`` 0.1.4 (open
loop at a fixed rate, per-request latencies via ``-o csv``). Both POST one JSON body file.
"""

from __future__ import annotations

import re
import statistics
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HeyResult", "WrkResult", "hey", "percentile", "write_wrk_script", "wrk"]


@dataclass
class WrkResult:
    """One wrk run: completed requests, req/s, latency percentiles (ms), errors."""

    requests: int
    duration_s: float
    rps: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    socket_errors: int
    command: str


@dataclass
class HeyResult:
    """One hey run: completed requests, achieved req/s, latency percentiles (ms), non-200 count."""

    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    non_200: int
    command: str
    latencies_ms: tuple[float, ...] = ()
    """Every counted request's latency, in completion order (pooled across slices by the caller)."""


def write_wrk_script(path: Path, body_path: Path, headers: dict[str, str]) -> None:
    """A wrk Lua script that POSTs the file ``body_path`` with ``headers``."""
    lines = [
        f'local f = assert(io.open("{body_path}", "rb"))',
        "wrk.body = f:read('*a')",
        "f:close()",
        'wrk.method = "POST"',
        'wrk.headers["Content-Type"] = "application/json"',
    ]
    lines += [f'wrk.headers["{k}"] = "{v}"' for k, v in headers.items()]
    path.write_text("\n".join(lines) + "\n")


_UNIT_MS = {"us": 1e-3, "ms": 1.0, "s": 1000.0, "m": 60_000.0}


def _ms(text: str) -> float:
    m = re.fullmatch(r"([\d.]+)(us|ms|s|m)", text)
    if not m:
        raise ValueError(f"unparsable wrk latency {text!r}")
    return float(m.group(1)) * _UNIT_MS[m.group(2)]


def wrk(url: str, script: Path, *, connections: int, duration_s: float, threads: int = 1) -> WrkResult:
    """Run wrk (closed loop: ``connections`` requests always in flight) and parse its report.

    Raises:
        RuntimeError: wrk failed or printed no summary.
    """
    cmd = [
        "wrk",
        f"-t{threads}",
        f"-c{connections}",
        f"-d{duration_s:g}s",
        "--latency",
        "-s",
        str(script),
        url,
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 30)
    text = out.stdout
    m = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)", text)
    rps = re.search(r"Requests/sec:\s+([\d.]+)", text)
    if out.returncode != 0 or not m or not rps:
        raise RuntimeError(f"wrk failed ({out.returncode}): {text[-500:]} {out.stderr[-500:]}")
    p = dict(re.findall(r"^\s+(50|99)(?:\.000)?%\s+(\S+)", text, re.M))
    non2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", text)
    sock = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", text)
    return WrkResult(
        requests=int(m.group(1)),
        duration_s=_ms(m.group(2) + m.group(3)) / 1000.0,
        rps=float(rps.group(1)),
        p50_ms=_ms(p["50"]),
        p99_ms=_ms(p["99"]),
        non_2xx=int(non2xx.group(1)) if non2xx else 0,
        socket_errors=sum(int(x) for x in sock.groups()) if sock else 0,
        command=" ".join(cmd),
    )


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile (0..1) by linear interpolation; NaN for no values."""
    if not values:
        return float("nan")
    return statistics.quantiles(values, n=1000, method="inclusive")[min(998, max(0, round(q * 1000) - 1))]


def hey(
    url: str,
    body: Path,
    headers: dict[str, str],
    *,
    rate_rps: float,
    workers: int,
    duration_s: float,
    skip_first: bool = False,
) -> HeyResult:
    """Run hey at ``rate_rps`` total (``workers`` × per-worker ``-q``) and compute percentiles
    from its per-request CSV.

    ``skip_first``: leave out each worker's first request, the one that dials its connection (hey's
    ``response-time`` includes the dial), so that short runs measure the steady state only.

    Raises:
        RuntimeError: hey failed or completed no request.
    """
    per_worker = max(1, round(rate_rps / workers))
    cmd = [
        "hey",
        "-z",
        f"{duration_s:g}s",
        "-c",
        str(workers),
        "-q",
        str(per_worker),
        "-m",
        "POST",
        "-T",
        "application/json",
        "-D",
        str(body),
        "-o",
        "csv",
    ]
    for k, v in headers.items():
        cmd += ["-H", f"{k}: {v}"]
    cmd.append(url)
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=duration_s + 60)
    lat: list[float] = []
    non200 = 0
    last_offset = 0.0
    rows = [p for p in (line.split(",") for line in out.stdout.splitlines()[1:]) if len(p) >= 8]
    if skip_first:  # the `workers` earliest-started requests that dialed (DNS+dialup > 0)
        dialed = sorted((float(p[7]), i) for i, p in enumerate(rows) if float(p[1]) > 0.0)[:workers]
        first = {i for _, i in dialed}
        rows = [p for i, p in enumerate(rows) if i not in first]
    for parts in rows:
        lat.append(float(parts[0]) * 1000.0)
        if parts[6] != "200":
            non200 += 1
        last_offset = max(last_offset, float(parts[7]))
    if out.returncode != 0 or not lat:
        raise RuntimeError(f"hey failed ({out.returncode}): {out.stderr[-500:]}")
    return HeyResult(
        requests=len(lat),
        rps=len(lat) / max(last_offset, 1e-9),
        p50_ms=percentile(lat, 0.50),
        p99_ms=percentile(lat, 0.99),
        non_200=non200,
        command=" ".join([*cmd[:-1], "URL"]),
        latencies_ms=tuple(lat),
    )
