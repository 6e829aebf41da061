"""Server-sent events framing (``text/event-stream``) as vLLM and OpenAI send it.

Each event is ``data: <compact JSON>\\n\\n``; the stream ends with ``data: [DONE]\\n\\n``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson

DONE_EVENT = b"data: [DONE]\n\n"
#: Pause between the pieces of a split event so each piece leaves in its own TCP segment.
SPLIT_PAUSE_S = 0.001


def encode_event(payload: dict[str, Any]) -> bytes:
    """``data: {json}\\n\\n`` for one JSON payload (UTF-8, compact)."""
    return b"data: " + orjson.dumps(payload) + b"\n\n"


def split_bytes(data: bytes, piece_bytes: int) -> list[bytes]:
    """Cut ``data`` into consecutive pieces of at most ``piece_bytes`` bytes (``<= 0`` → one piece).

    Pieces may cut a UTF-8 character or the ``\\n\\n`` terminator in two: that is the point (reassembly tests).
    """
    if piece_bytes <= 0 or len(data) <= piece_bytes:
        return [data]
    return [data[i : i + piece_bytes] for i in range(0, len(data), piece_bytes)]


async def write_pieces(event: bytes, piece_bytes: int) -> AsyncIterator[bytes]:
    """Yield ``event`` whole, or split by :func:`split_bytes` with a short pause between pieces."""
    pieces = split_bytes(event, piece_bytes)
    for i, piece in enumerate(pieces):
        if i:
            await asyncio.sleep(SPLIT_PAUSE_S)
        yield piece
