"""Real (prompt, answer) pairs and output-token traces for the output half of the budget (issue 30).

Pairs come from the conversations in ``../shared/data/text`` that hold the answer that followed
each prompt (read in place; licences in ``../shared/data/SOURCES.md``):

* ``sharegpt_multiturn``: every user turn of the 1,473 ShareGPT V3 conversations followed by a
  ChatGPT turn (the request holds all earlier turns, as :mod:`evaluation.corpus` builds it);
* ``lmsys``: the same for the 191 LMSYS-Chat-1M conversations (answers of the model each
  conversation names: Vicuna, Koala, Llama-2-chat, GPT-3.5, Claude, …);
* ``mt_bench_en`` / ``_ja`` / ``_ko``: both turns of the 80 MT-Bench questions with GPT-4's
  reference answers (FastChat, flexeval, KoMT-Bench);
* ``alignbench_zh``: the 683 AlignBench questions with their reference answers (written by the
  benchmark's authors with GPT-4's help: shorter than a chat model's answers);
* ``humaneval``: the 164 HumanEval prompts as ``/v1/completions`` requests with the canonical
  solution as the answer (a code-completion answer).

Answer tokens are counted with the real tokenizer (bare answer text, plus one end-of-turn token:
``usage.completion_tokens`` counts the stop token vLLM generates). Prompt tokens come from
``derived/request_token_counts.csv`` (the same requests, counted with the chat template) or, for
HumanEval completions, the bare prompt.

Traces (:func:`load_trace_pairs`): the Azure LLM inference trace 2023 (Splitwise; ``conv`` and
``code``: ``ContextTokens``, ``GeneratedTokens``) and the Mooncake FAST'25 conversation trace
(``input_length``, ``output_length``): true prompt and output counts, no text.
"""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evaluation.corpus import ReplayRequest, load_derived_counts

__all__ = [
    "PAIR_SOURCES",
    "TRACE_NAMES",
    "OutputPair",
    "load_output_pairs",
    "load_trace_pairs",
]

PAIR_SOURCES: tuple[str, ...] = (
    "sharegpt_multiturn",
    "lmsys",
    "mt_bench_en",
    "mt_bench_ja",
    "mt_bench_ko",
    "alignbench_zh",
    "humaneval",
)
TRACE_NAMES: tuple[str, ...] = ("azure_conv", "azure_code", "mooncake")

_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "bing": "assistant", "chatgpt": "assistant"}
_ROLES.update({"assistant": "assistant", "system": "system"})


@dataclass(frozen=True, slots=True)
class OutputPair:
    """One request with the true length of its answer.

    Attributes:
        source: source id (``sharegpt_multiturn``, ``azure_conv``, …).
        req_id: id unique within the source (conversation pairs: as in
            ``derived/request_token_counts.csv``; traces: the row number).
        request: the chat request (None for trace rows, which have no text).
        endpoint: ``chat`` or ``completions``.
        prompt_tokens: true prompt tokens (chat template included).
        output_tokens: true answer tokens (``usage.completion_tokens``).
        arrival_s: arrival time (traces; 0.0 for conversation pairs).
        answer: the answer text ('' for traces); never logged.
    """

    source: str
    req_id: str
    request: ReplayRequest | None
    endpoint: str
    prompt_tokens: int
    output_tokens: int
    arrival_s: float = 0.0
    answer: str = ""


def _jsonl(path: Path) -> list[dict[str, Any]]:
    with path.open(encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def _turn_pairs(
    source: str, conv_id: str, messages: list[dict[str, str]]
) -> Iterator[tuple[str, ReplayRequest, str]]:
    """``(req_id, request, answer)`` per user turn answered by the next message (ids as corpus.py)."""
    start = 0
    while start < len(messages) and messages[start]["role"] == "assistant":
        start += 1
    for i in range(start, len(messages) - 1):
        if messages[i]["role"] == "user" and messages[i + 1]["role"] == "assistant":
            answer = messages[i + 1]["content"]
            if answer.strip():
                yield (
                    f"{conv_id}@{i}",
                    ReplayRequest(source, f"{conv_id}@{i}", tuple(messages[start : i + 1])),
                    answer,
                )


_Pairs = Iterator[tuple[str, ReplayRequest, str]]


def _sharegpt(text: Path, source: str) -> _Pairs:
    for conv in _jsonl(text / "sharegpt" / "sharegpt_v3_multiturn_every12th.jsonl"):
        msgs = [{"role": _ROLES.get(t["from"], "user"), "content": t["value"]} for t in conv["conversations"]]
        yield from _turn_pairs(source, conv["id"], msgs)


def _lmsys(text: Path, source: str) -> _Pairs:
    for d in _jsonl(text / "lmsys_chat_1m" / "lmsys_1000.jsonl"):
        msgs = [{"role": m["role"], "content": m["content"]} for m in d["conversation"]]
        yield from _turn_pairs(source, d["conversation_id"], msgs)


def _mt_bench(text: Path, source: str) -> _Pairs:
    lang = source.removeprefix("mt_bench_")
    refs = {
        r["question_id"]: r["choices"][0]["turns"]
        for r in _jsonl(text / "mt_bench" / f"reference_answer_gpt-4_{lang}.jsonl")
    }
    for q in _jsonl(text / "mt_bench" / f"question_{lang}.jsonl"):
        ref = refs.get(q["question_id"])
        if not ref:
            continue
        qid = q["question_id"]
        user1 = {"role": "user", "content": q["turns"][0]}
        yield f"q{qid}@0", ReplayRequest(source, f"q{qid}@0", (user1,)), ref[0]
        if len(q["turns"]) > 1 and len(ref) > 1:
            turns = (
                user1,
                {"role": "assistant", "content": ref[0]},
                {"role": "user", "content": q["turns"][1]},
            )
            yield f"q{qid}@2", ReplayRequest(source, f"q{qid}@2", turns), ref[1]


def _alignbench(text: Path, source: str) -> _Pairs:
    for r in _jsonl(text / "alignbench" / "data_v1.1_release.jsonl"):
        if isinstance(r.get("reference"), str) and r["reference"].strip():
            rid = f"{r['question_id']}@0"
            yield (
                rid,
                ReplayRequest(source, rid, ({"role": "user", "content": r["question"]},)),
                r["reference"],
            )


def _humaneval(text: Path, source: str) -> _Pairs:
    with gzip.open(text / "humaneval" / "HumanEval.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            d = json.loads(line)
            req = ReplayRequest(source, d["task_id"], ({"role": "user", "content": d["prompt"]},))
            yield d["task_id"], req, d["canonical_solution"]


_LOADERS: dict[str, Callable[[Path, str], _Pairs]] = {
    "sharegpt_multiturn": _sharegpt,
    "lmsys": _lmsys,
    "mt_bench_en": _mt_bench,
    "mt_bench_ja": _mt_bench,
    "mt_bench_ko": _mt_bench,
    "alignbench_zh": _alignbench,
    "humaneval": _humaneval,
}


def _text_pairs(text: Path, source: str) -> _Pairs:
    load = _LOADERS.get(source)
    if load is None:
        raise ValueError(f"unknown pair source {source!r}")
    return load(text, source)


def load_output_pairs(
    data_dir: str | Path, tokenizer: Any, *, sources: tuple[str, ...] = PAIR_SOURCES
) -> list[OutputPair]:
    """Every (prompt, answer) pair of ``sources`` with true token counts, in a fixed order.

    Args:
        data_dir: the shared data directory (``text/``, ``derived/``).
        tokenizer: a ``tokenizers.Tokenizer`` (Llama-3's: the derived prompt counts are Llama-3's).

    Raises:
        FileNotFoundError: a needed file is missing.
    """
    data = Path(data_dir)
    derived = load_derived_counts(data)
    out: list[OutputPair] = []
    for source in sources:
        rows = list(_text_pairs(data / "text", source))
        answers = [a for _, _, a in rows]
        counts = [len(e.ids) for e in tokenizer.encode_batch(answers, add_special_tokens=False)]
        for (rid, req, answer), n in zip(rows, counts, strict=True):
            if source == "humaneval":
                prompt = len(tokenizer.encode(req.messages[0]["content"], add_special_tokens=False).ids) + 1
                endpoint = "completions"
            else:
                row = derived.get((source, rid))
                if row is None:
                    continue
                prompt = int(row["llama3_prompt_tokens"])
                endpoint = "chat"
            out.append(OutputPair(source, rid, req, endpoint, prompt, n + 1, 0.0, answer))
    return out


def load_trace_pairs(data_dir: str | Path, name: str) -> list[OutputPair]:
    """The rows of a trace as pairs (no text): ``azure_conv``, ``azure_code`` or ``mooncake``.

    Arrival times in seconds from the first row. Rows with a non-positive count are dropped.

    Raises:
        ValueError: unknown name. FileNotFoundError: the trace is missing.
    """
    base = Path(data_dir) / "traces"
    out: list[OutputPair] = []
    if name in ("azure_conv", "azure_code"):
        from datetime import datetime

        path = base / "azure_llm_2023" / f"AzureLLMInferenceTrace_{name.removeprefix('azure_')}.csv"
        t0: float | None = None
        with path.open(encoding="utf-8", newline="") as fh:
            for i, r in enumerate(csv.DictReader(fh)):
                p, o = int(r["ContextTokens"]), int(r["GeneratedTokens"])
                ts = datetime.fromisoformat(r["TIMESTAMP"][:26]).timestamp()
                t0 = ts if t0 is None else t0
                if p > 0 and o > 0:
                    out.append(OutputPair(name, str(i), None, "chat", p, o, ts - t0))
        return out
    if name == "mooncake":
        for i, d in enumerate(_jsonl(base / "mooncake_fast25" / "conversation_trace.jsonl")):
            p, o = int(d["input_length"]), int(d["output_length"])
            if p > 0 and o > 0:
                out.append(OutputPair(name, str(i), None, "chat", p, o, float(d["timestamp"]) / 1000.0))
        return out
    raise ValueError(f"unknown trace {name!r}; one of {', '.join(TRACE_NAMES)}")
