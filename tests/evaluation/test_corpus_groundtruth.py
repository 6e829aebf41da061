"""The replayed requests are the real ones of docs/data.md §2.2, with exact ground truth."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from evaluation.corpus import ReplayRequest, load_derived_counts, request_body
from evaluation.groundtruth import load_counter

pytestmark = pytest.mark.data


def test_bodies_match_derived_byte_counts(data_dir: Path, requests_all: list[ReplayRequest]) -> None:
    derived = load_derived_counts(data_dir)
    assert len(requests_all) == len(derived) == 13932
    for req in requests_all[::7]:
        row = derived[(req.source, req.req_id)]
        assert len(request_body(req)) == int(row["body_bytes_compact_utf8"]), req.req_id
        assert len(request_body(req, ascii_escaped=True)) == int(row["body_bytes_python_default"]), req.req_id
        assert len(req.messages) == int(row["n_messages"])


@pytest.mark.parametrize("name", ["llama3", "qwen3", "cl100k"])
def test_prompt_tokens_match_derived_counts(
    name: str, data_dir: Path, requests_all: list[ReplayRequest]
) -> None:
    """Real tokenizer + chat template reproduce the published per-request counts exactly."""
    derived = load_derived_counts(data_dir)
    rng = random.Random(4)
    small = [r for r in requests_all if r.source != "longbench_v2"]
    sample = rng.sample(small, 60)
    # every tool request shape and a multi-turn conversation are covered
    sample += [r for r in requests_all if r.source == "bfcl"][:5]
    sample += [r for r in requests_all if r.source == "mt_bench_ko" and r.req_id.endswith("@2")][:3]
    counter = load_counter(name, data_dir)
    got = counter.prompt_tokens_many(sample)
    want = [int(derived[(r.source, r.req_id)][f"{name}_prompt_tokens"]) for r in sample]
    assert got == want
