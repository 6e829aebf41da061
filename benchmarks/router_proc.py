"""One benchmark ext_proc process: the real router, or the do-nothing floor.

``python -m benchmarks.router_proc --config CFG --port P [--floor] [--uvloop] [--no-gc-freeze]
[--grpc-option KEY=VALUE ...]`` serves until SIGTERM. It prints ``ready <port>`` once serving.

* router: :class:`extproc.adapter.runtime.Runtime` + :func:`extproc.adapter.server.start_grpc_server` (the same
  servicer, processor and gRPC options as ``tbr serve``, and ``gc.freeze()`` after start as
  ``RouterApp`` does; no admin HTTP server).
* ``--floor``: a grpc.aio ext_proc that does no work at all: every message is answered with a
  prebuilt response (``request_headers`` → continue with the response phases turned off,
  ``request_body`` → the ``x-tbr-pool: short`` route). It bounds from below what any Python
  grpc.aio router can cost per request on this machine (2 messages per request).
"""

from __future__ import annotations

import argparse
import asyncio
import signal
from collections.abc import AsyncIterator
from typing import Any

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from extproc.adapter import responses as R
from extproc.adapter.runtime import Runtime
from extproc.adapter.server import freeze_startup_objects, start_grpc_server
from extproc.config import load_config
from extproc.service.metrics import PrometheusObserver, RouterMetrics


class FloorServicer(pb_grpc.ExternalProcessorServicer):  # type: ignore[misc]
    """Answers every message with a prebuilt response; parses nothing."""

    def __init__(self) -> None:
        self._answers = {
            "request_headers": R.CONTINUE_REQUEST_HEADERS_SKIP_RESPONSE,
            "request_body": R.route_request_body("x-tbr-pool", "short"),
            "response_headers": R.CONTINUE_RESPONSE_HEADERS,
            "response_body": R.CONTINUE_RESPONSE_BODY,
            "request_trailers": R.CONTINUE_REQUEST_TRAILERS,
            "response_trailers": R.CONTINUE_RESPONSE_TRAILERS,
        }

    async def Process(
        self, request_iterator: AsyncIterator[pb.ProcessingRequest], context: Any
    ) -> AsyncIterator[pb.ProcessingResponse]:
        answers = self._answers
        async for req in request_iterator:
            yield answers[req.WhichOneof("request")]


def _option(text: str) -> tuple[str, Any]:
    key, _, value = text.partition("=")
    return (key, int(value) if value.lstrip("-").isdigit() else value)


async def _serve(args: argparse.Namespace) -> None:
    cfg = load_config(args.config)
    options = [_option(o) for o in args.grpc_option]
    if args.floor:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", cfg.server.max_message_bytes),
                ("grpc.max_send_message_length", cfg.server.max_message_bytes),
                ("grpc.so_reuseport", 0),
                *options,
            ]
        )
        pb_grpc.add_ExternalProcessorServicer_to_server(FloorServicer(), server)
        port = server.add_insecure_port(f"127.0.0.1:{args.port}")
        await server.start()
        stopper = server.stop
    else:
        router = Runtime(cfg, observer=PrometheusObserver(RouterMetrics()))  # as `tbr serve` records
        g = await start_grpc_server(cfg.server, lambda: router, port=args.port, extra_options=options)
        port = g.port
        stopper = g.server.stop
    if not args.no_gc_freeze:
        freeze_startup_objects()  # as RouterApp.start does
    print(f"ready {port}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await stopper(0.5)


def main() -> None:
    """Parse arguments and serve until SIGTERM."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--floor", action="store_true")
    ap.add_argument("--uvloop", action="store_true")
    ap.add_argument("--no-gc-freeze", action="store_true", help="skip gc.freeze() after start (lever off)")
    ap.add_argument("--grpc-option", action="append", default=[])
    args = ap.parse_args()
    if args.uvloop:
        import uvloop

        uvloop.run(_serve(args))
    else:
        asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
