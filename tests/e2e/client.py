"""Minimal helpers around the official ``openai`` client for the end-to-end tests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import openai

MODEL = "Qwen/Qwen3-8B"


@dataclass(frozen=True)
class Served:
    status: int
    pool: str | None  # x-served-by-pool
    prompt_tokens: int | None
    completion_tokens: int | None


def chat(
    base_url: str,
    text: str,
    *,
    headers: dict[str, str] | None = None,
    stream: bool = False,
    include_usage: bool = False,
    max_tokens: int | None = None,
) -> Served:
    """POST one chat completion through Envoy; never raises on HTTP errors (returns the status)."""
    client = openai.OpenAI(base_url=base_url, api_key="test", max_retries=0, timeout=60.0)
    kwargs: dict[str, Any] = {"model": MODEL, "messages": [{"role": "user", "content": text}]}
    if max_tokens is not None:
        kwargs["max_tokens"] = max_tokens
    if stream:
        kwargs["stream"] = True
        if include_usage:
            kwargs["stream_options"] = {"include_usage": True}
    with client:
        try:
            raw = client.chat.completions.with_raw_response.create(**kwargs, extra_headers=headers or {})
        except openai.APIStatusError as e:
            return Served(e.status_code, e.response.headers.get("x-served-by-pool"), None, None)
        pool = raw.headers.get("x-served-by-pool")
        if not stream:
            usage = raw.parse().usage
            return Served(
                raw.status_code, pool, usage and usage.prompt_tokens, usage and usage.completion_tokens
            )
        prompt = completion = None
        for chunk in raw.parse():
            if chunk.usage is not None:
                prompt, completion = chunk.usage.prompt_tokens, chunk.usage.completion_tokens
        return Served(raw.status_code, pool, prompt, completion)
