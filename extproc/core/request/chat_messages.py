"""Chat messages and prompts as vLLM's chat template sees them: the text walk behind
:func:`extproc.core.request.request_body.parse_request_body`.

Every field vLLM's chat-message parsing hands to the template is measured
(:data:`VLLM_MESSAGE_FIELDS`); structured values are measured as the template prints them
(:func:`json_text`); images are sized from their headers (:mod:`extproc.core.request.images`). Text is
measured in UTF-8 bytes of the decoded JSON strings.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import orjson

from extproc.core.request.audio import AudioClip, clip_of_part
from extproc.core.request.images import ImageSize, size_from_base64, size_from_url
from extproc.core.text.runs import text_utf8_length

__all__ = [
    "VLLM_MESSAGE_FIELDS",
    "MediaItem",
    "PromptText",
    "UnreadableRequest",
    "int_field",
    "json_text",
    "tool_defs_of",
    "walk_content",
    "walk_messages",
    "walk_prompt",
]

_MAX_SANE_TOKENS = 1 << 31


class UnreadableRequest(ValueError):
    """The body cannot be budgeted; ``reason`` is a fixed label such as ``"body_not_json"``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.model: str | None = None
        """The request's ``model`` when it was read before the problem (routes to its pool set)."""


VLLM_MESSAGE_FIELDS = frozenset(
    {
        "role",
        "content",
        "name",
        "tool_calls",
        "tool_call_id",
        "reasoning",
        "reasoning_content",
        "tools",
        "task",
    }
)
"""Message fields vLLM's chat-message parsing hands to the chat template
(``vllm/entrypoints/chat_utils.py``: ``_parse_chat_message_content`` copies ``tool_calls`` and
``reasoning`` (also as ``reasoning_content``) of assistant messages, ``tool_call_id`` of tool messages,
``name`` and ``task`` of any message and ``tools`` of developer messages)."""


def json_text(value: Any) -> str:
    """How a template shows a structured value: JSON with ``", "``/``": "`` separators (Jinja
    ``tojson`` / Python ``json.dumps`` defaults, the wider of the compact and spaced forms)."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode().replace('","', '", "').replace('":', '": ')
    except TypeError:
        return str(value)


def _arguments_text(args: Any) -> str:
    """Tool-call ``arguments`` as the template shows them: vLLM parses a JSON string to an object
    (``_postprocess_messages``) and templates print it with ``tojson``."""
    if isinstance(args, str):
        try:
            parsed: Any = orjson.loads(args)
        except orjson.JSONDecodeError:
            return args
        return json_text(parsed)
    return "" if args is None else json_text(args)


MediaItem = ImageSize | AudioClip | None
"""One media part in request order: an image's size (None when not inline) or an audio clip."""


class PromptText:
    """Accumulates the prompt's text parts; bytes are counted once, on the joined text
    (:meth:`joined`)."""

    __slots__ = ("all",)

    def __init__(self) -> None:
        self.all: list[str] = []

    def add(self, s: str) -> None:
        if s:
            self.all.append(s)

    def joined(self, extra: list[str]) -> tuple[str, int, np.ndarray | None]:
        """``(text, total, codes)``: the parts then ``extra`` joined by newlines; the UTF-8 bytes of
        the parts alone (a lone surrogate from a ``\\ud800`` escape counts its 3 bytes); the code
        points of ``text`` (:func:`extproc.core.text.runs.code_points`) when the numpy path computed them
        to measure it (the run count reuses them), else None.

        An ASCII text (``str.isascii`` is O(1) in CPython) counts its length; any other is measured
        joined (:func:`extproc.core.text.runs.text_utf8_length`: one encode, or without the C run counter
        the numpy code points of a long text). The separators and ``extra`` are taken off.
        """
        pieces = self.all + extra
        text = "\n".join(pieces)
        others = max(0, len(pieces) - 1)
        if text.isascii():
            return text, len(text) - others - sum(map(len, extra)), None
        others += sum(len(t.encode("utf-8", "surrogatepass")) for t in extra)
        total, codes = text_utf8_length(text)
        return text, total - others, codes


def int_field(body: dict[str, Any], name: str) -> int | None:
    """A non-negative integer field of ``body`` (integral floats accepted), None when absent.

    Raises:
        UnreadableRequest: ``bad_field_type`` (not a number, or a non-integral float) or
            ``bad_field_value`` (negative or ≥ 2³¹).
    """
    value = body.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UnreadableRequest("bad_field_type", name)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")) or not value.is_integer():
            raise UnreadableRequest("bad_field_type", name)
        value = int(value)
    if value < 0 or value >= _MAX_SANE_TOKENS:
        raise UnreadableRequest("bad_field_value", name)
    return value


def _image_size(part: dict[str, Any]) -> ImageSize | None:
    """Pixel size of an image part from its header, when the part carries the image inline.

    Shapes: chat ``image_url: {url}`` or ``image_url: "<url>"``; Responses ``input_image``
    ``image_url: "<url>"``; Anthropic ``image`` ``source: {type: base64, data}``.
    """
    value = part.get("image_url")
    if isinstance(value, dict):
        value = value.get("url")
    if isinstance(value, str):
        return size_from_url(value)
    source = part.get("source")
    if isinstance(source, dict) and source.get("type") == "base64":
        data = source.get("data")
        if isinstance(data, str):
            return size_from_base64(data)
    return None


def walk_content(
    content: Any, text: PromptText, counts: list[int], images: list[MediaItem] | None = None
) -> None:
    """Walk a message ``content``: string, or list of parts. counts = [images, audio]; the size
    of each image part is appended to ``images`` (None when not inline)."""
    if content is None:
        return
    if isinstance(content, str):
        text.add(content)
        return
    if not isinstance(content, list):
        raise UnreadableRequest("bad_field_type", "content")
    for part in content:
        if isinstance(part, str):
            text.add(part)
            continue
        if not isinstance(part, dict):
            raise UnreadableRequest("bad_field_type", "content part")
        kind = part.get("type")
        if kind in ("text", "input_text", "output_text", "refusal"):
            value = part.get(kind if kind == "refusal" else "text")
            if value is not None and not isinstance(value, str):
                raise UnreadableRequest("bad_field_type", "content text")
            text.add(value or "")
        elif not _media_part(kind, part, counts, images):
            raise UnreadableRequest("unknown_content_part")


def _media_part(kind: Any, part: dict[str, Any], counts: list[int], images: list[MediaItem] | None) -> bool:
    """Count an image, audio or document part (counts = [images, audio]) and append its size or
    duration to ``images``; False for any other part type."""
    if kind in ("image_url", "input_image", "image"):
        counts[0] += 1
        if images is not None:
            images.append(_image_size(part))
    elif kind in ("input_audio", "audio", "audio_url"):
        counts[1] += 1
        if images is not None:
            images.append(clip_of_part(part))  # duration from the header (extproc.core.request.audio)
    elif kind in ("file", "input_file"):
        counts[0] += 1  # documents render to pages; budget like an image
    else:
        return False
    return True


def _tool_calls(calls: Any, text: PromptText, counts: list[int]) -> None:
    """An assistant's ``tool_calls``: name and arguments as the template prints them."""
    for call in calls or ():
        counts[2] += 1
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            text.add(str(fn.get("name") or ""))
            text.add(_arguments_text(fn.get("arguments")))
        else:
            text.add(json_text(call))


def _message(
    msg: dict[str, Any],
    text: PromptText,
    counts: list[int],
    reasoning: list[str],
    images: list[MediaItem] | None = None,
) -> None:
    """Every field of one message the template can render (module docstring of the estimator)."""
    for field, value in msg.items():
        if field == "content":
            walk_content(value, text, counts, images)
        elif field == "tool_calls":
            _tool_calls(value, text, counts)
        elif field in ("reasoning", "reasoning_content"):
            if value is not None and not (field == "reasoning_content" and "reasoning" in msg):
                reasoning.append(json_text(value))  # vLLM passes one of them, as both names
        elif field != "role" and value is not None:
            if field not in VLLM_MESSAGE_FIELDS:
                counts[3] += 1
            text.add(json_text(value))


def walk_messages(
    messages: Any,
    text: PromptText,
    counts: list[int],
    reasoning: list[str],
    images: list[MediaItem] | None = None,
) -> int:
    """Walk ``messages``; counts = [images, audio, tool calls, unknown fields]."""
    if not isinstance(messages, list):
        raise UnreadableRequest("bad_field_type", "messages")
    if not messages:
        raise UnreadableRequest("empty_prompt", "messages")
    add = text.add
    for msg in messages:
        if type(msg) is dict and len(msg) == 2 and "role" in msg:  # a role and a string content
            content = msg.get("content")
            if type(content) is str:
                add(content)
                continue
        if not isinstance(msg, dict):
            raise UnreadableRequest("bad_field_type", "message")
        _message(msg, text, counts, reasoning, images)
    return len(messages)


def walk_prompt(prompt: Any, text: PromptText) -> int:
    """Walk a completions ``prompt``; returns exact tokens given as ids."""
    if isinstance(prompt, str):
        text.add(prompt)
        return 0
    if not isinstance(prompt, list) or not prompt:
        raise UnreadableRequest(
            "bad_field_type" if not isinstance(prompt, list) else "empty_prompt", "prompt"
        )
    first = prompt[0]
    if isinstance(first, str):
        for p in prompt:
            if not isinstance(p, str):
                raise UnreadableRequest("bad_field_type", "prompt")
            text.add(p)
        return 0
    if isinstance(first, int) and not isinstance(first, bool):
        if not all(isinstance(t, int) and not isinstance(t, bool) for t in prompt):
            raise UnreadableRequest("bad_field_type", "prompt")
        return len(prompt)
    if isinstance(first, list):
        # A batch of token-id prompts: vLLM serves each as its own sequence; the longest decides fit.
        longest = 0
        for p in prompt:
            if not isinstance(p, list) or not all(isinstance(t, int) and not isinstance(t, bool) for t in p):
                raise UnreadableRequest("bad_field_type", "prompt")
            longest = max(longest, len(p))
        return longest
    raise UnreadableRequest("bad_field_type", "prompt")


def tool_defs_of(parsed: dict[str, Any]) -> list[Any]:
    """``tools`` and legacy ``functions`` definitions, in that order."""
    tool_defs: list[Any] = []
    for name in ("tools", "functions"):
        value = parsed.get(name)
        if value is None:
            continue
        if not isinstance(value, list):
            raise UnreadableRequest("bad_field_type", name)
        tool_defs.extend(value)
    return tool_defs
