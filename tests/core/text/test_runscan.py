"""The C run counter (extproc/core/text/_runscan.c) and the numpy path
(:func:`extproc.core.text.runs.count_runs_numpy`) give exactly the counts of the plain-Python oracle
(tests/core/text/runs_oracle.py): on every shared prompt, on adversarial text built to hit each branch
(blobs with and without non-ASCII characters inside, case tests, gaps, every storage width), and on
generated strings. Also: the UTF-8 length :func:`extproc.core.text.runs.text_utf8_length` gives equals
the encoder's, and the C word counts of the language tests equal their Python reference."""

from __future__ import annotations

import base64
import json
import random
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.corpus import load_requests
from extproc.core.request.request_body import parse_request_body
from extproc.core.text import runs
from tests.core.text.runs_oracle import oracle_count_runs

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared" / "data"

needs_c = pytest.mark.skipif(
    runs.RUNSCAN != "c",
    reason="extproc.core.text._runscan was not built (no C compiler at install time): the numpy path runs",
)
"""On the tests of the C extension itself; the others hold whichever path :func:`count_runs` runs
(and the numpy path) to the oracle."""


def _same(text: str, oracle: bool = True) -> None:
    """The C and numpy counts of ``text`` are equal, and equal the oracle's (``oracle``: a per-character
    Python loop, skipped on the longest corpus texts)."""
    c = runs.count_runs(text)
    ref = runs.count_runs_numpy(text)
    assert np.array_equal(c.runs, ref.runs), (c.as_dict(), ref.as_dict())
    assert np.array_equal(c.chars, ref.chars), (c.as_dict(), ref.as_dict())
    assert c.gaps == ref.gaps
    if oracle:
        o_runs, o_chars, o_gaps = oracle_count_runs(text)
        assert c.runs.tolist() == o_runs, (c.as_dict(), text[:80])
        assert c.chars.tolist() == o_chars, (c.as_dict(), text[:80])
        assert c.gaps == o_gaps, text[:80]
    assert runs.text_utf8_length(text)[0] == len(text.encode("utf-8", "surrogatepass"))


def _adversarial() -> list[str]:
    rng = random.Random(3)
    raw = rng.randbytes(3000)
    b64 = base64.b64encode(raw).decode()
    return [
        "",
        "a",
        " ",
        "9",
        "  7",
        "x 1 22  333\t\t4\n5",
        b64,
        "\n".join(b64[i : i + 76] for i in range(0, len(b64), 76)),
        f"Decode this:\n\ndata:image/png;base64,{b64} please",
        raw.hex(" "),
        raw.hex(),
        " ".join(str(uuid.UUID(int=rng.getrandbits(128))) for _ in range(50)),
        "5.1,3.5,1.4,0.2,setosa\n" * 40,
        "registry.example.com/app:19.0 /usr/lib/x86_64-linux-gnu/libc.so.6 v1.2.3-rc4",
        "ABCDEFGHIJabcdefghij0123456789",  # exactly 20, mixed case, hex-poor
        "ABCDEFGHIJKLMNOPQRS12",  # upper only: word-like
        "aB3" * 7 + "é" + "cD4" * 7,  # a non-ASCII letter inside a blob chunk
        "aB3" * 7 + "😀" + "cD4" * 7 + " \U00020000" * 3,  # astral inside a blob chunk
        "привет мир 12345 " * 30 + "ab12CD34ef56GH78ij90KL",
        "مرحبا بالعالم " * 20 + "پچژگکی" * 10,
        "Der schnelle braune Fuchs und die Katze; les chats de la maison " * 20,
        "\ud800 lone \udfff surrogates 12 " * 10,
        "\x00\x01\x7f\x80\xff" * 50 + "ÿÿÿ 1234567890abcdefABCDEF",
        "日本語のテキストと漢字 " * 50 + "0x1F2E3D4C5B6A79881726354453627180",
        "😀👍🏽‍♂️" * 100,
        "\t\t\n\n  \r\n" * 100,
        "a1" * 5000 + " " + "Zz9" * 3000,
        "привет мир " * 14000 + "x",  # a long 2-byte text
        "😀 a " * 40000,
    ]


@pytest.mark.parametrize("text", _adversarial())
def test_adversarial_texts_count_alike(text: str) -> None:
    _same(text)


_ALPHABET = st.sampled_from(
    [
        *"aAzZmQ09 5\n\t.,;:-_/+=@#",
        *(
            "é",
            "ß",
            "ÿ",
            "\x85",
            "д",
            "Ж",
            "ש",
            "ع",
            "پ",
            "ह",
            "ก",
            "한",
            "カ",
            "漢",
            "—",
            "→",
            "\u200d",
            "\ufe0f",
        ),
        *("😀", "\U00020000", "\U0001f9ff", "\U000e0001", "\ud800"),
    ]
)


@settings(max_examples=400, deadline=None, derandomize=True)
@given(
    st.lists(
        st.one_of(_ALPHABET, st.sampled_from(["ab12CD34ef56GH78ij90", "0123456789abcdef" * 2])), max_size=300
    )
)
def test_generated_texts_count_alike(parts: list[str]) -> None:
    _same("".join(parts))


def test_shared_prompts_count_alike() -> None:
    if not (SHARED / "text").is_dir():
        pytest.skip(f"shared data not found at {SHARED} (real prompts are needed)")
    requests = load_requests(SHARED)
    for r in requests[::3]:
        body = {"model": "m", "messages": [dict(m) for m in r.messages]}
        if r.tools:
            body["tools"] = list(r.tools)
        text = parse_request_body(json.dumps(body, ensure_ascii=False).encode(), "chat").prompt_text
        _same(text, oracle=len(text) < 20_000)


def _c() -> Any:
    """The C extension (imported here: the module is skipped where it was not built)."""
    from extproc.core.text import _runscan

    return _runscan


def _windows() -> list[str]:
    """Language-test windows: adversarial word patterns and the starts of every third shared prompt."""
    out = [
        "",
        " ",
        " de ",
        " de de de de ",
        " de le de  de  le le ",
        "x the the  and of of you that with is is y",
        " è é à și în não är för è è ",
        " la de la de la ",
        " desde de des ded de\tde de\nde ",
        " DE De de ",
        " " + "de " * 3000,
        " pentru pentrux xpentru pentru ",
    ]
    if (SHARED / "text").is_dir():
        for r in load_requests(SHARED)[::3]:
            out.append("\n".join(str(m.get("content") or "") for m in r.messages))
    return out


def _assert_word_counts(text: str) -> None:
    from extproc.core.text import run_languages as L

    window = L.window_of(text)
    euro = L._spaced_word_count(window, L._EURO_WORD_SET)
    en = sum(window.count(w) for w in L._FUNCTION_WORDS)
    spaces = text[: L.WINDOW_CHARS].count(" ")
    assert _c().window_words(text, L.WINDOW_CHARS) == (spaces, en, euro), window[:80]
    assert L.window_words(text) == (spaces + 1, en, euro)


@needs_c
def test_word_counts_match_the_python_reference() -> None:
    """The C counts of the lower-cased window equal the Python counts of ``str.lower`` of it."""
    for text in _windows():
        _assert_word_counts(text)


@needs_c
@settings(max_examples=300, deadline=None, derandomize=True)
@given(
    st.lists(
        st.sampled_from(
            [
                "de",
                "le",
                "the",
                "è",
                "È",
                "și",
                "Și",
                " ",
                "  ",
                "x",
                "des",
                "\n",
                "DE",
                "İl",
                "ΣΑΣ",
                "ß",
                "The",
            ]
        ),
        max_size=60,
    )
)
def test_generated_word_counts_match(parts: list[str]) -> None:
    _assert_word_counts(" ".join(parts))


@needs_c
def test_language_tests_without_the_extension_decide_alike(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pure-Python word counts (a build without a C compiler) equal the C counts on every window."""
    from extproc.core.text import run_languages as L

    texts = _windows()[1:]
    fixed = [L.window_words(w) for w in texts]
    monkeypatch.setattr(L, "_c", None)
    assert [L.window_words(w) for w in texts] == fixed


_PIECES = st.sampled_from(
    [
        "the ",
        "Quick ",
        "brown, ",
        "fox.\n",
        "  ",
        "\t",
        "42 ",
        " 7",
        "привет ",
        "мир, ",
        "漢字",
        "かな",
        "한국어 ",
        "हिन्दी ",
        "مرحبا ",
        "😀",
        "\u200d",
        "\ufe0f",
        "\U00020001",
        "é",
        "ab12CD34ef56GH78ij90KL",
        "0123456789abcdef0123",
        "x" * 25,
        '{"k": [1, 2]}',
        "\r\n",
        "\x00",
    ]
)


@settings(max_examples=600, deadline=None, derandomize=True)
@given(st.lists(_PIECES, min_size=4, max_size=120))
def test_generated_mixed_script_texts_count_alike(parts: list[str]) -> None:
    """Long mixed texts: every width, two non-ASCII kinds in one 16-character block, chunks of >= 20
    characters ending inside a block, gaps across block edges (the fast path's branches)."""
    _same("".join(parts))


_CHUNK_CHARS = st.sampled_from(
    [
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        "0123456789abcdef",
        "ab,.;1-é😀д漢",
        "x",
    ]
)
_CHUNKS = st.builds(
    lambda chars, length, seed, sep: (
        "".join(chars[(seed * 7919 + i * 104729) % len(chars)] for i in range(length)) + sep
    ),
    _CHUNK_CHARS,
    st.sampled_from([1, 5, 18, 19, 20, 21, 22, 40, 63, 64, 65, 90, 130]),
    st.integers(0, 10_000),
    st.sampled_from([" ", "  ", "\n", "\t", " \n ", "", " 1", "✅\ufe0f😀 "]),
)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.lists(_CHUNKS, min_size=1, max_size=60))
def test_generated_chunk_texts_count_alike(parts: list[str]) -> None:
    """Whitespace-bounded chunks of 18..130 characters, base64-, hex- and word-like, so that blob tests
    fall at every offset of a 64-character block and chunks cross block edges; symbols, emoji and a
    variation selector (three other kinds in one block)."""
    _same("".join(parts))


@needs_c
def test_the_scalar_pass_counts_alike(tmp_path: Path) -> None:
    """A build without SSE2 (aarch64 and other CPUs: ``configure()`` returns ``"scalar"``) gives the
    same counts and word counts: the extension rebuilt with ``-U__SSE2__`` against the installed one."""
    import importlib.machinery
    import importlib.util
    import shutil
    import subprocess
    import sysconfig

    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler to build the scalar pass")
    so = tmp_path / "_runscan_scalar.so"
    src = ROOT / "extproc" / "core" / "text" / "_runscan.c"
    inc = sysconfig.get_paths()["include"]
    subprocess.run(
        [cc, "-O2", "-std=c11", "-fPIC", "-shared", "-U__SSE2__", f"-I{inc}", str(src), "-o", str(so)],
        check=True,
        capture_output=True,
    )
    loader = importlib.machinery.ExtensionFileLoader("extproc.core.text._runscan", str(so))
    spec = importlib.util.spec_from_loader("extproc.core.text._runscan", loader)
    assert spec is not None
    scalar = importlib.util.module_from_spec(spec)
    loader.exec_module(scalar)
    assert scalar.configure(*runs._CONFIGURE_ARGS) == "scalar"
    from extproc.core.text.run_languages import WORD_SETS

    for set_id, words in enumerate(WORD_SETS):
        scalar.configure_words(set_id, words)
    rng = random.Random(7)
    pieces = [*_adversarial(), *_windows()[:200]]
    pieces += ["".join(rng.choice(pieces[1:30])[:40] for _ in range(200)) for _ in range(50)]
    for text in pieces:
        assert scalar.count_runs(text) == _c().count_runs(text), text[:60]
        assert scalar.window_words(text, 4096) == _c().window_words(text, 4096)
    # a word set configured again holds its new words only; a bad word leaves the set empty; a bad
    # table configures nothing
    scalar.configure_words(2, ("foo", "bar"))
    assert scalar.window_words(" foo bar the ", 99) == (4, 1, 0, 2)
    scalar.configure_words(2, ("bar",))
    assert scalar.window_words(" foo bar the ", 99) == (4, 1, 0, 1)
    for bad in (("a b",), ("",), ("x" * 17,), (3,)):
        with pytest.raises(ValueError):
            scalar.configure_words(2, bad)
        assert scalar.window_words(" foo bar the ", 99) == (4, 1, 0, 0)
    with pytest.raises(ValueError):
        scalar.configure_words(4, ("foo",))
    with pytest.raises(ValueError):
        scalar.configure(b"\xff" * 0x10000, *runs._CONFIGURE_ARGS[1:])
    with pytest.raises(RuntimeError):
        scalar.count_runs("text")
    with pytest.raises(TypeError):
        _c().count_runs(b"text")


@needs_c
@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.lists(_CHUNKS, min_size=1, max_size=20), st.integers(-5, 3000), st.integers(-5, 3000))
def test_a_range_counts_as_its_slice(parts: list[str], start: int, end: int) -> None:
    """``count_runs(text, start, end)`` reads the characters in place and counts as the slice does
    (bounds clamped as a slice's, a negative start as 0)."""
    text = "".join(parts)
    assert _c().count_runs(text, start, end) == _c().count_runs(text[max(start, 0) : max(end, 0)])
