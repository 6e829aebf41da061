"""Run counts (extproc/core/text/runs.py): blobs look random, punctuation-dense prose is not English,
every character is counted once, whatever the text's storage (ASCII, BMP, beyond U+FFFF)."""

from __future__ import annotations

import base64
import json
import random
import uuid
from pathlib import Path

import pytest

from extproc.core.text.runs import RUN_KINDS, count_runs
from tests.shared_data import BROAD_CORPUS

BLOB, LETTER, LETTER_OTHER, LETTER_EURO = (
    RUN_KINDS.index(k) for k in ("blob", "letter", "letter_other", "letter_euro")
)
ROOT = Path(__file__).resolve().parents[3]
BROAD = BROAD_CORPUS


def _random_chunks() -> list[str]:
    rng = random.Random(14)
    return [
        base64.b64encode(rng.randbytes(60)).decode(),
        base64.urlsafe_b64encode(rng.randbytes(40)).decode().rstrip("="),
        rng.randbytes(20).hex(),
        str(uuid.UUID(int=rng.getrandbits(128), version=4)),
        "data:image/png;base64," + base64.b64encode(rng.randbytes(48)).decode(),
    ]


@pytest.mark.parametrize("chunk", _random_chunks())
def test_random_alphanumerics_are_blobs(chunk: str) -> None:
    counts = count_runs(f"see {chunk} here")
    assert counts.chars[BLOB] == len(chunk)
    assert counts.runs[BLOB] == 1


@pytest.mark.parametrize(
    "chunk",
    [
        "registry.example.com/session:19.0",
        "/api/v2/session/items?page=12&size=50",
        "https://docs.python.org/3.11/library/re.html",
        "SomeLongJavaClassName2Factory3",
    ],
)
def test_word_like_chunks_are_not_blobs(chunk: str) -> None:
    assert count_runs(f"image: {chunk}\n").chars[BLOB] == 0


def test_every_character_is_counted_once() -> None:
    rng = random.Random(0)
    alphabet = "ab1 \n\t.,-_/=+é😀中ひ한ਪଓမ\ud800" + "0123456789ABCDEF"
    for _ in range(300):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 400)))
        counts = count_runs(text)
        assert counts.chars.sum() == len(text)
        assert (counts.runs <= counts.chars).all() and (counts.runs >= 0).all()


def _broad_texts(kind: str, source_prefix: str) -> list[str]:
    if not BROAD.exists():
        pytest.skip(f"broad corpus not found at {BROAD} (python -m evaluation.broad_corpus --out {BROAD})")
    out = []
    for line in BROAD.read_text(encoding="utf-8").splitlines():
        body = json.loads(line)
        meta = body["metadata"]
        if meta["kind"] == kind and meta["source"].startswith(source_prefix):
            out += [m["content"] for m in body["messages"] if isinstance(m.get("content"), str)]
    return out


@pytest.mark.parametrize("source", ["tldr_uz", "tldr_bs", "taocl_de", "tldr_sv"])
def test_punctuation_dense_markdown_in_other_languages_is_not_english(source: str) -> None:
    texts = [t for t in _broad_texts("latin_other", source) if len(t) > 2000][:5]
    assert texts, f"no {source} texts in the broad corpus"
    for text in texts:
        counts = count_runs(text)
        assert counts.chars[LETTER] == 0 and counts.chars[LETTER_OTHER] + counts.chars[LETTER_EURO] > 0


@pytest.mark.parametrize(
    ("source", "kind"),
    [
        ("tldr_es", LETTER_EURO),
        ("tldr_fr", LETTER_EURO),
        ("tldr_sv", LETTER_EURO),
        ("tldr_pt_BR", LETTER_EURO),
        ("tldr_it", LETTER_EURO),
        ("locale_sw", LETTER_OTHER),
        ("tldr_id", LETTER_OTHER),
        ("tldr_pl", LETTER_OTHER),
        ("tldr_tr", LETTER_OTHER),
    ],
)
def test_western_european_languages_have_their_own_letter_kind(source: str, kind: int) -> None:
    """Spanish, French, Swedish, Portuguese, Italian words cost 10–30 % fewer tokens than Swahili, Indonesian,
    Polish or Turkish ones: the first get ``letter_euro``, the others stay ``letter_other``."""
    texts = [t for t in _broad_texts("latin_other", source) if len(t) > 300]
    assert texts, f"no {source} texts in the broad corpus"
    hits = sum(count_runs(t).chars[kind] > 0 for t in texts)
    assert hits >= 0.8 * len(texts), (hits, len(texts))  # short UI strings may lack function words


@pytest.mark.parametrize("kind", ["config", "log", "code", "sql"])
def test_code_and_data_letters_cost_like_english(kind: str) -> None:
    texts = [t for t in _broad_texts(kind, "") if len(t) > 2000][:5]
    assert texts, f"no {kind} texts in the broad corpus"
    for text in texts:
        assert count_runs(text).chars[LETTER_OTHER] == 0


def test_spaced_word_count_equals_str_count() -> None:
    """The one-split count of the function words equals one non-overlapping ``str.count`` per word
    (repeated words share a space: " de de de " holds " de " twice)."""
    from extproc.core.text.run_languages import _EURO_WORD_SET, _EURO_WORDS, _spaced_word_count

    rng = random.Random(14)
    tokens = ["de", "le", "är", "x", "", "und", "de de", "è"]
    for _ in range(5000):
        window = "".join(
            rng.choice(tokens) + rng.choice([" ", " ", "  ", "\n"]) for _ in range(rng.randint(0, 12))
        )
        window = rng.choice(["", " "]) + window
        assert _spaced_word_count(window, _EURO_WORD_SET) == sum(window.count(w) for w in _EURO_WORDS)


@pytest.mark.parametrize(
    ("text", "dtype"),
    [
        ("plain ascii", "uint8"),
        ("café au lait", "uint8"),
        ("привет, мир", "uint16"),
        ("lone \ud800 and pair-like \udbff\udc00 surrogates", "uint16"),
        ("emoji 😀 and rare Han \U00020000 and \ud800", "uint32"),
        ("\U0010ffff\x00\x7f\x80\u07ff\u0800\uffff", "uint32"),
    ],
)
def test_code_points_and_utf8_length(text: str, dtype: str) -> None:
    """One encode at the string's storage width gives its code points, and its UTF-8 length is
    counted from them (a lone surrogate: its 3 ``surrogatepass`` bytes)."""
    from extproc.core.text.runs import code_points, utf8_length

    codes = code_points(text)
    assert codes.dtype == dtype and codes.tolist() == [ord(c) for c in text]
    assert utf8_length(codes) == len(text.encode("utf-8", "surrogatepass"))
    assert count_runs(text, codes).as_dict() == count_runs(text).as_dict()
