"""Content category of a request, decided before routing from a bounded sample of its text.

The bytes-per-token ratio of a tokenizer depends mostly on the script and on whether the text is
code or structured JSON (../shared/docs/data-stats.md §3: Llama-3 gives 4.7 B/token on English prose,
5.6 on Cyrillic, 3.3 on Chinese, 1.6 on Telugu). The classifier therefore looks at UTF-8 *lead
bytes*, which identify the Unicode block of each non-ASCII character, and counts them with
``bytes.count`` (C speed): classification of a 16 KiB sample costs tens of microseconds.

Rules (first match wins), mirroring data-stats.md §2.3 so the measured ratios apply:

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

Digits are not a category: the estimator budgets them separately (:func:`count_digits`).
"""

from __future__ import annotations

__all__ = ["CATEGORIES", "classify_text", "count_digits"]

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

# ASCII letters survive this translate(); everything else is deleted.
_NOT_ASCII_ALPHA = bytes(b for b in range(256) if not (65 <= b <= 90 or 97 <= b <= 122))
_NOT_DIGIT = bytes(b for b in range(256) if not 48 <= b <= 57)
_ENGLISH_WORDS = (b" the ", b" and ", b" to ", b" of ", b" is ", b" you ")


def count_digits(sample: bytes) -> int:
    """Number of ASCII digits in ``sample`` (C-speed ``bytes.translate``)."""
    return len(sample.translate(None, _NOT_DIGIT))


def _count_any(sample: bytes, needles: tuple[bytes, ...], leads: dict[int, int] | None = None) -> int:
    """Occurrences of any needle; with ``leads`` (lead byte → count), needles whose lead byte does
    not occur are skipped without scanning (multi-byte ``bytes.count`` is ~10× slower than
    single-byte)."""
    total = 0
    for n in needles:
        if leads is not None:
            lead = n[0]
            c = leads.get(lead)
            if c is None:
                c = leads[lead] = sample.count(n[:1])
            if c == 0:
                continue
            if len(n) == 1:
                total += c
                continue
        total += sample.count(n)
    return total


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


def _is_code(sample: bytes, letters: int) -> bool:
    if b"```" in sample:
        return True
    if letters == 0:
        return False
    punct = _count_any(sample, _CODE_MARKS)
    newlines = sample.count(b"\n")
    indents = sample.count(b"\n    ") + sample.count(b"\n\t")
    # Prose has ~1 such mark per 100 letters; source code has 10–30.
    return punct * 8 >= letters and indents * 4 >= newlines > 2


def classify_text(sample: bytes) -> str:
    """Return the content category of a UTF-8 text sample.

    Args:
        sample: UTF-8 bytes (at most a few tens of KiB: the caller bounds it). Invalid UTF-8 is
            tolerated: it only skews counts.

    Returns:
        One of :data:`CATEGORIES`.
    """
    stripped = sample.strip()
    if stripped[:1] in (b"{", b"[") and stripped[-1:] in (b"}", b"]"):
        return "json"
    ascii_letters = len(sample.translate(None, _NOT_ASCII_ALPHA))
    if sample.isascii():
        han = kana = hangul = 0
        scripts = dict.fromkeys(_SCRIPTS, 0)
        latin = ascii_letters
    else:
        leads: dict[int, int] = {}
        han = _count_any(sample, _HAN, leads) + _count_any(sample, _HAN_EXT_A, leads)
        kana = _count_any(sample, _KANA, leads)
        hangul = _count_any(sample, _HANGUL, leads)
        scripts = {
            "cyrillic": _count_any(sample, _CYRILLIC, leads),
            "thai": _count_any(sample, _THAI, leads),
            "indic_bn": _count_any(sample, _BENGALI, leads),
            "indic_te": _count_any(sample, _TELUGU, leads),
            "indic": _count_any(sample, _OTHER_INDIC, leads),
            "arabic": _count_any(sample, _ARABIC, leads),
            "greek": _count_any(sample, _GREEK, leads),
            "hebrew": _count_any(sample, _HEBREW, leads),
        }
        latin = ascii_letters + _count_any(sample, _LATIN_EXT, leads)
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
    if _is_code(sample, ascii_letters):
        return "code"
    words = sample.count(b" ") + 1
    if _count_any(sample, _ENGLISH_WORDS) * 100 >= words * 3 or words < 8:
        return "latin"
    return "latin_other"
