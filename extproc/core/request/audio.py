"""Audio token budgets from the clip's duration, read from its header (no decode, no I/O).

An audio encoder turns a clip into a number of prompt tokens proportional to its duration: a
Whisper-style encoder emits 50 frames per second (10 ms hop, stride-2 convolution), which the
models pool further. Voxtral pools 4×: 12.5 tokens per second (Liu et al., "Voxtral",
arXiv 2507.13264, §2.1); Qwen2-Audio pools 2×: one token per 40 ms, 25 tokens per second (Chu et
al., "Qwen2-Audio Technical Report", arXiv 2407.10759, §2). The rule of a model
(:class:`~extproc.config.AudioRule`, first ``pattern`` match) gives ``tokens_per_second`` and
``extra_tokens`` (begin/end-of-audio tokens); models matching none use
``estimator.audio_tokens_per_second``.

Duration: :func:`duration_s` hands the clip's bytes to ``mutagen``, which reads WAV (``fmt`` and
``data`` chunk sizes), FLAC (STREAMINFO), Ogg Opus/Vorbis (the last page's granule position) and
MP3 (Xing/VBRI header, else frame size × file size) without decoding any audio. The payload is
base64-decoded (bounded by the request body limit), never decompressed. A remote URL, an unknown
format or a damaged header has no duration: the clip is budgeted ``estimator.audio_tokens``.
"""

from __future__ import annotations

import binascii
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mutagen

from extproc.config import AudioRule
from extproc.core.request.model_rules import ModelRules

__all__ = ["MAX_AUDIO_BYTES", "AudioBudget", "AudioClip", "clip_of_part", "duration_s"]

MAX_AUDIO_BYTES = 16 * 1024 * 1024
"""Largest base64 payload (characters) whose header is read; a larger one has no duration."""

MAX_DURATION_S = 24 * 3600.0
"""Durations above a day are treated as unreadable (a forged header)."""


@dataclass(frozen=True, slots=True)
class AudioClip:
    """One audio part: its duration in seconds, None when unknown."""

    seconds: float | None


def duration_s(data: bytes) -> float | None:
    """Duration of a WAV, FLAC, Ogg (Opus, Vorbis) or MP3 clip from its header; None when unknown.

    Never raises on hostile bytes: anything ``mutagen`` cannot read (or reads as a non-finite,
    non-positive or absurd length) is None.
    """
    if len(data) < 12:
        return None
    try:
        parsed = mutagen.File(io.BytesIO(data))
        length = float(parsed.info.length) if parsed is not None else 0.0
    except Exception:  # mutagen raises many types on damaged input; the clip is then unknown
        return None
    if not math.isfinite(length) or length <= 0.0 or length > MAX_DURATION_S:
        return None
    return length


def _b64(payload: str) -> bytes | None:
    if len(payload) > MAX_AUDIO_BYTES:
        return None
    try:
        return binascii.a2b_base64(payload)
    except (binascii.Error, ValueError):
        return None


def clip_of_part(part: dict[str, Any]) -> AudioClip:
    """The :class:`AudioClip` of a content part: ``input_audio: {data: <base64>, format}`` (OpenAI
    chat, Responses) or ``audio_url: {url: "data:audio/...;base64,..."}`` / ``"<url>"`` (vLLM)."""
    raw: bytes | None = None
    value = part.get("input_audio")
    if isinstance(value, dict) and isinstance(value.get("data"), str):
        raw = _b64(value["data"])
    else:
        url = part.get("audio_url")
        if isinstance(url, dict):
            url = url.get("url")
        if isinstance(url, str) and url.startswith("data:"):
            comma = url.find(",", 5, 300)
            if comma > 0 and url[5:comma].endswith(";base64"):
                raw = _b64(url[comma + 1 :])
    return AudioClip(duration_s(raw) if raw else None)


class AudioBudget(ModelRules[AudioRule]):
    """Audio tokens by the model's :class:`~extproc.config.AudioRule`.

    Args:
        rules: the configured rules, first ``pattern`` match (case-insensitive) wins.
        tokens_per_second: the rate of models that match no rule.
        unknown_tokens: tokens of a clip whose duration is unknown.
    """

    def __init__(self, rules: Sequence[AudioRule], tokens_per_second: float, unknown_tokens: int) -> None:
        super().__init__(rules)
        self.tokens_per_second = tokens_per_second
        self.unknown_tokens = unknown_tokens

    def tokens(self, model: str, clip: AudioClip | None) -> int:
        """Prompt tokens of one clip: ``ceil(seconds × tokens_per_second) + extra_tokens``, or the
        unknown-duration budget."""
        if clip is None or clip.seconds is None:
            return self.unknown_tokens
        rule = self.rule(model)
        rate = rule.tokens_per_second if rule is not None else self.tokens_per_second
        extra = rule.extra_tokens if rule is not None else 0
        return math.ceil(clip.seconds * rate) + extra
