"""The classifier's fast path for ASCII-dominated text gives exactly the full rules' answer."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from extproc.categories import _NOT_ASCII_ALPHA, _classify_scripts, classify_text

_PIECES = [
    "The quick brown fox jumps over the lazy dog. ",
    "def f(x):\n    return {x: [1, 2]}\n",
    "这是一个测试句子。",
    "これはテストです。",
    "이것은 시험입니다. ",
    "Это проверка. ",
    "นี่คือการทดสอบ ",
    "এটি একটি পরীক্ষা ",
    "ఇది ఒక పరీక్ష ",
    "यह एक परीक्षण है ",
    "هذا اختبار ",
    "Αυτό είναι ",
    "זה מבחן ",
    "café naïve résumé ",
    "“smart quotes” — ",
    "12345 !!! ",
]


def _full(sample: bytes) -> str:
    stripped = sample.strip()
    if stripped[:1] in (b"{", b"[") and stripped[-1:] in (b"}", b"]"):
        return "json"
    return _classify_scripts(sample, len(sample.translate(None, _NOT_ASCII_ALPHA)))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_PIECES), st.integers(1, 30)), min_size=1, max_size=6))
def test_fast_path_matches_full_rules(parts: list[tuple[str, int]]) -> None:
    sample = "".join(p * n for p, n in parts).encode()
    assert classify_text(sample) == _full(sample)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=512))
def test_fast_path_matches_full_rules_on_arbitrary_bytes(sample: bytes) -> None:
    assert classify_text(sample) == _full(sample)


def test_ascii_prose_and_code() -> None:
    assert classify_text(b"The quick brown fox jumps over the lazy dog. " * 20) == "latin"
    code = b"```python\ndef f(x):\n    return x\n```\n"
    assert classify_text(code) == "code"
