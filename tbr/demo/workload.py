"""Demo requests: real prompts read in place from ``../shared/data`` (never copied), or the built-in sample.

One :class:`DemoRequest` = one OpenAI chat request replayed through Envoy. Requests follow
docs/data.md §2.2 (one request per user turn with its history; BFCL with ``tools``; LongBench v2 as
``context + question + choices``). The mix covers English prose (ShareGPT, LMSYS, MT-Bench, MGSM-en),
other Latin languages (MGSM de/es/fr/sw), code (HumanEval, fenced chat turns), CJK (AlignBench,
MT-Bench ja/ko, MGSM zh/ja), other scripts (WildChat-ru, MGSM ru/th/bn/te), tool calls (BFCL) and long
documents (LongBench v2). Every request also draws streaming on/off, ``include_usage`` and
``max_tokens`` (absent or a value), all from one seeded RNG: same seed → same requests.
"""

from __future__ import annotations

import csv
import gzip
import json
import random
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tbr.demo.builtin_sample import BUILTIN_PROMPTS, BUILTIN_TOOL_CALL, generated_long_document

__all__ = [
    "DEMO_CATEGORIES",
    "DemoRequest",
    "Workload",
    "build_workload",
    "long_prompt",
    "short_prompt",
]

Message = dict[str, Any]

DEMO_CATEGORIES: dict[str, float] = {
    "prose": 0.30,
    "latin_other": 0.05,
    "code": 0.10,
    "cjk": 0.15,
    "other_scripts": 0.12,
    "tool_call": 0.12,
    "multi_turn": 0.12,
    "long_doc": 0.04,
}
"""Share of the demo's requests per demo category (the router's own categories are finer)."""

_MAX_TOKENS_CHOICES: tuple[tuple[int | None, float], ...] = (
    (None, 0.35),
    (64, 0.15),
    (256, 0.20),
    (1024, 0.15),
    (4096, 0.10),
    (6144, 0.05),
)
"""``max_tokens`` drawn per request (None = absent): large values push mid-size prompts over 8192."""

_LONG_DOC_RESERVE_TOKENS = 2048
"""Head-room kept under the long pool's limit when picking LongBench documents."""


@dataclass(frozen=True)
class DemoRequest:
    """One chat request to replay.

    Attributes:
        request_id: sent as ``x-request-id``; the router's decision log is joined on it.
        category: demo category (a key of :data:`DEMO_CATEGORIES`).
        source: dataset id (docs/data.md §1.1) or ``builtin``.
        messages: OpenAI chat messages.
        tools: OpenAI ``tools`` (tool-call requests) or None.
        stream: send ``stream: true``.
        include_usage: with ``stream``, send ``stream_options.include_usage``.
        max_tokens: the ``max_tokens`` field, or None to leave it out.
    """

    request_id: str
    category: str
    source: str
    messages: list[Message]
    tools: list[dict[str, Any]] | None
    stream: bool
    include_usage: bool
    max_tokens: int | None


@dataclass(frozen=True)
class Workload:
    """The requests plus where they came from (``builtin`` True when the data directory was absent)."""

    requests: list[DemoRequest]
    builtin: bool
    data_dir: Path | None


# ---------------------------------------------------------------- readers (yield message lists)


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _turn_requests(turns: list[Message]) -> Iterator[list[Message]]:
    """One request per user turn: all earlier messages plus that turn (docs/data.md §2.2)."""
    while turns and turns[0]["role"] == "assistant":
        turns = turns[1:]
    for i, m in enumerate(turns):
        if m["role"] == "user" and m["content"]:
            yield turns[: i + 1]


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "bing": "assistant",
    "chatgpt": "assistant",
}


def _sharegpt_multiturn(d: Path) -> Iterator[list[Message]]:
    for conv in _jsonl(d / "text/sharegpt/sharegpt_v3_multiturn_every12th.jsonl"):
        turns = [
            {"role": _SHAREGPT_ROLES.get(m["from"], "system"), "content": m["value"]}
            for m in conv["conversations"]
            if m.get("value")
        ]
        yield from _turn_requests(turns)


def _sharegpt_first(d: Path) -> Iterator[list[Message]]:
    for conv in json.loads((d / "text/sharegpt/ShareGPT_V3_filtered_1000.json").read_text(encoding="utf-8")):
        first = conv["conversations"][0]["value"]
        if first:
            yield [{"role": "user", "content": first}]


def _lmsys(d: Path) -> Iterator[list[Message]]:
    for conv in _jsonl(d / "text/lmsys_chat_1m/lmsys_1000.jsonl"):
        turns = [
            {"role": m["role"], "content": m["content"]} for m in conv["conversation"] if m.get("content")
        ]
        yield from _turn_requests(turns)


def _single(text: str) -> list[Message]:
    return [{"role": "user", "content": text}]


def _mt_bench(lang: str) -> Callable[[Path], Iterator[list[Message]]]:
    def read(d: Path) -> Iterator[list[Message]]:
        for q in _jsonl(d / f"text/mt_bench/question_{lang}.jsonl"):
            yield _single(q["turns"][0])

    return read


def _mgsm(*langs: str) -> Callable[[Path], Iterator[list[Message]]]:
    def read(d: Path) -> Iterator[list[Message]]:
        for lang in langs:
            with (d / f"text/mgsm/mgsm_{lang}.tsv").open(encoding="utf-8", newline="") as f:
                for row in csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE):
                    if row and row[0]:
                        yield _single(row[0])

    return read


def _humaneval(d: Path) -> Iterator[list[Message]]:
    with gzip.open(d / "text/humaneval/HumanEval.jsonl.gz", "rt", encoding="utf-8") as f:
        for line in f:
            yield _single(json.loads(line)["prompt"])


def _fenced_chat(d: Path) -> Iterator[list[Message]]:
    for msgs in _sharegpt_multiturn(d):
        if "```" in msgs[-1]["content"]:
            yield msgs


def _alignbench(d: Path) -> Iterator[list[Message]]:
    for q in _jsonl(d / "text/alignbench/data_v1.1_release.jsonl"):
        yield _single(q["question"])


def _wildchat_ru(d: Path) -> Iterator[list[Message]]:
    for q in json.loads((d / "text/wildchat_hard_ru/wildchat_hard_ru.json").read_text(encoding="utf-8")):
        yield _single(q["instruction"])


def _bfcl_items(d: Path) -> Iterator[tuple[list[Message], list[dict[str, Any]]]]:
    for name in ("live_simple", "live_multiple", "simple_python"):
        for item in _jsonl(d / f"text/bfcl/BFCL_v4_{name}.json"):
            tools = [{"type": "function", "function": f} for f in item["function"]]
            yield [{"role": m["role"], "content": m["content"]} for m in item["question"][0]], tools


def _longbench_fitting_tokens(d: Path) -> dict[str, int]:
    """LongBench req_id → Qwen3 prompt tokens from ``derived/request_token_counts.csv`` ({} if absent)."""
    path = d / "derived/request_token_counts.csv"
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8", newline="") as f:
        return {
            r["req_id"]: int(r["qwen3_prompt_tokens"])
            for r in csv.DictReader(f)
            if r["source"] == "longbench_v2"
        }


def _longbench(d: Path, long_limit_tokens: int) -> list[list[Message]]:
    """LongBench v2 requests that fit the long pool (by the derived Qwen3 counts, else ≤ 2.5 B/token)."""
    tokens = _longbench_fitting_tokens(d)
    budget = long_limit_tokens - _LONG_DOC_RESERVE_TOKENS
    out = []
    for ctx in sorted((d / "text/longbench_v2").glob("*/*_context.txt")):
        md_path = ctx.with_name(ctx.name.replace("_context.txt", ".md"))
        req_id = f"{ctx.parent.name}/{md_path.stem}"
        fits = tokens[req_id] <= budget if req_id in tokens else ctx.stat().st_size <= 2.5 * budget
        if not fits or not md_path.is_file():
            continue
        md = md_path.read_text(encoding="utf-8")
        question = md.split("# Question", 1)[1].split("# Choices", 1)[0].strip()
        choices = md.split("# Choices", 1)[1].split("# Answer", 1)[0].strip()
        text = (
            f"{ctx.read_text(encoding='utf-8')}\n\nQuestion: {question}\n\nChoices:\n{choices}\n\n"
            "Answer with the letter of the correct choice."
        )
        out.append(_single(text))
    return out


# ---------------------------------------------------------------- assembly


def _pick_max_tokens(rng: random.Random) -> int | None:
    values = [v for v, _ in _MAX_TOKENS_CHOICES]
    weights = [w for _, w in _MAX_TOKENS_CHOICES]
    return rng.choices(values, weights)[0]


def _sample(rng: random.Random, items: list[Any], k: int) -> list[Any]:
    if not items or k <= 0:
        return []
    if k <= len(items):
        return rng.sample(items, k)
    return [rng.choice(items) for _ in range(k)]


Candidate = tuple[str, list[Message], Any]
"""(source id, messages, tools or None)."""


def tagged(source: str, items: Iterable[list[Message]]) -> list[Candidate]:
    """Candidates without tools from one source."""
    return [(source, m, None) for m in items]


def _real_pools(d: Path, long_limit_tokens: int) -> dict[str, list[Candidate]]:
    """Candidate (source, messages, tools) per demo category, read from the data directory."""
    multi = list(_sharegpt_multiturn(d)) + list(_lmsys(d))
    multi.sort(key=lambda m: sum(len(x["content"]) for x in m))
    return {
        "prose": tagged("sharegpt_first_turn", _sharegpt_first(d))
        + tagged("lmsys", (m for m in _lmsys(d) if len(m) == 1))
        + tagged("mt_bench_en", _mt_bench("en")(d))
        + tagged("mgsm_en", _mgsm("en")(d)),
        "latin_other": tagged("mgsm_de_es_fr_sw", _mgsm("de", "es", "fr", "sw")(d)),
        "code": tagged("humaneval", _humaneval(d)) + tagged("sharegpt_code_fence", _fenced_chat(d)),
        "cjk": tagged("alignbench_zh", _alignbench(d))
        + tagged("mt_bench_ja", _mt_bench("ja")(d))
        + tagged("mt_bench_ko", _mt_bench("ko")(d))
        + tagged("mgsm_zh_ja", _mgsm("zh", "ja")(d)),
        "other_scripts": tagged("wildchat_ru", _wildchat_ru(d))
        + tagged("mgsm_ru_th_bn_te", _mgsm("ru", "th", "bn", "te")(d)),
        "tool_call": [("bfcl", m, t) for m, t in _bfcl_items(d)],
        # The longest tenth of multi-turn requests (ShareGPT, LMSYS): the 1k-8k-token middle ground.
        "multi_turn": tagged("sharegpt_lmsys_multiturn", multi[-max(1, len(multi) // 10) :]),
        "long_doc": tagged("longbench_v2", _longbench(d, long_limit_tokens)),
    }


def _builtin_pools() -> dict[str, list[Candidate]]:
    pools: dict[str, list[Candidate]] = {
        cat: [("builtin", _single(t), None) for t in texts] for cat, texts in BUILTIN_PROMPTS.items()
    }
    prose = BUILTIN_PROMPTS["prose"]
    pools["multi_turn"] = [
        (
            "builtin",
            [
                {"role": "user", "content": prose[0]},
                {"role": "assistant", "content": generated_long_document(6_000, seed=1)},
                {"role": "user", "content": prose[2]},
            ],
            None,
        )
    ]
    pools["tool_call"] = [("builtin", BUILTIN_TOOL_CALL["messages"], BUILTIN_TOOL_CALL["tools"])]
    pools["long_doc"] = [
        ("builtin_generated", _single(generated_long_document(120_000, seed=s)), None) for s in (2, 3)
    ]
    return pools


def build_workload(
    data_dir: Path | None, *, n_requests: int, seed: int = 0, long_max_model_len: int = 65536
) -> Workload:
    """Draw ``n_requests`` requests following :data:`DEMO_CATEGORIES`, shuffled, from ``data_dir``.

    Falls back to the built-in sample (:mod:`tbr.demo.builtin_sample`) when ``data_dir`` is None
    or has no ``text/`` directory. LongBench documents are kept only if they fit ``long_max_model_len``.
    """
    rng = random.Random(seed)
    builtin = data_dir is None or not (data_dir / "text").is_dir()
    pools = _builtin_pools() if builtin else _real_pools(data_dir, long_max_model_len)  # type: ignore[arg-type]
    picked: list[tuple[str, Candidate]] = []
    for cat, share in DEMO_CATEGORIES.items():
        k = max(1, round(n_requests * share)) if n_requests >= len(DEMO_CATEGORIES) else 0
        picked.extend((cat, item) for item in _sample(rng, pools.get(cat, []), k))
    while len(picked) < n_requests:  # tiny n: fill with prose
        picked.append(("prose", rng.choice(pools["prose"])))
    picked = picked[:n_requests]
    rng.shuffle(picked)
    requests = []
    for i, (cat, (source, messages, tools)) in enumerate(picked):
        stream = rng.random() < 0.5
        requests.append(
            DemoRequest(
                request_id=f"tbr-demo-{seed}-{i:05d}",
                category=cat,
                source=source,
                messages=messages,
                tools=tools,
                stream=stream,
                include_usage=stream and rng.random() < 0.8,
                max_tokens=None if cat == "long_doc" and rng.random() < 0.5 else _pick_max_tokens(rng),
            )
        )
    return Workload(requests=requests, builtin=builtin, data_dir=None if builtin else data_dir)


def short_prompt(data_dir: Path | None) -> tuple[str, str]:
    """A short real English prompt ``(source, text)``: the first ShareGPT first-turn prompt, else built-in."""
    if data_dir is not None and (data_dir / "text").is_dir():
        for msgs in _sharegpt_first(data_dir):
            text: str = msgs[0]["content"]
            if 200 <= len(text.encode("utf-8")) <= 4000:
                return "sharegpt_first_turn", text
    return "builtin", BUILTIN_PROMPTS["prose"][0]


def long_prompt(data_dir: Path | None, *, max_tokens_hint: int = 40000) -> tuple[str, str]:
    """A long prompt ``(source, text)`` far over 8192 tokens but under ``max_tokens_hint``.

    The smallest LongBench v2 request over 60 KB that fits, else ~120 KB of generated text.
    """
    if data_dir is not None and (data_dir / "text").is_dir():
        docs = [m[0]["content"] for m in _longbench(data_dir, max_tokens_hint + _LONG_DOC_RESERVE_TOKENS)]
        docs = sorted((t for t in docs if len(t.encode("utf-8")) >= 60_000), key=len)
        if docs:
            return "longbench_v2", docs[0]
    return "builtin_generated", generated_long_document(120_000, seed=7)
