"""Per-request system calls, context switches and CPU of the router against the do-nothing floor.

``python -m benchmarks.wakeups [--variants floor,route,...] [--rate 200] [--duration-s 5] [--strace]``

Starts :class:`benchmarks.stack.Stack` with the chosen variants of :mod:`benchmarks.run`, drives
each listener with ``hey`` at the same fixed rate (open loop: every request wakes the processes,
nothing is batched) and reports per completed request, for each ext_proc process:

* CPU (``utime + stime`` of all threads, ms);
* voluntary and involuntary context switches, summed over the process's threads
  (``/proc/<pid>/task/*/status``), and the threads that took them;
* with ``--strace``: a second run under ``strace -c -f -p`` and the system calls per request,
  by name (strace slows the process; only the counts are read from that run).

What it answers: whether the router wakes up or enters the kernel more often per request than
the floor, and where (docs/performance.md, "Wakeups and system calls").
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bodies import build_bodies
from benchmarks.loadgen import hey, write_wrk_script, wrk
from benchmarks.procs import context_switches, cpu_seconds, strace_counts
from benchmarks.stack import Stack

__all__ = ["main", "measure_wakeups"]


def _measure(stack: Stack, name: str, body: Path, rate: float, duration_s: float) -> dict[str, Any]:
    pid = stack.router_pids[name][0]
    cs0, cpu0 = context_switches(pid), cpu_seconds(pid)
    r = hey(stack.url(name), body, stack.headers("1KB"), rate_rps=rate, workers=4, duration_s=duration_s)
    cs1, cpu1 = context_switches(pid), cpu_seconds(pid)
    n = max(r.requests, 1)
    per_thread = {
        k: ((v[0] - cs0.get(k, (0, 0))[0]) / n, (v[1] - cs0.get(k, (0, 0))[1]) / n) for k, v in cs1.items()
    }
    return {
        "requests": r.requests,
        "rps": r.rps,
        "p50_ms": r.p50_ms,
        "p99_ms": r.p99_ms,
        "non_200": r.non_200,
        "cpu_ms": (cpu1 - cpu0) * 1000.0 / n,
        "vol": sum(v[0] for v in per_thread.values()),
        "invol": sum(v[1] for v in per_thread.values()),
        "threads": {k: v for k, v in per_thread.items() if v[0] + v[1] >= 0.05},
    }


def _strace(
    stack: Stack, name: str, body: Path, rate: float, duration_s: float, work: Path
) -> dict[str, Any]:
    pid = stack.router_pids[name][0]
    out = work / f"strace_{name}.txt"
    proc = subprocess.Popen(["strace", "-c", "-f", "-o", str(out), "-p", str(pid)], stderr=subprocess.DEVNULL)
    time.sleep(0.5)
    r = hey(stack.url(name), body, stack.headers("1KB"), rate_rps=rate, workers=4, duration_s=duration_s)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=30)
    counts = strace_counts(out.read_text())
    n = max(r.requests, 1)
    return {
        "requests": r.requests,
        "per_request": {k: v / n for k, v in sorted(counts.items(), key=lambda kv: -kv[1])},
    }


def measure_wakeups(
    stack: Stack, names: list[str], work: Path, *, rate: float = 200.0, duration_s: float = 3.0
) -> dict[str, Any]:
    """For ``make bench``: per-request CPU and context switches of each variant's ext_proc process at
    ``rate`` (1 KB body), then the system calls per request from a second run under ``strace -c -f``
    (``{"error": ...}`` in place of the counts when strace is missing or fails)."""
    body = stack.body_files["1KB"]
    out: dict[str, Any] = {"rate": rate, "duration_s": duration_s, "variants": {}}
    for name in names:
        out["variants"][name] = _measure(stack, name, body, rate, duration_s)
    for name in names:
        try:
            s = _strace(stack, name, body, rate, duration_s, work)
            out["variants"][name]["syscalls"] = s["per_request"]
        except (OSError, subprocess.SubprocessError) as exc:
            out["variants"][name]["syscalls"] = {"error": str(exc)}
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the comparison and print one block per variant."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--variants", default="floor,route,floor_1msg,route_1msg")
    ap.add_argument("--rate", type=float, default=200.0, help="req/s, total over 4 hey workers")
    ap.add_argument("--duration-s", type=float, default=5.0)
    ap.add_argument("--strace", action="store_true")
    ap.add_argument("--saturation", action="store_true", help="also wrk -c16: req/s and CPU per request")
    args = ap.parse_args(argv)
    from benchmarks.run import variants as all_variants  # run.py imports this module

    names = args.variants.split(",")
    chosen = [v for v in all_variants() if v.name in names or v.kind == "bare"]
    with tempfile.TemporaryDirectory(prefix="tbr-wakeups-") as tmp:
        work = Path(tmp)
        bodies = [b for b in build_bodies({"1KB": 1024})]
        with Stack(work, chosen, bodies) as stack:
            body = stack.body_files["1KB"]
            for name in names:  # warm up (first requests import and compile)
                hey(stack.url(name), body, stack.headers("1KB"), rate_rps=100, workers=4, duration_s=1.0)
            for name in names:
                m = _measure(stack, name, body, args.rate, args.duration_s)
                print(
                    f"{name:12s} {m['requests']:5d} req {m['rps']:6.1f} req/s p50 {m['p50_ms']:.2f} p99 "
                    f"{m['p99_ms']:.2f} ms non200 {m['non_200']} | CPU {m['cpu_ms']:.3f} ms/req | "
                    f"ctx switches/req vol {m['vol']:.2f} invol {m['invol']:.2f}",
                    flush=True,
                )
                for k, v in sorted(m["threads"].items(), key=lambda kv: -kv[1][0]):
                    print(f"    {k:28s} vol {v[0]:.2f} invol {v[1]:.2f}")
            if args.saturation:
                script = work / "wrk.lua"
                write_wrk_script(script, body, stack.headers("1KB"))
                for name in names:
                    pid = stack.router_pids[name][0]
                    cpu0 = cpu_seconds(pid)
                    w = wrk(stack.url(name), script, connections=16, duration_s=args.duration_s)
                    cpu = (cpu_seconds(pid) - cpu0) * 1000.0 / max(w.requests, 1)
                    print(
                        f"{name:12s} saturation {w.rps:7.1f} req/s p99 {w.p99_ms:.2f} ms | CPU {cpu:.3f} ms/req"
                    )
            if args.strace:
                for name in names:
                    s = _strace(stack, name, body, args.rate, args.duration_s, work)
                    top = ", ".join(f"{k} {v:.2f}" for k, v in list(s["per_request"].items())[:14])
                    total = sum(s["per_request"].values())
                    print(f"{name:12s} syscalls/req {total:.1f}: {top}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
