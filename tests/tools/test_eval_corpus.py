"""``tbr eval-estimator --corpus FILE.jsonl``: any JSONL of OpenAI bodies, cold and online, per content kind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tbr.cli import main


def test_eval_corpus_reports_modes_kinds_and_worst_cases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "estimator.md").read_text(encoding="utf-8")
    bodies = [
        {
            "messages": [{"role": "user", "content": docs[:6000]}],
            "max_tokens": 64,
            "metadata": {"kind": "prose"},
        },
        {"messages": [{"role": "user", "content": "0123456789abcdef" * 400}], "metadata": {"kind": "blob"}},
        {"prompt": "Complete this: " + docs[6000:9000], "max_tokens": 16},
    ]
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("\n".join(json.dumps(b) for b in bodies) + "\n", encoding="utf-8")
    out_json = tmp_path / "r.json"
    rc = main(
        [
            "eval-estimator",
            "--corpus",
            str(corpus),
            "--tokenizer",
            "llama3",
            "--seeds",
            "0,1",
            "--json-out",
            str(out_json),
        ]
    )
    assert rc == 0
    text = capsys.readouterr().out
    assert "|cold|all|3|" in text and "|online|all|3|" in text
    assert "|online|prose|1|" in text and "Largest online under-estimates" in text
    report = json.loads(out_json.read_text(encoding="utf-8"))
    seeds = report["tokenizers"]["llama3"]
    assert [s["seed"] for s in seeds] == [0, 1]
    assert seeds[0]["online"]["all"]["n"] == 3


def test_eval_corpus_rejects_a_file_that_is_not_jsonl(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text("[1, 2]\n", encoding="utf-8")
    assert main(["eval-estimator", "--corpus", str(bad), "--tokenizer", "llama3"]) == 2
