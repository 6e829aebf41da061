"""Wire shapes of the stand-in pool's Responses and Anthropic Messages endpoints: request bodies
translated to the chat messages the template renders, and the response objects, usage blocks,
events and errors vLLM sends (sources cited per function and in :mod:`mockpool.apis`)."""

from __future__ import annotations

import json
from typing import Any

import orjson
from starlette.responses import JSONResponse

from mockpool import protocol
from mockpool.settings import PoolSettings
from mockpool.validation import RequestError, require_served_model


def sse_event(event: str, payload: dict[str, Any]) -> bytes:
    """One named server-sent event (``event: NAME`` + ``data: JSON``), as the Responses and Anthropic
    streams send them."""
    return f"event: {event}\ndata: ".encode() + orjson.dumps(payload) + b"\n\n"


def anthropic_error(message: str, code: int = 400, err_type: str = "BadRequestError") -> JSONResponse:
    """Anthropic's error body (``{"type": "error", "error": {type, message}}``) with HTTP ``code``."""
    return JSONResponse({"type": "error", "error": {"type": err_type, "message": message}}, status_code=code)


def max_tokens_of(body: dict[str, Any], key: str) -> int | None:
    """``body[key]`` as a positive int, None when absent.

    Raises:
        RequestError: the value is not a positive integer (answered with HTTP 400).
    """
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise RequestError(f"'{key}' must be a positive integer", param=key)
    return value


def model_of(body: dict[str, Any], settings: PoolSettings) -> str:
    """The request's ``model`` (the pool's first served name when absent).

    Raises:
        RequestError: ``model`` is not a string (400), or not served (404, as vLLM; see
            :func:`~mockpool.validation.require_served_model`).
    """
    model = body.get("model", settings.model_names[0])
    if not isinstance(model, str):
        raise RequestError("'model' must be a string", param="model")
    require_served_model(model, settings)
    return model


def _responses_part(part: Any) -> Any:
    if isinstance(part, dict) and part.get("type") in ("input_text", "output_text"):
        return {"type": "text", "text": part.get("text", "")}
    if isinstance(part, dict) and part.get("type") == "input_image":
        return {"type": "image_url", "image_url": {"url": part.get("image_url", "")}}
    return part


def responses_messages(body: dict[str, Any], stored: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages a Responses API request renders as (vLLM ``responses/utils.py``
    ``construct_input_messages``): instructions, the stored conversation, then ``input``."""
    out: list[dict[str, Any]] = []
    if isinstance(body.get("instructions"), str):
        out.append({"role": "system", "content": body["instructions"]})
    out.extend(m for m in stored if m.get("role") != "system")
    items = body.get("input")
    if isinstance(items, str):
        out.append({"role": "user", "content": items})
        return out
    if not isinstance(items, list):
        raise RequestError("'input' must be a string or an array of items", param="input")
    for item in items:
        if not isinstance(item, dict):
            raise RequestError("input items must be objects", param="input")
        kind = item.get("type", "message")
        if kind == "message":
            content = item.get("content")
            if isinstance(content, list):
                content = [_responses_part(p) for p in content]
            out.append({"role": item.get("role", "user"), "content": content})
        elif kind == "function_call":
            call = {"name": item.get("name", ""), "arguments": item.get("arguments", "{}")}
            out.append(
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": item.get("call_id", ""), "type": "function", "function": call}],
                }
            )
        elif kind == "function_call_output":
            out.append(
                {"role": "tool", "tool_call_id": item.get("call_id", ""), "content": item.get("output", "")}
            )
    return out


def responses_tools(tools: Any) -> list[Any] | None:
    """Responses API ``tools`` (flat function tools) as the chat template's ``tools`` list, None when
    there are none."""
    if not isinstance(tools, list) or not tools:
        return None
    return [
        {"type": "function", "function": {k: v for k, v in t.items() if k != "type"}}
        if isinstance(t, dict) and "function" not in t
        else t
        for t in tools
    ]


def anthropic_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """Chat messages an Anthropic Messages request converts to (vLLM ``anthropic/serving.py``)."""
    out: list[dict[str, Any]] = []
    system = body.get("system")
    parts: list[str] = []
    if isinstance(system, str):
        parts.append(system)
    elif isinstance(system, list):
        parts.extend(b.get("text", "") for b in system if isinstance(b, dict) and b.get("type") == "text")
    if parts:
        out.append({"role": "system", "content": "".join(parts)})
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("'messages' must be a non-empty array", param="messages")
    for msg in messages:
        if not isinstance(msg, dict):
            raise RequestError("messages must be objects", param="messages")
        role = msg.get("role", "user")
        content = msg.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        chat_parts, calls = _anthropic_blocks(content if isinstance(content, list) else [], out)
        entry: dict[str, Any] = {"role": role}
        if calls:
            entry["tool_calls"] = calls
        if len(chat_parts) == 1 and chat_parts[0]["type"] == "text":
            entry["content"] = chat_parts[0]["text"]
        elif chat_parts:
            entry["content"] = chat_parts
        if "content" in entry or calls:
            entry.setdefault("content", "")
            out.append(entry)
    return out


def _anthropic_blocks(
    blocks: list[Any], out: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """``(content parts, tool_calls)`` of one Anthropic message's blocks; a ``tool_result`` is
    appended to ``out`` as its own ``tool`` message (vLLM's ``_convert_user_tool_result``)."""
    chat_parts: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for block in blocks:
        kind = block.get("type") if isinstance(block, dict) else None
        if kind == "text" and block.get("text"):
            chat_parts.append({"type": "text", "text": block["text"]})
        elif kind == "image":
            chat_parts.append({"type": "image", "source": block.get("source", {})})
        elif kind == "tool_use":
            fn = {"name": block.get("name", ""), "arguments": json.dumps(block.get("input") or {})}
            calls.append({"id": block.get("id", ""), "type": "function", "function": fn})
        elif kind == "tool_result":
            out.append(
                {"role": "tool", "tool_call_id": block.get("tool_use_id", ""), "content": _result_text(block)}
            )
    return chat_parts, calls


def _result_text(block: dict[str, Any]) -> str:
    inner = block.get("content")
    if isinstance(inner, str):
        return inner
    return "\n".join(
        b.get("text", "") for b in inner or () if isinstance(b, dict) and b.get("type") == "text"
    )


def anthropic_tools(tools: Any) -> list[Any] | None:
    """Anthropic ``tools`` (name, description, input_schema) as the chat template's function tools,
    None when there are none."""
    if not isinstance(tools, list) or not tools:
        return None
    return [
        {
            "type": "function",
            "function": {
                "name": t.get("name", ""),
                "description": t.get("description", ""),
                "parameters": t.get("input_schema", {}),
            },
        }
        for t in tools
        if isinstance(t, dict)
    ]


def output_message(mid: str, text: str) -> dict[str, Any]:
    """A completed Responses ``output`` message item holding ``text``."""
    return {
        "id": mid,
        "type": "message",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": [], "logprobs": None}],
    }


def responses_usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """The Responses API ``usage`` block for these token counts."""
    return {
        "input_tokens": prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": prompt_tokens + completion_tokens,
    }


def response_object(
    rid: str, model: str, body: dict[str, Any], status: str, output: list[Any], usage: dict[str, Any] | None
) -> dict[str, Any]:
    """vLLM ``ResponsesResponse`` fields (``responses/protocol.py``)."""
    return {
        "id": rid,
        "created_at": protocol.now_s(),
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "metadata": None,
        "model": model,
        "object": "response",
        "output": output,
        "parallel_tool_calls": True,
        "temperature": 1.0,
        "tool_choice": "auto",
        "tools": [],
        "top_p": 1.0,
        "background": False,
        "max_output_tokens": body.get("max_output_tokens"),
        "previous_response_id": body.get("previous_response_id"),
        "reasoning": None,
        "service_tier": "auto",
        "status": status,
        "text": None,
        "truncation": "disabled",
        "usage": usage,
        "user": None,
    }
