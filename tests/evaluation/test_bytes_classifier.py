"""The one-pass code-mark count gives exactly the answer of the per-mark counts it replaced."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.baselines.categories import (
    _CODE_MARKS,
    _NOT_PUNCT,
    _WINDOW_BYTES,
    TextProfile,
    _classify,
    _histogram,
    _is_code,
    classify_text,
    profile_text,
)

_PIECES = [
    "The quick brown fox jumps over the lazy dog. ",
    "def f(x):\n    return {x: [1, 2]}\n",
    "if (a < b) { c = d; }\n\tx = y;\n",
    "Это проверка. ",
    "“smart quotes” — ",
    "12345 !!! ",
    "\n",
]


def _is_code_reference(sample: bytes, letters: int) -> bool:
    if b"```" in sample:
        return True
    if letters == 0:
        return False
    punct = sum(sample.count(m) for m in _CODE_MARKS)
    window = sample[:_WINDOW_BYTES]
    newlines = window.count(b"\n")
    indents = window.count(b"\n    ") + window.count(b"\n\t")
    return punct * 8 >= letters and indents * 4 >= newlines > 2


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(_PIECES), st.integers(1, 30)), min_size=1, max_size=6),
    st.integers(0, 3000),
)
def test_is_code_matches_per_mark_counts(parts: list[tuple[str, int]], letters: int) -> None:
    sample = "".join(p * n for p, n in parts).encode()
    assert _is_code(sample, _histogram(sample), letters) == _is_code_reference(sample, letters)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512), st.integers(0, 600))
def test_is_code_matches_on_arbitrary_bytes(sample: bytes, letters: int) -> None:
    assert _is_code(sample, _histogram(sample), letters) == _is_code_reference(sample, letters)


def test_ascii_prose_and_code() -> None:
    assert classify_text(b"The quick brown fox jumps over the lazy dog. " * 20) == "latin"
    assert classify_text(b"```python\ndef f(x):\n    return x\n```\n") == "code"


def _profile_reference(sample: bytes) -> TextProfile:
    """The histogram path every sample took before the ASCII fast path."""
    hist = _histogram(sample)
    return TextProfile(
        _classify(sample, hist),
        sum(hist[b] for b in range(48, 58)),
        sum(hist[b] for b in range(256) if b not in _NOT_PUNCT),
        hist[10],
    )


_ASCII_PIECES = [
    *_PIECES[:3],
    *_PIECES[5:],
    '{"a": [1, 2, 3]}',
    "```python\nx = 1\n```\n",
    "Der Ausschuss prüfte die Zahlen. ".encode("ascii", "ignore").decode(),
    "  ",
    "!!!",
]


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_ASCII_PIECES), st.integers(1, 40)), min_size=1, max_size=6))
def test_ascii_fast_path_matches_the_histogram_path(parts: list[tuple[str, int]]) -> None:
    sample = "".join(p * n for p, n in parts).encode()
    assert sample.isascii()
    assert profile_text(sample) == _profile_reference(sample)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=600).map(lambda b: bytes(x & 0x7F for x in b)))
def test_ascii_fast_path_matches_on_arbitrary_ascii_bytes(sample: bytes) -> None:
    assert profile_text(sample) == _profile_reference(sample)
