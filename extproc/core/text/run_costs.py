"""Tokens per run and per character of each run kind, per tokenizer family (measured, not guessed).

``extproc/core/text/run_costs.json`` is written by ``python -m evaluation.fit_run_costs`` (method in its
docstring and docs/estimator.md §Run costs): non-negative least squares of true token counts of
11,106 public text segments on their run counts, for the Llama-3, Qwen3 and cl100k tokenizers, plus a
cold correction per (family, content kind): the 2nd percentile of modelled/true on segments of
≥ 200 tokens. ``unknown`` (a model matching no profile) takes the largest coefficient of any family
and the smallest cold correction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np

from extproc.core.text.runs import CONTENT_KINDS, RUN_KINDS, RunCounts, content_kind

__all__ = ["RunCosts", "run_costs"]

_SPACE = RUN_KINDS.index("space")
_TABLE_PATH = Path(__file__).with_name("run_costs.json")


@dataclass(frozen=True, slots=True)
class RunCosts:
    """The cost model of one tokenizer family.

    Attributes:
        family: family name (``llama3``, ``qwen``, ``cl100k``, ``unknown``).
        per_run: tokens per run, shape ``(len(RUN_KINDS),)``.
        per_char: tokens per character, same shape.
        per_gap: tokens per whitespace run not followed by a word.
        cold_ratio: ``{content kind: modelled/true tokens}`` used before a key has learned anything
            (< 1 budgets more than the model: conservative).
    """

    family: str
    per_run: np.ndarray
    per_char: np.ndarray
    per_gap: float
    cold_ratio: dict[str, float]

    def tokens_by_kind(self, counts: RunCounts) -> np.ndarray:
        """Modelled tokens of each run kind (gaps are charged to ``space``)."""
        t: np.ndarray = counts.runs * self.per_run + counts.chars * self.per_char
        t[_SPACE] += counts.gaps * self.per_gap
        return t

    def text_tokens(self, counts: RunCounts) -> tuple[float, str]:
        """``(modelled tokens, content kind)`` of a text's run counts."""
        t = self.tokens_by_kind(counts)
        return float(t.sum()), content_kind(counts, t)


@cache
def run_costs(family: str) -> RunCosts:
    """The :class:`RunCosts` of a tokenizer family; unknown families get the conservative ``unknown``.

    Raises:
        FileNotFoundError, ValueError: the packaged table is missing or malformed.
    """
    table = json.loads(_TABLE_PATH.read_text(encoding="utf-8"))["families"]
    row = table.get(family) or table["unknown"]
    name = family if family in table else "unknown"
    return RunCosts(
        name,
        np.array([row["per_run"][k] for k in RUN_KINDS]),
        np.array([row["per_char"][k] for k in RUN_KINDS]),
        float(row["per_gap"]),
        {k: float(row["cold_ratio"].get(k, 0.8)) for k in CONTENT_KINDS},
    )
