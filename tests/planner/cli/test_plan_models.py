"""`tbr plan-models`: the decision log split by pool set, one plan per model."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from extproc.config import load_config
from planner.cli.cmd_plan_models import split_decision_log
from tests.service.contracts import REPO

CONFIG = REPO / "config" / "router-2models.yaml"


def record(i: int, model: str, pool: str, prompt_tokens: int) -> dict[str, object]:
    return {
        "ts_s": 1000.0 + i * 0.1,
        "request_id": f"r{i}",
        "model": model,
        "category": "latin",
        "pool": pool,
        "reason": "fits",
        "estimated_prompt_tokens": prompt_tokens + 10,
        "output_reserve_tokens": 256,
        "status": 200,
        "prompt_tokens": prompt_tokens,
        "completion_tokens": 64,
        "end": "complete",
    }


def write_log(path: Path) -> None:
    rows = []
    for i in range(40):
        long = i % 10 == 1
        if i % 2:
            rows.append(
                record(i, "Qwen/Qwen3-8B", "qwen-long" if long else "qwen-short", 20000 if long else 900)
            )
        else:
            rows.append(record(i, "mistral-7b", "qwen-short", 500))  # unknown model, default set
    rows.append(record(99, "m", "gone-pool", 10))
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\nnot json\n", encoding="utf-8")


def test_split_by_the_set_that_owns_each_pool(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    write_log(log)
    shares, dropped = split_decision_log(log, load_config(CONFIG), tmp_path)
    assert set(shares) == {"qwen"} and dropped == 2
    assert len(shares["qwen"].read_text(encoding="utf-8").splitlines()) == 40


def test_cli_plans_each_model_set(tmp_path: Path) -> None:
    log = tmp_path / "decisions.jsonl"
    write_log(log)
    llama = [record(200 + i, "meta-llama/Llama-3.1-8B-Instruct", "llama-short", 700) for i in range(30)]
    with log.open("a", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(r) for r in llama) + "\n")
    res = subprocess.run(
        [sys.executable, "-m", "tbr", "plan-models", "--trace", str(log), "--router-config", str(CONFIG),
         "--no-des", "--min-requests", "500", "--json"],
        capture_output=True, text=True, timeout=300, cwd=REPO, check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    plans = json.loads(res.stdout)
    assert set(plans) == {"qwen", "llama"}
    assert plans["qwen"]["long_max_model_len"] == 65536 and plans["llama"]["long_max_model_len"] == 131072
    assert plans["llama"]["closed_form"]["alpha"] == 1.0  # every llama request fits its short pool
    assert 0.0 < plans["qwen"]["closed_form"]["alpha"] < 1.0
