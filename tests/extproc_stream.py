"""One real ext_proc client for the tests: send scripted ``ProcessingRequest``s on a gRPC stream
in Envoy's lock-step order (one message, its answer, the next ...) and collect the answers."""

from __future__ import annotations

import json

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc


def chat_body(text: str, **extra: object) -> bytes:
    """A chat-completions body with one user message ``text`` (model ``m``)."""
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": text}], **extra}).encode()


async def run_stream(
    port: int, msgs: list[pb.ProcessingRequest], **channel_kw: object
) -> list[pb.ProcessingResponse]:
    """Send each message on one real gRPC stream to 127.0.0.1:``port``, read its answer, half-close,
    and wait for the server to end the call."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}", **channel_kw) as ch:  # type: ignore[arg-type]
        call = pb_grpc.ExternalProcessorStub(ch).Process()
        out = []
        for m in msgs:
            await call.write(m)
            out.append(await call.read())
        await call.done_writing()
        await call.code()
        return out
