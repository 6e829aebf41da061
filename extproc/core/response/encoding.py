"""Incremental decoders for response ``content-encoding`` (RFC 9110 §8.4.1).

The router reads ``usage`` from responses it must not alter; when the upstream compressed them,
it decodes a copy. Supported: ``identity``, ``gzip`` / ``x-gzip``, ``deflate`` (zlib, and raw
deflate as sent by some servers), ``br`` (brotli), ``zstd``. Names are case-insensitive; a
list (``gzip, br``) is decoded in reverse order of application. Anything else is unsupported:
:func:`make_decoder` returns None and the caller skips calibration for that response.

Output is bounded by ``max_output_bytes`` so a compression bomb cannot exhaust memory: each
layer is asked for at most the remaining bound (zlib ``max_length``, brotli
``output_buffer_limit``; zstd, which has no output limit, is fed in small pieces).
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

import brotli
import zstandard

__all__ = ["DecodeError", "StreamDecoder", "make_decoder"]


class DecodeError(ValueError):
    """The compressed stream is corrupt or exceeds the output bound."""


Step = Callable[[bytes, int], bytes]
"""One decoding layer: ``step(data, limit)`` returns the output for ``data`` and raises
:class:`DecodeError` rather than produce more than ``limit`` bytes."""

_ZSTD_PIECE_BYTES = 256
"""zstd input is decoded this many bytes at a time: the library has no output limit, and one
RLE block of a few bytes can expand to 128 KiB, so small pieces bound the overshoot (≤ 8 MiB)."""


def _too_large() -> DecodeError:
    return DecodeError("decoded body exceeds the bound")


def _zlib_step(mode: int) -> Step:
    d = zlib.decompressobj(mode)

    def step(data: bytes, limit: int) -> bytes:
        try:
            out = d.decompress(data, limit + 1)
        except zlib.error as exc:
            raise DecodeError(str(exc)) from None
        if len(out) > limit:
            raise _too_large()
        return out

    return step


def _deflate_step() -> Step:
    """zlib-wrapped deflate, falling back to raw deflate on the first chunk (RFC 9110 §8.4.1.2)."""
    state: dict[str, Step] = {}
    head = bytearray()

    def step(data: bytes, limit: int) -> bytes:
        if "d" not in state:
            # The zlib header is 2 bytes; a chunk may hold only one of them.
            head.extend(data)
            if len(head) < 2:
                return b""
            data = bytes(head)
            zlib_wrapped = (data[0] & 0x0F) == 8 and ((data[0] << 8) | data[1]) % 31 == 0
            state["d"] = _zlib_step(zlib.MAX_WBITS if zlib_wrapped else -zlib.MAX_WBITS)
        return state["d"](data, limit)

    return step


def _brotli_step() -> Step:
    d = brotli.Decompressor()

    def step(data: bytes, limit: int) -> bytes:
        try:
            out: bytes = d.process(data, output_buffer_limit=limit + 1)
            while len(out) <= limit and not d.can_accept_more_data():
                out += d.process(b"", output_buffer_limit=limit + 1 - len(out))
        except brotli.error as exc:
            raise DecodeError(str(exc)) from None
        if len(out) > limit:
            raise _too_large()
        return out

    return step


def _zstd_step() -> Step:
    d = zstandard.ZstdDecompressor().decompressobj()

    def step(data: bytes, limit: int) -> bytes:
        parts: list[bytes] = []
        produced = 0
        try:
            for i in range(0, len(data), _ZSTD_PIECE_BYTES):
                piece: bytes = d.decompress(data[i : i + _ZSTD_PIECE_BYTES])
                produced += len(piece)
                if produced > limit:
                    raise _too_large()
                parts.append(piece)
        except zstandard.ZstdError as exc:
            raise DecodeError(str(exc)) from None
        return b"".join(parts)

    return step


_FACTORIES: dict[str, Callable[[], Step]] = {
    "gzip": lambda: _zlib_step(16 + zlib.MAX_WBITS),
    "x-gzip": lambda: _zlib_step(16 + zlib.MAX_WBITS),
    "deflate": _deflate_step,
    "br": _brotli_step,
    "zstd": _zstd_step,
}


class StreamDecoder:
    """Decode a possibly multi-layer encoded stream chunk by chunk, with an output bound."""

    def __init__(self, steps: list[Step], max_output_bytes: int) -> None:
        self._steps = steps
        self._left = max_output_bytes

    def decode(self, data: bytes) -> bytes:
        """Decode the next chunk.

        Raises:
            DecodeError: corrupt input, or more than ``max_output_bytes`` produced in total.
        """
        if self._left < 0:
            raise _too_large()
        for step in self._steps:
            data = step(data, self._left)  # every layer's output is bounded, not just the last
        self._left -= len(data)
        if self._left < 0:
            raise _too_large()
        return data


def make_decoder(content_encoding: str, *, max_output_bytes: int = 64 << 20) -> StreamDecoder | None:
    """Build a decoder for a ``content-encoding`` header value; None when unsupported.

    An empty value or ``identity`` gives a pass-through decoder.
    """
    names = [n.strip().lower() for n in content_encoding.split(",") if n.strip()]
    steps: list[Step] = []
    for name in reversed(names):
        if name == "identity":
            continue
        factory = _FACTORIES.get(name)
        if factory is None:
            return None
        steps.append(factory())
    return StreamDecoder(steps, max_output_bytes)
