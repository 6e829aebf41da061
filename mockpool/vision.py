"""Image prompt tokens as a Qwen2.5-VL vLLM server counts them (stand-in pool only).

Each inline image (``data:`` URI, or Anthropic ``source.type: base64``) is decoded with Pillow, as
vLLM's media connector does, and resized by the Hugging Face Qwen2-VL image processor's
``smart_resize`` (``transformers/models/qwen2_vl/image_processing_qwen2_vl.py``; Qwen2.5-VL
``preprocessor_config.json``: patch_size 14, merge_size 2, min_pixels 3136, max_pixels 12845056).
The prompt holds one ``<|image_pad|>`` per 28×28 cell between ``<|vision_start|>`` and
``<|vision_end|>``: ``tokens = (h/28)·(w/28) + 2``. The cells are counted by the router's
``smart_resize`` (``extproc.core.request.images.image_tokens_patch``: the formula lives in one place); what
differs is how the size is read: here by a full Pillow decode, as vLLM's media connector does, there
from the image header alone, so the tests still compare two readings of every image.

A remote URL cannot be fetched here (loopback only): it counts as the largest image the processor
allows (``max_pixels``), the most a real server could count.
"""

from __future__ import annotations

import base64
import binascii
import io
from collections.abc import Iterable
from typing import Any

from PIL import Image, UnidentifiedImageError

from extproc.core.request.images import ImageSize, image_tokens_patch

PATCH_PX = 28
MIN_PIXELS = 3136
MAX_PIXELS = 12_845_056
VISION_MARKER_TOKENS = 2


class ImageInputError(ValueError):
    """An inline image that cannot be decoded (answered with HTTP 400)."""


def tokens_for_size(width: int, height: int) -> int:
    """Prompt tokens of one decoded image of ``width × height`` pixels: the 28×28 cells of
    ``smart_resize`` (one implementation, :func:`extproc.core.request.images.image_tokens_patch`;
    tests/core/request/test_images.py holds it to the processor's counts) plus the two vision markers."""
    cells = image_tokens_patch(ImageSize(width, height), PATCH_PX, MIN_PIXELS, MAX_PIXELS)
    return cells + VISION_MARKER_TOKENS


def _decode(b64: str) -> int:
    try:
        raw = base64.b64decode(b64, validate=False)
        with Image.open(io.BytesIO(raw)) as img:
            img.load()  # a full decode, as the server's media connector does
            width, height = img.size
    except (binascii.Error, ValueError, OSError, UnidentifiedImageError) as exc:
        raise ImageInputError(f"cannot decode image: {exc}") from exc
    return tokens_for_size(width, height)


def part_tokens(part: dict[str, Any]) -> int:
    """Tokens of one image content part (chat ``image_url``, Responses ``input_image``,
    Anthropic ``image``)."""
    url = part.get("image_url")
    if isinstance(url, dict):
        url = url.get("url")
    if isinstance(url, str):
        if url.startswith("data:") and ";base64," in url[:300]:
            return _decode(url.split(",", 1)[1])
        return MAX_PIXELS // (PATCH_PX * PATCH_PX) + VISION_MARKER_TOKENS
    source = part.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        return _decode(str(source.get("data", "")))
    return MAX_PIXELS // (PATCH_PX * PATCH_PX) + VISION_MARKER_TOKENS


def messages_image_tokens(messages: Iterable[Any]) -> tuple[int, int]:
    """``(image parts, their tokens)`` over OpenAI chat ``messages`` (image parts only)."""
    parts = 0
    tokens = 0
    for msg in messages:
        content = msg.get("content") if isinstance(msg, dict) else None
        if not isinstance(content, list):
            continue
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("image_url", "input_image", "image"):
                parts += 1
                tokens += part_tokens(part)
    return parts, tokens
