"""The routing screens (extproc.core.screen): the byte bound is never under the true prompt, and
neither screen changes a pool decision of the exact estimate on real text.

Truth: the real Llama-3 / Qwen3 tokenizers and chat templates of the stand-in pool
(:mod:`mockpool.tokencount`). Real text: the shared data (LongBench v2 documents, ShareGPT, WildChat-ru,
AlignBench-zh, MT-Bench ja/ko, HumanEval, BFCL) and, when present, the broad corpus
(``evaluation/broad_corpus.py``); tests skip with the reason when those files are absent.
"""

from __future__ import annotations

import base64
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from evaluation.broad import load_bodies
from evaluation.corpus import ReplayRequest, load_requests
from extproc.config import CalibrationConfig, EstimatorConfig, PoolConfig
from extproc.core.calibration import InMemoryRatioStore
from extproc.core.estimator import Estimator
from extproc.core.policy import Policy
from extproc.core.request_body import RequestFeatures, parse_request_body
from extproc.core.screen import (
    BOUND_CATEGORY,
    WINDOW_MIN_CHARS,
    bound_budget,
    route_budget,
    window_budget,
)
from mockpool.tokencount import load_counter

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared" / "data"
BROAD = Path(os.environ.get("TBR_BROAD_CORPUS", ROOT.parent / "tbr-broad" / "broad.jsonl"))
MODELS = {"llama3": "meta-llama/Llama-3.1-8B-Instruct", "qwen3": "Qwen/Qwen3-8B"}
LIMITS = (2048, 4096, 8192, 16384, 32768, 65536, 131072)


def _estimator() -> Estimator:
    cal = CalibrationConfig()
    return Estimator(estimator=EstimatorConfig(), calibration=cal, store=InMemoryRatioStore.from_config(cal))


def _features(body: dict[str, Any]) -> RequestFeatures:
    return parse_request_body(json.dumps(body, ensure_ascii=False).encode(), "chat")


def _pool_of(total: int, limits: tuple[int, ...]) -> int:
    return next((limit for limit in limits if total <= limit), -1)


@pytest.fixture(scope="module")
def shared_requests() -> list[ReplayRequest]:
    if not (SHARED / "text").is_dir():
        pytest.skip(f"shared data not found at {SHARED} (real prompts are needed)")
    return load_requests(SHARED)


def _adversarial() -> list[str]:
    """Texts that cost the most tokens per byte: random base64, hex, emoji, CJK, lone letters and
    digits separated by spaces, punctuation runs, whitespace runs, mixed scripts."""
    rng = random.Random(7)
    raw = bytes(rng.randrange(256) for _ in range(1500))
    return [
        base64.b64encode(raw).decode(),
        raw.hex(" "),
        "".join(chr(rng.randrange(0x1F300, 0x1FAFF)) for _ in range(400)),
        "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(600)),
        " ".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(1500)),
        "".join(rng.choice("!@#$%^&*()[]{};:'\",.<>/?\\|`~-_=+") for _ in range(1500)),
        "".join(rng.choice([" ", "\n", "\t", "  \n"]) for _ in range(1500)),
        "".join(
            chr(rng.choice([rng.randrange(0x0400, 0x04FF), rng.randrange(0x0900, 0x097F), 0x05D0, 0x0E01]))
            for _ in range(800)
        ),
        "a\u0301" * 700,  # combining marks
    ]


@pytest.mark.parametrize("family", ["llama3", "qwen3"])
def test_byte_bound_is_never_under_the_true_prompt(family: str, shared_requests: list[ReplayRequest]) -> None:
    counter = load_counter(family)  # type: ignore[arg-type]
    est = _estimator()
    model = MODELS[family]
    bodies: list[dict[str, Any]] = [
        {"model": model, "messages": [{"role": "user", "content": t}], "max_tokens": 16}
        for t in _adversarial()
    ]
    bodies.append(
        {
            "model": model,
            "messages": [
                {"role": "system", "content": "Be brief."},
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "", "reasoning_content": "🙂" * 50},
                {"role": "user", "content": "?"},
            ],
        }
    )
    picked = shared_requests[::7]
    assert len(picked) > 300
    for req in picked:
        body: dict[str, Any] = {"model": model, "messages": list(req.messages)}
        if req.tools is not None:
            body["tools"] = list(req.tools)
        bodies.append(body)
    worst = 0.0
    for body in bodies:
        bound = bound_budget(est, _features(body))
        assert bound is not None and bound.key[1] == BOUND_CATEGORY
        true = counter.count_chat(body["messages"], body.get("tools"), True).prompt_tokens
        assert bound.prompt_tokens >= true, (body["messages"][-1]["content"][:80], bound.prompt_tokens, true)
        worst = max(worst, true / bound.prompt_tokens)
    assert worst > 0.5  # the adversarial texts come close to one token per byte: the test can fail


def test_bound_needs_no_media_and_routes_only_when_it_fits_the_smallest_pool() -> None:
    est = _estimator()
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    with_image = _features(
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}]}
    )
    assert bound_budget(est, with_image) is None
    assert route_budget(est, with_image, (8192, 65536)).screened == ""
    small = _features(
        {"model": "m", "messages": [{"role": "user", "content": "hello " * 200}], "max_tokens": 100}
    )
    assert route_budget(est, small, (8192, 65536)).screened == "bound"
    # 1,200 bytes + framing + 100 > 1,024: the bound cannot decide, the exact estimate does
    exact = route_budget(est, small, (1024, 65536))
    assert exact.screened == "" and exact == est.estimate(small)


def test_heterogeneous_text_is_not_windowed() -> None:
    est = _estimator()
    prose = ("The quick brown fox jumps over the lazy dog while the committee reviews the budget. " * 900)[
        :70000
    ]
    blob = base64.b64encode(random.Random(1).randbytes(30000)).decode()
    homogeneous = _features({"model": "m", "messages": [{"role": "user", "content": prose}]})
    mixed = _features(
        {"model": "m", "messages": [{"role": "user", "content": prose[:35000] + blob + prose[:35000]}]}
    )
    assert len(homogeneous.prompt_text) >= WINDOW_MIN_CHARS
    w = window_budget(est, homogeneous)
    assert w is not None and w.screened == "windows"
    exact = est.estimate(homogeneous)
    assert abs(w.prompt_tokens - exact.prompt_tokens) <= 0.05 * exact.prompt_tokens
    assert window_budget(est, mixed) is None


def _decisions_agree(est: Estimator, f: RequestFeatures) -> tuple[int, int]:
    """(screened budgets checked, windowed ones); asserts every limit pair decides alike."""
    exact = est.estimate(f)
    checked = windowed = 0
    for small in LIMITS[:-1]:
        limits = (small, LIMITS[-1])
        b = route_budget(est, f, limits)
        if b.screened:
            checked += 1
            windowed += b.screened == "windows"
            assert _pool_of(b.total_tokens, limits) == _pool_of(exact.total_tokens, limits) or (
                b.screened == "bound" and b.total_tokens <= small
            ), (b, exact, limits)
    policy = Policy([PoolConfig(name=str(x), max_model_len=x, header_value=str(x)) for x in LIMITS])
    assert route_budget(est, f, policy.limits_tokens).total_tokens > 0
    return checked, windowed


def _long_texts(requests: list[ReplayRequest]) -> list[str]:
    """Long real texts: slices of the LongBench v2 documents (three lengths, three offsets) and, per
    other source, its prompts concatenated in order until ≥ 80,000 characters."""
    out: list[str] = []
    by_source: dict[str, list[str]] = {}
    for r in requests:
        text = "\n".join(str(m.get("content") or "") for m in r.messages)
        if r.source == "longbench_v2":
            for length in (WINDOW_MIN_CHARS, 100_000, 160_000):
                for k in range(3):
                    start = k * max(0, len(text) - length) // 2
                    if len(text) >= start + length:
                        out.append(text[start : start + length])
        else:
            by_source.setdefault(r.source, []).append(text)
    for texts in by_source.values():
        joined: list[str] = []
        for t in texts:
            joined.append(t)
            if sum(map(len, joined)) >= 80_000:
                out.append("\n\n".join(joined))
                joined = []
    return out


@pytest.mark.parametrize("family", ["llama3", "qwen3"])
def test_windows_change_no_decision_on_long_shared_texts(
    family: str, shared_requests: list[ReplayRequest]
) -> None:
    est = _estimator()
    texts = _long_texts(shared_requests)
    assert len(texts) > 100
    windowed = 0
    for text in texts:
        body = {"model": MODELS[family], "messages": [{"role": "user", "content": text}], "max_tokens": 512}
        windowed += _decisions_agree(est, _features(body))[1]
    assert windowed > 100  # the windows did decide, many times


@pytest.mark.parametrize("family", ["llama3", "qwen3"])
def test_windows_change_no_decision_on_the_broad_corpus(family: str) -> None:
    if not BROAD.is_file():
        pytest.skip(f"broad corpus not found at {BROAD} (python -m evaluation.broad_corpus --out {BROAD})")
    est = _estimator()
    windowed = 0
    for body in load_bodies(BROAD):
        if "messages" not in body:
            continue
        b = dict(body, model=MODELS[family])
        f = _features(b)
        if len(f.prompt_text) >= WINDOW_MIN_CHARS:
            windowed += _decisions_agree(est, f)[1]
    assert windowed > 10  # the windows did decide
