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
5. ``latin``: everything else with letters; ``no_letters`` when there are none.
"""

from __future__ import annotations

__all__ = ["CATEGORIES", "classify_text"]

CATEGORIES: tuple[str, ...] = (
    "latin",
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


def _count_any(sample: bytes, needles: tuple[bytes, ...]) -> int:
    return sum(sample.count(n) for n in needles)


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
# Bytes below 0xC0 are deleted: what survives are the lead bytes of multi-byte characters.
_BELOW_LEAD = bytes(range(0xC0))
_CODE_MARKS = (b"{", b"}", b";", b"(", b")", b"=", b"[", b"]", b"<", b">")
# Deleting every byte but the code marks counts all of them in one pass (10 ``bytes.count``
# scans cost ~10x more on a 16 KiB sample).
_NOT_CODE_MARK = bytes(b for b in range(256) if bytes([b]) not in _CODE_MARKS)


def _is_code(sample: bytes, letters: int) -> bool:
    if b"```" in sample:
        return True
    if letters == 0:
        return False
    punct = len(sample.translate(None, _NOT_CODE_MARK))
    if punct * 8 < letters:  # prose: skip the newline scans below (same answer)
        return False
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
    # Fast path (same result): every script counter below counts lead bytes (>= 0xC3), so none
    # can reach 30 % of the letters when all lead bytes together are fewer than 30 % of the
    # ASCII letters; the answer is then ``code`` or ``latin``. Saves ~85 scans of the sample
    # for ASCII-dominated text (docs/performance.md).
    if ascii_letters and len(sample.translate(None, _BELOW_LEAD)) * 10 < ascii_letters * 3:
        return "code" if _is_code(sample, ascii_letters) else "latin"
    return _classify_scripts(sample, ascii_letters)


def _classify_scripts(sample: bytes, ascii_letters: int) -> str:
    """The rules after ``json``, counting every script (the slow path of :func:`classify_text`)."""
    han = _count_any(sample, _HAN) + _count_any(sample, _HAN_EXT_A)
    kana = _count_any(sample, _KANA)
    hangul = _count_any(sample, _HANGUL)
    scripts = {
        "cyrillic": _count_any(sample, _CYRILLIC),
        "thai": _count_any(sample, _THAI),
        "indic_bn": _count_any(sample, _BENGALI),
        "indic_te": _count_any(sample, _TELUGU),
        "indic": _count_any(sample, _OTHER_INDIC),
        "arabic": _count_any(sample, _ARABIC),
        "greek": _count_any(sample, _GREEK),
        "hebrew": _count_any(sample, _HEBREW),
    }
    latin = ascii_letters + _count_any(sample, _LATIN_EXT)
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
    return "latin"
