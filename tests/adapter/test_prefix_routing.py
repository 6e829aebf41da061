"""A long prompt over every pool is routed from a prefix of its text when nobody reads its estimate
(extproc.core.estimate.screen.prefix_budget: category ``bounded``), to the same pool with the same reason as
when it is counted whole (a read request), through the real gRPC stream."""

from __future__ import annotations

import json
import random
from collections.abc import AsyncIterator

import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.config import parse_config
from extproc.service.app import RouterApp
from tests.pb import headers, routed_pool, run_stream

REQ = headers({":method": "POST", ":path": "/v1/chat/completions"})


def _cfg(rate: float) -> dict[str, object]:
    return {
        "pools": [
            {"name": "short", "max_model_len": 8192, "header_value": "short"},
            {"name": "long", "max_model_len": 65536, "header_value": "long"},
        ],
        "calibration": {"sample_rate": rate},
        "admin": {"enabled": False},
    }


def _body(n_words: int, numbers: bool) -> bytes:
    """An English-like prompt of ``n_words`` words (with numbers among them: more tokens a character)."""
    rng = random.Random(n_words)
    ends = ["", "", ",", ".", " 42"] if numbers else ["", "", ",", "."]
    words = [
        "the",
        "of",
        "and",
        "a",
        "to",
        "in",
        "is",
        "you",
        "that",
        "it",
        "he",
        "was",
        "for",
        "on",
        "are",
        "as",
        "with",
        "his",
        "they",
        "at",
        "be",
        "this",
        "have",
        "from",
    ]
    text = " ".join(rng.choice(words) + rng.choice(ends) for _ in range(n_words))
    return json.dumps(
        {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 64}
    ).encode()


@pytest.fixture
async def apps() -> AsyncIterator[dict[str, RouterApp]]:
    async with (
        RouterApp(parse_config(_cfg(0.0)), grpc_port=0) as unread,
        RouterApp(parse_config(_cfg(1.0)), grpc_port=0) as read,
    ):
        yield {"unread": unread, "read": read}


def _decisions(app: RouterApp) -> set[tuple[str, str, str]]:
    return {
        (s.labels["pool"], s.labels["category"], s.labels["reason"])
        for m in app.metrics.decisions.collect()
        for s in m.samples
        if s.name.endswith("_total") and s.value > 0
    }


@pytest.mark.parametrize(
    ("n_words", "numbers", "reason"), [(150_000, True, "exceeds_all_pools"), (32_000, False, "fits")]
)
async def test_a_long_prompt_routes_alike_from_a_prefix_and_counted_whole(
    apps: dict[str, RouterApp], n_words: int, numbers: bool, reason: str
) -> None:
    """150,000 words (~710 K characters, ~377,000 tokens): over every pool; 32,000 words without
    numbers (over 128 K characters): under the long pool."""
    msgs = [
        pb.ProcessingRequest(request_headers=REQ),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=_body(n_words, numbers), end_of_stream=True)),
    ]
    for name in ("unread", "read"):
        out = await run_stream(apps[name].grpc_port, msgs)
        assert routed_pool(out[1]) == "long"
    ((pool, category, why),) = _decisions(apps["read"])
    assert (pool, why) == ("long", reason) and category != "bounded"
    # over every pool, the unread request stops counting (a prefix budget); under it, it is counted
    # whole and its estimate is the exact one
    assert _decisions(apps["unread"]) == {
        ("long", "bounded" if reason == "exceeds_all_pools" else category, reason)
    }
