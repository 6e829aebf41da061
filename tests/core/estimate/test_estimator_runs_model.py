"""The run cost model routes hard inputs correctly: unspaced runs, CSV and SQL, learning from odd
observations, images, misroute recovery, agent turns with reasoning and tools, other scripts, mixed
languages (the inputs issue 14 listed as failing, each rebuilt from scratch).

Truth is the stand-in pool's count (real Llama-3 / Qwen3 tokenizers from the installed wheels and the
chat template as vLLM hands it the messages, :mod:`mockpool.tokencount`). English prose comes from this
repository's own documentation; texts in other scripts from the broad corpus
(``evaluation/broad_corpus.py``, read from ``$TBR_BROAD_CORPUS`` or ``../shared/data/broad/broad.jsonl``) and the
shared data, and those tests skip with the reason when the files are absent.

"Routes correctly" = never under the true prompt (no harmful misroute at any threshold) and at most
35 % over it (a wasteful misroute needs the true total within 35 % of a threshold).
"""

from __future__ import annotations

import base64
import json
import random
import uuid
from pathlib import Path
from typing import Any

import pytest

from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.estimate.calibration import InMemoryRatioStore, LearnerParams, RatioStore
from extproc.core.estimate.estimator import Estimator, TokenBudget
from extproc.core.request.request_body import parse_request_body
from mockpool.tokencount import TokenCounter, load_counter
from tests.shared_data import BROAD_CORPUS

ROOT = Path(__file__).resolve().parents[3]
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
QWEN = "Qwen/Qwen3-8B"
MAX_OVER = 1.35
BROAD = BROAD_CORPUS
SHARED = ROOT.parent / "shared" / "data"


def _estimator(store: RatioStore | None = None) -> Estimator:
    cal = CalibrationConfig()
    return Estimator(
        estimator=EstimatorConfig(), calibration=cal, store=store or InMemoryRatioStore.from_config(cal)
    )


def _body(content: str | list[dict[str, Any]], model: str = LLAMA, **extra: Any) -> dict[str, Any]:
    messages = content if isinstance(content, list) else [{"role": "user", "content": content}]
    return {"model": model, "messages": messages, **extra}


def _truth(body: dict[str, Any], counter: TokenCounter, image_tokens: int = 0) -> int:
    kwargs = dict(body.get("chat_template_kwargs") or {})
    if body.get("documents") is not None:
        kwargs["documents"] = body["documents"]
    return counter.count_chat(body["messages"], body.get("tools"), True, kwargs, image_tokens).prompt_tokens


def _estimate(est: Estimator, body: dict[str, Any]) -> TokenBudget:
    return est.estimate(parse_request_body(json.dumps(body).encode(), "chat"))


def _assert_routes(budget: TokenBudget, true_prompt: int) -> None:
    assert budget.prompt_tokens >= true_prompt, (budget.prompt_tokens, true_prompt)
    assert budget.prompt_tokens <= MAX_OVER * true_prompt + 16, (budget.prompt_tokens, true_prompt)


def _english(n_bytes: int, seed: int = 0) -> str:
    """Real English prose of about ``n_bytes``: paragraphs of this repository's docs (seeded pick)."""
    paras = [
        p
        for f in sorted((ROOT / "docs").glob("*.md"))
        for p in f.read_text(encoding="utf-8").split("\n\n")
        if len(p) > 200 and p[0].isalpha() and "|" not in p
    ]
    rng = random.Random(seed)
    out: list[str] = []
    while sum(len(x) for x in out) < n_bytes:
        out.append(rng.choice(paras))
    return "\n\n".join(out)[:n_bytes]


@pytest.fixture(scope="module")
def llama() -> TokenCounter:
    return load_counter("llama3")


@pytest.fixture(scope="module")
def qwen() -> TokenCounter:
    return load_counter("qwen3")


def _broad(kind: str, source_prefix: str = "") -> list[dict[str, Any]]:
    if not BROAD.exists():
        pytest.skip(f"broad corpus not found at {BROAD} (python -m evaluation.broad_corpus --out {BROAD})")
    rows = [json.loads(x) for x in BROAD.read_text(encoding="utf-8").splitlines() if x.strip()]
    return [
        r for r in rows if r["metadata"]["kind"] == kind and r["metadata"]["source"].startswith(source_prefix)
    ]


# 1. Unspaced runs --------------------------------------------------------------------------------


def _random_bytes(n: int) -> bytes:
    return random.Random(14).randbytes(n)


@pytest.mark.parametrize(
    "content",
    [
        "Decode this base64:\n\n"
        + "\n".join(base64.b64encode(_random_bytes(2600)).decode()[i : i + 76] for i in range(0, 3468, 76)),
        "Here is a screenshot data:image/png;base64,"
        + base64.b64encode(_random_bytes(2600)).decode()
        + " what does it show?",
        "\n".join(" ".join(f"{b:02x}" for b in _random_bytes(1920)[i : i + 16]) for i in range(0, 1920, 16)),
        json.dumps([str(uuid.UUID(int=random.Random(i).getrandbits(128), version=4)) for i in range(150)]),
    ],
    ids=["base64_lines", "data_url", "hex_dump", "uuid_array"],
)
def test_unspaced_runs_are_not_prose(content: str, llama: TokenCounter) -> None:
    body = _body(content)
    _assert_routes(_estimate(_estimator(), body), _truth(body, llama))


# 2. Digit- and punctuation-dense text ------------------------------------------------------------


def _iris(n: int) -> str:
    rng = random.Random(2)
    rows = [
        ",".join([*(f"{rng.uniform(0.1, 8):.1f}" for _ in range(4)), rng.choice(["setosa", "virginica"])])
        for _ in range(n)
    ]
    return "\n".join(rows)


@pytest.mark.parametrize("fenced", [True, False])
def test_csv_rows_fenced_or_not(fenced: bool, llama: TokenCounter) -> None:
    csv = _iris(150)
    body = _body(f"```csv\n{csv}\n```" if fenced else csv)
    _assert_routes(_estimate(_estimator(), body), _truth(body, llama))


def test_sql_inserts_after_learning(llama: TokenCounter) -> None:
    est = _estimator()
    for i in range(30):
        b = _body(_english(3000, i))
        est.observe(_estimate(est, b), _truth(b, llama))
    sql = "\n".join(
        f'INSERT INTO "InvoiceLine" ("InvoiceLineId", "InvoiceId", "TrackId", "UnitPrice", "Quantity") '
        f"VALUES ({i}, {i // 3 + 1}, {i * 7 % 3500}, 0.99, 1);"
        for i in range(1, 60)
    )
    body = _body(f"```sql\n{sql}\n```")
    _assert_routes(_estimate(est, body), _truth(body, llama))


# 3. The first observation of a key does not set its ratio ----------------------------------------


def test_first_observation_does_not_replace_the_prior(llama: TokenCounter) -> None:
    est = _estimator()
    blob = _body("Decode this base64:\n\n" + base64.b64encode(_random_bytes(2600)).decode())
    budget = _estimate(est, blob)
    est.observe(budget, _truth(blob, llama))
    for i in range(60):
        b = _body(_english(2000, 100 + i))
        est.observe(_estimate(est, b), _truth(b, llama))
    short = _body(_english(700, 999))
    true = _truth(short, llama)
    assert 100 <= true <= 320  # a short prompt (the issue's: 167 tokens); docs prose moves it as docs change
    _assert_routes(_estimate(est, short), true)


def test_one_odd_observation_moves_a_key_by_a_bounded_step(llama: TokenCounter) -> None:
    est = _estimator()
    b = _body(_english(8000, 5))
    budget = _estimate(est, b)
    before = est.store.get(budget.key)
    est.observe(budget, 40 * _truth(b, llama))  # absurd usage: rejected
    assert est.store.get(budget.key) == before
    est.observe(budget, 2 * _truth(b, llama))  # odd but plausible: clipped, blended with the prior
    state = est.store.get(budget.key)
    assert state is not None
    assert state.mean_ratio >= 1.0 / (1.0 + est.cfg.max_step) ** est.cfg.first_observation_weight - 1e-9


# 4. Misroute recovery cannot poison ratios -------------------------------------------------------


def test_image_tokens_are_attributed_to_the_image(llama: TokenCounter) -> None:
    est = _estimator()
    for i in range(12):
        b = _body(_english(16000, 200 + i))
        est.observe(_estimate(est, b), _truth(b, llama))
    image = _body(
        [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is on this screenshot?"},
                    {"type": "image_url", "image_url": {"url": "https://example.com/s.png"}},
                ],
            }
        ]
    )
    budget = _estimate(est, image)
    served = _truth(image, llama, image_tokens=10_500)
    assert budget.prompt_tokens < served  # the misroute of the issue
    est.observe(budget, served)
    # raises the (llama, image, l) factor from the state before, by at most x2 per misroute (issue 34)
    assert est.recover(budget, served) == 2.0
    again = _estimate(est, image)
    assert budget.prompt_tokens < again.prompt_tokens < served  # 10,500 is 2.56 x the rule's 4,096
    est.observe(again, served)
    est.recover(again, served)  # the second misroute covers it
    assert _estimate(est, image).prompt_tokens >= served - 64
    nxt = _body(_english(16000, 300))
    _assert_routes(_estimate(est, nxt), _truth(nxt, llama))


def _agent(reasoning_field: str | None, reasoning: str) -> dict[str, Any]:
    assistant: dict[str, Any] = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "read_file", "arguments": json.dumps({"path": "src/sort.go"})},
            }
        ],
    }
    if reasoning_field is not None:
        assistant[reasoning_field] = reasoning
    tools = [
        {
            "type": "function",
            "function": {
                "name": "read_file",
                "description": "Read a file of the repository.",
                "parameters": {
                    "type": "object",
                    "properties": {"path": {"type": "string"}},
                    "required": ["path"],
                },
            },
        }
    ]
    return _body(
        [
            {"role": "user", "content": "Find the bug in the sorting package."},
            assistant,
            {"role": "tool", "tool_call_id": "call_1", "content": _english(600, 7)},
        ],
        model=QWEN,
        tools=tools,
        max_tokens=256,
    )


def test_recovery_never_goes_below_the_floor_nor_forces_warm(qwen: TokenCounter) -> None:
    est = _estimator()
    body = _agent(None, "")
    budget = _estimate(est, body)
    fake_served = 30 * budget.prompt_tokens  # a prompt the parser could not have seen
    est.observe(budget, fake_served)
    assert est.recover(budget, fake_served) is None  # not like its key: moves nothing (issue 34)
    assert est.routing_ratio(budget.key) == (budget.routing_ratio, False)
    for _ in range(20):  # a served count 1.6x the estimate, again and again: one bounded step each
        before = est.routing_ratio(budget.key)[0]
        b = _estimate(est, body)
        value = est.recover(b, round(1.6 * b.prompt_tokens))
        assert value is None or value >= before / (1.0 + 0.1) - 1e-9
    ratio, warm = est.routing_ratio(budget.key)
    assert ratio == est.cfg.min_model_ratio and not warm
    nxt = _agent(None, "")
    nxt["messages"][2]["content"] = _english(8000, 8)
    true = _truth(nxt, qwen)
    b = _estimate(est, nxt)
    # at worst the floor: modelled text tokens / min_model_ratio, plus the template framing
    assert true <= b.prompt_tokens <= 1.1 * true / est.cfg.min_model_ratio + b.fixed_prompt_tokens


def test_a_recovered_blob_leaves_english_alone(llama: TokenCounter) -> None:
    est = _estimator()
    blob = _body("Decode this base64:\n\n" + base64.b64encode(_random_bytes(4000)).decode())
    budget = _estimate(est, blob)
    est.recover(budget, 3 * budget.prompt_tokens)
    english = _body(_english(12000, 11))
    assert _estimate(est, english).key != budget.key
    _assert_routes(_estimate(est, english), _truth(english, llama))


def test_recovery_behaves_the_same_with_the_redis_store() -> None:
    from extproc.service.metrics import RouterMetrics
    from extproc.service.redis_store import RedisRatioStore

    redis = RedisRatioStore(url="redis://127.0.0.1:1/0", params=LearnerParams(), metrics=RouterMetrics())
    stores: list[RatioStore] = [InMemoryRatioStore.from_config(CalibrationConfig()), redis]
    after = []
    for store in stores:
        est = _estimator(store)
        body = _body(_english(9000, 12))
        budget = _estimate(est, body)
        assert est.recover(budget, int(budget.prompt_tokens * 1.3)) is not None
        after.append(_estimate(est, body).prompt_tokens)
    assert after[0] == after[1] > 0


# 5. Every field the template renders is budgeted -------------------------------------------------


@pytest.mark.parametrize("field", ["reasoning_content", "reasoning"])
def test_agent_turn_with_reasoning(field: str, qwen: TokenCounter) -> None:
    reasoning = _english(40_000, 21)
    body = _agent(field, reasoning)
    true = _truth(body, qwen)
    assert true > 7000
    budget = _estimate(_estimator(), body)
    _assert_routes(budget, true)
    assert budget.total_tokens <= 1.35 * (true + 256) + 16


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ({"name": "alice-the-analyst"}, "message"),
        ({"tool_call_id": "call_0123456789abcdef"}, "message"),
        ({"documents": [{"title": "Spec", "text": "the router budgets every request"}]}, "request"),
        ({"chat_template_kwargs": {"enable_thinking": False}}, "request"),
        ({"unknown_field_x": "some text the template might print"}, "message"),
    ],
)
def test_fields_are_never_budgeted_at_zero(extra: dict[str, Any], where: str) -> None:
    base = _body(_english(2000, 3))
    with_field = json.loads(json.dumps(base))
    if where == "message":
        with_field["messages"][0].update(extra)
    else:
        with_field.update(extra)
    est = _estimator()
    assert _estimate(est, with_field).prompt_tokens > _estimate(est, base).prompt_tokens


def test_developer_role_and_its_tools_are_budgeted(qwen: TokenCounter) -> None:
    body = _body(
        [
            {
                "role": "developer",
                "content": "Answer tersely.",
                "tools": [{"type": "function", "function": {"name": "f"}}],
            },
            {"role": "user", "content": _english(3000, 4)},
        ],
        model=QWEN,
    )
    plain = _body([{"role": "user", "content": _english(3000, 4)}], model=QWEN)
    est = _estimator()
    assert _estimate(est, body).prompt_tokens > _estimate(est, plain).prompt_tokens


# 6. Cold priors of scripts missing from the shared data -------------------------------------------


@pytest.mark.parametrize(
    ("kind", "source"),
    [
        ("devanagari", "tldr_hi"),
        ("greek", "tldr_el"),
        ("arabic", "tldr_fa"),
        ("arabic", "tldr_ar"),
        ("hebrew", ""),
    ],
)
@pytest.mark.parametrize("model", [LLAMA, QWEN])
def test_cold_priors_hold_for_other_scripts(kind: str, source: str, model: str) -> None:
    counter = load_counter("llama3" if model == LLAMA else "qwen3")
    rows = [r for r in _broad(kind, source) if len(json.dumps(r)) > 1500][:3]
    assert rows, f"no {kind} rows in the broad corpus"
    for r in rows:
        body = _body(r["messages"], model=model)
        true = _truth(body, counter)
        budget = _estimate(_estimator(), body)
        assert budget.prompt_tokens >= true
        assert budget.prompt_tokens <= 1.6 * true + 16


def test_chinese_on_qwen3_fits_8192_cold(qwen: TokenCounter) -> None:
    path = SHARED / "text" / "alignbench" / "data_v1.1_release.jsonl"
    if not path.exists():
        pytest.skip(f"shared data not found at {path}")
    questions = [
        json.loads(x)["question"] for x in path.read_text(encoding="utf-8").splitlines() if x.strip()
    ]
    text = ""
    body = _body(text, model=QWEN, max_tokens=256)
    for q in questions:
        body = _body(text + q, model=QWEN, max_tokens=256)
        if _truth(body, qwen) > 4931:
            break
        text += q + "\n"
    body = _body(text, model=QWEN, max_tokens=256)
    true = _truth(body, qwen)
    assert 4500 < true + 256 <= 8192
    budget = _estimate(_estimator(), body)
    assert true <= budget.prompt_tokens and budget.total_tokens <= 8192


# 7. One key per request no longer decides the text's cost -----------------------------------------


def test_hebrew_chat_with_english_system_prompt_is_hebrew() -> None:
    rows = _broad("hebrew")
    assert rows
    msgs = [{"role": "system", "content": "You are a helpful assistant. Answer in the user's language."}]
    msgs += [m for m in rows[0]["messages"] if m["role"] == "user"]
    assert _estimate(_estimator(), _body(msgs)).key[1] == "hebrew"


def test_turkish_with_code_sample_is_not_code_and_is_not_under_budgeted(llama: TokenCounter) -> None:
    """Mixed traffic (other languages' pages, code) teaches the keys; a Turkish document with a Python
    sample then keeps a Latin-script key (not ``code_data``, whose learned correction once under-budgeted
    Turkish) and is never budgeted short. Upper bound: 1.6× like the cold priors of other scripts (test 6),
    not 1.35×: the ``latin_other`` correction is set by Swahili, which costs 1.3× more tokens per word than
    Turkish, and the key learns Turkish only from Turkish traffic (docs/estimator.md §Failure modes)."""
    rows = _broad("latin_other", "tldr_tr")
    assert rows
    est = _estimator()
    for r in _broad("latin_other", "taocl_")[:40] + _broad("code")[:20]:
        b = _body(r["messages"])
        est.observe(_estimate(est, b), _truth(b, llama))
    for r in rows[:5]:
        text = r["messages"][-1]["content"] + "\n```python\nfor i in range(10):\n    print(i)\n```\n"
        body = _body(text)
        budget = _estimate(est, body)
        true = _truth(body, llama)
        assert budget.key[1] in ("latin_other", "latin_euro")
        assert true <= budget.prompt_tokens <= 1.6 * true + 16


def _cldr_names(locale: str) -> str:
    """Names of languages, territories and scripts in ``locale`` (Unicode CLDR via the babel wheel)."""
    babel = pytest.importorskip("babel", reason="babel (the eval extra) ships the CLDR names")
    loc = babel.Locale.parse(locale)
    names = [v for a in ("languages", "territories", "scripts") for v in dict(getattr(loc, a)).values()]
    return "\n".join(v for v in names if isinstance(v, str))


@pytest.mark.parametrize("locale", ["pa", "or", "my"])  # Gurmukhi, Odia, Myanmar
@pytest.mark.parametrize("model", [LLAMA, QWEN])
def test_scripts_without_corpus_text_are_never_free(locale: str, model: str) -> None:
    """The run kinds of scripts the corpora lack are measured on CLDR names (or cost the byte-level
    ceiling): a Punjabi, Odia or Burmese prompt is budgeted at least its true tokens, cold."""
    counter = load_counter("llama3" if model == LLAMA else "qwen3")
    names = _cldr_names(locale).split("\n")
    for start in range(0, 400, 100):
        body = _body("Translate these names into English:\n" + "\n".join(names[start : start + 100]), model)
        true = _truth(body, counter)
        budget = _estimate(_estimator(), body)
        assert true <= budget.prompt_tokens <= 1.6 * true + 16


@pytest.mark.parametrize("kind", ["latin_other", "han", "cyrillic", "code", "config"])
def test_gpt_4o_is_budgeted_with_o200k_costs(kind: str) -> None:
    """gpt-4o bodies are estimated with the measured o200k family (not the conservative unknown
    costs) and never under the OpenAI cookbook count with the real o200k_base ranks."""
    from evaluation.groundtruth import load_counter as load_openai_counter

    pytest.importorskip("quicktok", reason="quicktok-v1 (the eval extra) ships the o200k_base ranks")
    count = load_openai_counter("o200k", SHARED).count_text
    est = _estimator()
    assert est.framing("gpt-4o-2024-08-06").family == "o200k"
    for row in [r for r in _broad(kind) if len(json.dumps(r)) > 1500][:3]:
        body = _body(row["messages"], model="gpt-4o")
        true = 3 + sum(3 + count(m["role"]) + count(m["content"]) for m in body["messages"])
        budget = _estimate(est, body)
        assert true <= budget.prompt_tokens <= 1.6 * true + 16


@pytest.mark.parametrize("model", [LLAMA, QWEN])
def test_emoji_only_prompt_is_never_free(model: str) -> None:
    """No run kind costs zero: a prompt of emoji alone (Qwen's fit once absorbed emoji into spaces)."""
    counter = load_counter("llama3" if model == LLAMA else "qwen3")
    rng = random.Random(6)
    emoji = [chr(c) for c in range(0x1F600, 0x1F650)]
    body = _body(
        " ".join("".join(rng.choice(emoji) for _ in range(rng.randint(1, 4))) for _ in range(300)), model
    )
    assert _estimate(_estimator(), body).prompt_tokens >= _truth(body, counter)
