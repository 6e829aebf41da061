"""Router RSS per ext_proc stream that the client resets after the last answer, as Envoy does.

``python -m benchmarks.reset_leak --streams 48000``: starts ``tbr serve`` (config/router.yaml on
free loopback ports, via devstack), then runs full 4-message exchanges (request headers and body,
2xx JSON response headers and body with ``usage``) 16 at a time; each client cancels its call as
soon as it has read the last answer (Envoy resets the ext_proc stream the same way). With
``--half-close`` the client half-closes and waits for the status instead. Prints the router's RSS
every 8,000 streams and the growth per 1,000 streams after the first 16,000 (warm-up).

This is how issue 12's native leak was found and measured (grpc/grpc#43360: a batch run on a
reset call leaks its op array): 137 KiB per 1k streams before the fix in
extproc/adapter/server.py, ~25 after; ~1–20 with ``--half-close`` (run-to-run noise of RSS).
"""

from __future__ import annotations

import argparse
import asyncio
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
    stub: pb_grpc.ExternalProcessorStub, msgs: list[pb.ProcessingRequest], half_close: bool
) -> None:
    call = stub.Process()
    for m in msgs:
        await call.write(m)
        await call.read()
    if half_close:
        await call.done_writing()
        await call.code()
    else:
        call.cancel()


async def _drive(port: int, pid: int, streams: int, half_close: bool) -> list[tuple[int, int]]:
    msgs = exchange()
    marks: list[tuple[int, int]] = []
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
        stub = pb_grpc.ExternalProcessorStub(ch)
        done = 0
        while done < streams:
            await asyncio.gather(*(_one(stub, msgs, half_close) for _ in range(16)))
            done += 16
            if done % 8000 == 0:
                marks.append((done, rss_kib(pid)))
                print(f"{done} streams: router RSS {marks[-1][1] / 1024:.2f} MiB", flush=True)
    return marks


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--streams", type=int, default=48_000)
    p.add_argument("--half-close", action="store_true", help="half-close and wait for the status instead")
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="tbr-reset-leak-"))
    grpc_port, admin_port = free_port(), free_port()
    cfg = render_router_config(
        grpc_port=grpc_port, admin_port=admin_port, short_max_model_len=8192, long_max_model_len=65536
    )
    cfg_path = work / "router.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    router = router_process(cfg_path, grpc_port, admin_port, log_dir=work)
    router.argv += ["--log-level", "WARNING"]
    with router:
        assert router.pid is not None
        t0 = time.monotonic()
        marks = asyncio.run(_drive(grpc_port, router.pid, args.streams, args.half_close))
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
