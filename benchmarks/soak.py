"""Soak test on loopback: Envoy (envoy/envoy.yaml) + router (``tbr serve``) + a fast upstream.

``make soak`` = ``python -m benchmarks.soak --duration-s 3600`` (60 minutes; not in CI):

1. Starts an upstream Envoy whose two listeners (the short and long pool) answer every request
   with a fixed OpenAI JSON body carrying ``usage`` (``direct_response``: no Python upstream, so
   the router is what is measured), the router, and the front Envoy rendered from
   ``envoy/envoy.yaml`` (devstack.envoy_runner).
2. Measures the maximum throughput with ``hey`` (Debian) without a rate limit for
   ``--probe-s`` seconds, then runs ``hey`` rate-limited at ``--load-fraction`` (default 80%)
   of it for ``--duration-s``.
3. Samples the router's RSS (``/proc/<pid>/status`` VmRSS) every ``--sample-s`` seconds. The
   router runs with ``TBR_TRACEMALLOC=1`` (extproc/service/memprof.py), its decision log and its
   periodic ratio snapshot on (the shipped config);
   a tracemalloc baseline is taken when the final ``--window-s`` starts and the allocation
   sites that grew most by the end are reported.
4. At the end checks: no non-2xx / transport errors from hey, ``tbr_processing_errors_total``
   = 0, ``tbr_inflight_streams`` = 0, Envoy ext_proc ``streams_failed``,
   ``failure_mode_allowed`` and ``message_timeouts`` = 0, RSS over the final window within
   ``--rss-tolerance`` (5%) of its first sample.
   Prints a markdown section for BENCHMARKS.md and exits 1 if any check fails.

Every process is started on free loopback ports and stopped by pid.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from devstack.envoy_runner import EnvoyPorts, EnvoyProcess, envoy_binary
from devstack.fixed_upstream import fixed_upstream_config
from devstack.procs import LOOPBACK, free_port
from devstack.stack import envoy_process, render_router_config, router_process

USAGE_BODY = json.dumps(
    {
        "id": "chatcmpl-soak",
        "object": "chat.completion",
        "model": "Qwen/Qwen3-8B",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 260, "completion_tokens": 1, "total_tokens": 261},
    }
)
PROMPT = "Summarise the following notes for the weekly engineering review, in three bullet points. " * 11


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


def router_metrics(admin_url: str) -> dict[str, float]:
    """All router samples as ``name{labels}`` → value."""
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(httpx.get(f"{admin_url}/metrics", timeout=10).text):
        for s in fam.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = float(s.value)
    return out


def debug_memory(admin_url: str, *, baseline: bool) -> dict[str, Any]:
    """The router's ``GET /debug/memory`` (tracemalloc growth by site); ``{}`` if it fails."""
    try:
        r = httpx.get(f"{admin_url}/debug/memory", params={"baseline": "1" if baseline else "0"}, timeout=120)
        out: dict[str, Any] = r.json()
        return out
    except (httpx.HTTPError, ValueError):
        return {}


def heap_kib(pid: int) -> int:
    """Resident KiB of the main malloc heap (``[heap]`` in ``/proc/<pid>/smaps``), 0 if absent:
    where a native leak of the main thread's allocations shows."""
    rss, in_heap = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if not line[:1].isupper():  # a mapping's header line: "addr-addr perms ... [name]"
            in_heap = line.endswith("[heap]")
        elif in_heap and line.startswith("Rss:"):
            rss += int(line.split()[1])
    return rss


def loadavg() -> str:
    """The 1/5/15-minute load averages (``/proc/loadavg``)."""
    return " / ".join(Path("/proc/loadavg").read_text().split()[:3])


def replace_section(markdown: str, section: str) -> str:
    """``markdown`` with the ``## Soak: 60 min`` section (up to the next ``## `` heading) replaced by
    ``section``, or ``section`` appended when there is none."""
    lines = markdown.splitlines(keepends=True)
    start = next((i for i, line in enumerate(lines) if line.startswith("## Soak: 60 min")), None)
    body = section.strip("\n") + "\n"
    if start is None:
        return markdown.rstrip("\n") + "\n\n" + body
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    tail = "".join(lines[end:])
    return "".join(lines[:start]) + body + ("\n" + tail if tail else "")


def rss_slope_mib_per_min(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope of RSS (KiB) against time (s), in MiB per minute; 0 with < 2 samples."""
    if len(samples) < 2:
        return 0.0
    n = len(samples)
    mt = sum(t for t, _ in samples) / n
    mr = sum(k for _, k in samples) / n
    var = sum((t - mt) ** 2 for t, _ in samples)
    if var == 0:
        return 0.0
    cov = sum((t - mt) * (k - mr) for t, k in samples)
    return cov / var * 60.0 / 1024.0


def metric_sum(metrics: dict[str, float], name: str) -> float:
    return sum(v for k, v in metrics.items() if k.startswith(name + "{"))


def run_hey(
    url: str, body_path: Path, *, duration_s: float, concurrency: int, qps_per_worker: float | None
) -> dict[str, Any]:
    """Run ``hey`` and parse its summary: requests/s, latencies, status codes, errors."""
    argv = [
        "hey",
        "-z",
        f"{int(duration_s)}s",
        "-c",
        str(concurrency),
        "-m",
        "POST",
        "-T",
        "application/json",
        "-D",
        str(body_path),
        "-t",
        "30",
    ]
    if qps_per_worker is not None:
        argv += ["-q", f"{qps_per_worker:.2f}"]
    proc = subprocess.run([*argv, url], capture_output=True, text=True, timeout=duration_s + 120, check=False)
    text = proc.stdout

    def num(pattern: str) -> float:
        m = re.search(pattern, text)
        return float(m.group(1)) if m else float("nan")

    codes = {int(c): int(n) for c, n in re.findall(r"\[(\d{3})\]\s+(\d+) responses", text)}
    errors_block = text.split("Error distribution:")[1] if "Error distribution:" in text else ""
    errors = sum(int(n) for n in re.findall(r"\[(\d+)\]\s", errors_block))
    return {
        "rps": num(r"Requests/sec:\s+([\d.]+)"),
        "p50_ms": num(r"50% in ([\d.]+) secs") * 1000,
        "p99_ms": num(r"99% in ([\d.]+) secs") * 1000,
        "codes": codes,
        "errors": errors,
        "raw": text,
        "rc": proc.returncode,
    }


RECORDED_60MIN = Path(__file__).resolve().parent / "results" / "soak_60min.md"
"""Where ``make soak`` writes its section; ``make bench`` appends it to its own short soak."""
RECORDED_RESET_LEAK = Path(__file__).resolve().parent / "results" / "reset_leak.md"
"""Recorded ``python -m benchmarks.reset_leak`` runs (native memory per ext_proc stream), which
``make bench`` appends after the soaks."""


def bench_section(quick: bool = False) -> str:
    """BENCHMARKS.md section from a bounded soak (60 s; 20 s with ``quick``), followed by the last
    recorded 60-minute soak of ``make soak`` (:data:`RECORDED_60MIN`) and the recorded
    native-memory-per-stream runs (:data:`RECORDED_RESET_LEAK`) when there are."""
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        main(
            [
                *("--duration-s", "20" if quick else "60"),
                *("--window-s", "10" if quick else "40"),
                *("--probe-s", "5" if quick else "10"),
            ]
        )
    recorded = [p.read_text(encoding="utf-8") for p in (RECORDED_60MIN, RECORDED_RESET_LEAK) if p.exists()]
    return buf.getvalue() + "\n".join(recorded)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration-s", type=float, default=3600.0, help="length of the soak at the target rate")
    p.add_argument("--window-s", type=float, default=2400.0, help="final window in which RSS must stay flat")
    p.add_argument("--probe-s", type=float, default=15.0, help="length of the max-throughput probe")
    p.add_argument("--load-fraction", type=float, default=0.8, help="fraction of the measured max to run at")
    p.add_argument("--concurrency", type=int, default=16, help="hey workers")
    p.add_argument("--sample-s", type=float, default=5.0, help="RSS sampling period")
    p.add_argument("--rss-tolerance", type=float, default=0.05, help="allowed RSS growth in the window")
    p.add_argument(
        "--work-dir", type=Path, default=None, help="logs and rendered configs (default: a temp dir)"
    )
    p.add_argument("--out", type=Path, default=None, help="also write the Markdown section to this file")
    p.add_argument(
        "--benchmarks-md",
        type=Path,
        default=None,
        help="also replace the '## Soak: 60 min' section of this file (BENCHMARKS.md) with it",
    )
    args = p.parse_args(argv)

    work = args.work_dir or Path(tempfile.mkdtemp(prefix="tbr-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    ports = EnvoyPorts(
        listener=free_port(),
        admin=free_port(),
        router_grpc=free_port(),
        short_pool=free_port(),
        long_pool=free_port(),
    )
    router_admin_port = free_port()
    up_admin = free_port()
    listeners = {"short": ports.short_pool, "long": ports.long_pool}
    up_cfg = work / "upstream.yaml"
    up_cfg.write_text(
        yaml.safe_dump(fixed_upstream_config(up_admin, listeners, {"all": USAGE_BODY}), sort_keys=False)
    )
    upstream = EnvoyProcess(up_cfg, admin_port=up_admin, log_path=work / "upstream.log")
    upstream.name = "upstream"
    cfg = render_router_config(
        grpc_port=ports.router_grpc,
        admin_port=router_admin_port,
        short_max_model_len=8192,
        long_max_model_len=65536,
        decision_log_path=work / "decisions.jsonl",
        snapshot_path=work / "ratios.json",
    )
    router_cfg = work / "router.yaml"
    router_cfg.write_text(yaml.safe_dump(cfg, sort_keys=False))
    router = router_process(router_cfg, ports.router_grpc, router_admin_port, log_dir=work)
    router.argv += ["--log-level", "WARNING"]
    router._env["TBR_TRACEMALLOC"] = "1"
    front = envoy_process(ports, log_dir=work)
    body_path = work / "body.json"
    body_path.write_text(
        json.dumps(
            {"model": "Qwen/Qwen3-8B", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 64}
        )
    )
    url = f"http://{LOOPBACK}:{ports.listener}/v1/chat/completions"
    admin_url = f"http://{LOOPBACK}:{router_admin_port}"
    print(f"soak: work dir {work}; envoy {envoy_binary()}", file=sys.stderr)
    ok = True
    load_start = loadavg()
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    try:
        upstream.start()
        router.start()
        front.start()
        assert router.pid is not None
        r = httpx.post(
            url, content=body_path.read_bytes(), headers={"content-type": "application/json"}, timeout=10
        )
        if r.status_code != 200 or r.headers.get("x-served-by-pool") != "short":
            raise RuntimeError(f"smoke request failed: {r.status_code} {r.headers}")
        print(f"soak: probing max throughput for {args.probe_s:.0f} s", file=sys.stderr)
        probe = run_hey(
            url, body_path, duration_s=args.probe_s, concurrency=args.concurrency, qps_per_worker=None
        )
        target_rps = probe["rps"] * args.load_fraction
        print(
            f"soak: max {probe['rps']:.0f} req/s → soak at {target_rps:.0f} req/s for {args.duration_s:.0f} s",
            file=sys.stderr,
        )
        m0 = router_metrics(admin_url)
        samples: list[tuple[float, int]] = []
        stop = threading.Event()
        window_start_s = max(0.0, args.duration_s - args.window_s)
        mem_reports: dict[str, Any] = {}

        def sampler() -> None:
            t0 = time.monotonic()
            while not stop.is_set():
                t = time.monotonic() - t0
                samples.append((t, rss_kib(router.pid)))  # type: ignore[arg-type]
                # The baseline is taken one minute before the window: the snapshot it keeps
                # (several MiB) must not count as growth inside the window.
                if t >= max(0.0, window_start_s - 60.0) and "window_start" not in mem_reports:
                    mem_reports["window_start"] = debug_memory(admin_url, baseline=True)
                if t >= window_start_s and "heap_start_kib" not in mem_reports:
                    mem_reports["heap_start_kib"] = heap_kib(router.pid)  # type: ignore[arg-type]
                stop.wait(args.sample_s)

        th = threading.Thread(target=sampler, daemon=True)
        th.start()
        soak = run_hey(
            url,
            body_path,
            duration_s=args.duration_s,
            concurrency=args.concurrency,
            qps_per_worker=target_rps / args.concurrency,
        )
        stop.set()
        th.join()
        time.sleep(1.0)
        m1 = router_metrics(admin_url)
        mem_reports["heap_end_kib"] = heap_kib(router.pid)
        mem_reports["end"] = debug_memory(admin_url, baseline=False)
        stats = front.stats("ext_proc.tbr.")
        ext_proc_resets = front.stats("cluster.ext_proc.upstream_rq_tx_reset").get(
            "cluster.ext_proc.upstream_rq_tx_reset", 0
        )
    finally:
        for proc in (front, router, upstream):
            proc.stop()

    load_end = loadavg()
    ended = time.strftime("%H:%M UTC", time.gmtime())

    def delta(name: str) -> float:
        return metric_sum(m1, name) - metric_sum(m0, name)

    def stat(suffix: str) -> int:
        return sum(v for k, v in stats.items() if k.endswith(suffix))

    window = [(t, kib) for t, kib in samples if t >= window_start_s] or samples
    warm = [kib for _, kib in window]
    rss_start, rss_end, rss_max = warm[0], warm[-1], max(warm)
    growth = (rss_max - rss_start) / rss_start
    slope = rss_slope_mib_per_min(window)
    end_report = mem_reports.get("end", {})
    growth_rows = "\n".join(
        f"| `{Path(r['where'].rsplit(':', 1)[0]).name}:{r['where'].rsplit(':', 1)[1]}` | "
        f"{r['size_diff_bytes'] / 1024:+.1f} | {r['count_diff']:+d} |"
        for r in end_report.get("top_growth", [])[:8]
    )
    traced_diff = end_report.get("traced_bytes", 0) - end_report.get("baseline_traced_bytes", 0)
    total_requests = sum(soak["codes"].values())
    non_2xx = sum(n for c, n in soak["codes"].items() if not 200 <= c < 300)
    failed_stats = {
        k: v
        for k, v in stats.items()
        if k.endswith(("streams_failed", "failure_mode_allowed", "message_timeouts")) and v
    }
    checks = {
        "no client errors (non-2xx, transport)": non_2xx == 0 and soak["errors"] == 0 and total_requests > 0,
        "router tbr_processing_errors_total = 0": metric_sum(m1, "tbr_processing_errors_total") == 0,
        "router tbr_inflight_streams = 0 at the end": metric_sum(m1, "tbr_inflight_streams") == 0,
        "Envoy ext_proc streams_failed / failure_mode_allowed / message_timeouts = 0": not failed_stats,
        f"router RSS within +{args.rss_tolerance:.0%} over the last {args.window_s / 60:.0f} min": growth
        <= args.rss_tolerance,
        "every request routed by the router": delta("tbr_routing_decisions_total") >= total_requests,
    }
    ok = all(checks.values())
    section = f"""
## Soak: {args.duration_s / 60:.0f} min at {args.load_fraction:.0%} of max (loopback, `python -m benchmarks.soak --duration-s {args.duration_s:.0f} --window-s {args.window_s:.0f}`)

Front Envoy 1.40 (`envoy/envoy.yaml`, `--concurrency 1`) → router (`tbr serve`, one grpc.aio process) →
upstream Envoy `direct_response` JSON with `usage` (the router reads every response: one routing
message per request, answered with the call's end, and an observability stream per request for the
response, read off the request path). Load: `hey -c {args.concurrency}` POST of a
{body_path.stat().st_size} B chat body. 2 shared cores; {started} – {ended}, load average (1/5/15 min) {load_start} at the
start, {load_end} at the end.

| measure | value |
|---|---|
| max throughput (probe, {args.probe_s:.0f} s, no rate limit) | {probe["rps"]:.0f} req/s (p50 {probe["p50_ms"]:.1f} ms, p99 {probe["p99_ms"]:.1f} ms) |
| soak target / achieved | {target_rps:.0f} / {soak["rps"]:.0f} req/s |
| soak latency p50 / p99 | {soak["p50_ms"]:.1f} / {soak["p99_ms"]:.1f} ms |
| requests in soak | {total_requests} (status codes {soak["codes"]}, transport errors {soak["errors"]}) |
| router decisions / streams ended (delta) | {delta("tbr_routing_decisions_total"):.0f} / {delta("tbr_streams_total"):.0f} |
| calibration applied (delta) | {metric_sum(m1, "tbr_calibration_events_total") - metric_sum(m0, "tbr_calibration_events_total"):.0f} |
| router processing errors | {metric_sum(m1, "tbr_processing_errors_total"):.0f} |
| router in-flight streams at end | {metric_sum(m1, "tbr_inflight_streams"):.0f} |
| Envoy ext_proc failures (streams_failed, failure_mode_allowed, message_timeouts) | {failed_stats or 0} |
| Envoy ext_proc streams started / closed / ended by the router (`server_half_closed`) / reset by Envoy (`upstream_rq_tx_reset`) | {stat(".streams_started")} / {stat(".streams_closed")} / {stat(".server_half_closed")} / {ext_proc_resets} |
| router RSS over the last {args.window_s / 60:.0f} min: first / last / max | {rss_start / 1024:.1f} / {rss_end / 1024:.1f} / {rss_max / 1024:.1f} MiB ({growth:+.1%}) |
| RSS trend over that window (least squares) | {slope:+.3f} MiB/min |
| main malloc heap (`[heap]` resident in smaps), window start → end | {mem_reports.get("heap_start_kib", 0) / 1024:.1f} → {mem_reports.get("heap_end_kib", 0) / 1024:.1f} MiB |
| tracemalloc traced memory, window start → end | {end_report.get("baseline_traced_bytes", 0) / 2**20:.2f} → {end_report.get("traced_bytes", 0) / 2**20:.2f} MiB ({traced_diff / 1024:+.0f} KiB) |
| RSS samples | {len(samples)} every {args.sample_s:.0f} s |

Allocation sites that grew most over the window (tracemalloc, 1 frame; router process with
`TBR_TRACEMALLOC=1`, decision log and periodic ratio snapshot on):

| site | size diff (KiB) | count diff |
|---|---|---|
{growth_rows or "| (tracemalloc report missing) | | |"}

Checks: {"; ".join(f"{'PASS' if v else 'FAIL'} {k}" for k, v in checks.items())}
"""
    print(section)
    if args.out is not None:
        args.out.write_text(section.lstrip("\n"), encoding="utf-8")
    if args.benchmarks_md is not None:
        md = args.benchmarks_md.read_text(encoding="utf-8")
        args.benchmarks_md.write_text(replace_section(md, section), encoding="utf-8")
    (work / "soak.json").write_text(
        json.dumps(
            {
                "probe": {k: v for k, v in probe.items() if k != "raw"},
                "soak": {k: v for k, v in soak.items() if k != "raw"},
                "rss_samples_kib": samples,
                "memory": mem_reports,
                "checks": checks,
            },
            indent=1,
        )
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
