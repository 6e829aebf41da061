"""Stream lifecycle over a real gRPC stream: client abort, connection reset, half-close,
undecodable messages, calibration at most once, in-flight gauge back to zero after every kind
of ending. (Envoy's own message_timeout and resets are exercised through Envoy in test_envoy_faults.)"""

from __future__ import annotations

import asyncio

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.service.app import RouterApp
from tests.hardening.helpers import Counts
from tests.pb import (
    EOF,
    ExtProcCall,
    chat_body,
    open_stream,
    phase_of,
    read_response,
    req_body,
    req_headers,
    resp_body,
    resp_headers,
)
from tests.waiting import until_async

TEXT = "the router must never lose a stream. " * 20
USAGE_EVENT = b'data: {"choices":[],"usage":{"prompt_tokens":200}}\n\n'


def _prefix(stream: bool = True) -> list[pb.ProcessingRequest]:
    return [
        req_headers(),
        req_body(chat_body(TEXT, max_tokens=10, stream=stream)),
        resp_headers({":status": "200", "content-type": "text/event-stream"}),
    ]


async def _wait_inflight_zero(c: Counts) -> None:
    """Until every stream has ended: its end is counted (``tbr_streams_total``), its calibration
    done and the in-flight gauge lowered in one callback (extproc/adapter/server.py
    ``_finish_stream``), so the counts are final once the gauge is zero."""
    await until_async(lambda: c.now("tbr_inflight_streams") == 0.0, what="in-flight gauge back to zero")


async def _open(app: RouterApp) -> tuple[grpc.aio.Channel, ExtProcCall]:
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}")
    return ch, open_stream(ch)


async def _send(call: ExtProcCall, msgs: list[pb.ProcessingRequest]) -> list[pb.ProcessingResponse]:
    out = []
    for m in msgs:
        await call.write(m)
        out.append(await read_response(call))
    return out


async def test_client_aborts_mid_stream_after_usage_calibrates_once(shared_app: RouterApp) -> None:
    """The client (or Envoy on a downstream reset) cancels after the usage event but before the
    end: the usage read so far still calibrates, exactly once; the stream ends as cancelled."""
    c = Counts(shared_app)
    ch, call = await _open(shared_app)
    await _send(call, [*_prefix(), resp_body(USAGE_EVENT)])
    assert c.now("tbr_inflight_streams") == 1.0
    call.cancel()
    await ch.close(None)
    await _wait_inflight_zero(c)
    # A reset that arrives while the router waits for the next message just ends gRPC's request
    # iterator (grpc.aio does not flag it as cancelled): the stream is counted once, either way.
    assert c.delta("tbr_streams_total") == 1.0
    assert c.delta("tbr_calibration_events_total", {"outcome": "applied"}) == 1.0
    assert c.delta("tbr_calibration_events_total") == 1.0


async def test_client_aborts_before_usage_learns_nothing(shared_app: RouterApp) -> None:
    c = Counts(shared_app)
    ch, call = await _open(shared_app)
    await _send(
        call, [*_prefix(), resp_body(b'data: {"choices":[{"delta":{"content":"x"}}],"usage":null}\n\n')]
    )
    call.cancel()
    await ch.close(None)
    await _wait_inflight_zero(c)
    assert c.delta("tbr_calibration_events_total") == 0.0
    assert c.delta("tbr_streams_total") == 1.0


async def test_abort_during_request_phase(shared_app: RouterApp) -> None:
    """Cancelled after request headers only (client gave up while uploading): the request is
    still counted, with its reason (issue 34, item 6), and nothing is learned."""
    c = Counts(shared_app)
    ch, call = await _open(shared_app)
    await _send(call, [req_headers()])
    call.cancel()
    await ch.close(None)
    await _wait_inflight_zero(c)
    assert c.delta("tbr_streams_total") == 1.0
    assert c.delta("tbr_routing_decisions_total") == 1.0
    assert c.delta("tbr_routing_decisions_total", {"pool": "long", "reason": "body_missing"}) == 1.0
    assert c.delta("tbr_unreadable_requests_total", {"reason": "body_missing"}) == 1.0
    assert c.delta("tbr_calibration_events_total") == 0.0


async def test_headers_without_a_body_message_are_counted_at_the_end_of_the_stream(
    shared_app: RouterApp,
) -> None:
    """Request headers (not end of stream), then a half-close without a body message: counted at
    the end of the stream, reason ``body_missing``, against the largest pool (Envoy's catch-all)."""
    c = Counts(shared_app)
    ch, call = await _open(shared_app)
    await _send(call, [req_headers()])
    await call.done_writing()
    while await call.read() is not grpc.aio.EOF:  # type: ignore[attr-defined]  # missing from grpc-stubs
        pass
    await ch.close(None)
    await _wait_inflight_zero(c)
    assert c.delta("tbr_routing_decisions_total", {"pool": "long", "reason": "body_missing"}) == 1.0
    assert c.delta("tbr_unreadable_requests_total", {"reason": "body_missing"}) == 1.0


async def test_connection_dropped_without_cancel(shared_app: RouterApp) -> None:
    """Envoy's HTTP/2 connection goes away (Envoy restarted/killed): all its streams end."""
    c = Counts(shared_app)
    ch = grpc.aio.insecure_channel(f"127.0.0.1:{shared_app.grpc_port}")
    calls = [open_stream(ch) for _ in range(10)]
    for call in calls:
        await _send(call, _prefix())
    assert c.now("tbr_inflight_streams") == 10.0
    await ch.close(grace=None)
    await _wait_inflight_zero(c)
    assert c.delta("tbr_streams_total") == 10.0


async def test_half_close_after_request_body(shared_app: RouterApp) -> None:
    """The stream ends after the request body while response headers (SEND) were still to come:
    the exchange did not finish (client abort before the response), so it ends as cancelled."""
    c = Counts(shared_app)
    ch, call = await _open(shared_app)
    await _send(call, [req_headers(), req_body(chat_body("hi", max_tokens=3))])
    await call.done_writing()
    assert await call.read() == EOF
    await ch.close(None)
    await _wait_inflight_zero(c)
    assert c.delta("tbr_streams_total", {"end": "cancelled"}) == 1.0


async def test_empty_stream(shared_app: RouterApp) -> None:
    """A stream closed before any message: no exchange happened (ends as cancelled, counted once)."""
    c = Counts(shared_app)
    ch, call = await _open(shared_app)
    await call.done_writing()
    assert await call.read() == EOF
    await ch.close(None)
    await _wait_inflight_zero(c)
    assert c.delta("tbr_streams_total", {"end": "cancelled"}) == 1.0


async def test_undecodable_message_ends_the_stream_cleanly(shared_app: RouterApp) -> None:
    """Bytes that are not a ProcessingRequest: gRPC fails the stream; no crash, gauge at zero,
    and the next stream is served."""
    c = Counts(shared_app)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{shared_app.grpc_port}") as ch:
        raw = ch.stream_stream(
            "/envoy.service.ext_proc.v3.ExternalProcessor/Process",
            request_serializer=lambda b: b,
            response_deserializer=lambda b: b,
        )
        call = raw()  # type: ignore[call-arg]  # grpc.aio takes no request iterator when the caller writes
        await call.write(b"\xff\xff\xff\xff\x0f garbage")
        try:
            await call.read()
        except grpc.aio.AioRpcError as exc:
            assert exc.code() in (
                grpc.StatusCode.INTERNAL,
                grpc.StatusCode.UNKNOWN,
                grpc.StatusCode.CANCELLED,
            )
        call.cancel()
    await _wait_inflight_zero(c)
    ch2, call2 = await _open(shared_app)
    out = await _send(call2, [req_headers(), req_body(chat_body("hi", max_tokens=3))])
    assert phase_of(out[1]) == "request_body"
    await ch2.close(None)
    await _wait_inflight_zero(c)


async def test_many_concurrent_streams_all_endings_return_gauge_to_zero(shared_app: RouterApp) -> None:
    """200 concurrent streams ending in mixed ways (complete, cancel, drop) → gauge 0, every
    stream counted once, calibration only for completed ones with usage."""
    c = Counts(shared_app)

    async def complete(i: int) -> None:
        ch, call = await _open(shared_app)
        await _send(call, [*_prefix(), resp_body(USAGE_EVENT)])
        await call.write(resp_body(b"data: [DONE]\n\n", eos=True))
        assert await call.read() == EOF  # the exchange is over: the router ends the call
        await ch.close(None)

    async def cancelled(i: int) -> None:
        ch, call = await _open(shared_app)
        await _send(call, _prefix())
        call.cancel()
        await ch.close(None)

    kinds = [complete, cancelled] * 100
    await asyncio.gather(*(k(i) for i, k in enumerate(kinds)))
    await _wait_inflight_zero(c)
    assert c.delta("tbr_streams_total") == 200.0
    assert c.delta("tbr_calibration_events_total", {"outcome": "applied"}) == 100.0


async def test_server_stop_with_open_streams_drains_and_zeroes_gauge() -> None:
    """Graceful shutdown with streams open: after the grace period they are cancelled, counted."""
    from extproc.config import parse_config
    from tests.hardening.helpers import CONFIG

    cfg = parse_config({**CONFIG, "server": {"grace_period_s": 0.2}})
    app = RouterApp(cfg, grpc_port=0, admin_port=0)
    await app.start()
    c = Counts(app)
    ch, call = await _open(app)
    await _send(call, _prefix())
    await app.stop()
    await _wait_inflight_zero(c)
    assert c.delta("tbr_streams_total") == 1.0
    await ch.close(None)


async def test_processing_error_is_answered_for_its_phase(shared_app: RouterApp, monkeypatch) -> None:
    """A bug inside a phase handler (simulated by a classifier that raises) is counted in
    tbr_processing_errors_total and answered with the safe default for that phase: long pool."""
    import extproc.core.estimate.estimator

    def boom(*args: object) -> object:
        raise RuntimeError("injected fault")

    monkeypatch.setattr(extproc.core.estimate.estimator, "run_costs", boom)
    c = Counts(shared_app)
    ch, call = await _open(shared_app)
    out = await _send(call, [req_headers(), req_body(chat_body("hi", max_tokens=3))])
    await ch.close(None)
    assert phase_of(out[1]) == "request_body"
    rb = out[1].request_body.response.header_mutation.set_headers[0].header
    assert rb.raw_value == b"long"
    assert c.delta("tbr_processing_errors_total", {"phase": "request_body"}) == 1.0
    assert c.delta("tbr_unreadable_requests_total", {"reason": "internal_error"}) == 1.0
