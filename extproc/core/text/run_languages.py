"""Which language a text's letters belong to, for the run kinds of :mod:`extproc.core.text.runs`: English-like
ASCII letters (English prose, code, markup, data) or those of other Latin-script languages, split into
Western European ones and the rest; Arabic-script letters as Arabic, Persian or Urdu. Each test reads the
first 4,096 characters of the text (the word tests lower-cased, :func:`window_of`; methods and thresholds
in the docstrings; measurements in docs/estimator.md)."""

from __future__ import annotations

from collections.abc import Callable
from itertools import compress

import numpy as np

from extproc.core.text.run_kinds import kind_index as _K

try:  # the C word counts (extproc/core/text/_runscan.c); the Python below is their reference
    from extproc.core.text import _runscan as _c
except ImportError:  # built without a C compiler
    _c = None  # type: ignore[assignment]

__all__ = [
    "MIN_WORDS_FOR_LANGUAGE",
    "WINDOW_CHARS",
    "WORD_SETS",
    "WindowWords",
    "arabic_script_language",
    "english_like",
    "western_european",
    "window_letters_of",
    "window_of",
    "window_words",
]

_PUNCT_K, _LETTER_K, _LATIN_EXT_K, _SPACE_K = _K["punct"], _K["letter"], _K["latin_ext"], _K["space"]
_ARABIC_K, _PERSIAN_K = _K["arabic"], _K["persian"]

_FUNCTION_WORDS = (" the ", " and ", " of ", " you ", " that ", " with ", " is ")
MIN_WORDS_FOR_LANGUAGE = 8
WINDOW_CHARS = 4096
"""Characters of the start of a text that each language test reads."""
_MAX_CODE_PROSE = 0.4
"""Share of letter runs followed by a single space and another letter run above which punctuation-
dense text is prose (measured on the broad corpus: YAML, logs, SQL, CSV 0.00–0.16 at the 90th
percentile, code 0.51; non-English prose 0.34 at the 10th, median 0.49)."""


def window_of(text: str) -> str:
    """What the word tests read: the first :data:`WINDOW_CHARS` characters of ``text``, lower-cased
    (``str.lower``; the C word counts lower-case character by character, to the same tokens)."""
    return text[:WINDOW_CHARS].lower()


WindowWords = tuple[int, int, int]
"""``(words, English function words, Western European function words)`` of a text's window
(:func:`window_words`)."""


def window_words(text: str) -> WindowWords:
    """The word counts the word tests read, in one pass over the first :data:`WINDOW_CHARS`
    characters: words (spaces + 1) and occurrences of ``" w "`` for the function words ``w`` of
    English (:data:`_FUNCTION_WORDS`) and of the Western European languages (:data:`_EURO_WORDS`)
    in the lower-cased window (:func:`window_of`). The C count when the extension is built, else
    :func:`_spaced_word_count` (its reference)."""
    if _c is not None:
        spaces, en, euro = _c.window_words(text, WINDOW_CHARS)
        return spaces + 1, en, euro
    window = window_of(text)
    return (
        text.count(" ", 0, WINDOW_CHARS) + 1,
        _spaced_word_count(window, _EN_WORD_SET),
        _spaced_word_count(window, _EURO_WORD_SET),
    )


def english_like(
    words: WindowWords, window_letters: Callable[[], tuple[int, int]], runs: np.ndarray, chars: np.ndarray
) -> bool:
    """True unless the text reads as prose of another Latin-script language.

    English: its function words make ≥ 2 % of the words of a 4,096-character window (start of the
    text; ``words``: :func:`window_words` of the text). Code, markup and data (≥ 0.6 punctuation runs
    per letter run, and fewer than :data:`_MAX_CODE_PROSE` of the window's letter runs followed by one
    space and another letter run: identifiers, keys and log fields rather than sentences) count as
    English too unless accented letters make ≥ 1 % of the letters: the word cost of English and of
    identifiers is the same, other languages cost 1.5–3× more per word. Markdown in Uzbek, Indonesian
    or Dutch is punctuation-dense but made of sentences: not English. ``runs``, ``chars``: the text's
    run counts; ``window_letters()``: ``(letter runs, letter-space-letter triples)`` of the text's
    first :data:`WINDOW_CHARS` characters (:func:`window_letters_of` their kinds, or the C count),
    asked for only when the punctuation test is reached.
    """
    if words[1] * 50 >= words[0]:
        return True
    if runs[_PUNCT_K] < 0.6 * runs[_LETTER_K] or chars[_LATIN_EXT_K] * 100 >= chars[_LETTER_K]:
        return False
    letter_runs, prose = window_letters()
    return bool(prose < _MAX_CODE_PROSE * letter_runs)


def window_letters_of(kinds: np.ndarray) -> tuple[int, int]:
    """``(letter runs, letter-space-letter triples)`` among the character kinds ``kinds`` (the first
    :data:`WINDOW_CHARS` of a text; non-empty): what :func:`english_like`'s punctuation test reads."""
    kinds = kinds[:WINDOW_CHARS]
    is_letter = kinds == _LETTER_K
    letter_runs = np.count_nonzero(is_letter[1:] & ~is_letter[:-1]) + int(is_letter[0])
    prose = np.count_nonzero((kinds[1:-1] == _SPACE_K) & is_letter[:-2] & is_letter[2:])
    return int(letter_runs), int(prose)


_EURO_WORDS = (
    " de ", " le ", " les ", " el ", " los ", " las ", " que ", " et ", " des ", " est ",
    " und ", " der ", " die ", " das ", " het ", " een ", " van ", " och ", " att ", " det ", " og ",
    " il ", " che ", " del ", " della ", " è ", " non ", " sono ", " un ", " una ", " per ", " con ", " gli ", " nel ", " și ", " în ", " pentru ", " para ", " pour ", " mit ", " som ", " för ", " não ", " é ", " à ", " är ",
)  # fmt: skip
"""Function words of Spanish, French, Portuguese, Italian, Catalan, Romanian, German, Dutch and the
Scandinavian languages (not of Indonesian, Polish, Czech, Turkish, Swahili... whose words cost more tokens; not
" la ", which Swahili uses as much as the Romance languages)."""


def western_european(words: WindowWords) -> bool:
    """True when the function words of :data:`_EURO_WORDS` make ≥ 4 % of the words of the text's
    window (``words``: :func:`window_words` of the text): Western European languages (with
    Romanian), whose words cost 10–30 % fewer tokens than those of other Latin-script languages on
    every measured tokenizer (docs/estimator.md)."""
    return words[2] * 25 >= words[0]


_EURO_WORD_SET = frozenset(w.strip(" ") for w in _EURO_WORDS)
_EN_WORD_SET = frozenset(w.strip(" ") for w in _FUNCTION_WORDS)
WORD_SETS: tuple[tuple[str, ...], ...] = (tuple(sorted(_EN_WORD_SET)), tuple(sorted(_EURO_WORD_SET)))
"""The word sets the C word counts are configured with, in set-id order (English 0, European 1:
the order :func:`window_words` reads their counts in)."""
if _c is not None:
    for _set_id, _words in enumerate(WORD_SETS):
        _c.configure_words(_set_id, _words)


def _spaced_word_count(window: str, words: frozenset[str]) -> int:
    """``sum(window.count(f" {w} ") for w in words)`` (each ``w`` a word without spaces) from one
    split of ``window`` instead of one scan per word (48 scans of a 4,096-character window cost
    ~0.2 ms).

    ``" w "`` occurs wherever a token of ``window.split(" ")`` with a space on both sides equals
    ``w``; ``str.count`` does not count overlapping occurrences, so of consecutive equal tokens
    (``" de de "``: the middle space is shared) every second one is not counted. The tokens are
    tested by a C-level ``map``; the Python loop runs over the occurrences only.
    """
    tokens = window.split(" ")[1:-1]  # the tokens with a space on both sides
    count = 0
    last = -2  # the last counted occurrence
    for i in compress(range(len(tokens)), map(words.__contains__, tokens)):
        if i == last + 1 and tokens[i] == tokens[last]:
            continue  # its leading space is the trailing space of the previous occurrence
        count += 1
        last = i
    return count


_PERSIAN_LETTERS = "\u067e\u0686\u0698\u06af\u06a9\u06cc"
_URDU_LETTERS = "\u0679\u0688\u0691\u06ba\u06be\u06d2"


def arabic_script_language(text: str) -> int:
    """Run kind of Arabic-script text: ``urdu`` when Urdu's own letters (ٹ ڈ ڑ ں ھ ے) make ≥ 1 % of a
    4,096-character window (the start of the text), ``persian`` when Persian/Urdu letters
    (پ چ ژ گ ک ی) make ≥ 2 %, else ``arabic``. Tokenizers learned the three very differently (Llama-3:
    Persian costs 0.8×, Urdu 1.4× the tokens of Arabic per character)."""
    n = max(1, min(len(text), WINDOW_CHARS))
    if _letters_in_window(text, _URDU_LETTERS) * 100 >= n:
        return _K["urdu"]
    if _letters_in_window(text, _PERSIAN_LETTERS) * 50 >= n:
        return _PERSIAN_K
    return _ARABIC_K


def _letters_in_window(text: str, letters: str) -> int:
    """Occurrences of the characters ``letters`` in the first :data:`WINDOW_CHARS` characters."""
    window = text[:WINDOW_CHARS]
    return sum(window.count(c) for c in letters)
