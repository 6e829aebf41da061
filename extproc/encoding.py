"""Incremental decoders for response ``content-encoding`` (RFC 9110 §8.4.1).

The router reads ``usage`` from responses it must not alter; when the upstream compressed them,
it decodes a copy. Supported: ``identity``, ``gzip`` / ``x-gzip``, ``deflate`` (zlib, and raw
deflate as sent by some servers), ``br`` (brotli), ``zstd``. Names are case-insensitive; a
list (``gzip, br``) is decoded in reverse order of application. Anything else is unsupported:
:func:`make_decoder` returns None and the caller skips calibration for that response.

Output is bounded by ``max_output_bytes`` so a compression bomb cannot exhaust memory.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import brotli
import zstandard

__all__ = ["DecodeError", "StreamDecoder", "make_decoder"]


class DecodeError(ValueError):
    """The compressed stream is corrupt or exceeds the output bound."""


def _zlib_step(mode: int) -> Callable[[bytes], bytes]:
    d = zlib.decompressobj(mode)

    def step(data: bytes) -> bytes:
        try:
            return d.decompress(data)
        except zlib.error as exc:
            raise DecodeError(str(exc)) from None

    return step


def _deflate_step() -> Callable[[bytes], bytes]:
    """zlib-wrapped deflate, falling back to raw deflate on the first chunk (RFC 9110 §8.4.1.2)."""
    state: dict[str, Callable[[bytes], bytes]] = {}
    head = bytearray()

    def step(data: bytes) -> bytes:
        if "d" not in state:
            # The zlib header is 2 bytes; a chunk may hold only one of them.
            head.extend(data)
            if len(head) < 2:
                return b""
            data = bytes(head)
            zlib_wrapped = (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            state["d"] = _zlib_step(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)
        return state["d"](data)

    return step


def _brotli_step() -> Callable[[bytes], bytes]:
    d = brotli.Decompressor()

    def step(data: bytes) -> bytes:
        try:
            out: bytes = d.process(data)
        except brotli.error as exc:
            raise DecodeError(str(exc)) from None
        return out

    return step


def _zstd_step() -> Callable[[bytes], bytes]:
    d = zstandard.ZstdDecompressor().decompressobj()

    def step(data: bytes) -> bytes:
        try:
            out: bytes = d.decompress(data)
        except zstandard.ZstdError as exc:
            raise DecodeError(str(exc)) from None
        return out

    return step


_FACTORIES: dict[str, Callable[[], Callable[[bytes], bytes]]] = {
    "gzip": lambda: _zlib_step(16 + zlib.MAX_WBITS),
    "x-gzip": lambda: _zlib_step(16 + zlib.MAX_WBITS),
    "deflate": _deflate_step,
    "br": _brotli_step,
    "zstd": _zstd_step,
}


class StreamDecoder:
    """Decode a possibly multi-layer encoded stream chunk by chunk, with an output bound."""

    def __init__(self, steps: list[Callable[[bytes], bytes]], max_output_bytes: int) -> None:
        self._steps = steps
        self._left = max_output_bytes

    def decode(self, data: bytes) -> bytes:
        """Decode the next chunk.

        Raises:
            DecodeError: corrupt input, or more than ``max_output_bytes`` produced in total.
        """
        for step in self._steps:
            data = step(data)
        self._left -= len(data)
        if self._left < 0:
            raise DecodeError("decoded body exceeds the bound")
        return data


def make_decoder(content_encoding: str, *, max_output_bytes: int = 64 << 20) -> StreamDecoder | None:
    """Build a decoder for a ``content-encoding`` header value; None when unsupported.

    An empty value or ``identity`` gives a pass-through decoder.
    """
    names = [n.strip().lower() for n in content_encoding.split(",") if n.strip()]
    steps: list[Callable[[bytes], bytes]] = []
    for name in reversed(names):
        if name == "identity":
            continue
        factory = _FACTORIES.get(name)
        if factory is None:
            return None
        steps.append(factory())
    return StreamDecoder(steps, max_output_bytes)
