"""The simulator checked against a real engine: replay a trace slice on a vLLM server and in the DES.

A *workload* is a slice of a trace scaled for one small instance (:func:`scaled_slice`): the first
``requests`` rows from ``offset``, every token count multiplied by ``token_scale`` (at least 1 prompt
and 1 output token; prompt + output clipped to ``max_model_len``), arrival gaps rescaled to ``rate``.

:func:`replay` sends it open-loop to an OpenAI-compatible vLLM server: each request at its arrival
time, a streaming ``/v1/completions`` whose prompt is a list of token ids (exactly the trace's prompt
tokens; seeded random ids, so neither the prefix cache nor two requests share a block) with
``max_tokens`` = the trace's output and ``ignore_eos`` (so it makes exactly that many tokens). The
client measures each request's TTFT (send to first streamed token) and end; vLLM's
``vllm:num_preemptions_total`` is read before and after.

:func:`simulate_workload` runs the same requests through :func:`planner.des.simulate` on one
instance of the fitted profile; :func:`compare` puts the two side by side. On a shared machine the
engine may run slower during a replay than during the profile's sweep (other work on its core); the
mean time per output token vLLM measured tells by how much, and :func:`speed_matched` re-simulates
with every time constant of the profile scaled so that the simulated mean matches it: the profile's
error and the scheduler model's error are then seen apart.

Metrics (both sides the same definitions): TTFT P50/P99 over all requests (numpy linear
percentiles, seconds); throughput = output tokens (or requests) / span, the span running from the
first arrival to the last completion (seconds); preemptions = preemption events; the mean time
between two output tokens of a request (``tpot_mean_s``, no target: it shows whether the engine ran
at the speed of its profile; measured by vLLM's ``vllm:inter_token_latency_seconds``, from the
engine's own step timestamps, so neither streaming nor the client is in it).
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from dataclasses import dataclass, field, replace
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt

from planner.des import PoolSpec, simulate
from planner.des.routers import make_router
from planner.model.profiles import PoolProfile
from planner.workload.trace import Trace, build_trace

__all__ = [
    "SERVER_HISTOGRAMS",
    "TARGETS",
    "ComparisonRow",
    "EngineRun",
    "compare",
    "measured_metrics",
    "metrics_from",
    "replay",
    "scaled_profile",
    "scaled_slice",
    "simulate_workload",
    "slowest_requests",
    "speed_matched",
    "vllm_counter",
]

TARGETS = {
    "ttft_p50_s": 0.15,
    "ttft_p99_s": 0.25,
    "output_tokens_per_s": 0.15,
    "requests_per_s": 0.15,
}
"""Agreement asked for (relative difference of the simulated to the measured value, issue 32 item 3)."""

PROMPT_TOKEN_ID_RANGE = (1000, 100_000)
"""Prompt token ids are drawn from this range: ordinary vocabulary of both Qwen3 (151,936) and
Llama-3 (128,256), below their special tokens."""


def scaled_slice(
    trace: Trace,
    *,
    requests: int,
    offset: int = 0,
    token_scale: float = 1.0,
    rate_req_per_s: float,
    max_model_len: int,
) -> Trace:
    """Rows ``offset .. offset+requests`` of ``trace``, tokens × ``token_scale`` and arrivals rescaled
    to ``rate_req_per_s`` (mean over the slice). Prompt ≥ 1, output ≥ 1 and prompt + output ≤
    ``max_model_len`` (the output is cut first, the prompt keeps ≥ 1 output token of room).

    Raises ``ValueError`` when the slice is empty or has fewer than 2 requests (no rate)."""
    end = min(len(trace), offset + requests)
    if end - offset < 2:
        raise ValueError(
            f"the slice {offset}..{offset + requests} of a {len(trace)}-request trace has < 2 requests"
        )
    if token_scale <= 0 or rate_req_per_s <= 0 or max_model_len < 2:
        raise ValueError("token_scale, rate and max_model_len must be positive (max_model_len >= 2)")
    sl = slice(offset, end)
    arr = trace.arrival_s[sl] - trace.arrival_s[offset]
    n = end - offset
    span = float(arr[-1])
    arr = arr * ((n / rate_req_per_s) / span) if span > 0 else np.arange(n) / rate_req_per_s
    inp = np.maximum(1, np.round(trace.input_tokens[sl] * token_scale)).astype(np.int64)
    inp = np.minimum(inp, max_model_len - 1)
    out = np.maximum(1, np.round(trace.output_tokens[sl] * token_scale)).astype(np.int64)
    out = np.minimum(out, max_model_len - inp)
    return build_trace(arr, inp, out)


@dataclass
class EngineRun:
    """What one replay measured: per request (arrays shape ``(n,)``, seconds since the first
    arrival) the send time, first-token time and end time; usage's ``completion_tokens``; the
    preemption events the server counted; the worst lateness of a send behind its arrival; the mean
    inter-token latency the server measured (seconds); the means of :data:`SERVER_HISTOGRAMS` over the
    replay (seconds, keyed as there)."""

    sent_s: npt.NDArray[np.float64]
    first_token_s: npt.NDArray[np.float64]
    done_s: npt.NDArray[np.float64]
    completion_tokens: npt.NDArray[np.int64]
    preemptions: int
    max_send_lateness_s: float
    errors: list[str] = field(default_factory=list)
    tpot_mean_s: float = math.nan
    server_means: dict[str, float] = field(default_factory=dict)


def vllm_counter(base_url: str, name: str, timeout_s: float = 10.0) -> float:
    """Sum of the samples of counter ``name`` (e.g. ``vllm:num_preemptions_total``) on
    ``base_url/metrics``; 0.0 when absent. Raises ``httpx.HTTPError`` when the server does not answer."""
    text = httpx.get(f"{base_url}/metrics", timeout=timeout_s).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            total += float(line.rsplit(" ", 1)[1])
    return total


async def _one(
    client: httpx.AsyncClient,
    url: str,
    model: str,
    prompt_ids: list[int],
    output_tokens: int,
    at_s: float,
    t0: float,
) -> tuple[float, float, float, int]:
    await asyncio.sleep(max(0.0, t0 + at_s - time.perf_counter()))
    body = {
        "model": model,
        "prompt": prompt_ids,
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": True,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    sent = time.perf_counter()
    first = math.nan
    completion = 0
    async with client.stream("POST", f"{url}/v1/completions", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {(await r.aread()).decode(errors='replace')[:200]}")
        async for line in r.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            ev = json.loads(line[6:])
            if math.isnan(first) and ev.get("choices"):
                first = time.perf_counter()
            if ev.get("usage"):
                completion = int(ev["usage"]["completion_tokens"])
    done = time.perf_counter()
    return sent - t0, first - t0, done - t0, completion


async def _replay(url: str, model: str, trace: Trace, seed: int, timeout_s: float) -> EngineRun:
    rng = np.random.default_rng(seed)
    lo, hi = PROMPT_TOKEN_ID_RANGE
    prompts = [rng.integers(lo, hi, size=int(n)).tolist() for n in trace.input_tokens]
    limits = httpx.Limits(max_connections=len(trace) + 1, max_keepalive_connections=len(trace) + 1)
    async with httpx.AsyncClient(timeout=timeout_s, limits=limits) as client:
        t0 = time.perf_counter() + 0.2
        tasks = [
            asyncio.create_task(_one(client, url, model, p, int(o), float(a), t0))
            for p, o, a in zip(prompts, trace.output_tokens, trace.arrival_s, strict=True)
        ]
        results = await asyncio.gather(*tasks, return_exceptions=True)
    n = len(trace)
    sent, first, done = np.full(n, np.nan), np.full(n, np.nan), np.full(n, np.nan)
    comp = np.zeros(n, dtype=np.int64)
    errors = []
    for i, res in enumerate(results):
        if isinstance(res, BaseException):
            errors.append(f"request {i} ({trace.input_tokens[i]} prompt tokens): {res!r}")
            continue
        sent[i], first[i], done[i], comp[i] = res
    late = float(np.nanmax(sent - trace.arrival_s)) if np.any(~np.isnan(sent)) else 0.0
    return EngineRun(sent, first, done, comp, 0, late, errors)


SERVER_HISTOGRAMS = {
    "queue_mean_s": "vllm:request_queue_time_seconds",
    "prefill_mean_s": "vllm:request_prefill_time_seconds",
    "server_ttft_mean_s": "vllm:time_to_first_token_seconds",
    "tpot_mean_s": "vllm:inter_token_latency_seconds",
}
"""vLLM 0.32's per-request histograms (``vllm/v1/metrics/loggers.py``) whose means over a replay
decompose its TTFT: queue (engine core: queued → first scheduled, which includes the wait for the next
scheduler step), prefill (first scheduled → first token), and the frontend's TTFT (its arrival →
first token); plus the inter-token latency (the engine's speed)."""


def replay(url: str, model: str, trace: Trace, *, seed: int = 0, timeout_s: float = 300.0) -> EngineRun:
    """Send ``trace`` open-loop to the server at ``url`` (module docstring) and measure it; the means
    of :data:`SERVER_HISTOGRAMS` over the replay go to ``server_means`` (NaN when a histogram is absent).

    Every request must succeed: a failed one (HTTP error, timeout, a completion shorter than asked)
    raises ``RuntimeError`` naming it, never a silent hole in the comparison."""
    names = ["vllm:num_preemptions_total"]
    for h in SERVER_HISTOGRAMS.values():
        names += [f"{h}_sum", f"{h}_count"]
    before = [vllm_counter(url, m) for m in names]
    run = asyncio.run(_replay(url, model, trace, seed, timeout_s))
    after = [vllm_counter(url, m) for m in names]
    run.preemptions = round(after[0] - before[0])
    for i, key in enumerate(SERVER_HISTOGRAMS):
        d_sum, d_count = after[1 + 2 * i] - before[1 + 2 * i], after[2 + 2 * i] - before[2 + 2 * i]
        run.server_means[key] = d_sum / d_count if d_count > 0 else math.nan
    run.tpot_mean_s = run.server_means["tpot_mean_s"]
    short = np.flatnonzero(run.completion_tokens != trace.output_tokens)
    for i in short[:5]:
        if not run.errors or str(i) not in "".join(run.errors):
            run.errors.append(
                f"request {i}: {run.completion_tokens[i]} of {trace.output_tokens[i]} output tokens"
            )
    if run.errors:
        raise RuntimeError(f"{len(run.errors)} request(s) failed: " + "; ".join(run.errors[:5]))
    return run


def simulate_workload(trace: Trace, profile: PoolProfile, max_model_len: int) -> dict[str, Any]:
    """The same workload on one simulated instance of ``profile`` (its ``max_num_seqs_cap``, KV,
    ``max_num_batched_tokens``; vLLM admission when the profile says so); :func:`metrics_from` of it.
    Every request counts (no warm-up: the engine also starts empty)."""
    spec = PoolSpec("engine", profile, max_model_len, 1, max_num_seqs=profile.max_num_seqs_cap)
    router = make_router("homogeneous")
    res = simulate(trace, [spec], router, warmup_fraction=0.0)
    gaps = (trace.output_tokens - 1).astype(np.float64)
    decode_s = float(np.nansum(res.tpot_s * gaps))
    return metrics_from(
        ttft_s=res.ttft_s,
        span_s=float(res.makespan_s),
        output_tokens=int(trace.output_tokens.sum()),
        requests=len(trace),
        preemptions=int(res.preemptions.sum()),
        extra={
            "tpot_mean_s": decode_s / gaps.sum() if gaps.sum() else math.nan,
            "queue_mean_s": float(np.nanmean(res.queue_s)) if res.queue_s is not None else math.nan,
            "prefill_mean_s": float(np.nanmean(res.ttft_s - res.queue_s)) - profile.request_overhead_s
            if res.queue_s is not None
            else math.nan,
            "overhead_s": profile.request_overhead_s,
            "ttft_per_request_s": res.ttft_s.tolist(),
        },
    )


def scaled_profile(profile: PoolProfile, factor: float) -> PoolProfile:
    """``profile`` with W, S, H, P, A and R multiplied by ``factor`` (an engine ``factor`` times slower)."""
    return replace(
        profile,
        w_s=profile.w_s * factor,
        s_s_per_running_seq=profile.s_s_per_running_seq * factor,
        h_s_per_kv_token=profile.h_s_per_kv_token * factor,
        p_s_per_prefill_token=profile.p_s_per_prefill_token * factor,
        a_s_per_prefill_context_token=profile.a_s_per_prefill_context_token * factor,
        request_overhead_s=profile.request_overhead_s * factor,
    )


def speed_matched(
    trace: Trace,
    profile: PoolProfile,
    max_model_len: int,
    measured_tpot_mean_s: float,
    rounds: int = 10,
    measured_overhead_s: float = math.nan,
) -> tuple[float, dict[str, Any]]:
    """Re-simulate with the profile's time constants scaled until the simulated mean time per output
    token equals ``measured_tpot_mean_s`` (fixed-point: the batch a token waits in changes with the
    speed: up to ``rounds`` rounds, until within 0.1 %), and with the per-request overhead R set to
    ``measured_overhead_s`` when that is a number ≥ 0 (the client's mean TTFT less vLLM's mean queue and
    prefill times during the replay: R does not change the schedule, it is added to each TTFT).
    Returns ``(factor, metrics)``; factor 1.0 and the plain simulation when the measured mean is not a
    positive number."""
    factor = 1.0
    prof = profile
    if measured_overhead_s >= 0.0:
        prof = replace(profile, request_overhead_s=measured_overhead_s)
    sim = simulate_workload(trace, prof, max_model_len)
    if not measured_tpot_mean_s > 0:
        return factor, sim
    for _ in range(rounds):
        if not sim["tpot_mean_s"] > 0:
            break
        step = measured_tpot_mean_s / sim["tpot_mean_s"]
        if abs(step - 1.0) < 1e-3:
            break
        factor *= step
        scaled = scaled_profile(prof, factor)
        if measured_overhead_s >= 0.0:
            scaled = replace(scaled, request_overhead_s=measured_overhead_s)
        sim = simulate_workload(trace, scaled, max_model_len)
    return factor, sim


def metrics_from(
    *,
    ttft_s: npt.NDArray[np.float64],
    span_s: float,
    output_tokens: int,
    requests: int,
    preemptions: int,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The compared metrics (module docstring) from per-request TTFTs (seconds) and the span (seconds)."""
    t = ttft_s[~np.isnan(ttft_s)]
    return {
        "ttft_mean_s": float(np.mean(t)),
        "ttft_p50_s": float(np.percentile(t, 50)),
        "ttft_p99_s": float(np.percentile(t, 99)),
        "output_tokens_per_s": output_tokens / span_s,
        "requests_per_s": requests / span_s,
        "preemptions": preemptions,
        "span_s": span_s,
        **(extra or {}),
    }


def measured_metrics(trace: Trace, run: EngineRun) -> dict[str, Any]:
    """:func:`metrics_from` of a replay (TTFT from each request's send time)."""
    ttft = run.first_token_s - run.sent_s
    sm = run.server_means
    engine_s = sm.get("queue_mean_s", math.nan) + sm.get("prefill_mean_s", math.nan)
    return metrics_from(
        ttft_s=ttft,
        span_s=float(np.nanmax(run.done_s)),
        output_tokens=int(run.completion_tokens.sum()),
        requests=len(trace),
        preemptions=run.preemptions,
        extra={
            "max_send_lateness_s": run.max_send_lateness_s,
            "tpot_mean_s": run.tpot_mean_s,
            "queue_mean_s": sm.get("queue_mean_s", math.nan),
            "prefill_mean_s": sm.get("prefill_mean_s", math.nan),
            "server_ttft_mean_s": sm.get("server_ttft_mean_s", math.nan),
            "overhead_s": float(np.nanmean(ttft)) - engine_s,
            "ttft_per_request_s": ttft.tolist(),
        },
    )


@dataclass(frozen=True)
class ComparisonRow:
    """One metric measured on the engine and simulated: relative difference ``sim/measured − 1``
    and whether it is within :data:`TARGETS` (None for metrics without a target: preemptions)."""

    metric: str
    measured: float
    simulated: float
    rel_diff: float
    target: float | None
    within: bool | None


def compare(measured: dict[str, Any], simulated: dict[str, Any]) -> list[ComparisonRow]:
    """Rows for the TTFT, throughput, preemption and mean TPOT metrics of two :func:`metrics_from`
    dicts (``tpot_mean_s`` NaN when a side has no decode step), then the mean TTFT's parts: queue,
    prefill and the per-request overhead outside the engine (no targets; NaN when not measured)."""
    rows = []
    for key in (
        "ttft_p50_s",
        "ttft_p99_s",
        "output_tokens_per_s",
        "requests_per_s",
        "preemptions",
        "tpot_mean_s",
        "ttft_mean_s",
        "queue_mean_s",
        "prefill_mean_s",
        "overhead_s",
    ):
        m, s = float(measured.get(key, math.nan)), float(simulated.get(key, math.nan))
        rel = s / m - 1.0 if m else (0.0 if s == 0 else math.inf)
        target = TARGETS.get(key)
        rows.append(ComparisonRow(key, m, s, rel, target, None if target is None else abs(rel) <= target))
    return rows


def slowest_requests(
    trace: Trace, measured: dict[str, Any], simulated: dict[str, Any], count: int = 3
) -> list[dict[str, Any]]:
    """The ``count`` requests with the longest measured TTFT (what P99 of a short replay is made of):
    index, prompt tokens, measured and simulated TTFT (seconds), longest first."""
    m = np.asarray(measured["ttft_per_request_s"], dtype=np.float64)
    s = np.asarray(simulated["ttft_per_request_s"], dtype=np.float64)
    order = np.argsort(-np.nan_to_num(m, nan=-np.inf), kind="stable")[:count]
    return [
        {
            "request": int(i),
            "prompt_tokens": int(trace.input_tokens[i]),
            "measured_ttft_s": float(m[i]),
            "simulated_ttft_s": float(s[i]),
        }
        for i in order
    ]
