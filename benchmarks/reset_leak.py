"""Router RSS per ext_proc stream that ends the way Envoy ends it.

``python -m benchmarks.reset_leak --streams 48000``: starts ``tbr serve`` (config/router.yaml on
free loopback ports, via devstack), then runs exchanges 16 at a time and prints the router's RSS
every 8,000 streams and the growth per 1,000 streams after the first 16,000 (warm-up).

* ``--messages 4`` (default): a calibrated exchange (request headers and body, 2xx JSON response
  headers and body with ``usage``). The client resets (cancels) its call as soon as it has the
  last answer, as Envoy 1.40 does after the last response-body answer; if the router ends the
  call instead of answering (extproc/adapter/server.py), the client reads the status.
* ``--messages 2``: an unsampled exchange (``calibration.skip_unsampled_responses``); the last
  answer is the request body's. ``--reset-after-ms`` then resets that long after it unless the
  router ended the call first (Envoy resets such a stream only when the HTTP request ends).
* ``--half-close``: the client half-closes and waits for the status instead (no reset at all).

This is how issue 12's native leak was found and measured (grpc/grpc#43360: a batch a reset
catches in flight leaks its op array): 137 KiB per 1k streams when the handler sat in a read,
22–29 with the 20 ms wait for the reset, ~4 when the router ends the call (BENCHMARKS.md).
What it cannot show: Envoy also resets the HTTP/2 stream after the router's status (the
``cluster.ext_proc.upstream_rq_tx_reset`` stat); that is measured through the real Envoy by
``make soak``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import tempfile
import time
from pathlib import Path

import grpc
import httpx
import yaml
from envoy.config.core.v3 import base_pb2 as core
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from devstack.procs import free_port
from devstack.stack import render_router_config, router_process


def _headers(pairs: dict[str, str], eos: bool = False) -> pb.HttpHeaders:
    hs = [core.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    return pb.HttpHeaders(headers=core.HeaderMap(headers=hs), end_of_stream=eos)


def exchange() -> list[pb.ProcessingRequest]:
    """The 4 messages of one calibrated chat exchange."""
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello there " * 40}]})
    usage = json.dumps({"usage": {"prompt_tokens": 130, "completion_tokens": 1}})
    return [
        pb.ProcessingRequest(
            request_headers=_headers(
                {":method": "POST", ":path": "/v1/chat/completions", "x-request-id": "r"}
            )
        ),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=body.encode(), end_of_stream=True)),
        pb.ProcessingRequest(
            response_headers=_headers({":status": "200", "content-type": "application/json"})
        ),
        pb.ProcessingRequest(response_body=pb.HttpBody(body=usage.encode(), end_of_stream=True)),
    ]


def rss_kib(pid: int) -> int:
    """VmRSS of ``pid`` in KiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


async def _one(
    stub: pb_grpc.ExternalProcessorStub,
    msgs: list[pb.ProcessingRequest],
    half_close: bool,
    reset_after_s: float,
) -> None:
    call = stub.Process()
    for m in msgs:
        await call.write(m)
        if await call.read() is grpc.aio.EOF:  # type: ignore[attr-defined]
            break  # the router ended the call instead of answering (it needs nothing more)
    if half_close:
        await call.done_writing()
        await call.code()
        return
    if reset_after_s > 0:
        # Envoy keeps the stream until the HTTP request ends (after a BUFFERED request body's
        # answer): reset then, unless the router ended the call first.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(call.code()), reset_after_s)
    call.cancel()


async def _drive(
    port: int,
    pid: int,
    streams: int,
    msgs: list[pb.ProcessingRequest],
    half_close: bool,
    reset_after_s: float,
) -> list[tuple[int, int]]:
    marks: list[tuple[int, int]] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.ExternalProcessorStub(ch)
        done = 0
        while done < streams:
            await asyncio.gather(*(_one(stub, msgs, half_close, reset_after_s) for _ in range(16)))
            done += 16
            if done % 8000 == 0:
                marks.append((done, rss_kib(pid)))
                print(f"{done} streams: router RSS {marks[-1][1] / 1024:.2f} MiB", flush=True)
    return marks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=48_000)
    p.add_argument("--half-close", action="store_true", help="half-close and wait for the status instead")
    p.add_argument(
        "--messages",
        type=int,
        choices=(2, 4),
        default=4,
        help="4: a calibrated exchange (the last answer is the response body's); 2: an unsampled "
        "one (calibration.skip_unsampled_responses, the last answer is the request body's)",
    )
    p.add_argument(
        "--reset-after-ms",
        type=float,
        default=0.0,
        help="reset this long after the last answer unless the router ended the call (0: at once)",
    )
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tbr-reset-leak-"))
    grpc_port, admin_port = free_port(), free_port()
    cfg = render_router_config(
        grpc_port=grpc_port, admin_port=admin_port, short_max_model_len=8192, long_max_model_len=65536
    )
    if args.messages == 2:
        cfg.setdefault("calibration", {}).update(sample_rate=0.0, skip_unsampled_responses=True)
    cfg_path = work / "router.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    router = router_process(cfg_path, grpc_port, admin_port, log_dir=work)
    router.argv += ["--log-level", "WARNING"]
    with router:
        assert router.pid is not None
        t0 = time.monotonic()
        marks = asyncio.run(
            _drive(
                grpc_port,
                router.pid,
                args.streams,
                exchange()[: args.messages],
                args.half_close,
                args.reset_after_ms / 1000,
            )
        )
        trim = httpx.get(
            f"http://127.0.0.1:{admin_port}/debug/memory", params={"trim": "1"}, timeout=30
        ).json()
        print(
            f"malloc_trim(0): RSS {trim['rss_before_kib'] / 1024:.2f} -> {trim['rss_after_kib'] / 1024:.2f} MiB"
        )
    warm = [m for m in marks if m[0] >= 16_000]
    if len(warm) >= 2:
        per_1k = (warm[-1][1] - warm[0][1]) / ((warm[-1][0] - warm[0][0]) / 1000)
        print(f"growth after warm-up: {per_1k:.1f} KiB per 1,000 streams ({time.monotonic() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
