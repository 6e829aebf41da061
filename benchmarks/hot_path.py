"""What the router process does per one-message request, part by part, in process.

``python -m benchmarks.hot_path [--config shipped|route] [--size 1KB] [--number N] [--repeat R]``

Builds the runtime ``RouterApp`` installs (the shipped config/router.yaml, or the ``route_1msg``
benchmark config: routing only), then times, best of ``--repeat`` × ``--number`` calls each (thread
CPU time, µs per call), the parts of one request as the servicer runs them
(``extproc/adapter/server.py``): the ``request_body`` message Envoy sends (the body and the
``request_attributes`` of envoy/envoy.yaml) decoded from its wire bytes, the stream's processor,
the request line, the body parse, the budget, the pool, the read decision (shipped: adaptive
reads), the per-request metrics, and the whole request (handle, plan, answer serialised, stream
end). Hot caches and no gRPC or event loop: the floor of the same work inside the running router,
where the figures are 2–3× higher (BENCHMARKS.md, "The router's own work per message").
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable
from typing import Any

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from google.protobuf import struct_pb2

from benchmarks.bodies import build_bodies
from benchmarks.stack import router_config, shipped_router_config
from benchmarks.variants import SIZES
from extproc.adapter import server
from extproc.adapter.processor import StreamProcessor
from extproc.config import parse_config
from extproc.core import facade
from extproc.core.estimate.screen import route_budget
from extproc.core.request.endpoints import parse_body
from extproc.service.app import RouterApp

__all__ = ["measure"]

_ATTRIBUTES = {
    "request.path": "/v1/chat/completions",
    "request.method": "POST",
    "request.id": "8f6c7c9e-0d1b-4a52-9d84-2c1f0b7a1e55",
}


def _best_us(fn: Callable[[], Any], number: int, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.thread_time()
        for _ in range(number):
            fn()
        best = min(best, time.thread_time() - t0)
    return best / number * 1e6


def measure(
    config: str = "shipped", size: str = "1KB", number: int = 5000, repeat: int = 7
) -> dict[str, float]:
    """µs per call of each part (and of the whole request) for ``config`` (``shipped`` or ``route``).

    Raises:
        ValueError: an unknown config or size.
    """
    if config not in ("shipped", "route"):
        raise ValueError(f"config must be shipped or route, not {config!r}")
    if size not in SIZES:
        raise ValueError(f"size must be one of {', '.join(SIZES)}, not {size!r}")
    data = shipped_router_config(0) if config == "shipped" else router_config(0.0, 0)
    cfg = parse_config(data)
    app = RouterApp(cfg)
    app._install(cfg)  # the runtime start() installs, without serving
    router = app.current_router()
    body = build_bodies({size: SIZES[size]})[0].body
    attrs = struct_pb2.Struct()
    attrs.update(_ATTRIBUTES)
    msg = pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))
    msg.attributes["envoy.filters.http.ext_proc"].CopyFrom(attrs)
    wire = msg.SerializeToString()
    rng = random.Random(0)

    def request() -> None:
        req = pb.ProcessingRequest.FromString(wire)
        proc = StreamProcessor(router, rng)
        router.observer.stream_started()
        resp = proc.handle(req)
        server._plan(proc, resp, req)
        resp.SerializeToString()
        server._finish_stream(proc, "complete")

    for _ in range(2000):  # warm: learned state, caches, the read decision's cold burst spent
        request()
    req = pb.ProcessingRequest.FromString(wire)
    proc = StreamProcessor(router, rng)
    proc.handle(req)
    features = parse_body(body, "chat")
    policy = router.models.select(features.model)
    limits = policy.limits_tokens if policy is not None else ()
    budget = route_budget(router.estimator, features, limits)
    obs = router.observer

    def metrics() -> None:
        obs.decision(proc.pool, budget.key[1], "fits", budget.total_tokens)
        obs.phase_timing("request_body", 5e-5)
        obs.stream_started()
        obs.stream_ended("complete")

    parts: dict[str, Callable[[], Any]] = {
        "request message from wire": lambda: pb.ProcessingRequest.FromString(wire),
        "stream processor": lambda: StreamProcessor(router, rng),
        "request line (request_attributes, endpoint)": lambda: proc.on_body_first(req),
        "body parse (parse_body)": lambda: parse_body(body, "chat"),
        "budget (byte bound, else exact estimate)": lambda: route_budget(router.estimator, features, limits),
        "pool (model set, policy)": lambda: facade.choose_pool(
            router.core, features.model, None, budget.total_tokens
        ),
        "metrics (decision, phase time, stream start/end)": metrics,
    }
    if cfg.calibration.response_reads.mode == "adaptive":
        parts["read decision (incl. its counter)"] = lambda: facade.decide_read(
            router.core, budget, proc.pool, None, rng.random(), time.monotonic()
        )
    out = {name: _best_us(fn, number, repeat) for name, fn in parts.items()}
    out["whole request (handle, plan, answer, stream end)"] = _best_us(request, number, repeat)
    return out


def main(argv: list[str] | None = None) -> int:
    """Print the parts as a Markdown table."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", default="shipped", choices=("shipped", "route"))
    ap.add_argument("--size", default="1KB", choices=tuple(SIZES))
    ap.add_argument("--number", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args(argv)
    got = measure(args.config, args.size, args.number, args.repeat)
    print(f"| part ({args.config}, {args.size}) | µs per call (best of {args.repeat} × {args.number}) |")
    print("|---|---|")
    for name, us in got.items():
        print(f"| {name} | {us:.1f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
