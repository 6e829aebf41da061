"""Fixtures: real pools served by uvicorn on free loopback ports, and httpx clients for them."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from mockpool.server import serve_pool
from mockpool.settings import PoolSettings


@pytest.fixture
async def qwen_pool() -> AsyncIterator[str]:
    """A Qwen3 pool named ``short`` (max_model_len 2048, 8 output tokens); yields its base URL."""
    async with serve_pool(PoolSettings(name="short", max_model_len=2048, output_tokens=8)) as url:
        yield url


@pytest.fixture
async def llama_pool() -> AsyncIterator[str]:
    """A Llama-3 pool named ``long`` (max_model_len 32768); yields its base URL."""
    async with serve_pool(PoolSettings(name="long", max_model_len=32768, tokenizer="llama3")) as url:
        yield url


@pytest.fixture
async def client(qwen_pool: str) -> AsyncIterator[httpx.AsyncClient]:
    """httpx client bound to :func:`qwen_pool`."""
    async with httpx.AsyncClient(base_url=qwen_pool, timeout=30) as c:
        yield c
