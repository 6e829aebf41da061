"""OpenAI/vLLM wire shapes: error bodies, usage, chat/completions responses and stream chunks.

Error shape and messages are vLLM's current ones (``vllm/entrypoints/openai/engine/protocol.py``:
``ErrorResponse(error=ErrorInfo(message, type, param, code))``; ``engine/serving.py``:
``create_error_response`` and ``_validate_input``; ``vllm/exceptions.py``: ``VLLMValidationError.__str__``
appends ``" (parameter=…, value=…)"``), i.e.::

    {"error": {"message": "...", "type": "BadRequestError", "param": "max_tokens", "code": 400}}

(vLLM before ~0.10 answered the older flat ``{"object": "error", "message": …, "type": …, "param": null,
"code": 400}``; current vLLM and OpenAI both nest under ``"error"``, which the ``openai`` client parses.)
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from starlette.responses import JSONResponse


def error_body(message: str, err_type: str, code: int, param: str | None = None) -> dict[str, Any]:
    """vLLM/OpenAI error JSON ``{"error": {"message", "type", "param", "code"}}``."""
    return {"error": {"message": message, "type": err_type, "param": param, "code": code}}


def error_response(
    message: str, code: int = 400, err_type: str = "BadRequestError", param: str | None = None
) -> JSONResponse:
    """HTTP error response with :func:`error_body` (status = ``code``)."""
    return JSONResponse(error_body(message, err_type, code, param), status_code=code)


def validation_message(message: str, parameter: str | None = None, value: Any = None) -> str:
    """``str(VLLMValidationError(message, parameter=…, value=…))`` as vLLM formats it."""
    extras = []
    if parameter is not None:
        extras.append(f"parameter={parameter}")
    if value is not None:
        extras.append(f"value={value}")
    return f"{message} ({', '.join(extras)})" if extras else message


@dataclass(frozen=True)
class LengthCheck:
    """Outcome of :func:`check_length`: vLLM's 400 (``error``), or the ``max_tokens`` it will
    generate up to (``max_tokens``, ≥ 1, already clamped to ``max_model_len - prompt_tokens``)."""

    error: JSONResponse | None
    max_tokens: int


def check_length(
    prompt_tokens: int,
    max_tokens: int | None,
    max_model_len: int,
    *,
    max_tokens_param: str = "max_tokens",
    token_ids: bool = False,
) -> LengthCheck:
    """vLLM 0.32's length rules for one prompt, in its order (all tokens).

    1. ``max_tokens > max_model_len`` → 400 on ``max_tokens_param`` (the field the client sent:
       ``max_tokens``, ``max_completion_tokens``, ``max_output_tokens``): "max_tokens=… cannot be
       greater than max_model_len=…" (``renderers/params.py``, ``TokenizeParams.__post_init__``).
    2. ``prompt_tokens > max_model_len`` → 400 on ``input_tokens``. A text prompt is tokenized with
       truncation to ``max_model_len + 1``, so vLLM reports "at least {max_model_len + 1}", never the
       real length; a token-id prompt (``token_ids``) reports its exact count
       (``TokenizeParams._token_len_check``).
    3. The output budget is ``min(max_model_len - prompt_tokens, max_tokens)``
       (``entrypoints/serve/utils/api_utils.py``, ``get_max_tokens``): prompt + max_tokens over the
       limit is **not** an error, the output is silently clamped (200, ``finish_reason: "length"``).
       A prompt of exactly ``max_model_len`` leaves 0 → 400 "max_tokens must be at least 1, got 0."
       (``SamplingParams._verify_args``, always on ``max_tokens``).
    """
    if max_tokens is not None and max_tokens > max_model_len:
        msg = (
            f"{max_tokens_param}={max_tokens} cannot be greater than max_model_len={max_model_len}. "
            "Please request fewer output tokens."
        )
        return LengthCheck(
            error_response(validation_message(msg, max_tokens_param, max_tokens), param=max_tokens_param),
            0,
        )
    if prompt_tokens > max_model_len:
        reported = prompt_tokens if token_ids else max_model_len + 1
        qualifier = "at least " if reported == max_model_len + 1 else ""
        msg = (
            f"This model's maximum context length is {max_model_len} tokens. However, your prompt "
            f"contains {qualifier}{reported} input tokens, which exceeds this limit even without any "
            "output tokens. Please reduce the length of the input prompt."
        )
        return LengthCheck(
            error_response(validation_message(msg, "input_tokens", reported), param="input_tokens"), 0
        )
    budget = (
        max_model_len - prompt_tokens
        if max_tokens is None
        else min(max_model_len - prompt_tokens, max_tokens)
    )
    if budget < 1:
        msg = validation_message(f"max_tokens must be at least 1, got {budget}.", "max_tokens", budget)
        return LengthCheck(error_response(msg, param="max_tokens"), 0)
    return LengthCheck(None, budget)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """OpenAI ``usage`` object (vLLM's ``UsageInfo``)."""
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def new_id(prefix: str) -> str:
    """A fresh response id such as ``chatcmpl-<32 hex>`` or ``cmpl-<32 hex>``."""
    return f"{prefix}-{uuid.uuid4().hex}"


def now_s() -> int:
    """``created`` timestamp (Unix seconds)."""
    return int(time.time())


def chat_logprobs(pieces: list[str], top_logprobs: int) -> dict[str, Any]:
    """OpenAI chat ``choices[].logprobs`` for output tokens ``pieces``, each with ``top_logprobs``
    alternatives (deterministic values; the shape of vLLM's ``ChatCompletionLogProbs``)."""

    def entry(token: str, logprob: float) -> dict[str, Any]:
        return {"token": token, "logprob": logprob, "bytes": list(token.encode("utf-8"))}

    content = []
    for step, token in enumerate(pieces):
        alts = [entry(pieces[(step + j) % len(pieces)], -0.125 - j) for j in range(top_logprobs)]
        content.append({**entry(token, -0.125), "top_logprobs": alts})
    return {"content": content}


def chat_response(
    rid: str,
    model: str,
    texts: list[str],
    finish_reasons: list[str],
    prompt_tokens: int,
    completion_tokens: int,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """Non-streaming ``chat.completion`` body (one choice per text; ``logprobs`` per choice or None)."""
    choices = [
        {
            "index": i,
            "message": {"role": "assistant", "content": text, "tool_calls": []},
            "logprobs": logprobs[i] if logprobs is not None else None,
            "finish_reason": reason,
            "stop_reason": None,
        }
        for i, (text, reason) in enumerate(zip(texts, finish_reasons, strict=True))
    ]
    return {
        "id": rid,
        "object": "chat.completion",
        "created": now_s(),
        "model": model,
        "choices": choices,
        "usage": usage(prompt_tokens, completion_tokens),
    }


def completion_response(
    rid: str,
    model: str,
    texts: list[str],
    finish_reasons: list[str],
    prompt_tokens: int,
    completion_tokens: int,
) -> dict[str, Any]:
    """Non-streaming ``text_completion`` body (one choice per text)."""
    choices = [
        {"index": i, "text": text, "logprobs": None, "finish_reason": reason, "stop_reason": None}
        for i, (text, reason) in enumerate(zip(texts, finish_reasons, strict=True))
    ]
    return {
        "id": rid,
        "object": "text_completion",
        "created": now_s(),
        "model": model,
        "choices": choices,
        "usage": usage(prompt_tokens, completion_tokens),
    }


def _stream_chunk(
    rid: str, created: int, model: str, obj: str, choice: dict[str, Any], include_usage: bool
) -> dict[str, Any]:
    """A streamed chunk envelope around one choice; ``usage: null`` is present iff ``include_usage``
    (OpenAI rule)."""
    chunk: dict[str, Any] = {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [choice],
    }
    if include_usage:
        chunk["usage"] = None
    return chunk


def chat_chunk(
    rid: str,
    created: int,
    model: str,
    index: int,
    delta: dict[str, Any],
    finish_reason: str | None,
    include_usage: bool,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``usage: null`` is present iff ``include_usage`` (OpenAI rule)."""
    choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
    return _stream_chunk(rid, created, model, "chat.completion.chunk", choice, include_usage)


def completion_chunk(
    rid: str, created: int, model: str, index: int, text: str, finish_reason: str | None, include_usage: bool
) -> dict[str, Any]:
    """One streamed ``text_completion`` chunk; ``usage: null`` present iff ``include_usage``."""
    choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish_reason}
    return _stream_chunk(rid, created, model, "text_completion", choice, include_usage)


def usage_chunk(
    rid: str, created: int, model: str, obj: str, prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    """The final ``include_usage`` chunk: ``choices: []`` and the request's ``usage``."""
    return {
        "id": rid,
        "object": obj,
        "created": created,
        "model": model,
        "choices": [],
        "usage": usage(prompt_tokens, completion_tokens),
    }
