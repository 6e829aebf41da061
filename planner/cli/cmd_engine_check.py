"""``tbr engine-check``: the simulator against a real vLLM server, measured vs simulated side by side.

Fits the server's profile first (the ``tbr profile`` sweep, :mod:`planner.cli.cmd_profile`) unless
``--profile-file`` is given, then for each ``--rate`` replays a scaled trace slice on the server and
in the DES (:mod:`planner.des.engine_check`) and prints TTFT P50/P99, output tokens/s, req/s and
preemptions, measured and simulated, with the relative difference and the target of issue 32.
Fit and replays run back to back, so they see the same machine load (printed: the 1-minute load
average before each replay).
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import httpx

from planner.cli.cli_common import eprint, positive_float, positive_int
from planner.cli.cmd_profile import build_profile, kv_capacity_from_metrics, measure
from planner.des.engine_check import (
    compare,
    measured_metrics,
    replay,
    scaled_slice,
    simulate_workload,
    slowest_requests,
    speed_matched,
)
from planner.model.profile_file import load_profile_file, write_profile_file
from planner.model.profile_fit import Measurement, fit_iteration_model
from planner.model.profiles import PoolProfile
from planner.workload.trace import TraceError
from planner.workload.trace_loaders import load_trace

__all__ = ["add_parser", "run"]


def add_parser(subparsers: Any) -> None:
    """Register ``engine-check`` on the ``tbr`` subparsers."""
    p = subparsers.add_parser(
        "engine-check",
        help="replay a scaled trace slice on a vLLM server and in the simulator; print both side by side",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8000 (no /v1)")
    p.add_argument("--model", required=True, help="served model name")
    p.add_argument("--trace", required=True, help="trace file (any format tbr plan reads)")
    p.add_argument("--format", default=None, help="trace format; None = detected")
    p.add_argument("--requests", type=positive_int, default=200, help="requests per replay")
    p.add_argument("--offset", type=int, default=0, help="first trace row of the slice")
    p.add_argument("--token-scale", type=positive_float, default=1.0, help="multiply every token count")
    p.add_argument("--rate", type=positive_float, nargs="+", required=True, help="one replay per rate, req/s")
    p.add_argument("--max-model-len", type=positive_int, required=True, help="the server's max_model_len")
    p.add_argument("--max-num-seqs", type=positive_int, required=True, help="the server's max_num_seqs")
    p.add_argument("--max-num-batched-tokens", type=positive_int, required=True,
                   help="the server's max_num_batched_tokens (its prefill chunk)")  # fmt: skip
    p.add_argument("--profile-file", default=None, help="use this profile instead of fitting one")
    p.add_argument("--profile-out", default=None, help="write the fitted profile here")
    p.add_argument("--prompt-tokens", type=positive_int, nargs="+", default=[64, 512, 1536],
                   help="profile sweep: prompt lengths")  # fmt: skip
    p.add_argument("--concurrency", type=positive_int, nargs="+", default=[1, 4], help="profile sweep")
    p.add_argument("--output-tokens", type=positive_int, default=32, help="profile sweep")
    p.add_argument("--repeats", type=positive_int, default=2, help="profile sweep")
    p.add_argument("--timeout-s", type=positive_float, default=300.0, help="per request, seconds")
    p.add_argument("--seed", type=int, default=0, help="prompt token ids")
    p.add_argument("--json", action="store_true", help="print JSON instead of the table")
    p.set_defaults(func=run)


def _profile(args: argparse.Namespace) -> tuple[PoolProfile, list[Measurement]]:
    """The profile file, or a fresh fit to the server (``tbr profile``'s sweep and fit) and its timings."""
    if args.profile_file:
        return load_profile_file(args.profile_file), []
    read = kv_capacity_from_metrics(args.url)
    if read is None:
        raise ValueError("/metrics has no vllm:cache_config_info (is this a vLLM server?)")
    eprint(f"fitting the profile of {args.url}: KV {read[0]:,} tokens in blocks of {read[1]}")
    ms = measure(args.url, args.model, args.prompt_tokens, args.concurrency, args.output_tokens, args.repeats,
                 args.timeout_s)  # fmt: skip
    fit = fit_iteration_model(ms, args.max_num_batched_tokens)
    ns = argparse.Namespace(
        name=None,
        model=args.model,
        gpu="unknown",
        gpus_per_instance=1,
        price_usd_per_gpu_h=0.0,
        max_num_seqs=args.max_num_seqs,
        chunk_tokens=args.max_num_batched_tokens,
        prompt_tokens=args.prompt_tokens,
        concurrency=args.concurrency,
        output_tokens=args.output_tokens,
    )
    prof = build_profile(ns, fit, read[0], read[1])
    if args.profile_out:
        write_profile_file(prof, args.profile_out)
    return prof, ms


def _fmt(key: str, x: float) -> str:
    if key.endswith("_per_s"):
        return f"{x:.4g}"
    if key.endswith("_s"):
        return f"{x:.4g} s"
    if key == "preemptions":
        return f"{x:.0f}"
    return f"{x:.2f}"


def _target(row: dict[str, Any]) -> str:
    return "" if row["target"] is None else f"±{row['target']:.0%} " + ("ok" if row["within"] else "MISS")


def format_table(results: list[dict[str, Any]]) -> list[str]:
    """Text table: one block per rate, one row per metric: measured; simulated on the profile (difference,
    target); simulated at the engine speed and per-request overhead measured during the replay (factor
    in the block's header); then the requests with the longest measured TTFTs."""
    out = [
        f"{'rate req/s':>10}  {'metric':<20} {'measured':>10} {'simulated':>10} {'diff':>8} {'target':<9}"
        f" {'speed-matched':>13} {'diff':>8} target"
    ]
    for res in results:
        out.append(
            f"{res['rate_req_per_s']:>10.3g}  (load average {res['load_average_1m']:.1f}; engine "
            f"{res['speed_factor']:.2f}x the profile's time per step during the replay)"
        )
        for row, m in zip(res["rows"], res["rows_speed_matched"], strict=True):
            key = row["metric"]
            out.append(
                f"{'':>10}  {key:<20} {_fmt(key, row['measured']):>10} {_fmt(key, row['simulated']):>10} "
                f"{row['rel_diff']:>+8.1%} {_target(row):<9} {_fmt(key, m['simulated']):>13} "
                f"{m['rel_diff']:>+8.1%} {_target(m)}"
            )
        slow = ", ".join(
            f"#{x['request']} ({x['prompt_tokens']} tokens) {x['measured_ttft_s']:.3g} s / "
            f"{x['simulated_ttft_s']:.3g} s"
            for x in res.get("slowest", [])
        )
        if slow:
            out.append(f"{'':>10}  longest TTFTs measured / speed-matched: {slow}")
    return out


def run(args: argparse.Namespace) -> int:
    """Fit (or read) the profile, replay each rate, print; exit 2 on bad input, 1 when the server fails."""
    args.url = args.url.rstrip("/")
    try:
        trace, _ = load_trace(args.trace, args.format)
        slices = [
            scaled_slice(
                trace,
                requests=args.requests,
                offset=args.offset,
                token_scale=args.token_scale,
                rate_req_per_s=r,
                max_model_len=args.max_model_len,
            )
            for r in args.rate
        ]
    except (TraceError, ValueError) as exc:
        eprint(f"error: {exc}")
        return 2
    try:
        prof, timings = _profile(args)
        results = []
        for rate, work in zip(args.rate, slices, strict=True):
            load = os.getloadavg()[0]
            eprint(f"replaying {len(work)} requests at {rate:g} req/s (load average {load:.2f})")
            run_ = replay(args.url, args.model, work, seed=args.seed, timeout_s=args.timeout_s)
            meas = measured_metrics(work, run_)
            sim = simulate_workload(work, prof, args.max_model_len)
            rows = [r.__dict__ for r in compare(meas, sim)]
            factor, matched = speed_matched(
                work, prof, args.max_model_len, meas["tpot_mean_s"], measured_overhead_s=meas["overhead_s"]
            )
            results.append(
                {
                    "rate_req_per_s": rate,
                    "load_average_1m": load,
                    "measured": meas,
                    "simulated": sim,
                    "rows": rows,
                    "speed_factor": factor,
                    "simulated_speed_matched": matched,
                    "rows_speed_matched": [r.__dict__ for r in compare(meas, matched)],
                    "slowest": slowest_requests(work, meas, matched),
                }
            )
    except (httpx.HTTPError, RuntimeError, ValueError) as exc:
        eprint(f"error: {exc}")
        return 1
    if args.json:
        out = {"profile": prof.__dict__, "profile_timings": [m.__dict__ for m in timings], "results": results}
        print(json.dumps(out, sort_keys=True, indent=1))
        return 0
    print(
        f"profile {prof.name}: W {prof.w_s * 1e3:.3f} ms, S {prof.s_s_per_running_seq * 1e3:.3f} ms/sequence, "
        f"H {prof.h_s_per_kv_token * 1e6:.4f} µs/token, P {prof.p_s_per_prefill_token * 1e6:.3f} µs/token, "
        f"A {prof.a_s_per_prefill_context_token * 1e9:.3f} ns/token², R {prof.request_overhead_s * 1e3:.2f} ms/request, KV {prof.kv_capacity_tokens:,} tokens, "
        f"max_num_seqs {prof.max_num_seqs_cap}, max_num_batched_tokens {prof.max_num_batched_tokens}"
    )
    print("\n".join(format_table(results)))
    return 0
