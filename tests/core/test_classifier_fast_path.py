"""The one-pass code-mark count gives exactly the answer of the per-mark counts it replaced."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from extproc.core.categories import _CODE_MARKS, _WINDOW_BYTES, _histogram, _is_code, classify_text

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
