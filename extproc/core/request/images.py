"""Image token budgets from pixel size, read from the image header only (no decode, no I/O).

Size: :func:`image_size` reads width and height from the first bytes of a PNG, JPEG, WebP or GIF
with the ``imagesize`` library (header parsing only). A ``data:`` URI is base64-decoded only as
far as the header: the first ``4 KiB`` of payload, then more (up to ``MAX_HEADER_BYTES``) only
for a JPEG whose start-of-frame segment comes after large EXIF/ICC segments. A remote URL (or
anything unreadable) has no size: :meth:`ImageRule.tokens` then budgets the model's configured
maximum.

Rules (:class:`~extproc.config.ImageRule`, first ``pattern`` match on the model name):

* ``patch``: Qwen2-VL / Qwen2.5-VL ``smart_resize`` (Hugging Face
  ``transformers/models/qwen2_vl/image_processing_qwen2_vl.py``): height and width are rounded to
  multiples of ``patch_px`` (28 = 14-pixel patches merged 2×2), scaled down to ``max_pixels`` or up to
  ``min_pixels`` keeping the aspect ratio; one token per ``patch_px × patch_px`` cell. A 3840×2160
  screenshot is 77 × 137 = 10,549 tokens; a 256×256 thumbnail 81.
* ``fixed``: models that tile or resize every image to a fixed grid (LLaVA-1.5: 576; Llama-3.2-Vision
  counts one ``<|image|>`` token in the prompt): ``tokens_per_image`` whatever the size.

``extra_tokens`` adds the per-image special tokens (Qwen: ``<|vision_start|>`` and ``<|vision_end|>``).
"""

from __future__ import annotations

import binascii
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass

import imagesize

from extproc.config import ImageRule
from extproc.core.request.model_rules import ModelRules

__all__ = [
    "MAX_HEADER_BYTES",
    "ImageBudget",
    "ImageSize",
    "image_size",
    "image_tokens_patch",
    "size_from_base64",
    "size_from_url",
]

MAX_HEADER_BYTES = 256 * 1024
"""Most payload bytes decoded to find a header (JPEG start-of-frame after EXIF/ICC segments)."""

_FIRST_BYTES = 4096


@dataclass(frozen=True, slots=True)
class ImageSize:
    """Pixel size of one image (``width_px``, ``height_px`` > 0)."""

    width_px: int
    height_px: int


def image_size(header: bytes) -> ImageSize | None:
    """Width and height from the first bytes of a PNG, JPEG, WebP or GIF; None when unknown.

    ``header`` may be truncated: a format whose size field lies beyond it gives None.
    EXIF orientation is not applied (token counts of the rules are symmetric in width/height).
    """
    if len(header) < 10:
        return None
    width, height = imagesize.get(io.BytesIO(header), exif_rotation=False)
    if width <= 0 or height <= 0:
        return None
    return ImageSize(int(width), int(height))


def _b64_prefix(payload: str, n_bytes: int) -> bytes | None:
    """Decode the base64 characters that yield the first ``n_bytes`` bytes (whitespace-free)."""
    chars = min(len(payload), (n_bytes + 2) // 3 * 4)
    chars -= chars % 4
    if chars <= 0:
        return None
    try:
        return binascii.a2b_base64(payload[:chars])
    except (binascii.Error, ValueError):
        return None


def size_from_url(url: str) -> ImageSize | None:
    """Size of an image given as a ``data:[<mime>];base64,<payload>`` URI; None for remote URLs,
    non-base64 data URIs, or payloads whose header cannot be read.

    Decodes at most :data:`MAX_HEADER_BYTES` of the payload (4 KiB first, more only for JPEG).
    """
    if not url.startswith("data:"):
        return None
    comma = url.find(",", 5, 300)
    if comma < 0 or not url[5:comma].endswith(";base64"):
        return None
    return size_from_base64(url[comma + 1 :])


def size_from_base64(payload: str) -> ImageSize | None:
    """Size of an image whose bytes are ``payload`` in base64 (Anthropic ``source.data``)."""
    n = _FIRST_BYTES
    while True:
        head = _b64_prefix(payload, n)
        if head is None:
            return None
        size = image_size(head)
        whole = len(head) >= len(payload) * 3 // 4 - 2
        if size is not None or whole or n >= MAX_HEADER_BYTES or not head.startswith(b"\xff\xd8"):
            return size
        n *= 8


def image_tokens_patch(size: ImageSize, patch_px: int, min_pixels: int, max_pixels: int) -> int:
    """Tokens of one image under Qwen2-VL's ``smart_resize`` (see the module docstring).

    Args:
        size: the image's pixel size.
        patch_px: the side of one token's cell after merging (28 for Qwen2/2.5-VL).
        min_pixels / max_pixels: the processor's pixel bounds (Qwen2.5-VL: 3136 and 12,845,056).
    """
    h, w = size.height_px, size.width_px
    f = patch_px
    h_bar = max(f, round(h / f) * f)
    w_bar = max(f, round(w / f) * f)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(h * w / max_pixels)
        h_bar = max(f, math.floor(h / beta / f) * f)
        w_bar = max(f, math.floor(w / beta / f) * f)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (h * w))
        h_bar = math.ceil(h * beta / f) * f
        w_bar = math.ceil(w * beta / f) * f
    return (h_bar // f) * (w_bar // f)


def rule_tokens(rule: ImageRule, size: ImageSize | None) -> int:
    """Tokens of one image under ``rule``; an unknown size costs :attr:`ImageRule.max_tokens`."""
    if size is None or rule.kind == "fixed":
        return rule.max_tokens
    return image_tokens_patch(size, rule.patch_px, rule.min_pixels, rule.max_pixels) + rule.extra_tokens


class ImageBudget(ModelRules[ImageRule]):
    """Image tokens of a request by its model's :class:`~extproc.config.ImageRule`.

    Args:
        rules: the configured rules, first ``pattern`` match (case-insensitive) wins.
        flat_tokens: tokens per image for models that match no rule.
    """

    def __init__(self, rules: Sequence[ImageRule], flat_tokens: int) -> None:
        super().__init__(rules)
        self.flat_tokens = flat_tokens

    def tokens(self, model: str, n_images: int, sizes: Sequence[ImageSize | None]) -> int:
        """Prompt tokens of ``n_images`` image parts of which ``sizes`` were read (in order);
        parts beyond ``sizes`` (documents) cost as much as an image of unknown size."""
        if n_images <= 0:
            return 0
        rule = self.rule(model)
        if rule is None:
            return n_images * self.flat_tokens
        known = sum(rule_tokens(rule, s) for s in sizes[:n_images])
        return known + max(0, n_images - len(sizes)) * rule.max_tokens
