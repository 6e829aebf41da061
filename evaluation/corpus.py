"""Rebuild the real chat requests of ``../shared/data/text`` exactly as docs/data.md §2.2 defines.

One request per user turn of a multi-turn conversation (holding every earlier message plus that
turn; leading assistant messages before the first user/system message are dropped), one per prompt
for single-prompt sources. ``req_id`` values equal those of ``derived/request_token_counts.csv``
so the replay can be cross-checked item by item.

The files are read in place (their licences forbid copying them into the repository).
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "DEFAULT_BODY_MODEL",
    "SOURCES",
    "ReplayRequest",
    "load_derived_counts",
    "load_requests",
    "request_body",
]

DEFAULT_BODY_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
"""The ``model`` of the bodies whose byte counts are in ``request_token_counts.csv``."""

Message = dict[str, str]

SOURCES: tuple[str, ...] = (
    "sharegpt_multiturn",
    "sharegpt_first_turn",
    "lmsys",
    "wildchat_ru",
    "alignbench_zh",
    "mt_bench_en",
    "mt_bench_ja",
    "mt_bench_ko",
    *(f"mgsm_{lang}" for lang in ("bn", "de", "en", "es", "fr", "ja", "ru", "sw", "te", "th", "zh")),
    "humaneval",
    "bfcl",
    "longbench_v2",
)

_SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "bing": "assistant"}
_SHAREGPT_ROLES.update({"assistant": "assistant", "chatgpt": "assistant", "system": "system"})


@dataclass(frozen=True, slots=True)
class ReplayRequest:
    """One real chat request.

    Attributes:
        source: source id (docs/data.md §1.1), e.g. ``"wildchat_ru"``.
        req_id: id unique within the source, as in ``request_token_counts.csv``.
        messages: OpenAI chat messages (``role``, ``content``), content verbatim.
        tools: OpenAI ``tools`` (``[{"type": "function", "function": ...}]``) or None.
    """

    source: str
    req_id: str
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...] | None = field(default=None)


def request_body(
    req: ReplayRequest,
    *,
    model: str = DEFAULT_BODY_MODEL,
    max_tokens: int | None = None,
    ascii_escaped: bool = False,
) -> bytes:
    """Serialise ``req`` as an OpenAI ``/v1/chat/completions`` body.

    Args:
        model: the ``model`` field.
        max_tokens: written as ``max_tokens`` when not None (after ``messages``/``tools``).
        ascii_escaped: False = compact UTF-8 (JS/Go/Rust/httpx ≥ 0.28); True = Python's default
            ``json.dumps`` (``\\uXXXX`` escapes, ``", "`` separators; ``requests``, old httpx).
    """
    body: dict[str, Any] = {"model": model, "messages": list(req.messages)}
    if req.tools is not None:
        body["tools"] = list(req.tools)
    if max_tokens is not None:
        body["max_tokens"] = max_tokens
    if ascii_escaped:
        return json.dumps(body).encode()
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _conversation_requests(source: str, conv_id: str, messages: list[Message]) -> Iterator[ReplayRequest]:
    """One request per user turn; ids use the turn's index in the original conversation."""
    start = 0
    while start < len(messages) and messages[start]["role"] == "assistant":
        start += 1
    for i in range(start, len(messages)):
        if messages[i]["role"] == "user":
            yield ReplayRequest(source, f"{conv_id}@{i}", tuple(messages[start : i + 1]))


def _sharegpt(path: Path, source: str, first_turn_only: bool) -> Iterator[ReplayRequest]:
    if first_turn_only:
        convs = json.loads(path.read_text(encoding="utf-8"))
    else:
        with path.open(encoding="utf-8") as fh:
            convs = [json.loads(line) for line in fh if line.strip()]
    for conv in convs:
        msgs = [
            {"role": _SHAREGPT_ROLES.get(t["from"], "user"), "content": t["value"]}
            for t in conv["conversations"]
        ]
        if first_turn_only:
            first = next((m for m in msgs if m["role"] == "user"), None)
            if first is not None:
                yield ReplayRequest(source, f"{conv['id']}@0", (first,))
        else:
            yield from _conversation_requests(source, conv["id"], msgs)


def _lmsys(path: Path) -> Iterator[ReplayRequest]:
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            d = json.loads(line)
            msgs = [{"role": m["role"], "content": m["content"]} for m in d["conversation"]]
            yield from _conversation_requests("lmsys", d["conversation_id"], msgs)


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _mt_bench(text: Path, lang: str) -> Iterator[ReplayRequest]:
    questions = _jsonl(text / "mt_bench" / f"question_{lang}.jsonl")
    refs = {
        r["question_id"]: r["choices"][0]["turns"]
        for r in _jsonl(text / "mt_bench" / f"reference_answer_gpt-4_{lang}.jsonl")
    }
    for q in questions:
        qid = q["question_id"]
        t = q["turns"]
        user1 = {"role": "user", "content": t[0]}
        yield ReplayRequest(f"mt_bench_{lang}", f"q{qid}@0", (user1,))
        ref = refs.get(qid)
        if ref and len(t) > 1:
            msgs = (user1, {"role": "assistant", "content": ref[0]}, {"role": "user", "content": t[1]})
            yield ReplayRequest(f"mt_bench_{lang}", f"q{qid}@2", msgs)


def _longbench(root: Path) -> Iterator[ReplayRequest]:
    for ctx_path in sorted(root.glob("*/*_context.txt")):
        md_path = ctx_path.with_name(ctx_path.name.removesuffix("_context.txt") + ".md")
        md = md_path.read_text(encoding="utf-8")
        question = md.split("# Question", 1)[1].split("# Choices", 1)[0].strip()
        choices_block = md.split("# Choices", 1)[1].split("# Answer", 1)[0]
        choices = choices_block.strip()
        context = ctx_path.read_text(encoding="utf-8")
        content = (
            f"{context}\n\nQuestion: {question}\n\nChoices:\n{choices}\n\n"
            "Answer with the letter of the correct choice."
        )
        rid = f"{ctx_path.parent.name}/{md_path.stem}"
        yield ReplayRequest("longbench_v2", rid, ({"role": "user", "content": content},))


def _wildchat_ru(text: Path) -> Iterator[ReplayRequest]:
    rows = json.loads((text / "wildchat_hard_ru" / "wildchat_hard_ru.json").read_text(encoding="utf-8"))
    for r in rows:
        yield ReplayRequest("wildchat_ru", f"{r['id']}@0", ({"role": "user", "content": r["instruction"]},))


def _alignbench_zh(text: Path) -> Iterator[ReplayRequest]:
    for r in _jsonl(text / "alignbench" / "data_v1.1_release.jsonl"):
        msg = {"role": "user", "content": r["question"]}
        yield ReplayRequest("alignbench_zh", f"{r['question_id']}@0", (msg,))


def _mgsm(text: Path, src: str) -> Iterator[ReplayRequest]:
    with (text / "mgsm" / f"{src}.tsv").open(encoding="utf-8", newline="") as fh:
        reader = csv.reader(fh, delimiter="\t", quoting=csv.QUOTE_NONE)
        for i, row in enumerate(reader):
            yield ReplayRequest(src, f"{i}@0", ({"role": "user", "content": row[0]},))


def _humaneval(text: Path) -> Iterator[ReplayRequest]:
    with gzip.open(text / "humaneval" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            yield ReplayRequest("humaneval", d["task_id"], ({"role": "user", "content": d["prompt"]},))


def _bfcl(text: Path) -> Iterator[ReplayRequest]:
    for name in ("live_simple", "live_multiple", "simple_python"):
        for d in _jsonl(text / "bfcl" / f"BFCL_v4_{name}.json"):
            msgs = tuple({"role": m["role"], "content": m["content"]} for m in d["question"][0])
            tools = tuple({"type": "function", "function": f} for f in d["function"])
            yield ReplayRequest("bfcl", d["id"], msgs, tools)


# Source id → loader (text dir → requests), in the fixed order of load_requests; the MGSM
# languages come between mt_bench and humaneval, in the caller's order.
_BEFORE_MGSM: dict[str, Callable[[Path], Iterable[ReplayRequest]]] = {
    "sharegpt_multiturn": lambda t: _sharegpt(
        t / "sharegpt" / "sharegpt_v3_multiturn_every12th.jsonl", "sharegpt_multiturn", False
    ),
    "sharegpt_first_turn": lambda t: _sharegpt(
        t / "sharegpt" / "ShareGPT_V3_filtered_1000.json", "sharegpt_first_turn", True
    ),
    "lmsys": lambda t: _lmsys(t / "lmsys_chat_1m" / "lmsys_1000.jsonl"),
    "wildchat_ru": _wildchat_ru,
    "alignbench_zh": _alignbench_zh,
    "mt_bench_en": lambda t: _mt_bench(t, "en"),
    "mt_bench_ja": lambda t: _mt_bench(t, "ja"),
    "mt_bench_ko": lambda t: _mt_bench(t, "ko"),
}
_AFTER_MGSM: dict[str, Callable[[Path], Iterable[ReplayRequest]]] = {
    "humaneval": _humaneval,
    "bfcl": _bfcl,
    "longbench_v2": lambda t: _longbench(t / "longbench_v2"),
}


def load_requests(data_dir: str | Path, sources: tuple[str, ...] = SOURCES) -> list[ReplayRequest]:
    """Every request of docs/data.md §2.2 (13,932 with all sources), in a fixed source order.

    Args:
        data_dir: the shared data directory (holds ``text/``).
        sources: which source ids to load.

    Raises:
        FileNotFoundError: ``data_dir`` lacks a needed file.
    """
    text = Path(data_dir) / "text"
    wanted = set(sources)
    out: list[ReplayRequest] = []
    for name, load in _BEFORE_MGSM.items():
        if name in wanted:
            out.extend(load(text))
    for src in sources:
        if src.startswith("mgsm_"):
            out.extend(_mgsm(text, src))
    for name, load in _AFTER_MGSM.items():
        if name in wanted:
            out.extend(load(text))
    return out


def load_derived_counts(data_dir: str | Path) -> dict[tuple[str, str], dict[str, str]]:
    """Rows of ``derived/request_token_counts.csv`` keyed by ``(source, req_id)``."""
    path = Path(data_dir) / "derived" / "request_token_counts.csv"
    with path.open(encoding="utf-8", newline="") as fh:
        return {(r["source"], r["req_id"]): r for r in csv.DictReader(fh)}
