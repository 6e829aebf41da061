"""Type stub of the C extension ``extproc/core/_runscan.c`` (see its header comment)."""

def configure(
    table: bytes,
    n_kinds: int,
    codes: tuple[int, ...],
    astral: tuple[int, int, int, int],
    /,
) -> None:
    """The kind of every BMP code point (65,536 bytes), the codes of letter, digit, punct, space,
    newline, blob, emoji, han and other (9 ints), and beyond U+FFFF the emoji range ``[lo, hi)`` and
    the Han range ``[lo, hi]``.

    Raises:
        ValueError: a table of another size, or a code out of range.
    """

def count_runs(text: str, /) -> bytes:
    """runs[n_kinds], chars[n_kinds] and gaps of ``text`` as native int64.

    Raises:
        RuntimeError: :func:`configure` was not called.
    """

def utf8_length(text: str, /) -> int:
    """UTF-8 bytes of ``text``, a lone surrogate counting 3 (``surrogatepass``)."""
