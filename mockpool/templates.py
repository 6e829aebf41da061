"""Chat templates: turn OpenAI ``messages`` (+ ``tools``) into the prompt string a vLLM server would tokenize.

Two families (method: docs/data.md §2.2):

* **qwen3** — the official Qwen3 Jinja template shipped in the wheel's ``tokenizer_config.json``, rendered the way
  ``transformers.apply_chat_template`` does (``ImmutableSandboxedEnvironment`` with ``trim_blocks``,
  ``lstrip_blocks``, the ``loopcontrols`` extension, transformers' ``tojson`` filter, ``raise_exception`` and
  ``strftime_now`` globals). This is the vLLM code path (``vllm/entrypoints/chat_utils.py`` → HF template).
* **llama3** — Meta's canonical Llama-3 chat format with no default system prompt:
  ``<|begin_of_text|>`` + Σ ``<|start_header_id|>{role}<|end_header_id|>\\n\\n{content.strip()}<|eot_id|>`` +
  ``<|start_header_id|>assistant<|end_header_id|>\\n\\n``; ``tools`` are appended as compact JSON text; an
  assistant's ``tool_calls`` follow its content as ``{"name": ..., "parameters": ...}`` (Meta's 3.1 template).
  (HF Llama-3.1+ templates also inject a dated system header; it is date-dependent and not used.)

Message normalisation follows vLLM's "string" content format: text parts of an array ``content`` are joined
with ``"\\n"``; media parts (images, audio, video) are removed from the text and counted separately
(see :func:`normalize_messages`); ``content: null`` becomes ``""``; assistant ``tool_calls[].function.arguments``
given as JSON strings are parsed to objects (vLLM's ``_postprocess_messages`` does the same).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import jinja2
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text", "refusal"})
MEDIA_PART_TYPES = frozenset(
    {
        "image_url",
        "input_image",
        "image",
        "image_pil",
        "image_embeds",
        "audio_url",
        "input_audio",
        "video_url",
    }
)
LLAMA3_BOS = "<|begin_of_text|>"


class ChatInputError(ValueError):
    """The ``messages``/``tools`` of a request cannot be rendered (answered with HTTP 400 by the app)."""


@dataclass(frozen=True)
class NormalizedChat:
    """Messages ready for a template.

    Attributes:
        messages: list of message dicts with string ``content``.
        media_parts: number of media content parts removed from the text (images, audio, video).
    """

    messages: list[dict[str, Any]]
    media_parts: int


def _content_to_text(content: Any, where: str) -> tuple[str, int]:
    """Return (text, media part count) of one message ``content`` (str, None or list of parts)."""
    if content is None:
        return "", 0
    if isinstance(content, str):
        return content, 0
    if not isinstance(content, list):
        raise ChatInputError(f"{where}.content must be a string, null or an array of content parts")
    texts: list[str] = []
    media = 0
    for j, part in enumerate(content):
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, Mapping):
            raise ChatInputError(f"{where}.content[{j}] must be an object")
        ptype = part.get("type")
        if ptype in TEXT_PART_TYPES:
            text = part.get("text", part.get("refusal"))
            if not isinstance(text, str):
                raise ChatInputError(f"{where}.content[{j}].text must be a string")
            texts.append(text)
        elif ptype in MEDIA_PART_TYPES:
            media += 1
        else:
            raise ChatInputError(f"Unknown part type: {ptype!r} in {where}.content[{j}]")
    return "\n".join(texts), media


def _parse_tool_call_arguments(message: dict[str, Any], where: str) -> None:
    """Parse JSON-string ``arguments`` of assistant tool calls to objects, as vLLM does (in place)."""
    tool_calls = message.get("tool_calls")
    if not isinstance(tool_calls, list):
        return
    parsed: list[Any] = []
    for k, call in enumerate(tool_calls):
        if not isinstance(call, Mapping) or not isinstance(call.get("function"), Mapping):
            raise ChatInputError(f"{where}.tool_calls[{k}] must be an object with a 'function' object")
        function = dict(call["function"])
        args = function.get("arguments")
        if not args:
            function["arguments"] = {}
        elif isinstance(args, str):
            try:
                function["arguments"] = json.loads(args)
            except json.JSONDecodeError as exc:
                raise ChatInputError(f"{where}.tool_calls[{k}].function.arguments is not valid JSON") from exc
        parsed.append({**call, "function": function})
    message["tool_calls"] = parsed


def _vllm_message(raw: Mapping[str, Any], role: str, text: str) -> dict[str, Any]:
    """The message vLLM hands to the chat template (``vllm/entrypoints/chat_utils.py``,
    ``_parse_chat_message_content``): ``role`` and the flattened ``content``; for assistants
    ``tool_calls`` and ``reasoning`` (copied to ``reasoning_content`` as well); for tool messages
    ``tool_call_id``; ``name`` and ``task`` when they are strings; ``tools`` for developer messages.
    Every other field is dropped. A request that sends only ``reasoning_content`` (the older
    spelling, still what DeepSeek/Qwen clients send) is read as ``reasoning``: budgets stay on the
    safe side whichever spelling a vLLM version accepts."""
    message: dict[str, Any] = {"role": role, "content": text}
    if role == "assistant":
        if raw.get("tool_calls") is not None:
            message["tool_calls"] = list(raw["tool_calls"])
        reasoning = raw.get("reasoning", raw.get("reasoning_content"))
        if reasoning is not None:
            message["reasoning"] = message["reasoning_content"] = reasoning
    elif role == "tool" and "tool_call_id" in raw:
        message["tool_call_id"] = raw["tool_call_id"]
    for field in ("name", "task"):
        if isinstance(raw.get(field), str):
            message[field] = raw[field]
    if role == "developer":
        message["tools"] = raw.get("tools")
    return message


def normalize_messages(messages: Any) -> NormalizedChat:
    """Validate OpenAI chat ``messages`` and convert them to template input.

    Args:
        messages: the request's ``messages`` value (must be a non-empty list of objects with a string ``role``).

    Returns:
        :class:`NormalizedChat` (copies; the request is not modified).

    Raises:
        ChatInputError: on any shape error, with a message naming the offending field.
    """
    if not isinstance(messages, list) or not messages:
        raise ChatInputError("'messages' must be a non-empty array")
    out: list[dict[str, Any]] = []
    media_total = 0
    for i, raw in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(raw, Mapping):
            raise ChatInputError(f"{where} must be an object")
        role = raw.get("role")
        if not isinstance(role, str) or not role:
            raise ChatInputError(f"{where}.role must be a non-empty string")
        text, media = _content_to_text(raw.get("content"), where)
        media_total += media
        message = _vllm_message(raw, role, text)
        if role == "assistant":
            _parse_tool_call_arguments(message, where)
        out.append(message)
    return NormalizedChat(messages=out, media_parts=media_total)


def _tojson(
    x: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    """transformers' ``tojson`` filter (no HTML escaping, ``ensure_ascii=False``)."""
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    """Template helper ``raise_exception`` (transformers): abort rendering with a template error."""
    raise jinja2.exceptions.TemplateError(message)


def _strftime_now(fmt: str) -> str:
    """Template helper ``strftime_now`` (transformers)."""
    return datetime.now().strftime(fmt)


class JinjaChatTemplate:
    """A Hugging Face chat template compiled like ``transformers.apply_chat_template`` compiles it."""

    def __init__(self, source: str, special_tokens: Mapping[str, str | None] | None = None) -> None:
        """Compile ``source`` (Jinja text); ``special_tokens`` (e.g. ``eos_token``) become template variables."""
        env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_exception
        env.globals["strftime_now"] = _strftime_now
        self._template = env.from_string(source)
        self._special_tokens = dict(special_tokens or {})

    def render(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = True,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> str:
        """Render the prompt string.

        Raises:
            ChatInputError: the template raised (``raise_exception``) or failed on the given input.
        """
        kwargs: dict[str, Any] = {**self._special_tokens, **(template_kwargs or {})}
        kwargs.update(messages=list(messages), tools=list(tools) if tools else None)
        kwargs["add_generation_prompt"] = add_generation_prompt
        try:
            return self._template.render(**kwargs)
        except jinja2.exceptions.TemplateError as exc:
            raise ChatInputError(f"chat template error: {exc}") from exc
        except (TypeError, AttributeError, KeyError, ValueError) as exc:
            raise ChatInputError(f"chat template could not render these messages: {exc}") from exc


def render_llama3(
    messages: Sequence[Mapping[str, Any]],
    tools: Sequence[Any] | None = None,
    add_generation_prompt: bool = True,
) -> str:
    """Meta's canonical Llama-3 chat format (see module docstring); ``tools`` appended as compact JSON text."""
    parts = [LLAMA3_BOS]
    for message in messages:
        content = (message.get("content") or "").strip()
        for call in message.get("tool_calls") or ():
            # Meta's Llama-3.1 template: {"name": ..., "parameters": ...} per call, JSON with spaces
            fn = call.get("function", {}) if isinstance(call, Mapping) else {}
            content += json.dumps(
                {"name": fn.get("name"), "parameters": fn.get("arguments")}, ensure_ascii=False
            )
        parts.append(f"<|start_header_id|>{message['role']}<|end_header_id|>\n\n{content}<|eot_id|>")
    if add_generation_prompt:
        parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    if tools:
        parts.append(json.dumps(list(tools), ensure_ascii=False, separators=(",", ":")))
    return "".join(parts)
