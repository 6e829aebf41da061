"""One benchmark ext_proc process: the real router, or the do-nothing floor.

``python -m benchmarks.router_proc --config CFG --port P [--floor] [--uvloop] [--no-gc-freeze]
[--grpc-option KEY=VALUE ...]`` serves until SIGTERM. It prints ``ready <port>`` once serving.

* router: the real :class:`extproc.service.app.RouterApp` (what ``tbr serve`` runs: servicer,
  processor, metrics, load tracker, gRPC options, ``gc.freeze()`` after start), in this process
  so the benchmark can choose the event loop (``--uvloop``), extra gRPC options and the
  ``gc.freeze()`` lever. The benchmark config disables the admin HTTP server.
* ``--floor``: a grpc.aio ext_proc that does no work at all: every message is answered with a
  prebuilt response (``request_headers`` → continue with the response phases turned off,
  ``request_body`` → the ``x-tbr-pool: short`` route, or with ``--one-message`` the dynamic
  metadata route of the one-message design). It bounds from below what any Python
  grpc.aio router can cost per request on this machine (2 messages per request).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from extproc.adapter import responses as R
from extproc.adapter import server as server_module
from extproc.adapter.exchange import Exchange
from extproc.adapter.processor import StreamProcessor
from extproc.adapter.server import freeze_startup_objects, start_write
from extproc.config import load_config
from extproc.service.app import RouterApp


class FloorServicer(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """Answers every message with a prebuilt response; parses nothing."""

    def __init__(self, *, one_message: bool = False) -> None:
        body = (
            R.route_by_metadata("x-tbr-pool", "short")
            if one_message
            else R.route_request_body("x-tbr-pool", "short")
        )
        self._answers = {
            "request_headers": R.CONTINUE_REQUEST_HEADERS_SKIP_RESPONSE,
            "request_body": body,
            "response_headers": R.CONTINUE_RESPONSE_HEADERS,
            "response_body": R.CONTINUE_RESPONSE_BODY,
            "request_trailers": R.CONTINUE_REQUEST_TRAILERS,
            "response_trailers": R.CONTINUE_RESPONSE_TRAILERS,
        }

    async def Process(self, request_iterator: Any, context: Any) -> AsyncIterator[pb.ProcessingResponse]:
        answers = self._answers
        async for req in request_iterator:
            yield answers[req.WhichOneof("request")]


class FloorEndServicer(FloorServicer):
    """As :class:`FloorServicer`, ending the call after the body answer as the router does: the
    answer's write started and the status sent at once (``extproc.adapter.server.start_write``)."""

    async def Process(self, request_iterator: Any, context: Any) -> None:  # type: ignore[override]
        answers = self._answers
        while True:
            req = await context.read()
            if req is grpc.aio.EOF:
                return
            phase = req.WhichOneof("request")
            if phase == "request_body":
                start_write(context, answers[phase])
                return
            await context.write(answers[phase])


def _option(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    return (key, int(value) if value.lstrip("-").isdigit() else value)


async def _until_signal(port: int) -> None:
    print(f"ready {port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()


async def _serve_floor(args: argparse.Namespace, options: list[tuple[str, Any]]) -> None:
    cfg = load_config(args.config)
    server = grpc.aio.server(
        options=[
            ("grpc.max_receive_message_length", cfg.server.max_message_bytes),
            ("grpc.max_send_message_length", cfg.server.max_message_bytes),
            ("grpc.so_reuseport", 0),
            *options,
        ]
    )
    pb_grpc.add_ExternalProcessorServicer_to_server(
        (FloorEndServicer if args.end_call else FloorServicer)(one_message=args.one_message), server
    )
    port = server.add_insecure_port(f"127.0.0.1:{args.port}")
    await server.start()
    if not args.no_gc_freeze:
        freeze_startup_objects()  # as RouterApp.start does
    await _until_signal(port)
    await server.stop(0.5)


async def _serve(args: argparse.Namespace) -> dict[str, list[float]] | None:
    options = [_option(o) for o in args.grpc_option]
    if args.floor:
        await _serve_floor(args, options)
        return None
    cfg = load_config(args.config)
    app = RouterApp(cfg, grpc_port=args.port, grpc_options=options, gc_freeze=not args.no_gc_freeze)
    async with app:
        await _until_signal(app.grpc_port)
    return phase_seconds(app)


def _skip_decision() -> None:
    """``--no-decide``: the request body is answered as the router answers it (its stream, the
    request line from ``request_attributes``, the phase timing and the stream's end all run), but
    with the first pool's prebuilt answer instead of parsing the body and deciding."""

    def on_request_body(self: StreamProcessor, msg: pb.HttpBody) -> pb.ProcessingResponse:
        self.exchange = Exchange.DONE
        return self.router.metadata_responses[self.router.config.pools[0].name]

    StreamProcessor.on_request_body = on_request_body  # type: ignore[method-assign]


HANDLE_CPU_ENV = "TBR_BENCH_HANDLE_CPU_DIR"
"""When set (a directory), each router process measures the thread CPU time of every
``StreamProcessor.handle`` call per phase and writes ``{phase: [cpu_seconds, wall_seconds, calls]}``
to ``<dir>/<stats file name>`` on exit (diagnosis: the phase histogram is wall time, which on a
loaded box includes the time the thread waited for a core; two clock reads per message)."""


def _time_handle() -> dict[str, list[float]]:
    """Wrap ``StreamProcessor.handle`` to add up its thread CPU and wall time per phase."""
    totals: dict[str, list[float]] = {}
    handle = StreamProcessor.handle

    def timed(self: StreamProcessor, req: pb.ProcessingRequest) -> pb.ProcessingResponse:
        c0, w0 = time.thread_time(), time.perf_counter()
        resp = handle(self, req)
        c1, w1 = time.thread_time(), time.perf_counter()
        t = totals.setdefault(req.WhichOneof("request") or "unknown", [0.0, 0.0, 0])
        t[0] += c1 - c0
        t[1] += w1 - w0
        t[2] += 1
        return resp

    StreamProcessor.handle = timed  # type: ignore[method-assign]
    return totals


def phase_seconds(app: RouterApp) -> dict[str, list[float]]:
    """``{phase: [seconds, messages]}`` from the router's ``tbr_phase_processing_seconds``
    histogram: the time ``StreamProcessor.handle`` took, in the process, over the whole run."""
    out: dict[str, list[float]] = {}
    for metric in app.metrics.phase_seconds.collect():
        for sample in metric.samples:
            phase = sample.labels.get("phase", "")
            if sample.name.endswith("_sum"):
                out.setdefault(phase, [0.0, 0.0])[0] = sample.value
            elif sample.name.endswith("_count"):
                out.setdefault(phase, [0.0, 0.0])[1] = sample.value
    return out


def main() -> None:
    """Parse arguments and serve until SIGTERM."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--floor", action="store_true")
    ap.add_argument("--uvloop", action="store_true")
    ap.add_argument("--one-message", action="store_true", help="floor: answer the body with dynamic metadata")
    ap.add_argument(
        "--end-call",
        action="store_true",
        help="floor: end the call after the request_body answer (as the router)",
    )
    ap.add_argument(
        "--await-last-write",
        action="store_true",
        help="router: await the last answer's write before ending the call (lever off)",
    )
    ap.add_argument(
        "--no-decide",
        action="store_true",
        help="router: answer every request body with the prebuilt answer of the first pool, parsing and"
        " deciding nothing (diagnosis: the servicer, stream and metrics around the decision, alone)",
    )
    ap.add_argument("--no-gc-freeze", action="store_true", help="skip gc.freeze() after start (lever off)")
    ap.add_argument("--grpc-option", action="append", default=[])
    ap.add_argument("--stats-out", default=None, help="router: write the per-phase handle time here on exit")
    ap.add_argument(
        "--cprofile",
        default=None,
        help="write a cProfile of the serving thread here on exit (pstats format; diagnosis only: the"
        " profiler slows Python code several times)",
    )
    args = ap.parse_args()
    profiler = None
    if args.cprofile:
        import cProfile
        import time

        profiler = cProfile.Profile(time.thread_time)  # CPU of the serving thread, not wall time
        profiler.enable()
    if args.await_last_write:
        server_module.EAGER_LAST_WRITE = False
    if args.no_decide:
        _skip_decision()
    handle_cpu = _time_handle() if os.environ.get(HANDLE_CPU_ENV) and not args.floor else None
    if args.uvloop:
        import uvloop

        phases = uvloop.run(_serve(args))
    else:
        phases = asyncio.run(_serve(args))
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.cprofile)
    if args.stats_out and phases is not None:
        Path(args.stats_out).write_text(json.dumps(phases))
    if handle_cpu is not None and args.stats_out:
        Path(os.environ[HANDLE_CPU_ENV], Path(args.stats_out).name).write_text(json.dumps(handle_cpu))


if __name__ == "__main__":
    main()
