"""Rebuild real chat requests from ../shared/data exactly as docs/data.md §2.2 defines them.

Used as test oracles: ``derived/request_token_counts.csv`` holds ``{qwen3,llama3}_prompt_tokens`` computed by an
independent one-off script from the same definitions.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).resolve().parents[2] / ".." / "shared" / "data"
ROLE_MAP = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "bing": "assistant",
    "assistant": "assistant",
    "system": "system",
}


@dataclass(frozen=True)
class OracleRequest:
    """One reconstructed request and its oracle prompt-token counts."""

    source: str
    req_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    qwen3_prompt_tokens: int
    llama3_prompt_tokens: int


def data_available() -> bool:
    """True when the shared data directory (with the derived counts) is present."""
    return (DATA_DIR / "derived" / "request_token_counts.csv").is_file()


def _oracle_rows() -> dict[tuple[str, str], dict[str, str]]:
    with open(DATA_DIR / "derived" / "request_token_counts.csv", encoding="utf-8", newline="") as f:
        return {(r["source"], r["req_id"]): r for r in csv.DictReader(f)}


def _jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def _mt_bench_en() -> Iterator[tuple[str, str, list[dict[str, Any]], None]]:
    base = DATA_DIR / "text" / "mt_bench"
    refs = {
        a["question_id"]: a["choices"][0]["turns"] for a in _jsonl(base / "reference_answer_gpt-4_en.jsonl")
    }
    for q in _jsonl(base / "question_en.jsonl"):
        qid, turns = q["question_id"], q["turns"]
        yield "mt_bench_en", f"q{qid}@0", [{"role": "user", "content": turns[0]}], None
        if qid in refs:
            msgs = [
                {"role": "user", "content": turns[0]},
                {"role": "assistant", "content": refs[qid][0]},
                {"role": "user", "content": turns[1]},
            ]
            yield "mt_bench_en", f"q{qid}@2", msgs, None


def _alignbench() -> Iterator[tuple[str, str, list[dict[str, Any]], None]]:
    for a in _jsonl(DATA_DIR / "text" / "alignbench" / "data_v1.1_release.jsonl"):
        yield "alignbench_zh", f"{a['question_id']}@0", [{"role": "user", "content": a["question"]}], None


def _bfcl() -> Iterator[tuple[str, str, list[dict[str, Any]], list[dict[str, Any]]]]:
    for name in ("BFCL_v4_live_simple.json", "BFCL_v4_simple_python.json"):
        for a in _jsonl(DATA_DIR / "text" / "bfcl" / name):
            tools = [{"type": "function", "function": f} for f in a["function"]]
            yield "bfcl", a["id"], a["question"][0], tools


def _sharegpt() -> Iterator[tuple[str, str, list[dict[str, Any]], None]]:
    for conv in _jsonl(DATA_DIR / "text" / "sharegpt" / "sharegpt_v3_multiturn_every12th.jsonl"):
        turns = conv["conversations"]
        for i, turn in enumerate(turns):
            if ROLE_MAP.get(turn["from"]) != "user":
                continue
            msgs = [{"role": ROLE_MAP[t["from"]], "content": t["value"]} for t in turns[: i + 1]]
            while msgs and msgs[0]["role"] == "assistant":
                msgs.pop(0)
            yield "sharegpt_multiturn", f"{conv['id']}@{i}", msgs, None


def oracle_requests(per_source: int) -> list[OracleRequest]:
    """The first ``per_source`` reconstructed requests of MT-Bench-en, AlignBench, BFCL and ShareGPT multi-turn
    whose oracle row exists and whose message count matches (a guard on the reconstruction)."""
    rows = _oracle_rows()
    out: list[OracleRequest] = []
    for gen in (_mt_bench_en(), _alignbench(), _bfcl(), _sharegpt()):
        taken = 0
        for source, req_id, messages, tools in gen:
            row = rows.get((source, req_id))
            if row is None or int(row["n_messages"]) != len(messages):
                continue
            out.append(
                OracleRequest(
                    source,
                    req_id,
                    messages,
                    tools,
                    int(row["qwen3_prompt_tokens"]),
                    int(row["llama3_prompt_tokens"]),
                )
            )
            taken += 1
            if taken >= per_source:
                break
    return out
