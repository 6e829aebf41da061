"""Content category of a request for the ``bytes`` baseline, from a bounded sample of its text.

The router's retired ``bytes`` cost model (one bytes/token ratio per content category, arXiv
2604.09613) classified each request with this module; the router now counts runs
(``extproc/core/text/runs.py``) and the classifier lives on as part of the evaluation's baseline
(:mod:`evaluation.baselines.bytes_model`).

The bytes-per-token ratio of a tokenizer depends mostly on the script and on whether the text is
code or structured JSON (docs/data.md §3.1: Llama-3 gives 4.7 B/token on English prose,
5.6 on Cyrillic, 3.3 on Chinese, 1.6 on Telugu). The classifier therefore looks at UTF-8 *lead
bytes*, which identify the Unicode block of each non-ASCII character, and counts them with
``bytes.count`` (C speed): classification of a 16 KiB sample costs tens of microseconds.

Rules (first match wins), mirroring docs/data.md §2.3 so the measured ratios apply:

1. ``json``: the text (stripped) starts with ``{`` or ``[`` and ends with ``}`` or ``]``.
2. CJK (Han + Kana + Hangul ≥ 30 % of letters): ``cjk_ko`` / ``cjk_ja`` / ``cjk_zh``.
3. another script ≥ 30 % of letters: ``cyrillic``, ``thai``, ``indic``, ``arabic``, ``greek``,
   ``hebrew``; Indic is split into ``indic_bn`` (Bengali) and ``indic_te`` (Telugu) and
   ``indic`` (others) because their ratios differ 1.4× (2.2 vs 1.6 B/token).
4. ``code``: a Markdown code fence, or a high density of code punctuation.
5. ``latin``: Latin-script text with English function words (" the ", " and ", " to ", " of ",
   " is ", " you " make ≥ 3 % of the words); ``latin_other`` for other Latin-script languages
   (German, French, Spanish, Swahili…: 3.3 B/token with Llama-3 against 4.6 for English, so
   mixing them would widen the English margin); ``no_letters`` when there are no letters.

Digits, punctuation and newlines are not categories: the estimator budgets them separately
(:func:`profile_text` returns their counts from the same pass; :mod:`evaluation.baselines.bytes_model`).

Cost: one numpy ``bincount`` gives every single-byte count (letters, lead bytes, digits,
punctuation, code marks); multi-byte needles are counted only when their lead byte occurs, and
English function words and indentation only in the first 4 KiB.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["CATEGORIES", "TextProfile", "classify_text", "count_digits", "count_structure", "profile_text"]

CATEGORIES: tuple[str, ...] = (
    "latin",
    "latin_other",
    "code",
    "json",
    "cjk_zh",
    "cjk_ja",
    "cjk_ko",
    "cyrillic",
    "thai",
    "indic_bn",
    "indic_te",
    "indic",
    "arabic",
    "greek",
    "hebrew",
    "no_letters",
)
"""Every category the classifier can return (bounded set: safe as a metric label)."""

_NOT_DIGIT = bytes(b for b in range(256) if not 48 <= b <= 57)
_ENGLISH_WORDS = (b" the ", b" and ", b" to ", b" of ", b" is ", b" you ")


_NOT_PUNCT = bytes(b for b in range(256) if chr(b) not in "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def count_digits(sample: bytes) -> int:
    """Number of ASCII digits in ``sample`` (C-speed ``bytes.translate``)."""
    return len(sample.translate(None, _NOT_DIGIT))


def count_structure(sample: bytes) -> tuple[int, int, int]:
    """``(digits, punctuation, newlines)``: ASCII digits, ASCII punctuation characters
    (``string.punctuation``) and ``\\n`` in ``sample``."""
    p = profile_text(sample)
    return p.digits, p.punctuation, p.newlines


_HAN = tuple(bytes([b]) for b in range(0xE4, 0xEA))  # U+4000–U+9FFF
_HAN_EXT_A = (b"\xe3\x90", b"\xe3\x91")  # part of U+3400–U+4DBF (rest is under 0xE4)
_KANA = (b"\xe3\x81", b"\xe3\x82", b"\xe3\x83")  # U+3040–U+30FF
# U+AC00–U+D7AF Hangul syllables: lead 0xEA (second byte ≥ 0xB0), 0xEB, 0xEC, 0xED
_HANGUL: tuple[bytes, ...] = (*(bytes([0xEA, b]) for b in range(0xB0, 0xC0)), b"\xeb", b"\xec", b"\xed")
_CYRILLIC = (b"\xd0", b"\xd1", b"\xd2", b"\xd3", b"\xd4")  # U+0400–U+052F
_GREEK = (b"\xce", b"\xcf")  # U+0380–U+03FF
_HEBREW = (b"\xd6", b"\xd7")
_ARABIC = (b"\xd8", b"\xd9", b"\xda", b"\xdb")
_THAI = (b"\xe0\xb8", b"\xe0\xb9")
_BENGALI = (b"\xe0\xa6", b"\xe0\xa7")
_TELUGU = (b"\xe0\xb0", b"\xe0\xb1")
_OTHER_INDIC = (
    b"\xe0\xa4",
    b"\xe0\xa5",
    b"\xe0\xa8",
    b"\xe0\xa9",
    b"\xe0\xaa",
    b"\xe0\xab",
    b"\xe0\xac",
    b"\xe0\xad",
    b"\xe0\xae",
    b"\xe0\xaf",
    b"\xe0\xb2",
    b"\xe0\xb3",
    b"\xe0\xb4",
    b"\xe0\xb5",
    b"\xe0\xb6",
    b"\xe0\xb7",
)
_LATIN_EXT = tuple(bytes([b]) for b in range(0xC3, 0xCA))  # U+00C0–U+024F accented Latin
_SCRIPTS = ("cyrillic", "thai", "indic_bn", "indic_te", "indic", "arabic", "greek", "hebrew")
_CODE_MARKS = (b"{", b"}", b";", b"(", b")", b"=", b"[", b"]", b"<", b">")


_CODE_MARK_BYTES = tuple(m[0] for m in _CODE_MARKS)
_ASCII_ALPHA = tuple(range(65, 91)) + tuple(range(97, 123))
_DIGITS = tuple(range(48, 58))
_PUNCT = tuple(b for b in range(256) if b not in _NOT_PUNCT)
_LATIN_EXT_BYTES = tuple(range(0xC3, 0xCA))
_WINDOW_BYTES = 4096
"""Multi-byte needles (English function words, indentation) are counted in the first this-many
bytes of the sample only: they measure a density, and multi-byte ``bytes.count`` is the
classifier's most expensive step."""


def _histogram(sample: bytes) -> list[int]:
    """Count of every byte value (one C pass via numpy)."""
    counts: list[int] = np.bincount(np.frombuffer(sample, dtype=np.uint8), minlength=256).tolist()
    return counts


def _count_multi(sample: bytes, needles: tuple[bytes, ...], hist: list[int]) -> int:
    """Occurrences of any needle; needles whose lead byte does not occur are skipped, single-byte
    needles are read from the histogram."""
    total = 0
    for n in needles:
        c = hist[n[0]]
        if c == 0:
            continue
        total += c if len(n) == 1 else sample.count(n)
    return total


@dataclass(frozen=True, slots=True)
class TextProfile:
    """What the estimator needs from a text sample: its category and structure counts.

    Attributes:
        category: one of :data:`CATEGORIES`.
        digits: ASCII digits in the sample.
        punctuation: ASCII punctuation characters (``string.punctuation``) in the sample.
        newlines: ``\\n`` in the sample.
    """

    category: str
    digits: int
    punctuation: int
    newlines: int


def _is_code(sample: bytes, hist: list[int], letters: int) -> bool:
    return _is_code_counts(sample, hist[96], sum(hist[b] for b in _CODE_MARK_BYTES), letters)


def _is_code_counts(sample: bytes, backticks: int, punct: int, letters: int) -> bool:
    """:func:`_is_code` from the counts of backticks and code marks in ``sample``."""
    if backticks >= 3 and b"```" in sample:
        return True
    if letters == 0:
        return False
    # Prose has ~1 such mark per 100 letters; source code has 10–30.
    if punct * 8 < letters:
        return False
    window = sample[:_WINDOW_BYTES]
    newlines = window.count(b"\n")
    indents = window.count(b"\n    ") + window.count(b"\n\t")
    return indents * 4 >= newlines > 2


def profile_text(sample: bytes) -> TextProfile:
    """Category and structure counts of a UTF-8 text sample in one pass (rules: module docstring).

    Args:
        sample: UTF-8 bytes (at most a few tens of KiB: the caller bounds it). Invalid UTF-8 is
            tolerated: it only skews counts.
    """
    if sample.isascii():
        return _profile_ascii(sample)
    hist = _histogram(sample)
    digits = sum(hist[b] for b in _DIGITS)
    punct = sum(hist[b] for b in _PUNCT)
    newlines = hist[10]
    return TextProfile(_classify(sample, hist), digits, punct, newlines)


def _keep_only(members: tuple[int, ...]) -> bytes:
    """The ``bytes.translate`` delete-table that keeps only ``members`` (count = length kept)."""
    keep = set(members)
    return bytes(b for b in range(256) if b not in keep)


_NOT_ALPHA_BYTES = _keep_only(_ASCII_ALPHA)
_NOT_CODE_MARK_BYTES = _keep_only(_CODE_MARK_BYTES)


def _profile_ascii(sample: bytes) -> TextProfile:
    """:func:`profile_text` of an all-ASCII sample (most prompts): the same counts and rules with
    a few C-speed ``bytes.translate``/``count`` passes instead of a 256-bin histogram, ~3× faster
    on a 1 KB sample. No script, CJK or accented-Latin byte can occur, so those counts are 0."""
    digits = len(sample.translate(None, _NOT_DIGIT))
    punct = len(sample.translate(None, _NOT_PUNCT))
    newlines = sample.count(b"\n")
    stripped = sample.strip()
    if stripped[:1] in (b"{", b"[") and stripped[-1:] in (b"}", b"]"):
        return TextProfile("json", digits, punct, newlines)
    letters = len(sample.translate(None, _NOT_ALPHA_BYTES))
    if letters == 0:
        return TextProfile("no_letters", digits, punct, newlines)
    marks = len(sample.translate(None, _NOT_CODE_MARK_BYTES))
    if _is_code_counts(sample, sample.count(b"`"), marks, letters):
        return TextProfile("code", digits, punct, newlines)
    return TextProfile(_latin_kind(sample), digits, punct, newlines)


def _latin_kind(sample: bytes) -> str:
    """``latin`` (English function words ≥ 3 % of the words, or very short) or ``latin_other``."""
    window = sample[:_WINDOW_BYTES]
    words = window.count(b" ") + 1
    if words < 8:
        return "latin"
    # Same rule as counting every word then comparing, stopped as soon as the threshold is met
    # (English prose meets it on " the " alone).
    hits = 0
    for word in _ENGLISH_WORDS:
        hits += window.count(word)
        if hits * 100 >= words * 3:
            return "latin"
    return "latin_other"


def _classify(sample: bytes, hist: list[int]) -> str:
    stripped = sample.strip()
    if stripped[:1] in (b"{", b"[") and stripped[-1:] in (b"}", b"]"):
        return "json"
    ascii_letters = sum(hist[b] for b in _ASCII_ALPHA)
    if sample.isascii():
        han = kana = hangul = 0
        scripts = dict.fromkeys(_SCRIPTS, 0)
        latin = ascii_letters
    else:
        han = _count_multi(sample, _HAN, hist) + _count_multi(sample, _HAN_EXT_A, hist)
        kana = _count_multi(sample, _KANA, hist)
        hangul = _count_multi(sample, _HANGUL, hist)
        scripts = {
            "cyrillic": _count_multi(sample, _CYRILLIC, hist),
            "thai": _count_multi(sample, _THAI, hist),
            "indic_bn": _count_multi(sample, _BENGALI, hist),
            "indic_te": _count_multi(sample, _TELUGU, hist),
            "indic": _count_multi(sample, _OTHER_INDIC, hist),
            "arabic": _count_multi(sample, _ARABIC, hist),
            "greek": _count_multi(sample, _GREEK, hist),
            "hebrew": _count_multi(sample, _HEBREW, hist),
        }
        latin = ascii_letters + sum(hist[b] for b in _LATIN_EXT_BYTES)
    cjk = han + kana + hangul
    letters = latin + cjk + sum(scripts.values())
    if letters == 0:
        return "no_letters"
    if cjk * 10 >= letters * 3:
        if hangul >= max(han, 1) and hangul > kana:
            return "cjk_ko"
        if kana * 10 >= cjk:
            return "cjk_ja"
        return "cjk_zh"
    script, count = max(scripts.items(), key=lambda kv: kv[1])
    if count * 10 >= letters * 3:
        return script
    if _is_code(sample, hist, ascii_letters):
        return "code"
    return _latin_kind(sample)


def classify_text(sample: bytes) -> str:
    """Return the content category of a UTF-8 text sample (one of :data:`CATEGORIES`).

    Args:
        sample: UTF-8 bytes (at most a few tens of KiB: the caller bounds it). Invalid UTF-8 is
            tolerated: it only skews counts.
    """
    return _classify(sample, _histogram(sample))
