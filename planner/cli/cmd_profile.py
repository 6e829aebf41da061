"""``tbr profile``: fit a profile to a running OpenAI-compatible vLLM server with a short load sweep.

For every prompt length and concurrency of the sweep, ``concurrency`` streaming ``/v1/completions``
requests start together (``max_tokens`` = ``--output-tokens``, vLLM's ``ignore_eos`` so each makes
exactly that many tokens; each prompt starts with its own number, so vLLM's prefix cache cannot serve
it). The client measures each request's TTFT and time per output token, reads ``usage`` for the true
token counts, and :func:`planner.model.profile_fit.fit_iteration_model` fits W, H and P. The KV capacity is
``num_gpu_blocks × block_size`` from ``vllm:cache_config_info`` on ``/metrics`` (or
``--kv-capacity-tokens``). The profile file (:mod:`planner.model.profile_file`) is what ``tbr plan`` and
``tbr simulate`` read with ``--profile-file``.

Bounded: at most ``--max-requests`` requests, each with ``--timeout-s``; any failed request is an
error (exit 1) that names it, never a silent hole in the fit.
"""

from __future__ import annotations

import argparse
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
    p.add_argument("--url", required=True, help="the server's base URL, e.g. http://127.0.0.1:8000 (no /v1)")
    p.add_argument("--model", required=True, help="served model name")
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


def measure(
    url: str,
    model: str,
    prompt_tokens: list[int],
    concurrency: list[int],
    output_tokens: int,
    repeats: int,
    timeout_s: float,
) -> list[Measurement]:
    """Run the sweep (module docstring); one :class:`Measurement` per request. Raises ``RuntimeError``
    naming the request that failed."""
    out: list[Measurement] = []
    serial = 0
    with httpx.Client(timeout=timeout_s) as client, ThreadPoolExecutor(max_workers=max(concurrency)) as pool:
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
        chunk_tokens=args.chunk_tokens,
        max_num_batched_tokens=args.chunk_tokens,
        admission="vllm",
        source=(
            f"tbr profile: {fit.rows} timings (prompts {args.prompt_tokens} tokens, concurrency {args.concurrency}, "
            f"{args.output_tokens} output tokens); TPOT error median {fit.tpot_median_rel_error:.1%} max "
            f"{fit.tpot_max_rel_error:.1%}, TTFT error median {fit.ttft_median_rel_error:.1%} max {fit.ttft_max_rel_error:.1%}"
        ),
    )


def run(args: argparse.Namespace) -> int:
    """Sweep, fit, write; exit 2 on bad options, 1 when the server fails or the fit is impossible."""
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
        f"P {fit.p_s_per_prefill_token * 1e6:.3f} µs/token, KV {kv:,} tokens; {prof.source}"
    )
    return 0
