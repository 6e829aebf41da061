"""Type stub of the C extension ``extproc/core/text/_runscan.c`` (see its header comment)."""

def configure(
    table: bytes,
    n_kinds: int,
    codes: tuple[int, ...],
    astral: tuple[int, int, int, int],
    blob: tuple[int, int, float, float, float],
    /,
) -> str:
    """The kind of every BMP code point (65,536 bytes), the codes of letter, digit, punct, space,
    newline, blob, emoji, han and other (9 ints), beyond U+FFFF the emoji range ``[lo, hi)`` and
    the Han range ``[lo, hi]``, and the blob test ``(min chars, min digits, alnum share, digit
    share, case share)``: every rule of :mod:`extproc.core.text.run_rules`. Returns the pass
    :func:`count_runs` runs: ``"sse2+popcnt"``, ``"sse2"`` (the 64-character SIMD classification,
    with the POPCNT instruction or without) or ``"scalar"``.

    Raises:
        ValueError: a table of another size, a table entry or code out of range, a blob length
            outside 2..63 (nothing is configured then).
    """

def count_runs(text: str, start: int = 0, end: int = ..., /) -> bytes:
    """runs[n_kinds], chars[n_kinds] and gaps of ``text[start:end]`` as native int64 (the bounds
    clamped to the text as a slice's, negative ``start`` as 0; no copy of the characters).

    Raises:
        RuntimeError: :func:`configure` was not called.
        OverflowError: a text of over 2**32 characters.
    """

def configure_words(set_id: int, words: tuple[str, ...], /) -> None:
    """Word set ``set_id`` (0..3): exactly ``words`` (1..16 characters each, without spaces; at most
    256 distinct words over all sets).

    Raises:
        ValueError: a set id, word count or word out of range (the set is left empty).
    """

def window_words(text: str, n: int, /) -> tuple[int, ...]:
    """``(spaces, count of set 0, count of set 1, ...)``: the spaces of ``text[:n]``, then for each
    configured word set (ids 0 .. the highest configured) the occurrences of ``" w "`` in
    ``text[:n].lower()`` for its words ``w``, as ``sum(window.count(f" {w} ") for w in words)``
    counts them (``run_languages._spaced_word_count``)."""
