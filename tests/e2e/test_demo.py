"""The demo's replay and summary against the real stack, and `tbr demo` on the built-in sample."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.stack import Gateway
from tbr.demo.decision_log import read_decisions
from tbr.demo.replay import replay
from tbr.demo.summary import SummaryInputs, build_summary
from tbr.demo.workload import build_workload
from tests.e2e.client import MODEL
from tests.e2e.harness import REPO, RouterEndpoints

pytestmark = pytest.mark.envoy


def test_builtin_replay_through_envoy(gateway: Gateway, router: RouterEndpoints, tmp_path: Path) -> None:
    w = build_workload(tmp_path / "no-data", n_requests=24, seed=11)
    outcomes = asyncio.run(replay(gateway.base_url, w.requests, model=MODEL, concurrency=4))
    assert all(o.status == 200 for o in outcomes), [
        (o.request.request_id, o.status, o.error) for o in outcomes
    ]
    pools = {o.request.category: o.pool for o in outcomes}
    assert pools["long_doc"] == "long"  # ~120 KB generated document
    assert pools["prose"] == "short"
    # The router logs a decision when its ext_proc stream ends, which can trail the client's
    # response; wait (bounded) for all of them.
    decisions = read_decisions(router.decision_log, 24, timeout_s=30.0)
    summary = build_summary(
        SummaryInputs(
            outcomes=outcomes,
            decisions=decisions,
            ratios=[],
            envoy_stats=gateway.envoy.stats("ext_proc.tbr."),
            short_max_model_len=8192,
            long_max_model_len=65536,
            default_output_reserve_tokens=1024,
            data_source="builtin",
            builtin=True,
            elapsed_s=1.0,
            concurrency=4,
        )
    )
    assert summary["harmful_misroutes"] == 0
    assert summary["decisions_logged"] == 24
    # Every request whose true size is known joined its estimate.
    assert summary["estimate_error_samples"] == 24 - summary["unknown_true_size"]
    assert summary["envoy_ext_proc"]["failure_mode_allowed"] == 0


def test_tbr_demo_cli_on_builtin_sample(tmp_path: Path) -> None:
    """`tbr demo` without ../shared/data: says so, runs the built-in sample, writes the JSON summary."""
    out = tmp_path / "summary.json"
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "tbr",
            "demo",
            "--data",
            str(tmp_path / "absent"),
            "--requests",
            "20",
            "--json-out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "built-in sample" in res.stderr and "built-in sample" in res.stdout
    # Without --work-dir the logs' temporary folder is removed at the end: it is not named.
    assert "logs in" not in res.stderr and "--work-dir DIR keeps them" in res.stderr
    s = json.loads(out.read_text(encoding="utf-8"))
    assert s["builtin_sample"] is True
    assert s["requests"] == 20
    assert s["harmful_misroutes"] == 0 and s["failed_requests"] == 0
    assert sum(s["requests_per_pool"].values()) == 20


def test_tbr_demo_two_models_summarises_each_model(tmp_path: Path) -> None:
    """`tbr demo --two-models`: a Qwen3 pair and a Llama-3 pair behind one Envoy; each model's half
    of the workload is answered by its own pools (strict pools: 404 for the other model), the long
    document by the model's long pool, and each model learns its own ratios."""
    out = tmp_path / "summary.json"
    res = subprocess.run(
        [sys.executable, "-m", "tbr", "demo", "--two-models", "--data", str(tmp_path / "absent"),
         "--requests", "24", "--json-out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
        check=False,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    models = json.loads(out.read_text(encoding="utf-8"))["models"]
    assert set(models) == {"Qwen/Qwen3-8B", "meta-llama/Llama-3.1-8B-Instruct"}
    for name, s in models.items():
        assert s["requests"] == 12 and s["http_status"] == {"200": 12}
        assert s["harmful_misroutes"] == 0 and s["failed_requests"] == 0
        assert s["learned_ratios"] and all(r["model"] == name for r in s["learned_ratios"])
        assert set(s["requests_per_pool"]) <= {"short", "long"}
    assert models["meta-llama/Llama-3.1-8B-Instruct"]["limits_tokens"] == {"short": 8192, "long": 131072}
    assert "==== model Qwen/Qwen3-8B (short = qwen-short, long = qwen-long) ====" in res.stdout
