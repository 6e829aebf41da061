"""The byte bound (extproc.core.estimate.screen) is never under the true prompt and decides only when it fits.

Truth: the real Llama-3 / Qwen3 tokenizers and chat templates of the stand-in pool
(:mod:`mockpool.tokencount`). Real text: the shared data (ShareGPT, LMSYS, WildChat-ru, AlignBench-zh,
MT-Bench, MGSM, HumanEval, BFCL tool schemas); the test skips with the reason when it is absent.
"""

from __future__ import annotations

import base64
import json
import random
from pathlib import Path
from typing import Any

import pytest

from evaluation.corpus import ReplayRequest, load_requests
from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.estimate.screen import (
    BOUND_CATEGORY,
    bound_budget,
    route_budget,
)
from extproc.core.request.request_body import RequestFeatures, parse_request_body
from mockpool.tokencount import load_counter

ROOT = Path(__file__).resolve().parents[3]
SHARED = ROOT.parent / "shared" / "data"
MODELS = {"llama3": "meta-llama/Llama-3.1-8B-Instruct", "qwen3": "Qwen/Qwen3-8B"}


def _estimator() -> Estimator:
    cal = CalibrationConfig()
    return Estimator(estimator=EstimatorConfig(), calibration=cal, store=InMemoryRatioStore.from_config(cal))


def _features(body: dict[str, Any]) -> RequestFeatures:
    return parse_request_body(json.dumps(body, ensure_ascii=False).encode(), "chat")


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
    counter = load_counter(family)
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
