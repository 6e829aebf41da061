"""A plain, unoptimised Python oracle of :func:`extproc.core.text.runs.count_runs`: one loop per rule, in
the words of :mod:`extproc.core.text.run_rules` and :mod:`extproc.core.text.run_languages`, no vector passes,
no C, no packing. The tests fuzz the C extension and the numpy path against it (tests/core/text/test_runscan.py).

It reads the rules (kinds of code points, blob thresholds, language thresholds) from the same
modules as the two implementations, so it checks how they count, not which rules they hold.
"""

from __future__ import annotations

import bisect

import numpy as np

from extproc.core.text import run_languages as lang
from extproc.core.text import run_rules as rules
from extproc.core.text.run_kinds import N_KINDS, RUN_KINDS

__all__ = ["OracleCounts", "oracle_count_runs", "oracle_kind"]

_STARTS = [start for start, _ in rules.BMP_RANGES]
_K = {k: i for i, k in enumerate(RUN_KINDS)}

OracleCounts = tuple[list[int], list[int], int]
"""``(runs per kind, characters per kind, gaps)``, kinds in :data:`RUN_KINDS` order."""


def oracle_kind(c: int) -> str:
    """The run kind of code point ``c`` by the rules' definitions."""
    if c < 0x80:
        return rules.ascii_kind(c)
    if c < 0x10000:
        return rules.BMP_RANGES[bisect.bisect_right(_STARTS, c) - 1][1]
    lo, hi = rules.EMOJI_ASTRAL
    if lo <= c < hi:
        return "emoji"
    lo, hi = rules.HAN_ASTRAL
    if lo <= c <= hi:
        return "han"
    return "other"


def _is_blob(chunk: str, kinds: list[str]) -> bool:
    if len(chunk) < rules.BLOB_MIN_CHARS:
        return False
    digits = sum(k == "digit" for k in kinds)
    letters = sum(k == "letter" for k in kinds)
    alnum = digits + letters
    if digits < rules.BLOB_MIN_DIGITS or alnum < rules.BLOB_ALNUM_SHARE * len(chunk):
        return False
    if digits >= rules.BLOB_MIN_DIGIT_SHARE * alnum:
        return True
    upper = sum("A" <= ch <= "Z" for ch in chunk)
    floor = rules.BLOB_MIN_CASE_SHARE * letters
    return upper >= floor and letters - upper >= floor


def _window_letters(kinds: list[str]) -> tuple[int, int]:
    window = kinds[: lang.WINDOW_CHARS]
    letter_runs = sum(k == "letter" and (i == 0 or window[i - 1] != "letter") for i, k in enumerate(window))
    prose = sum(
        window[i] == "space" and window[i - 1] == "letter" and window[i + 1] == "letter"
        for i in range(1, len(window) - 1)
    )
    return letter_runs, prose


def _move(runs: list[int], chars: list[int], source: str, target: str) -> None:
    runs[_K[target]], runs[_K[source]] = runs[_K[source]], 0
    chars[_K[target]], chars[_K[source]] = chars[_K[source]], 0


def _take_blobs(text: str, kinds: list[str], runs: list[int], chars: list[int]) -> None:
    """Move every blob chunk (between whitespace) to the ``blob`` kind."""
    i = 0
    while i < len(text):
        if kinds[i] in ("space", "newline"):
            i += 1
            continue
        j = i
        while j < len(text) and kinds[j] not in ("space", "newline"):
            j += 1
        if _is_blob(text[i:j], kinds[i:j]):
            for t in range(i, j):
                chars[_K[kinds[t]]] -= 1
                if t == i or kinds[t] != kinds[t - 1]:
                    runs[_K[kinds[t]]] -= 1
            runs[_K["blob"]] += 1
            chars[_K["blob"]] += j - i
        i = j


def _split_languages(text: str, kinds: list[str], runs: list[int], chars: list[int]) -> None:
    """Arabic script to Urdu or Persian by their own letters, ASCII letters to Western European or
    other Latin-script languages by the window's words (thresholds of run_languages.py)."""
    window = text[: lang.WINDOW_CHARS]
    if chars[_K["arabic"]]:
        n = max(1, len(window))
        urdu = sum(window.count(c) for c in lang._URDU_LETTERS)
        persian = sum(window.count(c) for c in lang._PERSIAN_LETTERS)
        if urdu * 100 >= n:
            _move(runs, chars, "arabic", "urdu")
        elif persian * 50 >= n:
            _move(runs, chars, "arabic", "persian")
    if runs[_K["letter"]] < lang.MIN_WORDS_FOR_LANGUAGE:
        return
    lowered = window.lower()
    words = (
        window.count(" ") + 1,
        sum(lowered.count(f" {w} ") for w in lang._EN_WORD_SET),
        sum(lowered.count(f" {w} ") for w in lang._EURO_WORD_SET),
    )
    # english_like takes the counts as arrays (it only indexes them)
    if not lang.english_like(words, lambda: _window_letters(kinds), np.array(runs), np.array(chars)):
        _move(runs, chars, "letter", "letter_euro" if lang.western_european(words) else "letter_other")


def oracle_count_runs(text: str) -> OracleCounts:
    """Runs, characters and gaps of ``text`` (see :mod:`extproc.core.text.run_rules`)."""
    runs = [0] * N_KINDS
    chars = [0] * N_KINDS
    kinds = [oracle_kind(ord(ch)) for ch in text]
    starts = [i for i in range(len(text)) if i == 0 or kinds[i] != kinds[i - 1]]  # maximal runs
    for i in starts:
        runs[_K[kinds[i]]] += 1
    for k in kinds:
        chars[_K[k]] += 1
    _take_blobs(text, kinds, runs, chars)
    _split_languages(text, kinds, runs, chars)
    # gaps: a space run of >= 2, or of 1 before a digit run (the kinds before blobs)
    gaps = 0
    for n_run, i in enumerate(starts):
        end = starts[n_run + 1] if n_run + 1 < len(starts) else len(text)
        if kinds[i] == "space" and (end - i >= 2 or (end < len(text) and kinds[end] == "digit")):
            gaps += 1
    return runs, chars, gaps
