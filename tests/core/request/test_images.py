"""Image sizes from headers only, and the per-model token rules."""

from __future__ import annotations

import base64
import io

import pytest
from PIL import Image

from extproc.config import DEFAULT_IMAGE_RULES, ImageRule
from extproc.core.request.images import (
    ImageBudget,
    ImageSize,
    image_size,
    image_tokens_patch,
    size_from_base64,
    size_from_url,
)


def encoded(fmt: str, w: int, h: int, **save: object) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), (10, 20, 30)).save(buf, format=fmt, **save)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "GIF"])
def test_header_size_of_each_format(fmt: str) -> None:
    data = encoded(fmt, 1234, 567)
    assert image_size(data) == ImageSize(1234, 567)
    uri = f"data:image/{fmt.lower()};base64," + base64.b64encode(data).decode()
    assert size_from_url(uri) == ImageSize(1234, 567)


def test_only_the_header_is_decoded() -> None:
    """A PNG whose payload is truncated right after its header still has a size: the decoder
    never needs the pixel data."""
    data = encoded("PNG", 3840, 2160)
    assert size_from_base64(base64.b64encode(data[:64]).decode() + "!!!not base64 beyond") == ImageSize(
        3840, 2160
    )


def test_jpeg_after_a_large_exif_segment() -> None:
    exif = Image.Exif()
    exif[0x010E] = "x" * 20000  # ImageDescription: pushes the start-of-frame past the first 4 KiB
    data = encoded("JPEG", 800, 600, exif=exif.tobytes())
    assert data.index(b"\xff\xc0") > 4096
    assert size_from_base64(base64.b64encode(data).decode()) == ImageSize(800, 600)


@pytest.mark.parametrize(
    "value", ["https://example.com/a.png", "data:image/png,rawbytes", "data:image/png;base64,@@@@", ""]
)
def test_unknown_sizes(value: str) -> None:
    assert size_from_url(value) is None


def test_qwen_patch_rule_published_examples() -> None:
    """Qwen2.5-VL smart_resize: 4K screenshot 77×137 cells; 1008×1008 → 1296; thumbnail 81;
    beyond max_pixels scaled down to at most 16384 cells."""
    q = (28, 3136, 12_845_056)
    assert image_tokens_patch(ImageSize(3840, 2160), *q) == 77 * 137
    assert image_tokens_patch(ImageSize(1008, 1008), *q) == 1296
    assert image_tokens_patch(ImageSize(256, 256), *q) == 81
    assert image_tokens_patch(ImageSize(20, 20), *q) == 4  # scaled up to min_pixels
    assert image_tokens_patch(ImageSize(8000, 8000), *q) <= 16384


def test_image_budget_by_model() -> None:
    fixed = ImageRule(pattern="llava", kind="fixed", tokens_per_image=576)
    budget = ImageBudget((*DEFAULT_IMAGE_RULES, fixed), flat_tokens=4096)
    four_k = ImageSize(3840, 2160)
    assert budget.tokens("Qwen/Qwen2.5-VL-7B-Instruct", 1, (four_k,)) == 77 * 137 + 2
    assert budget.tokens("Qwen/Qwen2.5-VL-7B-Instruct", 1, (None,)) == 16384 + 2  # remote URL: the maximum
    assert budget.tokens("llava-hf/llava-1.5-7b-hf", 2, (four_k, None)) == 2 * 576
    assert budget.tokens("meta-llama/Llama-3.1-8B-Instruct", 1, (four_k,)) == 4096  # no rule: flat
