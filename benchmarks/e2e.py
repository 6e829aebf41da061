"""Side-by-side end-to-end measurements through Envoy (throughput, CPU, latency).

Phases, each interleaving every variant in every repetition so that the shared 2-core box's
drift hits all of them alike:

1. warm-up: 1 s of wrk per (variant, body);
2. throughput: ``wrk -t1 -c16`` per (variant, body): req/s, router and front-Envoy CPU per
   request (``/proc/<pid>/stat`` deltas ÷ completed requests), ext_proc messages per request
   and fail-open counts (front Envoy stats deltas);
3. unloaded latency: ``hey -c1 -q200`` (open loop, 200 req/s) per (variant, body), each
   repetition in :data:`UNLOADED_SLICES` interleaved rounds whose samples are pooled (each run's
   dialing first request left out);
4. latency at 80 % load: for each variant, ``hey`` at 0.8 × that variant's median capacity,
   run back to back with bare Envoy at the same rate.
"""

from __future__ import annotations

import random
import statistics
from dataclasses import asdict, dataclass, replace
from typing import Any

from benchmarks.loadgen import hey, percentile, write_wrk_script, wrk
from benchmarks.procs import cpu_seconds
from benchmarks.stack import Stack

__all__ = ["UNLOADED_SLICES", "Measurement", "run_suite"]


@dataclass
class Measurement:
    """One load run of one variant with one body."""

    phase: str
    variant: str
    size: str
    rep: int
    requests: int
    rps: float
    p50_ms: float
    p99_ms: float
    router_cpu_ms_per_req: float
    envoy_cpu_ms_per_req: float
    msgs_per_req: float
    fail_open: int
    errors: int
    short_share: float
    command: str


def _measure(stack: Stack, phase: str, variant: str, size: str, rep: int, run: Any) -> Measurement:
    pids = stack.router_pids.get(variant, [])
    s0 = stack.stats()
    c0 = [cpu_seconds(p) for p in pids]
    e0 = cpu_seconds(stack.front_pid)
    r = run()
    e1 = cpu_seconds(stack.front_pid)
    c1 = [cpu_seconds(p) for p in pids]
    s1 = stack.stats()

    def d(name: str) -> int:
        return s1.get(name, 0) - s0.get(name, 0)

    ep = f"http.{variant}.ext_proc.tbr."
    streams = d(ep + "streams_started")
    short = d("cluster.short_pool.upstream_rq_total")
    long_ = d("cluster.long_pool.upstream_rq_total")
    n = max(r.requests, 1)
    return Measurement(
        phase=phase,
        variant=variant,
        size=size,
        rep=rep,
        requests=r.requests,
        rps=r.rps,
        p50_ms=r.p50_ms,
        p99_ms=r.p99_ms,
        router_cpu_ms_per_req=1000.0 * (sum(c1) - sum(c0)) / n,
        envoy_cpu_ms_per_req=1000.0 * (e1 - e0) / n,
        msgs_per_req=d(ep + "stream_msgs_sent") / streams if streams else 0.0,
        fail_open=d(ep + "failure_mode_allowed") + d(ep + "message_timeouts") + d(ep + "streams_failed"),
        errors=getattr(r, "non_2xx", 0) + getattr(r, "socket_errors", 0) + getattr(r, "non_200", 0),
        short_share=short / max(short + long_, 1),
        command=r.command,
    )


UNLOADED_SLICES = 3
"""Rounds per unloaded repetition (each pair runs ``unloaded_s / UNLOADED_SLICES`` per round)."""


def _pooled(parts: list[tuple[Measurement, tuple[float, ...]]]) -> Measurement:
    """One measurement of the slices of one (variant, body, repetition): requests and errors summed,
    CPU per request weighted by requests, p50 / p99 of the pooled latencies."""
    ms = [m for m, _ in parts]
    lat = [x for _, xs in parts for x in xs]
    n = max(sum(m.requests for m in ms), 1)
    first = ms[0]
    return replace(
        first,
        requests=sum(m.requests for m in ms),
        rps=sum(m.rps * m.requests for m in ms) / n,
        p50_ms=percentile(lat, 0.50),
        p99_ms=percentile(lat, 0.99),
        router_cpu_ms_per_req=sum(m.router_cpu_ms_per_req * m.requests for m in ms) / n,
        envoy_cpu_ms_per_req=sum(m.envoy_cpu_ms_per_req * m.requests for m in ms) / n,
        msgs_per_req=sum(m.msgs_per_req * m.requests for m in ms) / n,
        fail_open=sum(m.fail_open for m in ms),
        errors=sum(m.errors for m in ms),
        short_share=sum(m.short_share * m.requests for m in ms) / n,
        command=f"{UNLOADED_SLICES} interleaved slices of: {first.command}",
    )


def _pairs(stack: Stack) -> list[tuple[str, str]]:
    return [(v.name, size) for size in stack.bodies for v in stack.variants.values() if size in v.sizes]


def _unloaded(
    stack: Stack,
    pairs: list[tuple[str, str]],
    latency_reps: int,
    unloaded_s: float,
    out: list[Measurement],
    log: Any,
) -> None:
    """The unloaded phase (open loop, 200 req/s, one connection), appended to ``out``.

    Each repetition is :data:`UNLOADED_SLICES` rounds of every pair for ``unloaded_s /
    UNLOADED_SLICES`` each (a fresh seeded order per round), the samples of a pair pooled over its
    rounds: a burst of the shared box's noise then falls on every variant's samples alike instead
    of on the one 3 s run it happened in (the p99 of one run moved by ±0.5 ms between runs).
    """
    for rep in range(latency_reps):
        parts: dict[tuple[str, str], list[tuple[Measurement, tuple[float, ...]]]] = {p: [] for p in pairs}
        for sl in range(UNLOADED_SLICES):
            order = list(pairs)
            random.Random(100 + 10 * rep + sl).shuffle(order)
            for v, size in order:
                got: dict[str, Any] = {}

                def run(v: str = v, size: str = size, got: dict[str, Any] = got) -> Any:
                    got["r"] = hey(
                        stack.url(v),
                        stack.body_files[size],
                        stack.headers(size),
                        rate_rps=200,
                        workers=1,
                        duration_s=unloaded_s / UNLOADED_SLICES,
                        skip_first=True,
                    )
                    return got["r"]

                m = _measure(stack, "unloaded", v, size, rep, run)
                parts[(v, size)].append((m, got["r"].latencies_ms))
        for v, size in pairs:
            m = _pooled(parts[(v, size)])
            out.append(m)
            log(
                f"  unloaded rep{rep} {v:18s} {size:5s} p50 {m.p50_ms:.2f} p99 {m.p99_ms:.2f} ms"
                f"  router {m.router_cpu_ms_per_req:.3f} ms/req"
            )


def run_suite(
    stack: Stack,
    *,
    reps: int,
    wrk_s: float,
    hey_s: float,
    latency_reps: int,
    log: Any = print,
    unloaded_s: float | None = None,
) -> list[dict[str, Any]]:
    """Run all phases; returns every measurement as a dict (see :class:`Measurement`).

    The order of the (variant, body) pairs is shuffled in every repetition (seeded), so a
    variant is not always measured at the same point of the box's load swings.
    """
    scripts = {}
    for size, f in stack.body_files.items():
        scripts[size] = stack.workdir / f"wrk_{size}.lua"
        write_wrk_script(scripts[size], f, stack.headers(size))
    pairs = _pairs(stack)
    out: list[Measurement] = []

    def thr(v: str, size: str, rep: int, dur: float, phase: str = "throughput") -> Measurement:
        m = _measure(
            stack,
            phase,
            v,
            size,
            rep,
            lambda: wrk(stack.url(v), scripts[size], connections=16, duration_s=dur),
        )
        return m

    log(f"warm-up: {len(pairs)} (variant, body) pairs")
    for v, size in pairs:
        thr(v, size, -1, 1.0, "warmup")
    for rep in range(reps):
        order = list(pairs)
        random.Random(rep).shuffle(order)
        for v, size in order:
            m = thr(v, size, rep, wrk_s)
            out.append(m)
            log(
                f"  thr rep{rep} {v:18s} {size:5s} {m.rps:8.0f} req/s  router {m.router_cpu_ms_per_req:.3f} ms/req"
                f"  msgs {m.msgs_per_req:.2f}  fail_open {m.fail_open}  short {m.short_share:.2f}"
            )
    caps: dict[tuple[str, str], float] = {}
    for v, size in pairs:
        caps[(v, size)] = statistics.median(m.rps for m in out if m.variant == v and m.size == size)
    _unloaded(stack, pairs, latency_reps, unloaded_s or 2 * hey_s, out, log)
    # 80 % load: as many repetitions as the unloaded phase, pairs in a fresh seeded order each time
    # (one 3 s run's p99 is its 1 % worst requests: a few hundred, too few to compare variants).
    for rep in range(latency_reps):
        order = [(v, size) for v, size in pairs if stack.variants[v].kind != "bare"]
        random.Random(200 + rep).shuffle(order)
        for v, size in order:
            rate = 0.8 * caps[(v, size)]
            for target in (v, "bare"):
                m = _measure(
                    stack,
                    f"load80:{v}",
                    target,
                    size,
                    rep,
                    lambda target=target, size=size, rate=rate: hey(
                        stack.url(target),
                        stack.body_files[size],
                        stack.headers(size),
                        rate_rps=rate,
                        workers=8,
                        duration_s=hey_s,
                    ),
                )
                out.append(m)
                log(
                    f"  80% {v} → {target:18s} {size:5s} {m.rps:7.0f} req/s p50 {m.p50_ms:.2f} p99 {m.p99_ms:.2f}"
                )
    return [asdict(m) for m in out]
