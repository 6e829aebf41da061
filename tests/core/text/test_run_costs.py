"""Tokens per run and per character (extproc/core/text/run_costs.py): the packaged table's families, the
conservative ``unknown``, and the modelled tokens of a text."""

from __future__ import annotations

import json

import numpy as np
import pytest

from extproc.core.text import run_costs as rc
from extproc.core.text.runs import CONTENT_KINDS, RUN_KINDS, count_runs

TABLE = json.loads(rc._TABLE_PATH.read_text(encoding="utf-8"))["families"]


@pytest.mark.parametrize("family", ["llama3", "qwen", "cl100k"])
def test_each_family_reads_its_row_of_the_table(family: str) -> None:
    costs = rc.run_costs(family)
    assert costs.family == family
    assert costs.per_run.tolist() == [TABLE[family]["per_run"][k] for k in RUN_KINDS]
    assert costs.per_char.tolist() == [TABLE[family]["per_char"][k] for k in RUN_KINDS]
    assert set(costs.cold_ratio) == set(CONTENT_KINDS)
    assert all(0.0 < v <= 1.5 for v in costs.cold_ratio.values())


def test_an_unknown_family_gets_the_conservative_row() -> None:
    costs = rc.run_costs("no-such-tokenizer")
    assert costs.family == "unknown"
    known = [rc.run_costs(f) for f in ("llama3", "qwen", "cl100k")]
    assert np.all(costs.per_char >= np.min([k.per_char for k in known], axis=0))
    for kind in ("latin", "han", "code_data"):
        assert costs.cold_ratio[kind] <= min(k.cold_ratio[kind] for k in known)


def test_text_tokens_are_runs_times_cost_plus_chars_times_cost_plus_gaps() -> None:
    costs = rc.run_costs("llama3")
    counts = count_runs("The quick brown fox jumps over the lazy dog  42 times.\n")
    by_kind = costs.tokens_by_kind(counts)
    expected = counts.runs * costs.per_run + counts.chars * costs.per_char
    expected[RUN_KINDS.index("space")] += counts.gaps * costs.per_gap
    assert np.allclose(by_kind, expected)
    total, kind = costs.text_tokens(counts)
    assert total == pytest.approx(float(expected.sum()))
    assert kind == "latin"
    assert rc.run_costs("llama3") is costs  # cached: the table is read once per family
