"""In-process micro-benchmarks of the request path (best of several repeats, µs per call).

* JSON: stdlib ``json.loads`` vs ``orjson.loads`` on the benchmark bodies, and
  :func:`extproc.core.request.request_body.parse_request_body` (orjson + reading only the fields the
  estimate needs);
* the exact estimate (run counts + costs + ratio lookup: parse and estimate, minus parse) and the
  processor's whole 2-message path (protobuf parse of both messages, ``handle`` with the byte bound
  of ``extproc.core.estimate.screen`` where it decides, response serialisation);
* precomputed vs per-request-built routing responses;
* event-loop stall of a large body parsed on the loop vs in ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import json
import time
import timeit
from collections.abc import Callable
from typing import Any

import orjson
from envoy.config.core.v3 import base_pb2 as core
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from benchmarks.bodies import BenchBody
from extproc.adapter import responses as R
from extproc.adapter.processor import StreamProcessor
from extproc.adapter.runtime import Runtime
from extproc.config import parse_config
from extproc.core.request.request_body import parse_request_body
from extproc.service.metrics import PrometheusObserver, RouterMetrics

__all__ = ["run_micro"]


def _best_us(fn: Callable[[], Any], number: int, repeat: int = 7) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def _router() -> Runtime:
    return Runtime(
        observer=PrometheusObserver(RouterMetrics()),
        config=parse_config(
            {
                "pools": [
                    {"name": "short", "max_model_len": 8192, "header_value": "short"},
                    {"name": "long", "max_model_len": 65536, "header_value": "long"},
                ],
                "calibration": {"sample_rate": 0.0},
                "admin": {"enabled": False},
            }
        ),
    )


_HDRS = {
    ":method": "POST",
    ":path": "/v1/chat/completions",
    ":authority": "127.0.0.1",
    ":scheme": "http",
    "content-type": "application/json",
    "content-length": "1024",
    "user-agent": "wrk",
    "x-request-id": "8f6c7c9e-0d1b-4a52-9d84-2c1f0b7a1e55",
}


async def _loop_stall(body: bytes, offload: bool, n: int) -> tuple[float, float]:
    """(max gap between event-loop ticks in ms, wall time per parse in ms)."""
    gaps: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    t0 = time.perf_counter()
    for _ in range(n):
        if offload:
            await asyncio.to_thread(parse_request_body, body, "chat")
        else:
            parse_request_body(body, "chat")
            await asyncio.sleep(0)
    wall = (time.perf_counter() - t0) / n
    stop.set()
    await task
    return max(gaps) * 1000.0, wall * 1000.0


def run_micro(bodies: list[BenchBody], quick: bool) -> dict[str, Any]:
    """Run all micro-benchmarks; returns rows for the report."""
    router = _router()
    hdr = pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(
            headers=core.HeaderMap(
                headers=[core.HeaderValue(key=k, raw_value=v.encode()) for k, v in _HDRS.items()]
            )
        )
    ).SerializeToString()
    rows = []
    for b in bodies:
        number = max(3, min(2000, 2_000_000 // len(b.body)) // (4 if quick else 1))
        msg = pb.ProcessingRequest(
            request_body=pb.HttpBody(body=b.body, end_of_stream=True)
        ).SerializeToString()

        def two_messages(msg: bytes = msg) -> None:
            p = StreamProcessor(router)
            p.handle(pb.ProcessingRequest.FromString(hdr)).SerializeToString()
            p.handle(pb.ProcessingRequest.FromString(msg)).SerializeToString()
            p.finish("complete")

        rows.append(
            {
                "size": b.label,
                "bytes": len(b.body),
                "json_loads_us": _best_us(lambda b=b: json.loads(b.body), number),
                "orjson_loads_us": _best_us(lambda b=b: orjson.loads(b.body), number),
                "parse_request_body_us": _best_us(lambda b=b: parse_request_body(b.body, "chat"), number),
                # fresh features each call: run counts are computed on first use and cached
                "estimate_us": _best_us(
                    lambda b=b: router.estimator.estimate(parse_request_body(b.body, "chat")), number
                )
                - _best_us(lambda b=b: parse_request_body(b.body, "chat"), number),
                "processor_2msg_us": _best_us(two_messages, number),
            }
        )
    built = _best_us(lambda: R.route_request_body("x-tbr-pool", "short").SerializeToString(), 5000)
    prebuilt_msg = router.body_responses["short"]
    prebuilt = _best_us(lambda: prebuilt_msg.SerializeToString(), 5000)
    large = max(bodies, key=lambda x: len(x.body))
    n = 5 if quick else 20
    inline = asyncio.run(_loop_stall(large.body, False, n))
    thread = asyncio.run(_loop_stall(large.body, True, n))
    return {
        "rows": rows,
        "response_built_us": built,
        "response_prebuilt_us": prebuilt,
        "stall": {
            "size": large.label,
            "inline_max_gap_ms": inline[0],
            "inline_wall_ms": inline[1],
            "thread_max_gap_ms": thread[0],
            "thread_wall_ms": thread[1],
        },
    }
