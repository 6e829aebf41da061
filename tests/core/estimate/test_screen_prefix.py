"""Counting a prompt in pieces (extproc.core.text.runs.PieceCounter) and stopping once the budget is over
every pool (extproc.core.estimate.screen.prefix_budget) route exactly as the full count does.

Texts: long prompts joined from the shared data (ShareGPT, LMSYS, WildChat-ru, AlignBench-zh, ...;
skipped with the reason when absent) and generated ones mixing English, French, Persian and Arabic,
Han, base64 blobs, digits, emoji and whitespace runs, so that the language tests and the blob test
fall on both sides of the cuts.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evaluation.corpus import load_requests
from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.estimate.screen import MIN_PREFIX_CHARS, prefix_budget, route_budget
from extproc.core.request.request_body import RequestFeatures, parse_request_body
from extproc.core.text import runs
from extproc.core.text.runs import CONTENT_KINDS, PieceCounter, count_runs

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared" / "data"
MODELS = ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B", "some-unknown-model")

_WORDS = {
    "en": [
        "the",
        "quick",
        "brown",
        "fox",
        "jumps",
        "over",
        "the",
        "lazy",
        "dog",
        "and",
        "then",
        "you",
        "see",
        "that",
        "it",
        "is",
        "with",
    ],
    "fr": [
        "le",
        "chat",
        "est",
        "sur",
        "la",
        "table",
        "et",
        "les",
        "enfants",
        "de",
        "la",
        "maison",
        "sont",
        "dans",
        "le",
        "jardin",
        "pour",
    ],
    "fa": ["این", "یک", "متن", "فارسی", "است", "که", "برای", "آزمایش", "نوشته", "شده", "گفت", "کرد"],
    "ar": ["هذا", "نص", "عربي", "مكتوب", "من", "أجل", "الاختبار", "في", "هذه", "الحالة"],
    "han": ["中文", "测试", "文本", "模型", "令牌"],
}


def _generated(rng: random.Random, n_chars: int) -> str:
    """A text of about ``n_chars`` characters of runs of one language or kind each."""
    parts: list[str] = []
    size = 0
    while size < n_chars:
        kind = rng.choice([*_WORDS, "blob", "digits", "emoji", "space"])
        if kind in _WORDS:
            piece = " ".join(rng.choice(_WORDS[kind]) for _ in range(rng.randrange(5, 400)))
        elif kind == "blob":
            piece = base64.b64encode(rng.randbytes(rng.randrange(10, 300))).decode()
        elif kind == "digits":
            piece = " ".join(str(rng.randrange(10**9)) for _ in range(rng.randrange(1, 50)))
        elif kind == "emoji":
            piece = "".join(chr(rng.randrange(0x1F300, 0x1F64F)) for _ in range(rng.randrange(1, 30)))
        else:
            piece = rng.choice(["  ", "\n", "\n\n", " \t ", "   7"])
        parts.append(piece)
        size += len(piece) + 1
    return rng.choice([" ", "\n", ""]).join(parts)


@pytest.fixture(scope="module")
def long_texts() -> list[str]:
    """Long prompts: generated ones, and shared-data prompts joined to 64 K .. 600 K characters."""
    rng = random.Random(35)
    texts = [_generated(rng, rng.randrange(MIN_PREFIX_CHARS, 400_000)) for _ in range(12)]
    if (SHARED / "text").is_dir():
        prompts = [
            m["content"]
            for r in load_requests(SHARED)
            for m in r.messages
            if isinstance(m.get("content"), str)
        ]
        for _ in range(12):
            want = rng.randrange(MIN_PREFIX_CHARS, 600_000)
            joined: list[str] = []
            while sum(map(len, joined)) < want:
                joined.append(rng.choice(prompts))
            texts.append("\n".join(joined))
    return texts


def _same_counts(a: runs.RunCounts, b: runs.RunCounts) -> None:
    assert np.array_equal(a.runs, b.runs), (a.as_dict(), b.as_dict())
    assert np.array_equal(a.chars, b.chars), (a.as_dict(), b.as_dict())
    assert a.gaps == b.gaps


def _pieces(text: str, cuts: list[int]) -> PieceCounter:
    counter = PieceCounter(text)
    for at in cuts:
        counter.advance(at)
    counter.advance(len(text))
    return counter


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.integers(0, 2**32), st.lists(st.integers(0, 3000), max_size=8))
def test_pieces_add_up_to_the_whole_text(seed: int, cuts: list[int]) -> None:
    """Cut anywhere (after a space, before a letter), the pieces' counts before the language tests
    add up to the text's, and the language tests on the sum give ``count_runs(text)``."""
    text = _generated(random.Random(seed), 3000)
    counter = _pieces(text, sorted(cuts))
    assert counter.done and counter.counted_chars == len(text)
    _same_counts(counter.whole(), count_runs(text))


def test_pieces_of_long_texts_add_up_on_both_paths(
    long_texts: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = random.Random(4)
    for text in long_texts[:8]:
        cuts = sorted(rng.randrange(len(text)) for _ in range(5))
        _same_counts(_pieces(text, cuts).whole(), count_runs(text))
    monkeypatch.setattr(runs, "_runscan", None)  # the numpy path (no C compiler)
    for text in long_texts[:3]:
        _same_counts(_pieces(text, [len(text) // 3]).whole(), count_runs(text))


def test_whole_before_the_end_is_an_error() -> None:
    counter = PieceCounter("word " * 100)
    counter.advance(50)
    assert 50 <= counter.counted_chars < 500 and counter.pieces == 1
    with pytest.raises(ValueError, match="not counted"):
        counter.whole()


def _estimator(learned_reserve: bool, warm: dict[str, float]) -> Estimator:
    """An estimator whose keys in ``warm`` (content kind → observed model-to-true ratio) have learned."""
    cal = CalibrationConfig()
    est = Estimator(
        estimator=EstimatorConfig.model_validate({"output_reserve": {"learned": learned_reserve}}),
        calibration=cal,
        store=InMemoryRatioStore.from_config(cal),
    )
    for model in MODELS:
        for kind, ratio in warm.items():
            for _ in range(max(1, cal.warmup_samples) + 2):
                est.store.observe((est.model_key(model), kind), ratio)
    return est


def _features(text: str, model: str, body: dict[str, Any]) -> RequestFeatures:
    payload = {"model": model, "messages": [{"role": "user", "content": text}], **body}
    return parse_request_body(json.dumps(payload, ensure_ascii=False).encode(), "chat")


def _fit(total_tokens: int, limits: tuple[int, ...]) -> int:
    return next((i for i, limit in enumerate(limits) if total_tokens <= limit), len(limits))


def test_routes_to_the_pool_of_the_full_count(long_texts: list[str]) -> None:
    """On every long text, model, reserve policy and pool set around its exact budget, the routing
    budget falls in the exact estimate's pool (same ``policy.choose`` pool and reason); a prefix
    budget only when that is over every pool; undecided, the pieces' counts are the text's."""
    rng = random.Random(31)
    prefix = undecided = 0
    for i, text in enumerate(long_texts):
        warm = {k: rng.uniform(0.6, 1.3) for k in rng.sample(CONTENT_KINDS, 5)}
        est = _estimator(learned_reserve=bool(i % 2), warm=warm)
        for model in MODELS:
            body: dict[str, Any] = rng.choice(
                [
                    {},
                    {"max_tokens": rng.randrange(1, 4000)},
                    {"max_tokens": 500, "n": 3},
                    {"truncate_prompt_tokens": 9000},
                ]
            )
            exact = est.estimate(_features(text, model, body)).total_tokens
            for limits in {
                (8192, max(8193, exact - rng.randrange(1, 40_000))),
                (4096, 8192, max(8193, exact - 1)),
                (8192, exact),
                (8192, exact + rng.randrange(0, 5000)),
                (8192, 32768, 65536),
            }:
                f = _features(text, model, body)
                routed = route_budget(est, f, limits)
                assert _fit(routed.total_tokens, limits) == _fit(exact, limits), (limits, exact, routed)
                if routed.screened == "prefix":
                    prefix += 1
                    assert routed.total_tokens > limits[-1] and routed.key[1] == "bounded"
                else:
                    undecided += 1
                    assert routed.screened == "" and routed.total_tokens == exact
    assert prefix > 20 and undecided > 20, (prefix, undecided)


def test_no_prefix_budget_for_short_texts_media_or_a_capped_prompt() -> None:
    est = _estimator(learned_reserve=False, warm={})
    short = _features("word " * 1000, MODELS[0], {})
    assert prefix_budget(est, short, (10,)) is None
    long_text = "word " * (MIN_PREFIX_CHARS // 2)
    capped = _features(long_text, MODELS[0], {"truncate_prompt_tokens": 100, "max_tokens": 10})
    assert prefix_budget(est, capped, (200, 8192)) is None
    assert prefix_budget(est, _features(long_text, MODELS[0], {}), ()) is None
    over = prefix_budget(est, _features(long_text, MODELS[0], {"max_tokens": 10}), (200, 8192))
    assert over is not None and over.screened == "prefix" and over.total_tokens > 8192
