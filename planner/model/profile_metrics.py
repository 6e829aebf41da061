"""Fit the iteration-time model from a live fleet's vLLM Prometheus metrics (``tbr profile --from-metrics``).

No load is sent: the fleet's own traffic is the sweep. Each instance is scraped at least twice (or
saved ``/metrics`` texts are read); between two scrapes of one instance the counters' increments give

- ``ITL`` = Δ``vllm:inter_token_latency_seconds_sum`` / Δ``_count`` (vLLM 0.32 also exports the same
  histogram under its deprecated name ``vllm:time_per_output_token_seconds``): the mean time between
  two output tokens of a request, one decode iteration;
- ``prefill`` = Δ``vllm:request_prefill_time_seconds_sum`` / Δ``_count``: the mean time from a
  request's first scheduling to its first token;
- ``L̄`` = Δ``vllm:request_prompt_tokens_sum`` / Δ``_count`` and ``Ō`` the same of
  ``vllm:request_generation_tokens``: the mean prompt and output of the requests that finished;
- ``n̄``, the mean decode batch: Δ``vllm:generation_tokens_total`` / Δ``vllm:iteration_tokens_total_count``
  (output tokens per engine step; every running sequence makes one per step), or, from a server that
  does not export the iteration histogram, the mean of the ``vllm:num_requests_running`` gauge at the
  two scrapes.

Names: vLLM 0.32.0 ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger``; ``vllm:iteration_tokens_total``
observes ``computed prompt tokens + generation tokens`` once per engine step). Each interval is two
rows of the model of :mod:`planner.model.profile_fit` (``t_iter = W + H·Σc + P·Σprefill``):

- decode: ``ITL = W + H·n̄·(L̄ + Ō/2)`` (the batch's context, every sequence at mid-answer);
- prefill: ``prefill = k·(W + H·n̄·(L̄ + Ō/2)) + P·L̄`` with ``k = ceil(L̄ / chunk)`` iterations,
  each carrying the running batch as well.

:func:`planner.model.profile_fit.fit_rows` fits W, H, P (relative error, non-negative); the other constants
of the sweep's fit (R, S, A) are not told apart by these means and stay 0 (W and H absorb them). The fit needs
intervals at two or more different batch contexts ``n̄·c̄``: a fleet whose load changes over the
scrapes, or several instances at different loads. A single scrape of an instance counts its
cumulative histograms since the server started (one row, ``n̄`` the gauge at that moment). The
text format is parsed with the Prometheus client's own parser (``prometheus_client.parser``).
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from planner.model.profile_fit import ProfileFit, fit_rows

__all__ = [
    "MetricsInterval",
    "MetricsSnapshot",
    "fit_from_snapshots",
    "intervals",
    "parse_exposition",
    "read_snapshot",
    "scrape_series",
]

ITL_NAMES = ("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds")
PREFILL = "vllm:request_prefill_time_seconds"
PROMPT = "vllm:request_prompt_tokens"
GENERATION = "vllm:request_generation_tokens"
TTFT = "vllm:time_to_first_token_seconds"
ITERATIONS = "vllm:iteration_tokens_total"
GENERATED = "vllm:generation_tokens_total"
RUNNING = "vllm:num_requests_running"
CACHE_INFO = "vllm:cache_config_info"
HISTOGRAMS = (*ITL_NAMES, PREFILL, PROMPT, GENERATION, TTFT, ITERATIONS)


@dataclass(frozen=True)
class MetricsSnapshot:
    """One scrape of one vLLM server: each histogram's ``_sum`` and ``_count`` (summed over label sets;
    absent histograms are absent keys), the generated-tokens counter (None when absent), the
    running-requests gauge, and the KV capacity from ``vllm:cache_config_info``
    (``num_gpu_blocks × block_size`` tokens; None when not exported)."""

    source: str
    sums: dict[str, float]
    counts: dict[str, float]
    generated_tokens: float | None
    running: float
    kv_capacity_tokens: int | None
    block_size_tokens: int | None


@dataclass(frozen=True)
class MetricsInterval:
    """What one instance did between two scrapes (or since its start): ``requests`` finished,
    ``running`` mean decode batch (sequences), ``prompt_tokens``/``output_tokens`` per finished request, ``itl_s`` mean
    inter-token latency and ``prefill_s`` mean prefill time (seconds)."""

    source: str
    requests: float
    running: float
    prompt_tokens: float
    output_tokens: float
    itl_s: float
    prefill_s: float

    @property
    def batch_context_tokens(self) -> float:
        """``n̄·(L̄ + Ō/2)``: the context tokens one decode iteration reads, tokens."""
        return self.running * (self.prompt_tokens + self.output_tokens / 2.0)


def parse_exposition(text: str, source: str) -> MetricsSnapshot:
    """A :class:`MetricsSnapshot` from Prometheus text exposition ``text`` (``source`` names it in
    errors). Raises ``ValueError`` when the text is not the exposition format or has no vLLM
    histogram of :data:`HISTOGRAMS`."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    counts: dict[str, float] = {}
    running = 0.0
    generated: float | None = None
    kv = block = None
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise ValueError(f"{source}: not Prometheus text exposition ({exc})") from None
    for fam in families:
        for s in fam.samples:
            for h in HISTOGRAMS:
                if s.name == f"{h}_sum":
                    sums[h] = sums.get(h, 0.0) + float(s.value)
                elif s.name == f"{h}_count":
                    counts[h] = counts.get(h, 0.0) + float(s.value)
            if s.name == RUNNING:
                running += float(s.value)
            elif s.name == GENERATED:
                generated = (generated or 0.0) + float(s.value)
            elif s.name in (CACHE_INFO, f"{CACHE_INFO}_info") and kv is None:
                blocks, size = s.labels.get("num_gpu_blocks", ""), s.labels.get("block_size", "")
                if blocks.isdigit() and size.isdigit():
                    kv, block = int(blocks) * int(size), int(size)
    if not counts:
        raise ValueError(f"{source}: no vLLM histogram ({', '.join(HISTOGRAMS)}) in the exposition")
    return MetricsSnapshot(source, sums, counts, generated, running, kv, block)


def read_snapshot(spec: str, timeout_s: float = 10.0) -> MetricsSnapshot:
    """Scrape ``spec``: an ``http(s)://`` server base URL (``/metrics`` is appended unless given) or a
    saved exposition file. Raises ``ValueError`` (unreadable file, HTTP error, not an exposition)."""
    if spec.startswith(("http://", "https://")):
        import httpx

        url = spec if spec.rstrip("/").endswith("/metrics") else f"{spec.rstrip('/')}/metrics"
        try:
            r = httpx.get(url, timeout=timeout_s)
            r.raise_for_status()
        except httpx.HTTPError as exc:
            raise ValueError(f"{url}: {exc}") from None
        return parse_exposition(r.text, url)
    try:
        text = Path(spec).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{spec}: {exc}") from None
    return parse_exposition(text, spec)


def _delta(a: MetricsSnapshot | None, b: MetricsSnapshot, name: str, sums: bool) -> float:
    cur = (b.sums if sums else b.counts).get(name, 0.0)
    prev = 0.0 if a is None else (a.sums if sums else a.counts).get(name, 0.0)
    return cur - prev


def _mean(a: MetricsSnapshot | None, b: MetricsSnapshot, name: str) -> float | None:
    n = _delta(a, b, name, False)
    return _delta(a, b, name, True) / n if n > 0 else None


def intervals(scrapes: Sequence[MetricsSnapshot]) -> list[MetricsInterval]:
    """The intervals of one instance's successive ``scrapes`` (time order): consecutive pairs, or the
    single scrape since the server's start. An interval in which no request finished (or a counter
    went down: the server restarted) is left out. Raises ``ValueError`` with no scrape."""
    if not scrapes:
        raise ValueError("no scrape")
    pairs: list[tuple[MetricsSnapshot | None, MetricsSnapshot]] = (
        [(None, scrapes[0])] if len(scrapes) == 1 else list(itertools.pairwise(scrapes))
    )
    out = []
    for a, b in pairs:
        itl_name = next((n for n in ITL_NAMES if n in b.counts), None)
        if itl_name is None:
            continue
        values = [_mean(a, b, n) for n in (itl_name, PREFILL, PROMPT, GENERATION)]
        done = _delta(a, b, PROMPT, False)
        if any(v is None or v < 0 for v in values) or done <= 0:
            continue
        itl, prefill, prompt, gen = (float(v) for v in values if v is not None)
        steps = _delta(a, b, ITERATIONS, False)
        gen_now, gen_before = b.generated_tokens, (0.0 if a is None else a.generated_tokens)
        if steps > 0 and gen_now is not None and gen_before is not None:
            running = (gen_now - gen_before) / steps
        else:
            running = b.running if a is None else (a.running + b.running) / 2.0
        out.append(MetricsInterval(b.source, done, running, prompt, gen, itl, prefill))
    return out


def fit_from_snapshots(instances: Sequence[Sequence[MetricsSnapshot]], chunk_tokens: int) -> ProfileFit:
    """Fit W, H, P (module docstring) to every interval of every instance (``instances``: per instance
    its scrapes in time order); ``chunk_tokens`` the servers' ``max_num_batched_tokens``. Raises
    ``ValueError`` with fewer than two intervals at distinct batch contexts, or when the fit fails."""
    rows = [iv for scrapes in instances for iv in intervals(scrapes)]
    contexts = {round(iv.batch_context_tokens, 3) for iv in rows}
    if len(rows) < 2 or len(contexts) < 2:
        raise ValueError(
            f"{len(rows)} usable interval(s) at {len(contexts)} batch context(s): the fit needs two or more "
            "intervals in which requests finished at different loads (scrape more often, longer, or more instances)"
        )
    a, y, kind = [], [], []
    for iv in rows:
        ctx = iv.batch_context_tokens
        a.append([1.0, ctx, 0.0, 0.0, 0.0, 0.0])
        y.append(iv.itl_s)
        kind.append(0)
        k = max(1, math.ceil(iv.prompt_tokens / chunk_tokens))
        a.append([float(k), k * ctx, iv.prompt_tokens, 0.0, 0.0, 0.0])
        y.append(iv.prefill_s)
        kind.append(1)
    return fit_rows(np.asarray(a), np.asarray(y), np.asarray(kind, dtype=np.int64))


def scrape_series(
    url: str, scrapes: int, interval_s: float, sleep: Callable[[float], None] = time.sleep
) -> list[MetricsSnapshot]:
    """``scrapes`` successive scrapes of ``url`` ``interval_s`` apart (the live fleet's own traffic
    between them). Raises ``ValueError`` on a failed scrape."""
    out = []
    for i in range(scrapes):
        if i:
            sleep(interval_s)
        out.append(read_snapshot(url))
    return out
