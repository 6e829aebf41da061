"""Where each API reports the served prompt size, in its JSON body and in its stream events.

* OpenAI chat / completions / chat batch: ``usage.prompt_tokens`` (batch: the sum over
  conversations, vLLM ``chat_completion/batch_serving.py``); streams: the ``include_usage`` chunk.
* Responses API (vLLM ``vllm/entrypoints/openai/responses/serving.py``, ``protocol.py``
  ``ResponseUsage``): ``usage.input_tokens`` of the response object; streamed as
  ``event: <type>`` / ``data: <json>`` pairs without ``[DONE]``, where ``response.created`` and
  ``response.in_progress`` carry ``response.usage: null`` and ``response.completed`` (or
  ``response.incomplete`` / ``response.failed``) the final ``response.usage``. The response ``id``
  (``resp_…``) is read with it, for :mod:`extproc.core.route.response_ids`.
* Anthropic Messages (vLLM ``vllm/entrypoints/anthropic/serving.py``): ``usage.input_tokens``
  (plus ``cache_creation_input_tokens`` and ``cache_read_input_tokens`` when present: Anthropic
  counts cached prompt tokens apart); streamed in ``message_start`` (``message.usage``) and again
  in ``message_delta`` (``usage``, same value in vLLM): the last one read wins, so it is learned
  from once.
"""

from __future__ import annotations

from typing import Any

import orjson

__all__ = [
    "MAX_FINISH_REASONS",
    "finish_reasons_of",
    "json_usage",
    "response_id_of",
    "usage_of",
]

MAX_FINISH_REASONS = 128
"""Choices whose finish reason a reader keeps (more is not a real answer: the judgement is skipped)."""


def _count(usage: dict[str, Any], key: str, minimum: int) -> int | None:
    value = usage.get(key)
    if isinstance(value, int) and not isinstance(value, bool) and value >= minimum:
        return value
    return None


def _usage_dict(obj: Any, api: str) -> dict[str, Any] | None:
    if not isinstance(obj, dict):
        return None
    usage = obj.get("usage")
    if usage is None and api != "openai":
        inner = obj.get("response" if api == "responses" else "message")
        if isinstance(inner, dict):
            usage = inner.get("usage")
    return usage if isinstance(usage, dict) else None


def usage_of(obj: Any, api: str) -> tuple[int | None, int | None]:
    """``(prompt tokens, completion tokens)`` of one JSON body or stream event of ``api``
    (``openai``, ``responses`` or ``anthropic``); the prompt count is None unless positive."""
    usage = _usage_dict(obj, api)
    if usage is None:
        return None, None
    if api == "openai":
        return _count(usage, "prompt_tokens", 1), _count(usage, "completion_tokens", 0)
    prompt = _count(usage, "input_tokens", 1)
    if prompt is not None and api == "anthropic":
        for key in ("cache_creation_input_tokens", "cache_read_input_tokens"):
            prompt += _count(usage, key, 0) or 0
    return prompt, _count(usage, "output_tokens", 0)


def _reason(value: Any) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= 64 else None


def finish_reasons_of(obj: Any, api: str) -> list[tuple[int, str]]:
    """``(choice index, finish reason)`` pairs of one JSON body or stream event of ``api``.

    * ``openai``: each ``choices[i].finish_reason`` that is a string (``length``, ``stop``,
      ``tool_calls``, ...), at the choice's ``index`` (its position when absent); a stream chunk
      carries it in the choice's last chunk.
    * ``responses``: the response's ``status`` (``completed``, ``failed``, ...), or for
      ``status: "incomplete"`` its ``incomplete_details.reason`` (``max_output_tokens``), at index 0;
      streamed in ``response.completed`` / ``response.incomplete``.
    * ``anthropic``: ``stop_reason`` (``end_turn``, ``max_tokens``, ...) of the message, or of a
      stream's ``message_delta`` ``delta``, at index 0.

    Empty when ``obj`` carries none (``null`` values, other shapes).
    """
    if not isinstance(obj, dict):
        return []
    if api == "openai":
        choices = obj.get("choices")
        if not isinstance(choices, list):
            return []
        out: list[tuple[int, str]] = []
        for pos, choice in enumerate(choices[:MAX_FINISH_REASONS]):
            if not isinstance(choice, dict):
                continue
            reason = _reason(choice.get("finish_reason"))
            index = choice.get("index", pos)
            if reason is not None and isinstance(index, int) and 0 <= index < MAX_FINISH_REASONS:
                out.append((index, reason))
        return out
    if api == "responses":
        inner = obj.get("response", obj)
        if not isinstance(inner, dict):
            return []
        status = _reason(inner.get("status"))
        if status == "incomplete":
            details = inner.get("incomplete_details")
            status = (_reason(details.get("reason")) if isinstance(details, dict) else None) or status
        return [(0, status)] if status is not None and status != "in_progress" else []
    delta = obj.get("delta") if obj.get("type") == "message_delta" else obj
    reason = _reason(delta.get("stop_reason")) if isinstance(delta, dict) else None
    return [(0, reason)] if reason is not None else []


def response_id_of(obj: Any) -> str | None:
    """The Responses API ``id`` of a response body or of a stream event's ``response``."""
    if not isinstance(obj, dict):
        return None
    inner = obj.get("response")
    rid = inner.get("id") if isinstance(inner, dict) else obj.get("id")
    if isinstance(rid, str) and 0 < len(rid) <= 256 and obj.get("object", "response") == "response":
        return rid
    return None


def json_usage(body: bytes, api: str) -> tuple[int | None, int | None, str | None]:
    """``(prompt tokens, completion tokens, response id)`` of a complete JSON response body;
    each None when absent or unreadable (the id only for ``api == "responses"``)."""
    if b'"usage"' not in body and api != "responses":
        return None, None, None
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None, None, None
    prompt, completion = usage_of(obj, api)
    return prompt, completion, response_id_of(obj) if api == "responses" else None
