"""``tbr profile``: fit a profile to a running OpenAI-compatible vLLM server with a short load sweep.

For every prompt length and concurrency of the sweep, ``concurrency`` streaming ``/v1/completions``
requests start together (``max_tokens`` = ``--output-tokens``, vLLM's ``ignore_eos`` so each makes
exactly that many tokens; each prompt starts with its own number, so vLLM's prefix cache cannot serve
it). The client measures each request's TTFT and time per output token, reads ``usage`` for the true
token counts, and :func:`planner.model.profile_fit.fit_iteration_model` fits W, S, H, P, A and R. The KV capacity is
``num_gpu_blocks × block_size`` from ``vllm:cache_config_info`` on ``/metrics`` (or
``--kv-capacity-tokens``). The profile file (:mod:`planner.model.profile_file`) is what ``tbr plan`` and
``tbr simulate`` read with ``--profile-file``.

Bounded: at most ``--max-requests`` requests, each with ``--timeout-s``; any failed request is an
error (exit 1) that names it, never a silent hole in the fit.

``--from-metrics URL[,URL...]`` (repeat per instance) sends no load: it scrapes each live vLLM server
``--scrapes`` times ``--interval-s`` apart (a saved ``/metrics`` text file in place of a URL reads
that scrape instead) and fits the same model to the fleet's own latency histograms
(:mod:`planner.model.profile_metrics`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx

from planner.cli.cli_common import eprint, non_negative_float, positive_float, positive_int
from planner.model.profile_file import write_profile_file
from planner.model.profile_fit import Measurement, ProfileFit, fit_iteration_model
from planner.model.profiles import PoolProfile

__all__ = ["add_parser", "kv_capacity_from_metrics", "measure", "run"]


def add_parser(subparsers: Any) -> None:
    """Register ``profile`` on the ``tbr`` subparsers."""
    p = subparsers.add_parser(
        "profile",
        help="fit an iteration-time profile to a running vLLM server (short bounded load sweep)",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--url", help="the server's base URL for a load sweep, e.g. http://127.0.0.1:8000 (no /v1)"
    )
    src.add_argument(
        "--from-metrics",
        action="append",
        metavar="URL_OR_FILE[,...]",
        help="fit from a live fleet's vLLM Prometheus histograms, no load sent: one option per instance, "
        "its scrapes in time order (a URL is scraped --scrapes times, a file is one saved scrape)",
    )
    p.add_argument("--scrapes", type=positive_int, default=2, help="--from-metrics: scrapes of each URL")
    p.add_argument(
        "--interval-s", type=positive_float, default=60.0, help="--from-metrics: seconds between scrapes"
    )
    p.add_argument("--model", default=None, help="served model name (required with --url)")
    p.add_argument("--out", required=True, help="profile file to write (JSON)")
    p.add_argument("--name", default=None, help="profile name (default: the model name)")
    p.add_argument("--prompt-tokens", type=positive_int, nargs="+", default=[64, 512, 1536])
    p.add_argument("--concurrency", type=positive_int, nargs="+", default=[1, 2, 4])
    p.add_argument("--output-tokens", type=positive_int, default=32)
    p.add_argument("--repeats", type=positive_int, default=2, help="rounds per (prompt, concurrency) point")
    p.add_argument("--max-requests", type=positive_int, default=200, help="refuse a sweep of more requests")
    p.add_argument("--timeout-s", type=positive_float, default=120.0, help="per request, seconds")
    p.add_argument("--chunk-tokens", type=positive_int, default=2048,
                   help="the server's max_num_batched_tokens (its prefill chunk)")  # fmt: skip
    p.add_argument("--price-usd-per-gpu-h", type=non_negative_float, default=0.0)
    p.add_argument("--gpus-per-instance", type=positive_int, default=1)
    p.add_argument(
        "--gpu",
        default="unknown",
        help="GPU name (a name of planner/model/profiles.py picks vLLM's defaults)",
    )
    p.add_argument("--kv-capacity-tokens", type=positive_int, default=None,
                   help="KV tokens per instance; default: vllm:cache_config_info on /metrics")  # fmt: skip
    p.add_argument("--max-num-seqs", type=positive_int, default=256, help="the server's max_num_seqs")
    # the file is a vLLM-admission profile: max_num_seqs and max_num_batched_tokens are the server's
    p.set_defaults(func=run)


_INFO_LINE = re.compile(r"^vllm:cache_config_info\{(?P<labels>[^}]*)\}", re.MULTILINE)
_LABEL = re.compile(r'(\w+)="([^"]*)"')


def kv_capacity_from_metrics(base_url: str, timeout_s: float = 10.0) -> tuple[int, int] | None:
    """``(num_gpu_blocks × block_size, block_size)`` in tokens from ``vllm:cache_config_info`` at
    ``base_url/metrics`` (None when absent). The block size is the server's: 16 on GPUs, 128 by default
    on vLLM's CPU backend (vLLM 0.32 ``platforms/cpu.py``).

    The info gauge's labels are read from the exposition text (the planner does not depend on the
    Prometheus client; pyproject's import contract)."""
    text = httpx.get(f"{base_url}/metrics", timeout=timeout_s).text
    for m in _INFO_LINE.finditer(text):
        labels = dict(_LABEL.findall(m.group("labels")))
        blocks, size = labels.get("num_gpu_blocks", ""), labels.get("block_size", "")
        if blocks.isdigit() and size.isdigit():
            return int(blocks) * int(size), int(size)
    return None


def _one(
    client: httpx.Client, url: str, model: str, prompt: str, out_tokens: int
) -> tuple[float, float, int, int]:
    """One streaming completion: (ttft_s, last-token time after the first, prompt_tokens, completion_tokens)."""
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": out_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    t0 = time.perf_counter()
    first = last = None
    usage: dict[str, int] = {}
    with client.stream("POST", f"{url}/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read().decode(errors='replace')[:200]}")
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            now = time.perf_counter()
            if ev.get("choices") and ev["choices"][0].get("text") is not None:
                first = now if first is None else first
                last = now
            if ev.get("usage"):
                usage = ev["usage"]
    if first is None or last is None or not usage:
        raise RuntimeError("the stream ended without tokens or usage")
    return first - t0, last - first, int(usage["prompt_tokens"]), int(usage["completion_tokens"])


WARMUP_REQUESTS = 2
"""Requests sent and discarded before the sweep (:func:`measure`)."""


def measure(
    url: str,
    model: str,
    prompt_tokens: list[int],
    concurrency: list[int],
    output_tokens: int,
    repeats: int,
    timeout_s: float,
    warmup_requests: int = WARMUP_REQUESTS,
) -> list[Measurement]:
    """Run the sweep (module docstring) after ``warmup_requests`` unmeasured ones (of at most 4
    output tokens); one :class:`Measurement` per request. Raises ``RuntimeError`` naming the
    request that failed."""
    out: list[Measurement] = []
    serial = 0
    with httpx.Client(timeout=timeout_s) as client, ThreadPoolExecutor(max_workers=max(concurrency)) as pool:
        # warm-up, not measured: a server's first requests pay one-time costs (connections, allocator,
        # kernels' first calls) that would otherwise land in the single-request TTFTs and so in R
        for i in range(warmup_requests):
            _one(client, url, model, f"warm-up {i} " + " ".join(["hello"] * 62), min(output_tokens, 4))
        for n in prompt_tokens:
            for c in concurrency:
                for _ in range(repeats):
                    prompts = []
                    for _ in range(c):
                        serial += 1
                        prompts.append(f"{serial} " + " ".join(["hello"] * max(1, n - 2)))
                    futs = [pool.submit(_one, client, url, model, p, output_tokens) for p in prompts]
                    for i, f in enumerate(futs):
                        try:
                            ttft, span, pt, ct = f.result()
                        except Exception as exc:
                            raise RuntimeError(f"request {i + 1} of {c} at {n} prompt tokens: {exc}") from exc
                        out.append(Measurement(c, pt, ct, ttft, span / (ct - 1) if ct > 1 else 0.0))
    return out


def build_profile(
    args: argparse.Namespace, fit: ProfileFit, kv_tokens: int, block_size_tokens: int = 16
) -> PoolProfile:
    """The fitted profile with the operator's price, GPUs per instance and KV capacity."""
    return PoolProfile(
        name=args.name or args.model,
        model=args.model,
        gpu=args.gpu,
        tp=args.gpus_per_instance,
        price_usd_per_gpu_h=args.price_usd_per_gpu_h,
        kv_capacity_tokens=kv_tokens,
        block_size_tokens=block_size_tokens,
        max_num_seqs_cap=args.max_num_seqs,
        w_s=fit.w_s,
        h_s_per_kv_token=fit.h_s_per_kv_token,
        p_s_per_prefill_token=fit.p_s_per_prefill_token,
        request_overhead_s=fit.request_overhead_s,
        s_s_per_running_seq=fit.s_s_per_running_seq,
        a_s_per_prefill_context_token=fit.a_s_per_prefill_context_token,
        chunk_tokens=args.chunk_tokens,
        max_num_batched_tokens=args.chunk_tokens,
        admission="vllm",
        source=(
            f"tbr profile: {fit.rows} timings (prompts {args.prompt_tokens} tokens, concurrency {args.concurrency}, "
            f"{args.output_tokens} output tokens); TPOT error median {fit.tpot_median_rel_error:.1%} max "
            f"{fit.tpot_max_rel_error:.1%}, TTFT error median {fit.ttft_median_rel_error:.1%} max {fit.ttft_max_rel_error:.1%}"
        ),
    )


def _run_from_metrics(args: argparse.Namespace) -> int:
    """``--from-metrics``: scrape (or read) every instance, fit, write; exit 1 on a failed scrape or fit."""
    from planner.model.profile_metrics import (
        MetricsSnapshot,
        fit_from_snapshots,
        read_snapshot,
        scrape_series,
    )

    instances: list[list[MetricsSnapshot]] = []
    try:
        for spec in args.from_metrics:
            scrapes: list[MetricsSnapshot] = []
            for item in (x.strip() for x in spec.split(",") if x.strip()):
                if item.startswith(("http://", "https://")):
                    eprint(f"scraping {item} {args.scrapes} times, {args.interval_s:g} s apart")
                    scrapes += scrape_series(item, args.scrapes, args.interval_s)
                else:
                    scrapes.append(read_snapshot(item))
            instances.append(scrapes)
        fit = fit_from_snapshots(instances, args.chunk_tokens)
    except ValueError as exc:
        eprint(f"error: {exc}")
        return 1
    info = next((s for ss in instances for s in ss if s.kv_capacity_tokens), None)
    kv = args.kv_capacity_tokens or (info.kv_capacity_tokens if info else None)
    if not kv:
        eprint("error: the metrics have no vllm:cache_config_info; give --kv-capacity-tokens")
        return 1
    block = (info.block_size_tokens if info else None) or 16
    args.model = args.model or args.name or "vllm-fleet"
    prof = build_profile(args, fit, kv, block)
    n = sum(len(s) for s in instances)
    prof = dataclasses.replace(
        prof,
        source=(
            f"tbr profile --from-metrics: {fit.rows // 2} intervals of {len(instances)} instance(s), {n} scrapes; "
            f"ITL error median {fit.tpot_median_rel_error:.1%} max {fit.tpot_max_rel_error:.1%}, prefill error "
            f"median {fit.ttft_median_rel_error:.1%} max {fit.ttft_max_rel_error:.1%}"
        ),
    )
    write_profile_file(prof, args.out)
    print(
        f"wrote {args.out}: W {fit.w_s * 1e3:.3f} ms, H {fit.h_s_per_kv_token * 1e6:.4f} µs/token, "
        f"P {fit.p_s_per_prefill_token * 1e6:.3f} µs/token, KV {kv:,} tokens; {prof.source}"
    )
    return 0


def run(args: argparse.Namespace) -> int:
    """Sweep (or read the fleet's metrics), fit, write; exit 2 on bad options, 1 when the server fails or
    the fit is impossible."""
    if args.from_metrics:
        return _run_from_metrics(args)
    if not args.model:
        eprint("error: --url needs --model")
        return 2
    url = args.url.rstrip("/")
    n_req = len(args.prompt_tokens) * sum(args.concurrency) * args.repeats
    if n_req > args.max_requests:
        eprint(f"error: the sweep needs {n_req} requests, above --max-requests {args.max_requests}")
        return 2
    try:
        read = kv_capacity_from_metrics(url)
        if args.kv_capacity_tokens is None and read is None:
            eprint("error: /metrics has no vllm:cache_config_info; give --kv-capacity-tokens")
            return 1
        kv = args.kv_capacity_tokens or (read[0] if read else 0)
        block = read[1] if read else 16
        eprint(f"profiling {url} ({args.model}): {n_req} requests, KV {kv:,} tokens")
        ms = measure(url, args.model, args.prompt_tokens, args.concurrency, args.output_tokens, args.repeats,
                     args.timeout_s)  # fmt: skip
        fit = fit_iteration_model(ms, args.chunk_tokens)
    except (httpx.HTTPError, RuntimeError, ValueError) as exc:
        eprint(f"error: {exc}")
        return 1
    prof = build_profile(args, fit, kv, block)
    write_profile_file(prof, args.out)
    print(
        f"wrote {args.out}: W {fit.w_s * 1e3:.3f} ms, H {fit.h_s_per_kv_token * 1e6:.4f} µs/token, "
        f"P {fit.p_s_per_prefill_token * 1e6:.3f} µs/token, S {fit.s_s_per_running_seq * 1e3:.3f} ms/sequence, "
        f"A {fit.a_s_per_prefill_context_token * 1e9:.3f} ns/token², R {fit.request_overhead_s * 1e3:.2f} ms/request, "
        f"KV {kv:,} tokens; {prof.source}"
    )
    return 0
