"""Drive a running router over real gRPC ext_proc streams (no Envoy), and read its admin API."""

from __future__ import annotations

import httpx

from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.request.request_body import parse_request_body
from tests.pb import chat_body, json_response_msgs, request_msgs, routed_pool, run_stream

POOLS = [
    {"name": "short", "max_model_len": 8192, "header_value": "short"},
    {"name": "long", "max_model_len": 65536, "header_value": "long"},
]

# 8000 bytes of latin text: ~1,940 modelled tokens, ~2,100 at the cold prior (short pool).
TEXT_8000 = ("The quick brown fox jumps over the lazy dog. " * 178)[:8000]

TEXT_LONG = TEXT_8000 * 2
"""~3,900 modelled tokens of Latin text: at the cold prior it fits the short pool (8,192 tokens);
once the router has learned that the pools count twice its modelled tokens (model-to-true 0.5, the
plausibility floor), the prompt alone is ~7,770 tokens and, with the output reserve, goes long."""

FAST_LEARNING: dict[str, object] = {"first_observation_weight": 1.0, "max_step": 1.0, "prior_ramp_samples": 1}
"""``estimator`` settings under which a key's first observations set its value (the defaults move
it by bounded steps and ramp it in from the cold prior over 50 observations, issue 34)."""


def usage_at(text: str, model_to_true: float) -> int:
    """The ``usage.prompt_tokens`` that gives a one-message chat request of ``text`` (model ``m``)
    this model-to-true ratio under the default estimator (its modelled tokens ÷ the ratio, plus
    the template framing)."""
    cal = CalibrationConfig()
    est = Estimator(estimator=EstimatorConfig(), calibration=cal, store=InMemoryRatioStore.from_config(cal))
    budget = est.estimate(parse_request_body(chat_body(text), "chat"))
    return round(budget.model_tokens / model_to_true) + budget.fixed_prompt_tokens


async def route_of(port: int, text: str) -> str | None:
    """The pool the router picks for a chat request with ``text``."""
    out = await run_stream(port, request_msgs(text))
    return routed_pool(out[1])


async def calibrate(port: int, text: str, prompt_tokens: int, *, times: int = 1) -> None:
    """Full request/response streams whose JSON response reports ``prompt_tokens``."""
    for _ in range(times):
        await run_stream(port, request_msgs(text) + json_response_msgs(prompt_tokens))


async def admin_get(port: int, path: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=5.0) as c:
        return await c.get(f"http://127.0.0.1:{port}{path}")


async def ratios(port: int) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = (await admin_get(port, "/ratios")).json()["ratios"]
    return rows
