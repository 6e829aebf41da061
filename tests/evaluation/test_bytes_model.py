"""The ``bytes`` baseline of the evaluation (evaluation/baselines/bytes_model.py): the paper's
bytes/token arithmetic, its classifier, framing, digits and punctuation, on hand and real bodies."""

from __future__ import annotations

import json
import math

import pytest

from evaluation.baselines.bytes_model import PAPER, BytesModel, BytesModelConfig, classifier_sample
from evaluation.baselines.categories import classify_text, count_digits, count_structure
from evaluation.baselines.priors import CATEGORY_PRIORS_BPT
from evaluation.corpus import ReplayRequest, request_body
from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.estimate.budget import TokenBudget
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.request.request_body import parse_request_body


def _model(config: BytesModelConfig | None = None, **cal: object) -> BytesModel:
    c = CalibrationConfig(**cal)  # type: ignore[arg-type]
    router = Estimator(estimator=EstimatorConfig(), calibration=c, store=InMemoryRatioStore.from_config(c))
    return BytesModel(config if config is not None else BytesModelConfig(), router)


def _estimate(model: BytesModel, body: bytes, endpoint: str = "chat") -> TokenBudget:
    sample = classifier_sample(body, model.cfg.sample_bytes)
    return model.estimate(parse_request_body(body, endpoint), sample)


def _chat(model: str, content: str, **extra: object) -> bytes:
    return json.dumps({"model": model, "messages": [{"role": "user", "content": content}], **extra}).encode()


@pytest.mark.parametrize(
    ("text", "category"),
    [
        ("The quick brown fox jumps over the lazy dog.", "latin"),
        ("这是一个关于机器学习的问题，请详细回答。", "cjk_zh"),
        ("これは機械学習についての質問です。", "cjk_ja"),
        ("이것은 기계 학습에 관한 질문입니다.", "cjk_ko"),
        ("Это вопрос о машинном обучении.", "cyrillic"),
        ("นี่คือคำถามเกี่ยวกับการเรียนรู้ของเครื่อง", "thai"),
        ('{"type": "object", "properties": {"a": {"type": "string"}}}', "json"),
        ("```python\ndef f(x):\n    return x\n```", "code"),
        ("12345 67890", "no_letters"),
    ],
)
def test_classifier_scripts(text: str, category: str) -> None:
    assert classify_text(text.encode()) == category


def test_budget_uses_prior_then_learned_conservative_ratio() -> None:
    model = _model(
        BytesModelConfig(count_digits=False, count_punctuation=False),
        warmup_samples=3,
        gamma=2.0,
        ema_beta=0.5,
        learner="ema_dev",
    )
    text = "the word " * 444 + "the "  # 4000 bytes of English-like Latin prose
    body = _chat("m", text, max_tokens=100)
    b = _estimate(model, body)
    assert b.key == ("_other", "latin")
    assert not b.warm
    assert b.prompt_tokens == math.ceil(4000 / CATEGORY_PRIORS_BPT["latin"]) + 5 + 5
    assert b.total_tokens == b.prompt_tokens + 100
    for _ in range(3):
        assert model.observe(b, 4000 // 5 + 10) is not None  # true ratio 5.0 B/token
    b2 = _estimate(model, body)
    assert b2.warm
    assert b2.key == ("m", "latin")  # a served name takes a key slot, as in the router
    state = model.store.get(b2.key)
    assert state is not None
    assert b2.routing_ratio == pytest.approx(state.mean_ratio - 2.0 * state.dev_ratio)
    assert b2.prompt_tokens == math.ceil(4000 / b2.routing_ratio) + 10


def test_paper_prior_is_flat_and_the_floor_holds() -> None:
    paper = _model(PAPER)
    b = _estimate(paper, _chat("meta-llama/Llama-3.1-8B-Instruct", "这是一个问题" * 50))
    assert b.routing_ratio == 4.0  # no family table: the flat prior
    floored = _model(
        BytesModelConfig(family_priors=False, prior_bytes_per_token=0.7, min_bytes_per_token=1.0)
    )
    assert _estimate(floored, _chat("m", "hello there")).routing_ratio == 1.0


def test_observe_skips_non_text_dominated_and_media_prompts() -> None:
    model = _model()
    ids = json.dumps({"model": "m", "prompt": list(range(500))}).encode()
    assert model.observe(_estimate(model, ids, "completions"), 500) is None
    image = {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}}
    body = json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}, image]}]}
    ).encode()
    assert model.observe(_estimate(model, body), 5000) is None


def test_framing_is_per_model_and_not_in_the_ratio() -> None:
    model = _model()
    msgs = [{"role": "user", "content": "the cat"}, {"role": "assistant", "content": "the dog"}] * 3
    for name, per_msg, per_req in (
        ("meta-llama/Llama-3.1-8B-Instruct", 5, 5),
        ("Qwen/Qwen3-8B", 5, 3),
        ("gpt-4", 4, 3),
        ("some-unknown-model", 5, 5),
    ):
        body = json.dumps({"model": name, "messages": msgs}).encode()
        f = parse_request_body(body, "chat")
        b = _estimate(model, body)
        assert b.fixed_prompt_tokens == per_msg * 6 + per_req
        assert b.modelled_units == f.text_bytes


def test_digits_are_budgeted_per_tokenizer() -> None:
    model = _model()
    text = "readings " + " ".join(str(1000 + i) for i in range(500))
    digits = count_digits(text.encode())
    assert digits == 2000
    for name, per_digit in (("Qwen/Qwen3-8B", 1.0), ("meta-llama/Llama-3.1-8B-Instruct", 0.6)):
        body = _chat(name, text)
        f = parse_request_body(body, "chat")
        b = _estimate(model, body)
        assert b.modelled_units == f.text_bytes - digits
        assert b.fixed_prompt_tokens == math.ceil(digits * per_digit) + model.router.fixed_tokens(f)


def test_punctuation_and_newlines_are_budgeted_outside_the_ratio() -> None:
    """Markup/number-dense text: punctuation and newlines cost tokens at the family's rate."""
    model = _model()
    row = "| a | b | c |\n"
    text = "table\n" + row * 200
    digits, punct, newlines = count_structure(text.encode())
    assert (digits, punct, newlines) == (0, 800, 201)
    body = _chat("meta-llama/Llama-3.1-8B-Instruct", text)
    f = parse_request_body(body, "chat")
    b = _estimate(model, body)
    assert b.key[1] not in ("code", "tools")
    assert b.modelled_units == f.text_bytes - punct - newlines
    assert b.fixed_prompt_tokens == math.ceil(punct * 0.75 + newlines * 1.0) + model.router.fixed_tokens(f)
    off = _estimate(_model(BytesModelConfig(count_punctuation=False)), body)
    assert off.modelled_units == f.text_bytes and off.fixed_prompt_tokens == model.router.fixed_tokens(f)


def test_tools_are_their_own_category_with_template_boilerplate() -> None:
    model = _model()
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}] * 3
    body = {"model": "Qwen/Qwen3-8B", "messages": [{"role": "user", "content": "call f"}], "tools": tools}
    raw = json.dumps(body).encode()
    f = parse_request_body(raw, "chat")
    b = _estimate(model, raw)
    assert b.key[1] == "tools"
    assert b.modelled_units == f.text_bytes + f.tool_schema_bytes
    assert b.fixed_prompt_tokens == 3 + 5 + 96 + 3


@pytest.mark.parametrize(
    "content",
    ["plain ascii", "привет, мир", "中文和 English", "emoji 😀 and 𝔘", "mixed é ü ß" * 300, "tab\tnew\nline"],
)
def test_classifier_sample_is_the_text_parts_joined_by_spaces(content: str) -> None:
    """Both encodings give the same sample: each part's UTF-8, cut at ``sample_bytes``, space-joined."""
    msgs = [{"role": "user", "content": content}, {"role": "assistant", "content": "ok"}]
    for ensure_ascii in (True, False):
        body = json.dumps({"model": "m", "messages": msgs}, ensure_ascii=ensure_ascii).encode()
        assert classifier_sample(body, 16384) == content.encode()[:16384] + b" ok"
        assert classifier_sample(body, 4) == content.encode()[:4]


def test_classifier_sample_reads_parts_tool_calls_and_prompts() -> None:
    call = {"type": "function", "function": {"name": "get", "arguments": '{"city":"Paris"}'}}
    msgs = [
        {"role": "user", "content": [{"type": "text", "text": "weather?"}, {"type": "image_url"}]},
        {"role": "assistant", "content": None, "tool_calls": [call], "reasoning": "think"},
        {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
    ]
    body = json.dumps({"model": "m", "messages": msgs}).encode()
    assert classifier_sample(body, 1024) == b'weather? get {"city": "Paris"} c1 sunny'
    prompt = json.dumps({"model": "m", "prompt": "one", "suffix": "two"}).encode()
    assert classifier_sample(prompt, 1024) == b"one two"
    assert classifier_sample(b"not json", 1024) == b"" == classifier_sample(b"[1]", 1024)


@pytest.mark.data
def test_compact_and_ascii_escaped_bodies_give_the_same_estimate(requests_all: list[ReplayRequest]) -> None:
    model = _model()
    picked = [r for r in requests_all if r.source in ("alignbench_zh", "wildchat_ru", "mgsm_th", "bfcl")][
        ::40
    ]
    assert len(picked) > 50
    for req in picked:
        for name in ("meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-8B"):
            compact = request_body(req, model=name, max_tokens=256)
            escaped = request_body(req, model=name, max_tokens=256, ascii_escaped=True)
            assert len(escaped) > len(compact) or req.source == "bfcl"
            assert _estimate(model, compact) == _estimate(model, escaped)


@pytest.mark.data
def test_categories_of_real_text(requests_all: list[ReplayRequest]) -> None:
    def cat(source: str) -> str:
        req = next(r for r in requests_all if r.source == source)
        return classify_text(req.messages[-1]["content"].encode())

    assert cat("mgsm_en") == "latin"
    for lang in ("de", "fr", "es", "sw"):
        assert cat(f"mgsm_{lang}") == "latin_other", lang
    assert cat("mgsm_zh") == "cjk_zh"
    assert cat("mgsm_ja") == "cjk_ja"
    assert cat("mgsm_ru") == "cyrillic"
    assert cat("mgsm_th") == "thai"
    assert cat("mgsm_bn") == "indic_bn"
    assert cat("mgsm_te") == "indic_te"
    assert cat("humaneval") in ("code", "latin")
