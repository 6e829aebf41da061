"""A slow streaming upstream for the memory benchmark: every POST gets ``200 text/event-stream``
with one SSE chunk per second for ``--hold-s`` seconds, then a ``usage`` chunk and ``[DONE]``
(HTTP/1.1, chunked, keep-alive). ``python -m benchmarks.slow_upstream --port P --hold-s H``.
"""

from __future__ import annotations

import argparse
import asyncio
import json

_HEAD = b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, hold_s: float) -> None:
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = 0
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:"):
                    length = int(line.split(b":", 1)[1])
            if length:
                await reader.readexactly(length)
            writer.write(_HEAD)
            delta = {"choices": [{"index": 0, "delta": {"content": "tok"}}]}
            for _ in range(int(hold_s)):
                writer.write(_chunk(b"data: " + json.dumps(delta).encode() + b"\n\n"))
                await writer.drain()
                await asyncio.sleep(1.0)
            usage = {"choices": [], "usage": {"prompt_tokens": 250, "completion_tokens": int(hold_s)}}
            writer.write(_chunk(b"data: " + json.dumps(usage).encode() + b"\n\ndata: [DONE]\n\n"))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()


async def _main(port: int, hold_s: float) -> None:
    server = await asyncio.start_server(lambda r, w: _handle(r, w, hold_s), "127.0.0.1", port, backlog=4096)
    async with server:
        await server.serve_forever()


def main() -> None:
    """Serve until killed."""
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--hold-s", type=float, default=10.0)
    args = ap.parse_args()
    asyncio.run(_main(args.port, args.hold_s))


if __name__ == "__main__":
    main()
