"""Issue 12 item 1: reading usage never changes what the client gets, whatever the body size.

A pool answers ``200 application/json`` of 0.9, 8.6 and 17.1 MiB (``logprobs`` with 20
``top_logprobs`` per token, as a real vLLM does). Through the real Envoy (envoy/envoy.yaml) and
router the client must get the same status, headers and body as straight from the pool, and the
router must still read ``usage`` (its decision record carries ``prompt_tokens``). Before the
fix the router asked Envoy to BUFFER JSON bodies and Envoy failed the 8.6 and 17.1 MiB ones with
500 (its buffer limit is 8 MiB).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from devstack.stack import Stack, StackOptions
from tests.e2e.harness import decision_records
from tests.stacks import running

SIZES_MIB = (0.9, 8.6, 17.1)
PROBE_TOKENS = 500
HOP_BY_HOP = {"date", "server", "connection", "keep-alive", "transfer-encoding"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    work: Path = tmp_path_factory.mktemp("large-responses")
    yield from running(Stack(work, StackOptions(decision_log=True, pool_args=("--output-tokens", "60000"))))


def _request(max_tokens: int) -> dict[str, Any]:
    return {
        "model": "Qwen/Qwen3-8B",
        "messages": [{"role": "user", "content": "List every token you know, with alternatives."}],
        "max_tokens": max_tokens,
        "logprobs": True,
        "top_logprobs": 20,
    }


def _comparable(body: bytes) -> Any:
    obj = orjson.loads(body)
    for key in ("id", "created"):
        obj.pop(key, None)
    return obj


def _decision(path: Path | None, request_id: str) -> dict[str, Any]:
    return decision_records(path, request_id)[0]


@pytest.mark.parametrize("size_mib", SIZES_MIB)
def test_large_json_answer_reaches_the_client_unchanged_and_usage_is_read(
    stack: Stack, size_mib: float
) -> None:
    ports = {"short": stack.ports.short_pool, "long": stack.ports.long_pool}
    with httpx.Client(timeout=300) as client:
        probe = client.post(
            f"http://127.0.0.1:{ports['long']}/v1/chat/completions", json=_request(PROBE_TOKENS)
        )
        assert probe.status_code == 200
        max_tokens = int(1.05 * size_mib * 2**20 / (len(probe.content) / PROBE_TOKENS)) + 1
        request_id = f"large-{size_mib}"
        routed = client.post(
            f"{stack.base_url}/chat/completions",
            json=_request(max_tokens),
            headers={"x-request-id": request_id},
        )
        assert routed.status_code == 200, routed.text[:300]
        pool = routed.headers["x-served-by-pool"]
        direct = client.post(f"http://127.0.0.1:{ports[pool]}/v1/chat/completions", json=_request(max_tokens))
    assert direct.status_code == 200
    assert len(direct.content) >= size_mib * 2**20
    assert int(routed.headers["content-length"]) == len(routed.content) == len(direct.content)
    assert _comparable(routed.content) == _comparable(direct.content)
    # Same headers as straight from the pool, apart from per-connection ones and Envoy's own.
    same = {k: v for k, v in direct.headers.items() if k not in HOP_BY_HOP}
    got = {k: v for k, v in routed.headers.items() if k not in HOP_BY_HOP and not k.startswith("x-envoy")}
    assert got == same
    assert stack.decision_log_path is not None
    rec = _decision(stack.decision_log_path, request_id)
    assert rec["status"] == 200
    assert rec["prompt_tokens"] == orjson.loads(routed.content)["usage"]["prompt_tokens"]
    assert rec["completion_tokens"] == max_tokens
