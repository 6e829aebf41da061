"""Request bodies of the Responses API, the Anthropic Messages API and the chat batch endpoint.

Each is reduced to the same :class:`~extproc.core.request.request_body.RequestFeatures` as a chat request,
counting what the server renders through the chat template (shapes as published):

* ``/v1/responses`` (OpenAI Responses API; vLLM ``vllm/entrypoints/openai/responses/protocol.py``
  ``ResponsesRequest``): ``instructions`` (a system message); ``input`` as a string (one user
  message) or a list of items: messages (``role`` + ``content`` string or ``input_text`` /
  ``output_text`` / ``input_image`` parts), ``function_call`` (name + arguments),
  ``function_call_output`` (output), ``reasoning`` (summary and content text); other item types
  are budgeted by their compact JSON. ``tools`` (flat function definitions), ``max_output_tokens``,
  ``previous_response_id``. The stored turns a ``previous_response_id`` refers to are not in the
  body: the router sends such a request to the pool that produced that response
  (:mod:`extproc.core.route.response_ids`).
* ``/v1/messages`` (Anthropic Messages API; vLLM ``vllm/entrypoints/anthropic/serving.py``
  converts it to a chat request): ``system`` as a string or ``text`` blocks (one system message),
  ``messages`` whose ``content`` is a string or blocks: ``text``, ``image`` (``source.type``
  ``base64`` or ``url``), ``tool_use`` (name + ``input`` as JSON, like vLLM's conversion),
  ``tool_result`` (string or text/image blocks; vLLM renders it as its own ``tool`` message),
  ``thinking``; ``tools``; ``max_tokens``.
* ``/v1/chat/completions/batch`` (vLLM ``vllm/entrypoints/openai/chat_completion/batch_serving.py``):
  ``messages`` is a list of conversations, each served as its own sequence; its ``usage.prompt_tokens``
  is the sum over conversations. The returned features describe the longest conversation (the one
  that decides the fit) and carry every conversation in ``conversations``.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import orjson

from extproc.core.request.audio import AudioClip
from extproc.core.request.chat_messages import (
    MediaItem,
    PromptText,
    UnreadableRequest,
    int_field,
    json_text,
    tool_defs_of,
    walk_content,
    walk_messages,
)
from extproc.core.request.request_body import (
    RequestFeatures,
    reasoning_request_of,
    rendered_bytes,
    stream_flags,
    tool_json,
    utf8_bytes,
)

__all__ = ["chat_batch_features", "messages_features", "responses_features"]

_TEXT_BLOCKS = ("text", "input_text", "output_text", "summary_text", "reasoning_text")


def _features(
    parsed: dict[str, Any],
    endpoint: str,
    text: PromptText,
    counts: list[int],
    images: list[MediaItem],
    n_messages: int,
    max_output: int | None,
    reasoning: list[str] | None = None,
    **extra: Any,
) -> RequestFeatures:
    """Features of a walked request; ``counts`` = [images, audio, tool calls, unknown fields]."""
    tool_defs = tool_defs_of(parsed)
    tools = tool_json(tool_defs)
    stream, include_usage = stream_flags(parsed)
    prompt_text, text_bytes, prompt_codes = text.joined([])
    return RequestFeatures(
        endpoint=endpoint,
        model=parsed.get("model", ""),
        text_bytes=text_bytes,
        n_messages=n_messages,
        exact_prompt_tokens=0,
        tool_schema_bytes=utf8_bytes(tools[0]) if tools else 0,
        n_tools=len(tool_defs),
        n_images=counts[0],
        n_audio=counts[1],
        max_output_tokens=max_output,
        n_sequences=1,
        stream=stream,
        include_usage=include_usage,
        prompt_text=prompt_text,
        n_tool_calls=counts[2],
        unknown_fields=counts[3],
        reasoning_text="\n".join(reasoning or ()),
        tools_json=tools,
        rendered_bytes=rendered_bytes(text_bytes, reasoning or [], tools),
        image_sizes=tuple(x for x in images if not isinstance(x, AudioClip)),
        audio_clips=tuple(x for x in images if isinstance(x, AudioClip)),
        reasoning_request=reasoning_request_of(parsed),
        **extra,
    ).with_prompt_codes(prompt_codes)


# -- Responses API ----------------------------------------------------------------------------


def responses_features(parsed: dict[str, Any]) -> RequestFeatures:
    """The features of a ``/v1/responses`` body (module docstring); raises :class:`UnreadableRequest`."""
    text = PromptText()
    counts = [0, 0, 0, 0]
    images: list[MediaItem] = []
    n_messages = 0
    instructions = parsed.get("instructions")
    if instructions is not None:
        if not isinstance(instructions, str):
            raise UnreadableRequest("bad_field_type", "instructions")
        text.add(instructions)
        n_messages += 1
    previous = parsed.get("previous_response_id")
    if previous is not None and not isinstance(previous, str):
        raise UnreadableRequest("bad_field_type", "previous_response_id")
    items = parsed.get("input")
    if isinstance(items, str):
        text.add(items)
        n_messages += 1
    elif isinstance(items, list):
        for item in items:
            n_messages += _response_item(item, text, counts, images)
    else:
        raise UnreadableRequest("empty_prompt" if items is None else "bad_field_type", "input")
    if not n_messages and previous is None:
        raise UnreadableRequest("empty_prompt", "input")
    return _features(
        parsed,
        "responses",
        text,
        counts,
        images,
        n_messages,
        int_field(parsed, "max_output_tokens"),
        previous_response_id=previous[:256] if previous else None,
    )


def _response_item(item: Any, text: PromptText, counts: list[int], images: list[MediaItem]) -> int:
    """Add one ``input`` item; returns the chat messages it renders as (0 or 1)."""
    if not isinstance(item, dict):
        raise UnreadableRequest("bad_field_type", "input item")
    kind = item.get("type", "message")
    if kind == "message":
        walk_content(item.get("content"), text, counts, images)
        return 1
    if kind == "function_call":
        text.add(str(item.get("name") or ""))
        text.add(json_text(item.get("arguments") or ""))
        return 1
    if kind == "function_call_output":
        text.add(json_text(item.get("output") or ""))
        return 1
    if kind == "reasoning":
        for field in ("summary", "content"):
            for part in item.get(field) or ():
                if isinstance(part, dict) and isinstance(part.get("text"), str):
                    text.add(part["text"])
        return 0
    if kind == "item_reference":
        return 0
    text.add(orjson.dumps(item).decode())  # unknown item: its JSON is an upper bound of its text
    return 1


# -- Anthropic Messages API --------------------------------------------------------------------


def messages_features(parsed: dict[str, Any]) -> RequestFeatures:
    """The features of a ``/v1/messages`` body (module docstring); raises :class:`UnreadableRequest`."""
    text = PromptText()
    counts = [0, 0, 0, 0]
    images: list[MediaItem] = []
    n_messages = 0
    system = parsed.get("system")
    if system is not None:
        if isinstance(system, str):
            text.add(system)
        elif isinstance(system, list):
            _blocks(system, text, counts, images)
        else:
            raise UnreadableRequest("bad_field_type", "system")
        n_messages += 1
    messages = parsed.get("messages")
    if not isinstance(messages, list):
        raise UnreadableRequest("bad_field_type", "messages")
    if not messages:
        raise UnreadableRequest("empty_prompt", "messages")
    for msg in messages:
        if not isinstance(msg, dict):
            raise UnreadableRequest("bad_field_type", "message")
        content = msg.get("content")
        n_messages += 1
        if isinstance(content, str):
            text.add(content)
        elif isinstance(content, list):
            n_messages += _blocks(content, text, counts, images)
        elif content is not None:
            raise UnreadableRequest("bad_field_type", "content")
    return _features(parsed, "messages", text, counts, images, n_messages, int_field(parsed, "max_tokens"))


def _blocks(blocks: list[Any], text: PromptText, counts: list[int], images: list[MediaItem]) -> int:
    """Add Anthropic content blocks; returns the extra chat messages they render as
    (vLLM turns each ``tool_result`` of a user turn into a ``tool`` message)."""
    extra = 0
    for block in blocks:
        if not isinstance(block, dict):
            raise UnreadableRequest("bad_field_type", "content block")
        kind = block.get("type")
        if kind == "text":
            value = block.get("text")
            text.add(value if isinstance(value, str) else "")
        elif kind == "image":
            walk_content([block], text, counts, images)
        elif kind == "document":
            counts[0] += 1
        elif kind == "tool_use":
            text.add(str(block.get("name") or ""))
            text.add(json_text(block.get("input") or {}))
        elif kind == "tool_result":
            extra += 1
            inner = block.get("content")
            if isinstance(inner, str):
                text.add(inner)
            elif isinstance(inner, list):
                _blocks(inner, text, counts, images)
        elif kind == "thinking":
            value = block.get("thinking")
            text.add(value if isinstance(value, str) else "")
        elif kind in ("redacted_thinking", "tool_reference", "search_result"):
            continue
        else:
            raise UnreadableRequest("unknown_content_part")
    return extra


# -- chat batch --------------------------------------------------------------------------------


def chat_batch_features(parsed: dict[str, Any]) -> RequestFeatures:
    """The features of a ``/v1/chat/completions/batch`` body (module docstring); raises
    :class:`UnreadableRequest`."""
    conversations = parsed.get("messages")
    if not isinstance(conversations, list):
        raise UnreadableRequest("bad_field_type", "messages")
    if not conversations:
        raise UnreadableRequest("empty_prompt", "messages")
    max_completion = int_field(parsed, "max_completion_tokens")
    max_output = max_completion if max_completion is not None else int_field(parsed, "max_tokens")
    each: list[RequestFeatures] = []
    for conversation in conversations:
        text = PromptText()
        counts = [0, 0, 0, 0]
        images: list[MediaItem] = []
        reasoning: list[str] = []
        n = walk_messages(conversation, text, counts, reasoning, images)
        each.append(_features(parsed, "chat_batch", text, counts, images, n, max_output, reasoning))
    longest = max(each, key=lambda f: (f.text_bytes + 4096 * f.n_images, f.n_messages))
    return _features_with_conversations(longest, tuple(each))


def _features_with_conversations(
    longest: RequestFeatures, conversations: tuple[RequestFeatures, ...]
) -> RequestFeatures:
    """The features of the longest conversation (every field: run counts, tool and reasoning runs,
    tool calls, unknown fields), as one sequence with no token-id prompt, carrying all ``conversations``."""
    return dataclasses.replace(longest, exact_prompt_tokens=0, n_sequences=1, conversations=conversations)
