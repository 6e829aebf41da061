"""The tests' one set of ext_proc message builders and one real ext_proc client.

Builders produce the ``ProcessingRequest`` messages Envoy sends with ``envoy/envoy.yaml``'s
processing mode (request headers SEND, request body BUFFERED, response headers SEND, response body
as the router's ``mode_override`` asks). :func:`run_stream` sends them on one real gRPC stream in
Envoy's lock-step order (one message, its answer, the next ...) and collects the answers.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable

import grpc
from envoy.config.core.v3 import base_pb2 as core
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

ROUTING_HEADER = "x-tbr-pool"
CHAT_HEADERS = {":method": "POST", ":path": "/v1/chat/completions", "x-request-id": "r1"}
COMPLETIONS_HEADERS = {":method": "POST", ":path": "/v1/completions", "x-request-id": "r2"}

HeaderPairs = dict[str, str] | Iterable[tuple[str, str | bytes]]
ExtProcCall = grpc.aio.StreamStreamCall[pb.ProcessingRequest, pb.ProcessingResponse]

EOF: object = grpc.aio.EOF  # type: ignore[attr-defined]  # grpc-stubs lack grpc.aio.EOF (end of a stream)


def open_stream(channel: grpc.aio.Channel) -> ExtProcCall:
    """A new ext_proc stream on ``channel``: write messages with ``call.write`` and read the
    answers with :func:`read_response` (or ``call.read()``, which returns :data:`EOF` at the end)."""
    # grpc.aio takes no request iterator when the caller writes; grpc-stubs declare it required.
    return pb_grpc.ExternalProcessorStub(channel).Process()  # type: ignore[call-arg]


async def read_response(call: ExtProcCall) -> pb.ProcessingResponse:
    """The next answer on ``call`` (fails the test at the end of the stream)."""
    msg = await call.read()
    assert isinstance(msg, pb.ProcessingResponse), msg
    return msg


def chat_body(text: str, **extra: object) -> bytes:
    """A chat-completions body with one user message ``text`` (model ``m``)."""
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": text}], **extra}).encode()


def usage_body(prompt_tokens: int, completion_tokens: int = 1) -> bytes:
    """A JSON response body carrying only ``usage`` (what the router learns from)."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    return json.dumps({"usage": usage}).encode()


def headers(pairs: HeaderPairs, *, eos: bool = False, raw: bool = True) -> pb.HttpHeaders:
    """An ``HttpHeaders`` message; values in ``raw_value`` (what Envoy sends) or in ``value``."""
    items = pairs.items() if isinstance(pairs, dict) else pairs
    hs = []
    for k, v in items:
        b = v if isinstance(v, bytes) else v.encode()
        hs.append(core.HeaderValue(key=k, raw_value=b) if raw else core.HeaderValue(key=k, value=b.decode()))
    return pb.HttpHeaders(headers=core.HeaderMap(headers=hs), end_of_stream=eos)


def req_headers(
    pairs: HeaderPairs | None = None, *, eos: bool = False, raw: bool = True
) -> pb.ProcessingRequest:
    """A ``request_headers`` message (default: a chat-completions POST)."""
    return pb.ProcessingRequest(request_headers=headers(pairs or CHAT_HEADERS, eos=eos, raw=raw))


def req_body(body: bytes, *, eos: bool = True) -> pb.ProcessingRequest:
    """A ``request_body`` message (BUFFERED mode: the whole body, end of stream)."""
    return pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=eos))


def resp_headers(pairs: HeaderPairs, *, eos: bool = False) -> pb.ProcessingRequest:
    """A ``response_headers`` message."""
    return pb.ProcessingRequest(response_headers=headers(pairs, eos=eos))


def resp_body(body: bytes, *, eos: bool = False) -> pb.ProcessingRequest:
    """A ``response_body`` message (one chunk; ``eos`` on the last)."""
    return pb.ProcessingRequest(response_body=pb.HttpBody(body=body, end_of_stream=eos))


def request_msgs(text: str, request_id: str = "r1") -> list[pb.ProcessingRequest]:
    """Request headers + body of a chat request with ``text``."""
    return [req_headers({**CHAT_HEADERS, "x-request-id": request_id}), req_body(chat_body(text))]


def json_response_msgs(prompt_tokens: int) -> list[pb.ProcessingRequest]:
    """Response headers (200, JSON) + a body reporting ``prompt_tokens``."""
    return [
        resp_headers({":status": "200", "content-type": "application/json"}),
        resp_body(usage_body(prompt_tokens), eos=True),
    ]


def passed_through(out: list[pb.ProcessingResponse], i: int) -> bool:
    """Message ``i`` of a :func:`run_stream` exchange reaches the client unchanged: its answer is
    the empty one for its phase (no mutation, no mode override), or the router ended the call
    before answering it (Envoy's ``onGrpcClose`` continues the pending message, and every later
    one, as it came)."""
    if i >= len(out):
        return True
    r = out[i]
    phase = r.WhichOneof("response")
    if phase is None or phase == "immediate_response":
        return False
    return bool(r == pb.ProcessingResponse(**{phase: type(getattr(r, phase))()}))


def phase_of(resp: pb.ProcessingResponse) -> str:
    """Which phase a ProcessingResponse answers."""
    return str(resp.WhichOneof("response"))


def routed_pool(resp: pb.ProcessingResponse) -> str | None:
    """The pool a response routes to (``x-tbr-pool`` raw_value), or None when it sets no header.

    Asserts the mutation is the router's: one header, OVERWRITE_IF_EXISTS_OR_ADD, route cache
    cleared, the value in ``raw_value``.
    """
    if resp.HasField("request_body"):
        common = resp.request_body.response
    elif resp.HasField("request_headers"):
        common = resp.request_headers.response
    else:
        return None
    sets = list(common.header_mutation.set_headers)
    if not sets:
        return None
    assert common.clear_route_cache
    (opt,) = sets
    assert opt.header.key == ROUTING_HEADER
    assert opt.append_action == core.HeaderValueOption.OVERWRITE_IF_EXISTS_OR_ADD
    assert opt.header.value == ""
    return str(opt.header.raw_value.decode())


async def run_stream(
    port: int, msgs: list[pb.ProcessingRequest], **channel_kw: object
) -> list[pb.ProcessingResponse]:
    """Send each message on one real gRPC stream to 127.0.0.1:``port``, read its answer, half-close,
    and wait for the server to end the call (status OK asserted).

    Returns the answers. Once the router needs nothing more from the exchange it ends the call
    (extproc/adapter/server.py), instead of answering a message it would pass through unchanged:
    then there are fewer answers than messages, the rest are not sent, and Envoy continues the
    unanswered message, and skips processing any later one, unchanged (:func:`passed_through`).
    """
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", **channel_kw) as ch:  # type: ignore[arg-type]
        call = open_stream(ch)
        out: list[pb.ProcessingResponse] = []
        for m in msgs:
            try:
                await call.write(m)
            except grpc.aio.AioRpcError:
                # The router ended the call right after its last answer, before this write (the
                # client then reports its own failed write, not the router's status).
                assert out, "the stream failed before the first answer"
                return out
            msg = await call.read()
            if msg is EOF:
                break
            assert isinstance(msg, pb.ProcessingResponse), msg
            out.append(msg)
        await call.done_writing()
        assert await call.code() == grpc.StatusCode.OK
        return out


def body_first(body: bytes, request_id: str, path: str = "/v1/chat/completions") -> pb.ProcessingRequest:
    """The one message of the one-message design (envoy/envoy.yaml): the body, with the request
    line as attributes."""
    req = pb.ProcessingRequest(request_body=pb.HttpBody(body=body, end_of_stream=True))
    attrs = req.attributes["envoy.filters.http.ext_proc"]
    attrs["request.path"] = path
    attrs["request.method"] = "POST"
    attrs["request.id"] = request_id
    return req


def forwarded(answer: pb.ProcessingResponse) -> pb.ProcessingRequest:
    """The observability stream's request headers as Envoy sends them: the routing answer's ``tbr``
    namespace forwarded in ``metadata_context`` (``forwarding_namespaces``), no router header."""
    req = pb.ProcessingRequest(request_headers=headers({":method": "POST", ":path": "/v1/chat/completions"}))
    req.metadata_context.filter_metadata["tbr"].CopyFrom(answer.dynamic_metadata.fields["tbr"].struct_value)
    return req


async def silent_stream(port: int, msgs: list[pb.ProcessingRequest]) -> list[pb.ProcessingResponse]:
    """Write every message (Envoy's observability mode waits for no answer), then read to the end
    (status OK asserted); returns what the router answered."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        call = open_stream(ch)
        for m in msgs:
            await call.write(m)
        with contextlib.suppress(grpc.aio.AioRpcError):  # the router may end the call first
            await call.done_writing()
        out = [m async for m in call]
        assert await call.code() == grpc.StatusCode.OK
        return out
