"""grpc.aio server of ``envoy.service.ext_proc.v3.ExternalProcessor/Process``.

The servicer only does plumbing: it creates a :class:`~extproc.adapter.processor.StreamProcessor` per
stream, answers each message in order, ends the call itself once the exchange needs nothing more
(below), and ends the processor exactly once. A client disconnect or an Envoy reset (CANCELLED)
is a normal end. The gRPC message limits are the Envoy buffer limit (``server.max_message_bytes``)
plus 1 MiB of headroom, since a BUFFERED request body arrives in one message with protobuf
framing around it.

How a stream ends. Envoy resets (RST_STREAM) every ext_proc stream it closes itself, and
grpc.aio leaks the native op array of any batch a reset catches in flight (grpc/grpc#43360: a
read, a write whose completion the cancelled task never consumes, or the final status): that was
the router's RSS growth in the soak. A server that ends the call instead (the handler returns,
status OK) makes Envoy run ``onGrpcClose``: ``processing_complete_``, the stream counted in
``streams_closed`` and ``server_half_closed``, not in ``streams_failed`` or
``failure_mode_allowed``, and the message it is waiting on, if any, continues unchanged (the
ext_proc protocol: the server answers each message "or closes the stream"). So once the router
needs nothing more from the exchange:

* the last answer would change nothing (response headers, body or trailers passed through): the
  handler returns *instead of* answering, and Envoy continues that message as it came. No write
  and no reset to race: ~4 KiB of RSS per 1,000 streams against 22–29 when Envoy resets
  (``python -m benchmarks.reset_leak``, BENCHMARKS.md).
* the last answer routes the request (``request_body``): its write is started and the handler
  returns at once, so the answer and the status leave together (:func:`start_write`: the status
  no longer waits for the write's completion to come back through grpc's completion queue, and
  the stream's accounting runs after both, :func:`_finish_stream`). Envoy 1.40 does not close a
  stream after a BUFFERED body answer (it resets it when the HTTP request ends), so the status
  arrives first. Measured against awaiting the write (``make bench``, docs/performance.md): the
  same CPU, a lower unloaded p99.
* the last answer routes at ``request_headers`` (bodiless or unhandled requests): Envoy 1.40
  resets the stream as soon as it has that answer (its stream-close optimization), so the
  handler waits up to :data:`RESET_WAIT_S` for the reset, which cancels it with no batch in
  flight, then returns.
* a one-message stream (request headers SKIPped) after its body answer: Envoy may still send the
  response phases its filter configures, so the handler waits :data:`RESET_WAIT_S` and reads on.
"""

from __future__ import annotations

import asyncio
import gc
import logging
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import grpc
import grpc.aio
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from grpc_health.v1 import _async as health_aio  # grpc-stubs lack the asyncio servicer
from grpc_health.v1 import health_pb2, health_pb2_grpc

from extproc.adapter import responses as R
from extproc.adapter.exchange import Exchange
from extproc.adapter.observer import request_id_var
from extproc.adapter.processor import StreamProcessor
from extproc.adapter.runtime import Runtime
from extproc.config import ServerConfig
from extproc.core.learn.outcomes import StreamEnd

__all__ = [
    "EXT_PROC_SERVICE",
    "ExtProcServicer",
    "GrpcServer",
    "freeze_startup_objects",
    "start_grpc_server",
    "start_write",
]

log = logging.getLogger(__name__)

EXT_PROC_SERVICE = "envoy.service.ext_proc.v3.ExternalProcessor"

_MESSAGE_HEADROOM_BYTES = 1 << 20
"""Added to ``server.max_message_bytes`` for the gRPC limits: protobuf framing around a body of
exactly the Envoy buffer limit, plus request attributes or metadata Envoy may attach."""


class ExtProcServicer(pb_grpc.ExternalProcessorServicer):
    """The ext_proc service; ``get_router`` returns the current runtime (swapped on reload)."""

    def __init__(self, get_router: Callable[[], Runtime]) -> None:
        self._get_router = get_router
        self.active_streams = 0

    async def Process(  # type: ignore[override]  # the reader/writer API: a coroutine, not a generator
        self,
        request_iterator: AsyncIterator[pb.ProcessingRequest],
        context: grpc.aio.ServicerContext[Any, Any],
    ) -> None:
        """Answer every message of one stream, in order (grpc.aio's reader/writer API: the call's
        status is sent when this returns)."""
        router = self._get_router()
        proc = StreamProcessor(router)
        router.observer.stream_started()
        self.active_streams += 1
        end: StreamEnd = "complete"
        try:
            while True:
                req = await context.read()
                if req is grpc.aio.EOF:  # type: ignore[attr-defined]  # missing from grpc-stubs
                    break
                if proc.exchange is Exchange.REQUEST_HEADERS and req.HasField("request_headers"):
                    proc.unrouted = _is_unrouted_stream(context)
                resp = proc.handle(req)
                if proc.request_id and not request_id_var.get():
                    request_id_var.set(proc.request_id)  # for every log line of this stream
                answer, then = _plan(proc, resp, req)
                if then == "end" and answer and EAGER_LAST_WRITE:
                    # The last answer and the status leave together: the write's batch starts
                    # now and the status follows as this returns, with no wait for the write's
                    # completion in between ("How a stream ends", module docstring).
                    start_write(context, resp)
                    break
                if answer:
                    await context.write(resp)
                if then in ("wait_read", "wait_end"):
                    await _wait_for_reset(context)
                if then in ("end", "wait_end"):
                    break
            # A reset while waiting for the next message also ends the iteration normally, so
            # "complete" means the exchange's last message was answered, whatever closed the stream.
            end = "complete" if proc.exchange_done else "cancelled"
        except asyncio.CancelledError:
            # Envoy resets the stream after the exchange's last message; only a reset before
            # that is a real cancellation (client abort, Envoy timeout).
            end = "complete" if proc.exchange_done else "cancelled"
            raise
        except grpc.aio.AioRpcError:
            end = "complete" if proc.exchange_done else "cancelled"
        except Exception:
            end = "error"
            log.exception("ext_proc stream failed (request_id=%s)", proc.request_id)
        finally:
            self.active_streams -= 1
            # After the status is on its way: the stream's accounting is off the request's path.
            asyncio.get_running_loop().call_soon(_finish_stream, proc, end)


UNROUTED_STREAM = ("x-tbr-stream", "unrouted")
"""gRPC metadata of the streams Envoy's ``tbr_unrouted`` filter opens (``grpc_service.initial_metadata``
in envoy/envoy.yaml): requests that reached no routing answer, bodiless ones above all."""


def _is_unrouted_stream(context: grpc.aio.ServicerContext[Any, Any]) -> bool:
    """Whether the call carries :data:`UNROUTED_STREAM` (read only for streams that start with
    request headers: the one-message routing stream starts with its body)."""
    return any(tuple(m) == UNROUTED_STREAM for m in context.invocation_metadata() or ())


def _finish_stream(proc: StreamProcessor, end: StreamEnd) -> None:
    """End ``proc`` exactly once and count the stream's end (run by the loop once the call's
    status is sent)."""
    try:
        proc.finish(end)
    except Exception:
        log.exception("finishing stream failed (request_id=%s)", proc.request_id)
    proc.router.observer.stream_ended(end)
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            "stream ended",
            extra={"request_id": proc.request_id, "end": end, "pool": proc.pool, "reason": proc.reason},
        )


def start_write(context: grpc.aio.ServicerContext[Any, Any], resp: pb.ProcessingResponse) -> None:
    """Write ``resp`` without waiting for the write's completion: run ``context.write`` up to its
    first suspension now, so that its gRPC batch is started before the call's status (grpc core
    sends the message, then the status), and let the write's own future resume it later (what
    an eager task does on Python 3.12). The completion is consumed either way, so a failure (the
    peer reset the stream) leaves no batch unconsumed; it changes nothing for the request, whose
    answer is then lost exactly as if the reset had come first."""
    coro = context.write(resp)

    def step(_: object = None) -> None:
        try:
            awaited = coro.send(None)
        except StopIteration:
            return
        except (Exception, asyncio.CancelledError):  # the stream is gone (reset, server stopping)
            log.debug("last answer not written (request_id=%s)", request_id_var.get())
            return
        if isinstance(awaited, asyncio.Future):
            awaited.add_done_callback(step)
        else:  # a bare yield (``asyncio.sleep(0)``): resume on the next loop iteration
            asyncio.get_running_loop().call_soon(step)

    step()


def _plan(proc: StreamProcessor, resp: pb.ProcessingResponse, req: pb.ProcessingRequest) -> tuple[bool, str]:
    """``(answer, then)`` after handling ``req``: whether to send ``resp``, and then ``read`` the next
    message, ``wait_read`` (give Envoy :data:`RESET_WAIT_S` to reset, then read), ``end`` the call,
    or ``wait_end`` ("How a stream ends", module docstring)."""
    if proc.silent or proc.unrouted:  # observability mode: Envoy waits for no answer
        return False, "end" if proc.exchange_done else "read"
    if not proc.exchange_done:
        return True, "read"
    if proc.response_phases_may_follow:
        return True, "wait_read"
    # The router needs nothing more from this stream: end the call (status OK) rather than be reset.
    if _is_pass_through(resp):
        return False, "end"
    return True, "end" if req.HasField("request_body") else "wait_end"


_PASS_THROUGH = (
    R.CONTINUE_RESPONSE_BODY,
    R.CONTINUE_RESPONSE_HEADERS,
    R.CONTINUE_RESPONSE_TRAILERS,
    R.CONTINUE_REQUEST_TRAILERS,
)


def _is_pass_through(resp: pb.ProcessingResponse) -> bool:
    """``resp`` is one of the prebuilt answers that change nothing (identity, not equality)."""
    return any(resp is p for p in _PASS_THROUGH)


async def _wait_for_reset(context: grpc.aio.ServicerContext[Any, Any]) -> None:
    """After an answer Envoy closes the stream on: give it :data:`RESET_WAIT_S` to reset it.

    grpc.aio then cancels this task (``CancelledError`` here) with no batch in flight, so
    nothing leaks ("How a stream ends", module docstring). A peer that does not reset (a test client, an
    Envoy without the stream-close optimization) then gets the status, or, on a one-message
    stream whose response phases may follow, is read on.
    """
    if not context.cancelled():
        await asyncio.sleep(RESET_WAIT_S)


EAGER_LAST_WRITE = True
"""Send the last answer and the status together (:func:`start_write`); the benchmarks turn it off
(``benchmarks.router_proc --await-last-write``) to measure what it saves."""

RESET_WAIT_S = 0.02
"""How long a finished stream waits for the peer's reset (seconds)."""


def freeze_startup_objects() -> int:
    """Collect once, then move every object alive now out of the cyclic GC's reach (``gc.freeze``).

    Call once the process has started. The startup objects (xds-protos descriptors, pydantic
    models, prometheus metrics: ~51k tracked objects) live for the whole process, yet every full
    (generation 2) collection walked them: 85–130 ms per collection on the shared 2-core box,
    a pause taken on the event loop in the middle of request handling. Frozen, a full collection
    costs ~0 ms; ``make bench`` measured 1.7× the req/s of the unfrozen router (docs/performance.md).
    Objects created later are collected as usual.

    Returns:
        the number of frozen objects.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class GrpcServer:
    """A started grpc.aio server with its health service and ext_proc servicer."""

    def __init__(
        self, server: grpc.aio.Server, port: int, servicer: ExtProcServicer, health_servicer: Any
    ) -> None:
        self.server = server
        self.port = port
        self.servicer = servicer
        self.health = health_servicer

    async def set_serving(self, serving: bool) -> None:
        """Readiness as seen by gRPC health checks of the ext_proc service name."""
        status = (
            health_pb2.HealthCheckResponse.SERVING if serving else health_pb2.HealthCheckResponse.NOT_SERVING
        )
        await self.health.set(EXT_PROC_SERVICE, status)

    async def stop(self, grace_s: float) -> None:
        """Stop accepting streams; let open ones finish for up to ``grace_s`` seconds."""
        await self.health.enter_graceful_shutdown()
        await self.server.stop(grace_s)


def _credentials(cfg: ServerConfig) -> grpc.ServerCredentials | None:
    if cfg.tls_cert_path is None or cfg.tls_key_path is None:
        return None
    key = Path(cfg.tls_key_path).read_bytes()
    cert = Path(cfg.tls_cert_path).read_bytes()
    ca = Path(cfg.tls_client_ca_path).read_bytes() if cfg.tls_client_ca_path else None
    return grpc.ssl_server_credentials(
        [(key, cert)], root_certificates=ca, require_client_auth=ca is not None
    )


async def start_grpc_server(
    cfg: ServerConfig,
    get_router: Callable[[], Runtime],
    *,
    port: int | None = None,
    extra_options: Sequence[tuple[str, Any]] = (),
) -> GrpcServer:
    """Start the ext_proc gRPC server; ``port`` overrides ``cfg.grpc_port`` (0 = any free port).

    ``extra_options`` are appended to the gRPC channel arguments (the benchmarks use it to
    measure e.g. ``("grpc.optimization_target", "latency")``).

    The standard gRPC health service reports liveness on ``""`` and readiness on the ext_proc
    service name.

    Raises:
        RuntimeError: the address cannot be bound.
    """
    # A body of exactly Envoy's buffer limit arrives wrapped in a ProcessingRequest a few bytes
    # larger (field tags, lengths, attributes): allow headroom so it is read, not rejected.
    limit = cfg.max_message_bytes + _MESSAGE_HEADROOM_BYTES
    options = [
        ("grpc.max_receive_message_length", limit),
        ("grpc.max_send_message_length", limit),
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.min_ping_interval_without_data_ms", 10_000),
        *extra_options,
    ]
    server = grpc.aio.server(options=options)
    servicer = ExtProcServicer(get_router)
    pb_grpc.add_ExternalProcessorServicer_to_server(servicer, server)
    health_servicer = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    address = f"{cfg.grpc_host}:{cfg.grpc_port if port is None else port}"
    creds = _credentials(cfg)
    bound = server.add_secure_port(address, creds) if creds else server.add_insecure_port(address)
    if not bound:
        raise RuntimeError(f"cannot bind gRPC listener {address}")
    await server.start()
    await health_servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    await health_servicer.set(EXT_PROC_SERVICE, health_pb2.HealthCheckResponse.SERVING)
    log.info("ext_proc gRPC listening on %s:%d (tls=%s)", cfg.grpc_host, bound, creds is not None)
    return GrpcServer(server, bound, servicer, health_servicer)
