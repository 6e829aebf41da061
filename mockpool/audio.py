"""Audio prompt tokens of the stand-in pool: an audio encoder emits a number of tokens proportional
to the clip's duration (e.g. 12.5 per second for Voxtral, 25 for Qwen2-Audio). The duration is read
from the clip's header with ``mutagen`` (WAV, FLAC, Ogg, MP3); an unreadable clip is a 400, as a
server that cannot load the audio answers."""

from __future__ import annotations

import binascii
import io
import math
from typing import Any

import mutagen

__all__ = ["AUDIO_EXTRA_TOKENS", "AudioInputError", "audio_clips_seconds"]

AUDIO_EXTRA_TOKENS = 2
"""Begin/end-of-audio tokens per clip."""


class AudioInputError(ValueError):
    """An audio part whose clip cannot be read (answered with HTTP 400)."""


def _seconds(payload: str) -> float:
    try:
        data = binascii.a2b_base64(payload)
        parsed = mutagen.File(io.BytesIO(data))
        length = float(parsed.info.length) if parsed is not None else 0.0
    except Exception as exc:
        raise AudioInputError(f"cannot read the audio clip: {exc}") from None
    if not math.isfinite(length) or length <= 0.0:
        raise AudioInputError("cannot read the audio clip's duration")
    return length


def audio_clips_seconds(messages: Any) -> list[float]:
    """Durations (seconds) of every ``input_audio`` / ``audio_url`` (base64 data URI) part of ``messages``.

    Raises:
        AudioInputError: an audio part whose clip cannot be read.
    """
    out: list[float] = []
    for message in messages if isinstance(messages, list) else ():
        content = message.get("content") if isinstance(message, dict) else None
        for part in content if isinstance(content, list) else ():
            if not isinstance(part, dict):
                continue
            if part.get("type") == "input_audio" and isinstance(part.get("input_audio"), dict):
                out.append(_seconds(str(part["input_audio"].get("data", ""))))
            elif part.get("type") == "audio_url":
                url = part.get("audio_url")
                url = url.get("url") if isinstance(url, dict) else url
                if not isinstance(url, str) or ";base64," not in url[:300]:
                    raise AudioInputError("audio_url must be a base64 data URI here")
                out.append(_seconds(url.split(",", 1)[1]))
    return out
