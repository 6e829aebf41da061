"""The rules that cut text into runs, defined once: the kind of every code point and the blob test.

Three implementations read this module and nothing else for these rules: the numpy path of
:mod:`extproc.core.text.runs`, the C extension ``extproc/core/text/_runscan.c`` (given every value here by
``configure()`` at import: the C file holds no threshold of its own) and the plain-Python oracle the
tests fuzz both against (``tests/core/text/runs_oracle.py``). Changing a rule is one edit here.

Kinds of characters (names: :data:`extproc.core.text.run_kinds.RUN_KINDS`):

* ASCII (:func:`ascii_kind`): ``letter``, ``digit``, ``newline`` (LF, CR), ``space`` (other
  whitespace and control characters), ``punct`` (the rest).
* U+0080..U+FFFF: the script or class of the block the code point falls in (:data:`BMP_RANGES`).
* beyond U+FFFF: ``emoji`` in :data:`EMOJI_ASTRAL`, ``han`` in :data:`HAN_ASTRAL`, else ``other``.

Blob test (a chunk is a maximal stretch of characters that are neither ``space`` nor ``newline``):
a chunk of ≥ :data:`BLOB_MIN_CHARS` characters is a blob when ≥ :data:`BLOB_ALNUM_SHARE` of it are
ASCII letters or digits, it holds ≥ :data:`BLOB_MIN_DIGITS` digits, and it looks random: hex-like
(digits ≥ :data:`BLOB_MIN_DIGIT_SHARE` of its letters and digits) or base64-like (upper-case and
lower-case letters each ≥ :data:`BLOB_MIN_CASE_SHARE` of its letters). A blob's runs and characters
move to the ``blob`` kind as one run (why these thresholds: docs/estimator.md, the ``blob`` kind).

Gaps (whitespace that costs its own token): a ``space`` run of ≥ 2 characters, or a ``space`` run of
one character followed by a ``digit`` run (pre-tokenisers split ``\\s+(?!\\S)`` off the last space,
and digits take no leading space).
"""

from __future__ import annotations

__all__ = [
    "BLOB_ALNUM_SHARE",
    "BLOB_MIN_CASE_SHARE",
    "BLOB_MIN_CHARS",
    "BLOB_MIN_DIGITS",
    "BLOB_MIN_DIGIT_SHARE",
    "BMP_RANGES",
    "EMOJI_ASTRAL",
    "HAN_ASTRAL",
    "ascii_kind",
]

BLOB_MIN_CHARS = 20
"""Characters of the shortest chunk that may be a blob (2..63: the C fast path tests it on 64-bit
masks)."""
BLOB_ALNUM_SHARE = 0.75
"""Least share of a blob's characters that are ASCII letters or digits."""
BLOB_MIN_DIGITS = 2
"""Least digits of a blob."""
BLOB_MIN_DIGIT_SHARE = 0.3
"""Digits ÷ (letters + digits) at or above which a chunk is hex-like."""
BLOB_MIN_CASE_SHARE = 0.25
"""Least share of a chunk's letters in each case for it to be base64-like."""

BMP_RANGES: tuple[tuple[int, str], ...] = (
    (0x80, "latin_ext"), (0x370, "greek"), (0x400, "cyrillic"), (0x530, "other_script"),
    (0x590, "hebrew"), (0x600, "arabic"), (0x700, "other_script"), (0x750, "arabic"), (0x780, "other_script"),
    (0x8A0, "arabic"), (0x900, "devanagari"), (0x980, "bengali"), (0xA00, "gurmukhi"), (0xA80, "gujarati"),
    (0xB00, "oriya"), (0xB80, "tamil"), (0xC00, "telugu"), (0xC80, "kannada"), (0xD00, "malayalam"),
    (0xD80, "sinhala"), (0xE00, "thai"), (0xE80, "lao"), (0xF00, "other_script"), (0x1000, "myanmar"),
    (0x10A0, "other_script"), (0x1100, "hangul"), (0x1200, "other_script"), (0x1C80, "cyrillic"),
    (0x1C90, "other_script"), (0x1D00, "latin_ext"), (0x1F00, "greek"), (0x2000, "symbol"),
    (0x200D, "emoji"), (0x200E, "symbol"), (0x2E80, "han"), (0x3000, "symbol"), (0x3040, "kana"),
    (0x3100, "han"), (0x3130, "hangul"), (0x3190, "han"), (0x31F0, "kana"), (0x3200, "symbol"),
    (0x3400, "han"), (0xA000, "other_script"), (0xA960, "hangul"), (0xA980, "other_script"),
    (0xAC00, "hangul"), (0xD7B0, "other"), (0xF900, "han"), (0xFB00, "latin_ext"), (0xFB1D, "hebrew"),
    (0xFB50, "arabic"), (0xFE00, "emoji"), (0xFE10, "symbol"), (0xFE70, "arabic"), (0xFF00, "symbol"),
)  # fmt: skip
"""``(first code point, kind)`` in increasing order from U+0080; each range runs to the next start,
the last to U+FFFF. Surrogates and private use (U+D7B0..U+F8FF) are ``other``."""

EMOJI_ASTRAL = (0x1F000, 0x1FB00)
"""Code points ``[lo, hi)`` beyond U+FFFF of the ``emoji`` kind (pictographs, emoticons, flags)."""
HAN_ASTRAL = (0x20000, 0x3FFFF)
"""Code points ``[lo, hi]`` beyond U+FFFF of the ``han`` kind (CJK extensions B..H)."""


def ascii_kind(c: int) -> str:
    """The kind of the ASCII character with code ``c`` (0..127)."""
    ch = chr(c)
    if ch.isalpha():
        return "letter"
    if ch.isdigit():
        return "digit"
    if ch in "\n\r":
        return "newline"
    if ch.isspace() or c < 32 or c == 127:
        return "space"
    return "punct"
