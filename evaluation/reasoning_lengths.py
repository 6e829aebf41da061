"""Answer lengths of reasoning models: a small public set for the output half (issue 30).

Neither ``../shared/data`` nor any PyPI package at hand ships answers of reasoning models. The set
used here is derived from the public GitHub repository ``cpldcpu/LRMTokenEconomy`` (Apache-2.0;
the data behind Nous Research's report "Measuring Thinking Efficiency in Reasoning Models: The
Missing Benchmark", 2025), snapshot commit ``d5cc353cf1250b805f955504b807530248154e62``
(2025-08-07): its ``data/output_queries_*.json`` hold, per model and prompt, the
``usage.completion_tokens`` each provider reported (reasoning included) and the finish reason of
up to 5 answers to 21 prompts (knowledge questions, logic puzzles, competition math) from 28
reasoning models queried through OpenRouter. ``data/output_queries_batch2.json`` is absent from the
snapshot (the stored copy is a large file) and is not used.

The table is committed as ``evaluation/data/reasoning_answer_lengths.csv`` (numbers only; the
source's Apache-2.0 licence allows a derivative work with its licence and the changes stated:
``evaluation/data/SOURCE.md``, ``evaluation/data/LICENSE-LRMTokenEconomy.txt``). It is read from
``$TBR_REASONING_LENGTHS`` when set, else that file (:func:`default_path`), and has one row per
answer: ``model``,
``open_weights`` (1 = weights published: what a vLLM pool can serve), ``prompt_id``, ``category``,
``prompt_tokens`` (the prompt as one user message with the Llama-3 chat template, counted with the
Llama-3 tokenizer of ``../shared/data``), ``completion_tokens``, ``finish_reason``. Rebuild:
``python -m evaluation.reasoning_lengths --repo <checkout of the snapshot> --data ../shared/data
--out evaluation/data/reasoning_answer_lengths.csv``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "COMMITTED_TABLE",
    "SOURCE_COMMIT",
    "ReasoningAnswer",
    "build",
    "default_path",
    "load_reasoning_answers",
]

SOURCE_REPO = "cpldcpu/LRMTokenEconomy"
SOURCE_COMMIT = "d5cc353cf1250b805f955504b807530248154e62"

OPEN_WEIGHTS = (
    "magistral-small",
    "deepseek-r1",
    "minimax-m1",
    "qwen3",
    "glm-4.5",
    "glm-z1",
    "DeepHermes",
    "nemotron",
    "gpt-oss",
)
"""Model-name prefixes of the models whose weights are published (the rest are API-only)."""

CATEGORIES = {
    "knowledge": ("capital_of_australia", "brazil_continent", "leap_year_february_days", "one_plus_one"),
    "logic": ("bridge_", "monty_", "roses_logic"),
}
"""Prompt-id prefixes per category; every other prompt is ``math`` (AIME problems, word problems)."""


@dataclass(frozen=True, slots=True)
class ReasoningAnswer:
    """One answer of a reasoning model (token counts as the provider reported them)."""

    model: str
    open_weights: bool
    prompt_id: str
    category: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: str


def _category(prompt_id: str) -> str:
    for name, prefixes in CATEGORIES.items():
        if any(prompt_id.startswith(p) for p in prefixes):
            return name
    return "math"


COMMITTED_TABLE = Path(__file__).with_name("data") / "reasoning_answer_lengths.csv"
"""The table as committed (evaluation/data/SOURCE.md)."""


def default_path() -> Path:
    """Where the table is read from: ``$TBR_REASONING_LENGTHS``, else :data:`COMMITTED_TABLE`."""
    env = os.environ.get("TBR_REASONING_LENGTHS")
    return Path(env) if env else COMMITTED_TABLE


def load_reasoning_answers(path: str | Path) -> list[ReasoningAnswer]:
    """The rows of the table at ``path`` (:func:`default_path`), in file order.

    Raises:
        FileNotFoundError: no such file. ValueError: a malformed row.
    """
    with Path(path).open(encoding="utf-8", newline="") as fh:
        return [
            ReasoningAnswer(
                r["model"],
                r["open_weights"] == "1",
                r["prompt_id"],
                r["category"],
                int(r["prompt_tokens"]),
                int(r["completion_tokens"]),
                r["finish_reason"],
            )
            for r in csv.DictReader(fh)
        ]


def build(repo: Path, data_dir: Path, out: Path) -> int:
    """Write the table to ``out`` from a git checkout (or bare mirror) of the source snapshot;
    returns the number of rows. Answers without an integer token count are skipped."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(data_dir / "tokenizers" / "llama3" / "tokenizer.json"))
    listing = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", SOURCE_COMMIT, "data"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    rows: list[list[object]] = []
    for name in sorted(listing):
        if "output_queries_" not in name:
            continue
        text = subprocess.run(
            ["git", "-C", str(repo), "show", f"{SOURCE_COMMIT}:{name}"], capture_output=True, text=True
        ).stdout
        if not text.strip():
            continue
        for r in json.loads(text)["results"]:
            prompt = str(r["prompt"])
            # Llama-3 chat template around one user message: 5 + 5 framing tokens (docs/estimator.md)
            prompt_tokens = len(tok.encode(prompt, add_special_tokens=False).ids) + 10
            reasons = r.get("finish_reason") or []
            for i, t in enumerate(r.get("tokens_completion") or []):
                if not isinstance(t, int) or t <= 0:
                    continue
                fin = reasons[i] if i < len(reasons) and isinstance(reasons[i], str) else ""
                model = str(r["llm"])
                open_w = int(any(model.startswith(p) for p in OPEN_WEIGHTS))
                rows.append([model, open_w, r["prompt_id"], _category(r["prompt_id"]), prompt_tokens, t, fin])
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w", encoding="utf-8", newline="") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(
            [
                "model",
                "open_weights",
                "prompt_id",
                "category",
                "prompt_tokens",
                "completion_tokens",
                "finish_reason",
            ]
        )
        w.writerows(rows)
    return len(rows)


def main() -> None:
    """``python -m evaluation.reasoning_lengths --repo PATH --data DIR [--out PATH]``."""
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--repo", required=True, help="git checkout or mirror of cpldcpu/LRMTokenEconomy")
    p.add_argument("--data", default="../shared/data")
    p.add_argument(
        "--out",
        default=None,
        help="default: $TBR_REASONING_LENGTHS or evaluation/data/reasoning_answer_lengths.csv",
    )
    args = p.parse_args()
    out = Path(args.out) if args.out else default_path()
    print(build(Path(args.repo), Path(args.data), out), "rows written to", out)


if __name__ == "__main__":
    main()
