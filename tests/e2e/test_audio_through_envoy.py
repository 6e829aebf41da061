"""Issue 34, item 3, through Envoy, the router and stand-in pools that price audio by duration
(``tbr mock-pool --audio-tokens-per-second 25``: 25 tokens per second + 2, read from the clip's
header), for a model the router has no audio rule for (it budgets 12.5 tokens per second).

The issue's run, with durations instead of a flat 4,096 per clip: six 5 s voice notes go short;
a 400 s recording is budgeted 5,000, refused by the short pool (10,002 true: vLLM 0.32 clamps
max_tokens, so only a prompt over max_model_len is refused), retried and served by long; the next
recording is budgeted from what that taught (~10,000, not ~15,000) and goes long;
5 s notes still go short (their size class keeps its own learned cost).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from devstack.stack import Stack, StackOptions
from tests.core.audio_samples import flac, wav
from tests.e2e.harness import decision_records
from tests.stacks import running
from tests.waiting import until

pytestmark = pytest.mark.envoy

MODEL = "acme-speech"


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work = tmp_path_factory.mktemp("audio")
    options = StackOptions(
        decision_log=True,
        pool_args=("--audio-tokens-per-second", "25", "--served-model-name", MODEL),
        router_overrides={"decision_log_flush_interval_s": 0.1},
    )
    yield from running(Stack(work, options))


def post(stack: Stack, clip: bytes, fmt: str, request_id: str) -> httpx.Response:
    content: list[dict[str, Any]] = [
        {"type": "text", "text": "Transcribe this."},
        {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": fmt}},
    ]
    body = {"model": MODEL, "messages": [{"role": "user", "content": content}], "max_tokens": 1024}
    return httpx.post(
        f"{stack.base_url}/chat/completions", json=body, headers={"x-request-id": request_id}, timeout=60
    )


def calibrated(stack: Stack, n: int) -> None:
    """Wait until the router has read ``n`` responses (off the request path)."""
    until(
        lambda: stack.router_metric("tbr_calibration_events_total") >= n,
        timeout_s=15.0,
        what=f"{n} responses read by the router",
    )


def budget(stack: Stack, request_id: str) -> int:
    return int(decision_records(stack.decision_log_path, request_id)[0]["budget_tokens"])


def test_audio_by_duration_and_learned_per_size_class_through_envoy(stack: Stack) -> None:
    note, talk = wav(5.0), flac(400.0)
    for i in range(6):
        r = post(stack, note, "wav", f"note-{i}")
        assert (r.status_code, r.headers["x-served-by-pool"]) == (200, "short")
        assert 127 <= r.json()["usage"]["prompt_tokens"] < 127 + 30  # 5 s x 25 + 2, plus the text
    calibrated(stack, 6)
    r = post(stack, talk, "flac", "talk-1")  # budgeted 5,000 + text + 1,024: short; truly 10,002
    assert (r.status_code, r.headers["x-served-by-pool"], r.headers["x-envoy-attempt-count"]) == (
        200,
        "long",
        "2",
    )
    served = r.json()["usage"]["prompt_tokens"]
    assert 10_002 <= served < 10_002 + 30
    calibrated(stack, 7)
    assert (
        stack.router_metric("tbr_misroutes_total", {"outcome": "recovered", "cause": "estimate_too_low"}) == 1
    )
    r = post(stack, talk, "flac", "talk-2")
    assert (r.status_code, r.headers["x-served-by-pool"], r.headers.get("x-envoy-attempt-count")) == (
        200,
        "long",
        "1",
    )
    r = post(stack, note, "wav", "note-after")
    assert (r.status_code, r.headers["x-served-by-pool"]) == (200, "short")
    assert 5_000 + 1_024 <= budget(stack, "talk-1") < 5_000 + 1_024 + 60  # by duration, not 4,096 flat
    # learned once from the state before the observation: ~10,000, not 10,000 + (10,000 - 5,000)
    assert served + 1_024 - 60 <= budget(stack, "talk-2") < served + 1_024 + 60
    assert budget(stack, "note-after") < 1_024 + 400  # the notes' class, not the recording's
