"""Split decoded prompt text into runs of one kind of character and count them (the estimator's input).

A BPE tokenizer's pre-tokeniser cuts text where the kind of character changes (letters of one script,
digits, punctuation, whitespace, newlines), and each piece then costs a number of tokens that depends on
its kind and length: an English word is about one token, a run of digits one token per 1–3 digits, a
Devanagari word several tokens, random base64 about one token per 1.4 characters. The estimator
therefore budgets ``Σ_kind (a_kind · runs_kind + b_kind · chars_kind)`` with coefficients per tokenizer
family (:mod:`extproc.core.text.run_costs`), instead of one bytes/token ratio per request.

Kinds (:data:`RUN_KINDS`, one vocabulary used by the estimator, the evaluation and the demo):

* ASCII: ``letter``, ``digit``, ``punct``, ``space`` (spaces, tabs, other ASCII controls), ``newline``.
* ``blob``: a whitespace-free stretch of ≥ 20 ASCII characters that is ≥ 75 % letters/digits, holds ≥ 2
  digits and looks random: hex-like (digits ≥ 30 % of its letters and digits: hex, UUIDs, hashes) or
  base64-like (letters of both cases, each ≥ 25 %); its characters are taken out of the ASCII kinds.
  Host names, paths, versions ("registry.example.com/app:19.0") are words and numbers, not blobs.
* ``letter_other`` / ``letter_euro``: the ASCII letters of a text that is not English-like
  (:mod:`extproc.core.text.run_languages`), ``letter_euro`` when Western European function words show.
* scripts, by Unicode block: ``latin_ext`` (accented Latin, Vietnamese, IPA, combining marks), ``greek``,
  ``cyrillic``, ``hebrew``, ``arabic`` (Arabic), ``persian``, ``urdu`` (chosen per text by their own letters), ``devanagari`` (Hindi, Marathi, Nepali),
  ``bengali``, ``gurmukhi``, ``gujarati``, ``oriya``, ``tamil``, ``telugu``, ``kannada``, ``malayalam``,
  ``sinhala``, ``thai``, ``lao``, ``myanmar``, ``other_script`` (Armenian, Georgian, Ethiopic, Khmer,
  Tibetan...), ``hangul``, ``kana``, ``han``;
* ``symbol`` (non-ASCII punctuation, CJK punctuation, full-width forms, arrows, math, box drawing),
  ``emoji`` (pictographs, variation selectors, ZWJ), ``other`` (private use, unassigned, surrogates).

The rules (kinds of code points, the blob test) are defined once, in :mod:`extproc.core.text.run_rules`.
Two implementations count by them, and tests/core/text/test_runscan.py holds both to a plain-Python
oracle (tests/core/text/runs_oracle.py) on every corpus and on generated text:

* the C extension :mod:`extproc.core.text._runscan` (built by ``pip install`` where a C compiler is found):
  one loop over the string's own 1-, 2- or 4-byte storage, no encode, 64 ASCII characters at a time
  with SSE2; about 0.03 ms for a 32 KB and 0.3 ms for a 512 KB benchmark prompt;
* the numpy path (:func:`count_runs_numpy`): one encode at the width CPython stores the text with
  (:func:`code_points`) and a table look-up per character, then C-level numpy passes (run starts,
  counts per kind, one ``reduceat`` per blob test); about 10× the C path's time on a 32 KB prompt
  and 20–25× on a 512 KB one (docs/performance.md §Run counter). It runs where the extension was
  not built (:data:`RUNSCAN` says which).

The language tests (:mod:`extproc.core.text.run_languages`) read a 4,096-character window in both.
:class:`PieceCounter` counts a text in pieces whose counts add up to the whole text's, so that the
router can stop once the pool is certain (:mod:`extproc.core.estimate.screen`).
Figures: BENCHMARKS.md §Estimator cost.
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Callable

import numpy as np

from extproc.core.text import run_rules
from extproc.core.text.run_kinds import N_KINDS, RUN_KINDS, kind_index
from extproc.core.text.run_languages import (
    MIN_WORDS_FOR_LANGUAGE,
    WINDOW_CHARS,
    arabic_script_language,
    english_like,
    western_european,
    window_letters_of,
    window_words,
)

__all__ = [
    "CONTENT_KINDS",
    "LANGUAGE_GROUPS",
    "RUNSCAN",
    "RUNSCAN_PASS",
    "RUN_KINDS",
    "PieceCounter",
    "RunCounts",
    "code_points",
    "content_kind",
    "count_runs",
    "count_runs_numpy",
    "text_utf8_length",
    "utf8_length",
]

_K = kind_index

_BLOB_MIN_CHARS = run_rules.BLOB_MIN_CHARS
_BLOB_ALNUM_SHARE = run_rules.BLOB_ALNUM_SHARE
_BLOB_MIN_DIGITS = run_rules.BLOB_MIN_DIGITS
_BLOB_MIN_DIGIT_SHARE = run_rules.BLOB_MIN_DIGIT_SHARE
_BLOB_MIN_CASE_SHARE = run_rules.BLOB_MIN_CASE_SHARE


def _table() -> np.ndarray:
    t = np.full(0x10001, _K["other"], dtype=np.uint8)
    for c in range(128):
        t[c] = _K[run_rules.ascii_kind(c)]
    bounds = [*run_rules.BMP_RANGES, (0x10000, "other")]
    for (start, kind), (end, _) in itertools.pairwise(bounds):
        t[start:end] = _K[kind]
    t[0x10000] = _K["other"]
    return t


_TABLE = _table()
_EMOJI_LO, _EMOJI_HI = run_rules.EMOJI_ASTRAL
_HAN_EXT_LO, _HAN_EXT_HI = run_rules.HAN_ASTRAL
_ALNUM = np.zeros(N_KINDS, dtype=bool)
_ALNUM[[_K["letter"], _K["digit"]]] = True
_WS = np.zeros(N_KINDS, dtype=bool)
_WS[[_K["space"], _K["newline"]]] = True
_DIGIT = np.zeros(N_KINDS, dtype=bool)
_DIGIT[_K["digit"]] = True
_BLOB = _K["blob"]
_DIGIT_K = _K["digit"]
_LETTER_K = _K["letter"]
_LETTER_OTHER_K = _K["letter_other"]
_LETTER_EURO_K = _K["letter_euro"]
_LATIN_EXT_K = _K["latin_ext"]
_ARABIC_K = _K["arabic"]
_PERSIAN_K = _K["persian"]
_PUNCT_K = _K["punct"]
_MIN_WS_CODE = _K["space"]
_SPACE_K = _K["space"]
_CODE_BYTES = [bytes([i]) for i in range(N_KINDS)]


class RunCounts:
    """Runs and characters of each kind in a text.

    Attributes:
        runs: float64 array of shape ``(len(RUN_KINDS),)``: maximal runs of each kind.
        chars: float64 array of the same shape: characters (code points) of each kind.
    """

    __slots__ = ("chars", "gaps", "runs")

    def __init__(self, runs: np.ndarray, chars: np.ndarray, gaps: float = 0.0) -> None:
        self.runs = runs
        self.chars = chars
        self.gaps = gaps

    @classmethod
    def zero(cls) -> RunCounts:
        """Counts of the empty text."""
        return cls(np.zeros(N_KINDS), np.zeros(N_KINDS))

    def __add__(self, other: RunCounts) -> RunCounts:
        return RunCounts(self.runs + other.runs, self.chars + other.chars, self.gaps + other.gaps)

    def as_dict(self) -> dict[str, tuple[int, int]]:
        """``{kind: (runs, chars)}`` for kinds that occur (reports, tests)."""
        return {k: (int(self.runs[i]), int(self.chars[i])) for i, k in enumerate(RUN_KINDS) if self.chars[i]}


_OTHER_K = _K["other"]
_ASCII_KINDS = [_K[k] for k in ("letter", "digit", "punct", "space", "newline")]


_TABLE_BMP = _TABLE[:0x10000].copy()
_LATIN1_BYTES = bytes(_TABLE[:256].tolist())
_STR_HEADER = sys.getsizeof("\xe9") - 2
"""Bytes of a compact non-ASCII ``str`` besides its characters (and their terminating NUL)."""

_CONFIGURE_ARGS = (
    _TABLE_BMP.tobytes(),
    N_KINDS,
    tuple(_K[k] for k in ("letter", "digit", "punct", "space", "newline", "blob", "emoji", "han", "other")),
    (_EMOJI_LO, _EMOJI_HI, _HAN_EXT_LO, _HAN_EXT_HI),
    (_BLOB_MIN_CHARS, _BLOB_MIN_DIGITS, _BLOB_ALNUM_SHARE, _BLOB_MIN_DIGIT_SHARE, _BLOB_MIN_CASE_SHARE),
)
"""What ``_runscan.configure`` is given: the kind table of the BMP, the kind count, the kind codes,
the astral ranges and the blob test (every rule of :mod:`extproc.core.text.run_rules`: the C file holds
none of its own)."""

try:
    from extproc.core.text import _runscan

    RUNSCAN_PASS = _runscan.configure(*_CONFIGURE_ARGS)
    RUNSCAN = "c"
except ImportError:  # built without a C compiler: the numpy path counts
    _runscan = None  # type: ignore[assignment]
    RUNSCAN = "numpy"
    RUNSCAN_PASS = "numpy"
"""Which implementation :func:`count_runs` runs: ``"c"`` (:mod:`extproc.core.text._runscan`) or ``"numpy"``.
``RUNSCAN_PASS``: the C pass, ``"sse2+popcnt"`` / ``"sse2"`` (its 64-character SIMD fast path) or
``"scalar"``, else ``"numpy"``."""

_SHORT_ENCODE_CHARS = 4096
"""Without the extension, :func:`text_utf8_length` encodes a non-ASCII text up to this long to UTF-8:
numpy's fixed cost per call exceeds the encode there (issue 15)."""


def text_utf8_length(text: str) -> tuple[int, np.ndarray | None]:
    """``(UTF-8 bytes of text, its code points or None)``; a lone surrogate counts its 3 bytes.

    An ASCII text: its length (``str.isascii`` is O(1) in CPython). With the extension, or a short
    text: one encode and None (a C length loop saved 2–5 % of the router's CPU per request on the
    benchmark bodies, under the 5 % rule: docs/performance.md §Run counter). Without it, a long text:
    its code points (:func:`code_points`, which the numpy run count then reuses) and their UTF-8
    length.
    """
    if text.isascii():
        return len(text), None
    if _runscan is not None or len(text) <= _SHORT_ENCODE_CHARS:
        return len(text.encode("utf-8", "surrogatepass")), None
    codes = code_points(text)
    return utf8_length(codes), codes


def code_points(text: str) -> np.ndarray:
    """The code points of ``text``: shape ``(len(text),)``, uint8 for ASCII and Latin-1 text, uint16 for
    other text of the Basic Multilingual Plane, uint32 when it has characters beyond U+FFFF (lone
    surrogates are kept as themselves).

    One encode at the width CPython stores the string with (1, 2 or 4 bytes per character, which
    ``sys.getsizeof`` shows): a copy, no transcoding.
    """
    if text.isascii():
        return np.frombuffer(text.encode("ascii"), dtype=np.uint8)
    width = (sys.getsizeof(text) - _STR_HEADER) // (len(text) + 1)
    if width == 1:
        try:
            return np.frombuffer(text.encode("latin-1"), dtype=np.uint8)
        except UnicodeEncodeError:  # not CPython's compact storage: take the general path
            pass
    if width <= 2:
        units = np.frombuffer(text.encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
        if units.size == len(text):  # no character beyond U+FFFF (a lone surrogate is one unit)
            return units
    return np.frombuffer(text.encode("utf-32-le", "surrogatepass"), dtype=np.uint32)


def utf8_length(codes: np.ndarray) -> int:
    """UTF-8 bytes of the text whose code points are ``codes`` (:func:`code_points`); a lone surrogate
    counts the 3 bytes ``surrogatepass`` encodes it with. One comparison per byte-length step."""
    n = codes.size
    if codes.dtype == np.uint8:
        return n + int(np.count_nonzero(codes >= 0x80))
    n += int(np.count_nonzero(codes >= 0x80)) + int(np.count_nonzero(codes >= 0x800))
    if codes.dtype == np.uint32:
        n += int(np.count_nonzero(codes >= 0x10000))
    return n


def _classes(codes: np.ndarray) -> np.ndarray:
    """The run kind of every character of the text whose code points are ``codes``
    (:func:`code_points`): uint8 array of the same shape.

    1-byte code points: one ``bytes.translate``; 2-byte: one ``take`` from a 64 K-entry table; 4-byte:
    a clipped ``take``, then the few characters beyond U+FFFF (emoji, rare Han) by their ranges.
    """
    if codes.dtype == np.uint8:
        return np.frombuffer(codes.tobytes().translate(_LATIN1_BYTES), dtype=np.uint8)
    if codes.dtype == np.uint16:
        cls: np.ndarray = _TABLE_BMP.take(codes)
        return cls
    cls = _TABLE.take(codes, mode="clip")  # code points ≥ 0x10000 read _TABLE[0x10000] = other
    astral = np.flatnonzero(codes >= 0x10000)
    a = codes[astral]
    kinds = np.full(a.size, _OTHER_K, dtype=np.uint8)
    kinds[(a >= _EMOJI_LO) & (a < _EMOJI_HI)] = _K["emoji"]
    kinds[(a >= _HAN_EXT_LO) & (a <= _HAN_EXT_HI)] = _K["han"]
    cls[astral] = kinds
    return cls


# Per-run weights summed over chunks by one ``np.add.reduceat`` each: characters as
# ``digits << 32 | letters+digits`` and runs as ``punct << 42 | digit << 21 | letter``.
_CHAR_PACK = np.zeros(N_KINDS, dtype=np.int64)
_CHAR_PACK[[_LETTER_K, _DIGIT_K]] = (1, (1 << 32) + 1)
_RUN_PACK = np.zeros(N_KINDS, dtype=np.int64)
_RUN_PACK[[_LETTER_K, _DIGIT_K, _PUNCT_K]] = (1, 1 << 21, 1 << 42)
_FIELD_21 = (1 << 21) - 1


def _mixed_case(codes: np.ndarray, starts: np.ndarray, ends: np.ndarray, letters: np.ndarray) -> np.ndarray:
    """True for each character range ``[starts[i], ends[i])`` of the text whose code points are
    ``codes`` whose ASCII letters are at least :data:`_BLOB_MIN_CASE_SHARE` upper case and as much
    lower case (``letters``: ASCII letters in each range).

    Upper-case letters are counted by one ``np.add.reduceat``: over the ranges' characters gathered
    back to back when they are a small part of the text (ranges are ≥ ``_BLOB_MIN_CHARS`` long, never
    empty), else over the whole text."""
    lengths = ends - starts
    in_ranges = int(lengths.sum())
    if 4 * in_ranges < codes.size:
        offsets = np.cumsum(lengths) - lengths
        at = np.repeat(starts - offsets, lengths) + np.arange(in_ranges)
        upper = ((codes[at] - 65) < 26).astype(np.int32)  # unsigned: below "A" wraps to large
        n_upper = np.add.reduceat(upper, offsets)
    else:
        upper = np.zeros(codes.size + 1, dtype=np.int32)  # a trailing 0: a range may end at the text's end
        np.less(codes - 65, 26, out=upper[:-1], casting="unsafe")
        idx = np.empty(2 * starts.size, dtype=np.int64)
        idx[0::2] = starts
        idx[1::2] = ends
        n_upper = np.add.reduceat(upper, idx)[0::2]
    floor = _BLOB_MIN_CASE_SHARE * letters
    result: np.ndarray = (n_upper >= floor) & (letters - n_upper >= floor)
    return result


def _blobs(
    codes: np.ndarray,
    bounds: np.ndarray,
    rl: np.ndarray,
    run_cls: np.ndarray,
    runs: np.ndarray,
    chars: np.ndarray,
) -> None:
    """Move the characters and runs of blob chunks to the ``blob`` kind (in place).

    A chunk is the stretch of runs between two whitespace runs; its length in characters comes from
    the run bounds. Letters, digits and punctuation of the chunks of at least ``_BLOB_MIN_CHARS``
    characters are summed by ``np.add.reduceat`` over packed per-run weights (no per-run Python).
    """
    ws = np.flatnonzero(run_cls >= _MIN_WS_CODE)  # space and newline have the highest class codes
    first = np.empty(ws.size + 1, dtype=np.int64)  # first run of each chunk
    first[0] = 0
    first[1:] = ws + 1
    last = np.empty(ws.size + 1, dtype=np.int64)  # one past its last run
    last[:-1] = ws
    last[-1] = run_cls.size
    length = bounds[last] - bounds[first]
    longi = np.flatnonzero(length >= _BLOB_MIN_CHARS)
    if not longi.size:
        return
    pairs = np.empty((longi.size, 2), dtype=np.int64)  # [first run, one past last run] of each chunk
    pairs[:, 0] = first[longi]
    pairs[:, 1] = last[longi]
    total = length[longi]
    n_runs = pairs[:, 1] - pairs[:, 0]
    # Per-chunk sums by one reduceat: over the runs of the long chunks gathered back to back when
    # they are a small part of the text, else over all runs (every other sum is then a gap's).
    in_chunks = int(n_runs.sum())
    gathered = 4 * in_chunks < run_cls.size
    if gathered:
        offsets = np.cumsum(n_runs) - n_runs
        at = np.repeat(pairs[:, 0] - offsets, n_runs) + np.arange(in_chunks)
        sub_cls, sub_rl, starts = run_cls[at], rl[at], offsets
        weights = np.empty(in_chunks, dtype=np.int64)
    else:
        sub_cls, sub_rl, starts = run_cls, rl, pairs.ravel()
        weights = np.zeros(rl.size + 1, dtype=np.int64)  # a trailing 0: a chunk may end at the last run
    step = 1 if gathered else 2
    np.multiply(_CHAR_PACK.take(sub_cls), sub_rl, out=weights[: sub_cls.size])
    packed = np.add.reduceat(weights, starts)[::step]
    digits, alnum = packed >> 32, packed & 0xFFFFFFFF
    ok = (digits >= _BLOB_MIN_DIGITS) & (alnum >= _BLOB_ALNUM_SHARE * total)
    # Random rather than word-like: hex-like (digits ≥ 30 % of the letters and digits: hex, UUIDs,
    # hashes) or base64-like (letters of both cases, each ≥ 25 %). A path, host name, version or
    # timestamp ("registry.example.com/app:19.0") is made of words and numbers: not a blob.
    word_like = ok & (digits < _BLOB_MIN_DIGIT_SHARE * alnum)
    if word_like.any():
        w = np.flatnonzero(word_like)
        ok[w] = _mixed_case(codes, bounds[pairs[w, 0]], bounds[pairs[w, 1]], alnum[w] - digits[w])
    if not ok.any():
        return
    weights[: sub_cls.size] = _RUN_PACK.take(sub_cls)
    packed = np.add.reduceat(weights, starts)[::step][ok]
    pairs, total, digits, alnum, n_runs = pairs[ok], total[ok], digits[ok], alnum[ok], n_runs[ok]
    letter_runs, digit_runs, punct_runs = packed & _FIELD_21, (packed >> 21) & _FIELD_21, packed >> 42
    if int(n_runs.max()) > _FIELD_21 or np.any(letter_runs + digit_runs + punct_runs != n_runs):
        # a non-ASCII character inside a blob chunk (rare) or a chunk of millions of runs
        mark = np.zeros(rl.size + 1, dtype=np.int8)
        mark[pairs[:, 0]] = 1
        mark[pairs[:, 1]] -= 1
        inb = np.cumsum(mark[:-1], dtype=np.int8).view(np.bool_)  # chunks never nest
        rc = run_cls[inb]
        runs -= np.bincount(rc, minlength=N_KINDS)
        chars -= np.bincount(rc, weights=rl[inb], minlength=N_KINDS)
    else:
        runs[[_LETTER_K, _DIGIT_K, _PUNCT_K]] -= (letter_runs.sum(), digit_runs.sum(), punct_runs.sum())
        chars[[_LETTER_K, _DIGIT_K, _PUNCT_K]] -= (
            (alnum - digits).sum(),
            digits.sum(),
            (total - alnum).sum(),
        )
    runs[_BLOB] += pairs.shape[0]
    chars[_BLOB] += float(total.sum())


_C_MAX_CHARS = (1 << 32) - 1
"""The C counter's per-kind counters are 32-bit (a request body is at most a few MiB)."""


def count_runs(text: str, codes: np.ndarray | None = None) -> RunCounts:
    """Runs and characters of each kind in ``text`` (kinds: module docstring).

    The C extension when it is built (:data:`RUNSCAN`), else :func:`count_runs_numpy`; both give the
    same counts.

    Args:
        text: any Python string (lone surrogates are tolerated and counted as ``other``).
        codes: ``code_points(text)`` when the caller already has it (the numpy path then skips
            the encode; the C path reads the string itself).
    """
    if not text:
        return RunCounts.zero()
    if _runscan is None or len(text) > _C_MAX_CHARS:
        return count_runs_numpy(text, codes)
    return _with_languages(text, _count_before_languages(text))


def _count_before_languages(text: str, start: int = 0, end: int | None = None) -> RunCounts:
    """:func:`count_runs` of ``text[start:end]`` before the language tests move its letters (every
    ASCII letter ``letter``, every Arabic-script one ``arabic``); the C path reads the range in place."""
    if end is None:
        end = len(text)
    if _runscan is None or len(text) > _C_MAX_CHARS:
        return count_runs_numpy(text[start:end], languages=False)
    raw = np.frombuffer(_runscan.count_runs(text, start, end), dtype=np.int64)
    return RunCounts(
        raw[:N_KINDS].astype(np.float64), raw[N_KINDS : 2 * N_KINDS].astype(np.float64), float(raw[-1])
    )


def _with_languages(text: str, counts: RunCounts) -> RunCounts:
    """``counts`` (of ``text``, before the language tests) with the language tests applied (in place)."""
    _languages(
        text, counts.runs, counts.chars, lambda: window_letters_of(_classes(code_points(text[:WINDOW_CHARS])))
    )
    return counts


LANGUAGE_GROUPS: tuple[tuple[int, ...], ...] = (
    (_LETTER_K, _LETTER_EURO_K, _LETTER_OTHER_K),
    (_ARABIC_K, _PERSIAN_K, _K["urdu"]),
)
"""Run kinds (indices) among which the language tests move all of a text's letters at once: the
runs and characters of a group are counted alike whatever the tests decide; which kind they land
in depends on the whole text."""

_PIECE_CUT = re.compile(r" [A-Za-z]")


class PieceCounter:
    """:func:`count_runs` of a text in prefixes, so that a caller can stop once it has read enough
    (:mod:`extproc.core.estimate.screen`: once the pool is certain).

    A text is cut only after a space and before an ASCII letter: a space run ends there and a letter
    run starts, no whitespace-free chunk spans the cut (the blob test), and a single space before a
    letter is no gap. So the run counts of the pieces, before the language tests, add up exactly to
    the whole text's, and :meth:`whole` applies the language tests once to the sum: equal to
    ``count_runs(text)`` (tests/core/estimate/test_screen_prefix.py).

    Attributes:
        text: the text.
        counted_chars: characters counted so far (the prefix ``text[:counted_chars]``).
        prefix: run counts of that prefix before the language tests (:data:`LANGUAGE_GROUPS`).
        pieces: pieces counted so far.
    """

    __slots__ = ("counted_chars", "pieces", "prefix", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.counted_chars = 0
        self.prefix = RunCounts.zero()
        self.pieces = 0

    @property
    def done(self) -> bool:
        """The whole text is counted."""
        return self.counted_chars >= len(self.text)

    def advance(self, at_least_chars: int) -> None:
        """Count the next piece: up to the first cut at or after ``at_least_chars`` characters from
        the start of the text (the text's end when there is none)."""
        start, n = self.counted_chars, len(self.text)
        end = n
        if at_least_chars < n:
            m = _PIECE_CUT.search(self.text, max(at_least_chars, start + 1) - 1)
            end = m.start() + 1 if m is not None else n
        if end > start:
            self.prefix = self.prefix + _count_before_languages(self.text, start, end)
            self.counted_chars = end
            self.pieces += 1

    def whole(self) -> RunCounts:
        """``count_runs(text)``, from the pieces (raises ValueError before the text is counted). The
        language tests move :attr:`prefix`'s letters in place: call it once, last."""
        if not self.done:
            raise ValueError("PieceCounter.whole: the text is not counted to its end")
        return _with_languages(self.text, self.prefix)


def count_runs_numpy(text: str, codes: np.ndarray | None = None, *, languages: bool = True) -> RunCounts:
    """:func:`count_runs` by numpy passes (the path without the C extension).

    Every pass is a C-level one over the whole text (no per-character Python): one encode and
    table look-up, one comparison of neighbours, then counts per kind present.

    Args:
        text: any Python string (lone surrogates are tolerated and counted as ``other``).
        codes: ``code_points(text)`` when the caller already has it (saves the encode).
        languages: apply the language tests (False: the counts before them, ``PieceCounter``).
    """
    if not text:
        return RunCounts.zero()
    if codes is None:
        codes = code_points(text)
    cls = _classes(codes)
    n = cls.size
    edge = np.empty(n + 1, dtype=np.bool_)  # a run starts (or the text ends) before character i
    edge[0] = edge[-1] = True
    np.not_equal(cls[1:], cls[:-1], out=edge[1:-1])
    bounds = np.flatnonzero(edge)  # run starts, then n: shape (runs + 1,)
    run_cls = cls.take(bounds[:-1])
    if n <= _SHORT_TEXT_CHARS:
        # A short text (a 1 KB chat prompt): two bincounts beat a pass per kind, whose fixed cost
        # per numpy call dominates here (issue 15: ~2x faster on a 1 KB prompt; same counts).
        runs = np.bincount(run_cls, minlength=N_KINDS).astype(np.float64)
        chars = np.bincount(cls, minlength=N_KINDS).astype(np.float64)
        return _finish(text, codes, cls, bounds, run_cls, runs, chars, languages)
    runs = np.zeros(N_KINDS)
    chars = np.zeros(N_KINDS)
    if text.isascii():
        for k in _ASCII_KINDS:
            runs[k] = np.count_nonzero(run_cls == k)
        present = [k for k in _ASCII_KINDS if runs[k]]
    else:
        runs[:] = np.bincount(run_cls, minlength=N_KINDS)
        present = np.flatnonzero(runs).tolist()
    rest = n
    for k in present[:-1]:
        chars[k] = c = int(np.count_nonzero(cls == k))
        rest -= c
    chars[present[-1]] = rest
    return _finish(text, codes, cls, bounds, run_cls, runs, chars, languages)


_SHORT_TEXT_CHARS = 2048
"""Up to this many characters :func:`count_runs_numpy` counts runs and characters with two bincounts."""


def _languages(
    text: str, runs: np.ndarray, chars: np.ndarray, window_letters: Callable[[], tuple[int, int]]
) -> None:
    """Move Arabic-script letters to ``persian`` / ``urdu`` and non-English ASCII letters to
    ``letter_euro`` / ``letter_other`` (in place) by the language tests of
    :mod:`extproc.core.text.run_languages`; ``window_letters()``: the letter runs and letter-space-letter
    triples of the first :data:`WINDOW_CHARS` characters (computed only when the English test needs
    them)."""
    if chars[_ARABIC_K]:
        lang = arabic_script_language(text)
        if lang != _ARABIC_K:
            runs[lang], runs[_ARABIC_K] = runs[_ARABIC_K], 0.0
            chars[lang], chars[_ARABIC_K] = chars[_ARABIC_K], 0.0
    if runs[_LETTER_K] < MIN_WORDS_FOR_LANGUAGE:
        return
    words = window_words(text)
    if not english_like(words, window_letters, runs, chars):
        other = _LETTER_EURO_K if western_european(words) else _LETTER_OTHER_K
        runs[other], runs[_LETTER_K] = runs[_LETTER_K], 0.0
        chars[other], chars[_LETTER_K] = chars[_LETTER_K], 0.0


def _finish(
    text: str,
    codes: np.ndarray,
    cls: np.ndarray,
    bounds: np.ndarray,
    run_cls: np.ndarray,
    runs: np.ndarray,
    chars: np.ndarray,
    languages: bool = True,
) -> RunCounts:
    """The rest of :func:`count_runs_numpy` once runs and characters per kind are counted: blobs, the
    Arabic-script and Latin-script language splits (``languages``), and the whitespace gaps."""
    rl = np.diff(bounds)
    if cls.size >= _BLOB_MIN_CHARS and chars[_DIGIT_K] >= _BLOB_MIN_DIGITS:
        _blobs(codes, bounds, rl, run_cls, runs, chars)
    if languages:
        _languages(text, runs, chars, lambda: window_letters_of(cls[:WINDOW_CHARS]))
    # Whitespace that costs its own token: a space run of ≥ 2 characters (pre-tokenisers split
    # "\s+(?!\S)" off the last space), or a single space before digits (digits take no leading space).
    gaps = 0.0
    if runs[_SPACE_K]:
        sp = run_cls == _SPACE_K
        multi = np.count_nonzero(sp & (rl >= 2))
        digit_next = np.count_nonzero(sp[:-1] & (rl[:-1] == 1) & (run_cls[1:] == _DIGIT_K))
        gaps = float(multi + digit_next)
    return RunCounts(runs, chars, gaps)


CONTENT_KINDS: tuple[str, ...] = (
    "latin", "latin_euro", "latin_other", "code_data", "numeric", "blob", "greek", "cyrillic", "hebrew", "arabic", "persian",
    "urdu", "devanagari",
    "bengali", "gurmukhi", "gujarati", "oriya", "tamil", "telugu", "kannada", "malayalam", "sinhala",
    "thai", "lao", "myanmar", "other_script", "hangul", "japanese", "han", "emoji",
)  # fmt: skip
"""The content kind of a request: the group of run kinds that carries most of its modelled tokens.
It names the learned correction's key and the evaluation's and demo's rows (one vocabulary)."""

_GROUP = {k: k for k in RUN_KINDS}
_GROUP.update(
    letter="latin", letter_euro="latin_euro", letter_other="latin_other", latin_ext="latin_other", kana="japanese",
    digit="numeric", punct="code_data", blob="blob", space="code_data", newline="code_data",
    symbol="code_data", other="code_data",
)  # fmt: skip
_GROUP_INDEX = np.array([CONTENT_KINDS.index(_GROUP[k]) for k in RUN_KINDS])
_GROUP_WEIGHTS = np.zeros((len(CONTENT_KINDS), len(RUN_KINDS)))
"""``_GROUP_WEIGHTS @ tokens_by_kind``: the tokens of each content kind, spaces left out."""
_GROUP_WEIGHTS[_GROUP_INDEX, np.arange(len(RUN_KINDS))] = 1.0
_GROUP_WEIGHTS[:, _K["space"]] = 0.0
_KANA_K, _HAN_K = _K["kana"], _K["han"]


def content_kind(counts: RunCounts, tokens_by_kind: np.ndarray) -> str:
    """The :data:`CONTENT_KINDS` entry carrying most of ``tokens_by_kind`` (modelled tokens per run
    kind, shape ``(len(RUN_KINDS),)``), spaces and gaps left out: the space before each word goes with
    the word (how the fit splits a word's cost between its letters and its space is arbitrary, and
    counting spaces as code made English prose ``code_data``). Han text with ≥ 10 % kana is
    ``japanese``."""
    per = _GROUP_WEIGHTS.dot(tokens_by_kind)
    kind = CONTENT_KINDS[int(per.argmax())] if per.any() else "code_data"
    if kind == "han" and counts.chars[_KANA_K] * 9 >= counts.chars[_HAN_K]:
        return "japanese"
    return kind
