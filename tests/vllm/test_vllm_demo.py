"""``tbr demo --pools vllm``: the demo's replay through two real vLLM pools prints the same summary."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from devstack.vllm_pool import VllmSetup
from tests.vllm.conftest import DATA_DIR

pytestmark = pytest.mark.vllm


def test_demo_replays_real_requests_through_real_vllm(vllm_setup: VllmSetup, tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-m",
        "tbr",
        "demo",
        "--pools",
        "vllm",
        "--requests",
        "12",
        "--data",
        str(DATA_DIR),
    ]
    argv += ["--json", "--work-dir", str(tmp_path)]
    env = {**os.environ, "TBR_VLLM_PYTHON": str(vllm_setup.python)}
    # its own session: on a timeout the demo and the vLLM servers it started go with its group
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=420)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    assert proc.returncode == 0, err.decode()[-3000:]
    summary = json.loads(out)
    assert summary["requests"] == 12 and summary["failed_requests"] == 0 and summary["harmful_misroutes"] == 0
    pools = summary["requests_per_pool"]
    assert set(pools) <= {"short", "long"} and sum(pools.values()) == 12, pools  # every answer attributed
    assert summary["http_status"] == {"200": 12}
