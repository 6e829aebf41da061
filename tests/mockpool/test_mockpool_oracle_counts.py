"""usage.prompt_tokens over HTTP equals the independent oracle counts for real requests (docs/data.md §2.2)."""

from __future__ import annotations

import asyncio
import collections

import httpx
import pytest
from mockpool_oracle import OracleRequest, data_available, oracle_requests

from mockpool.server import serve_pool
from mockpool.settings import PoolSettings

pytestmark = [
    pytest.mark.data,
    pytest.mark.skipif(
        not data_available(), reason="../shared/data (derived/request_token_counts.csv) is absent"
    ),
]
PER_SOURCE = 25


async def served_prompt_tokens(base_url: str, requests: list[OracleRequest]) -> list[int]:
    """POST every request as a chat completion (max_tokens 1) and return usage.prompt_tokens."""
    sem = asyncio.Semaphore(8)
    async with httpx.AsyncClient(base_url=base_url, timeout=60) as client:

        async def one(req: OracleRequest) -> int:
            body: dict[str, object] = {"messages": req.messages, "max_tokens": 1}
            if req.tools:
                body["tools"] = req.tools
            async with sem:
                r = await client.post("/v1/chat/completions", json=body)
            assert r.status_code == 200, r.text
            tokens: int = r.json()["usage"]["prompt_tokens"]
            return tokens

        return list(await asyncio.gather(*(one(r) for r in requests)))


@pytest.mark.parametrize("family", ["qwen3", "llama3"])
async def test_prompt_tokens_match_oracle(family: str) -> None:
    requests = oracle_requests(PER_SOURCE)
    sources = collections.Counter(r.source for r in requests)
    assert sources == {"mt_bench_en": 25, "alignbench_zh": 25, "bfcl": 25, "sharegpt_multiturn": 25}
    async with serve_pool(PoolSettings(name=family, tokenizer=family, max_model_len=131072)) as url:  # type: ignore[arg-type]
        served = await served_prompt_tokens(url, requests)
    expected = [r.qwen3_prompt_tokens if family == "qwen3" else r.llama3_prompt_tokens for r in requests]
    mismatches = [
        (r.source, r.req_id, s, e) for r, s, e in zip(requests, served, expected, strict=True) if s != e
    ]
    assert mismatches == []
