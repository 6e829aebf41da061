"""Read what the token budget needs from an OpenAI request body, and nothing more.

Supported endpoints: ``/v1/chat/completions`` (``messages``) and ``/v1/completions``
(``prompt``: a string, a list of strings, a list of token ids, or a list of token-id lists).
Text is measured in UTF-8 bytes of the *decoded* JSON strings, not of the escaped body: a
Python client escapes every CJK character as ``\\uXXXX`` (6 bytes for 3), which would skew the
ratio by 2× (docs/data.md §3.3, "Python default" columns).

Anything the router cannot read raises :class:`UnreadableRequest` whose ``reason`` is a short
fixed string (a bounded metric label); the caller sends such requests to the largest pool.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson

from extproc.core.images import ImageSize, size_from_base64, size_from_url
from extproc.core.runs import RunCounts, count_runs

__all__ = [
    "CHAT_BATCH_PATH",
    "CHAT_PATH",
    "COMPLETIONS_PATH",
    "MESSAGES_PATH",
    "RESPONSES_PATH",
    "RequestFeatures",
    "UnreadableRequest",
    "endpoint_for_path",
    "parse_request_body",
]

CHAT_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
RESPONSES_PATH = "/v1/responses"
MESSAGES_PATH = "/v1/messages"
CHAT_BATCH_PATH = "/v1/chat/completions/batch"
_ENDPOINTS = {
    CHAT_PATH: "chat",
    COMPLETIONS_PATH: "completions",
    RESPONSES_PATH: "responses",
    MESSAGES_PATH: "messages",
    CHAT_BATCH_PATH: "chat_batch",
}
_MAX_SANE_TOKENS = 1 << 31


class UnreadableRequest(ValueError):
    """The body cannot be budgeted; ``reason`` is a fixed label such as ``"body_not_json"``."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.model: str | None = None
        """The request's ``model`` when it was read before the problem (routes to its pool set)."""


@dataclass(frozen=True, slots=True)
class RequestFeatures:
    """What the estimator needs from one request (no prompt text beyond a bounded sample).

    Attributes:
        endpoint: ``"chat"`` or ``"completions"``.
        model: the ``model`` field ('' when absent).
        text_bytes: UTF-8 bytes of all prompt text (message contents, tool results, tool-call
            arguments, completion prompts).
        sample: the first ``sample_bytes`` of that text, for the content classifier.
        n_messages: chat messages (0 for completions).
        exact_prompt_tokens: tokens given as token-id arrays (counted exactly, not estimated).
        tool_schema_bytes: UTF-8 bytes of the compact JSON of ``tools`` / ``functions``.
        n_tools: number of tool definitions.
        n_images: image parts (``image_url``, ``input_image``).
        n_audio: audio parts (``input_audio``).
        max_output_tokens: ``max_completion_tokens``, else ``max_tokens``; None when absent.
        n_sequences: sequences generated per prompt: ``max(n, best_of)``, at least 1.
        stream: the client asked for SSE.
        include_usage: ``stream_options.include_usage`` as sent (None when absent).
        runs: run counts (:mod:`extproc.core.runs`) of every string the chat template renders: message
            contents, ``reasoning``/``reasoning_content``, tool calls (name + arguments as JSON),
            ``name``, ``tool_call_id``, developer ``tools``, any other message field (as JSON), the
            tool schemas, request ``documents`` and ``chat_template_kwargs`` (as JSON).
        n_tool_calls: assistant tool calls in the history.
        unknown_fields: message fields outside what vLLM's chat-message parsing passes to the
            template (budgeted as text; their presence makes an observation unexplained).
    """

    endpoint: str
    model: str
    text_bytes: int
    sample: bytes
    n_messages: int
    exact_prompt_tokens: int
    tool_schema_bytes: int
    n_tools: int
    n_images: int
    n_audio: int
    max_output_tokens: int | None
    n_sequences: int
    stream: bool
    include_usage: bool | None
    runs: RunCounts | None = None
    n_tool_calls: int = 0
    unknown_fields: int = 0
    tools_runs: tuple[RunCounts, RunCounts] | None = None
    """Run counts of the tool schemas as compact JSON and as JSON with spaces (templates differ:
    ``ModelProfile.tools_json_spaced``)."""
    reasoning_runs: RunCounts | None = None
    """Run counts of ``reasoning`` / ``reasoning_content`` (some templates drop it: budgeted per
    model profile, ``ModelProfile.renders_reasoning``)."""
    image_sizes: tuple[ImageSize | None, ...] = ()
    """Pixel size of each image part read from its header, None where unknown (remote URL,
    unreadable data); ``len(image_sizes) <= n_images`` (extproc.core.images)."""
    previous_response_id: str | None = None
    """Responses API ``previous_response_id`` (extproc.core.api_bodies)."""
    conversations: tuple[RequestFeatures, ...] = ()
    """``/v1/chat/completions/batch``: the features of each conversation (this object then
    describes the longest one); empty otherwise."""


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


def _json_text(value: Any) -> str:
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
        return _json_text(parsed)
    return "" if args is None else _json_text(args)


def endpoint_for_path(path: str) -> str | None:
    """Map a request ``:path`` to ``"chat"``, ``"completions"``, ``"responses"``, ``"messages"``
    or ``"chat_batch"`` (the last three parsed by :mod:`extproc.core.api_bodies`); None for
    anything else.

    The query string is ignored; a trailing slash is tolerated.
    """
    return _ENDPOINTS.get(path.split("?", 1)[0].rstrip("/"))


class _Text:
    """Accumulates text byte counts and a bounded sample.

    ASCII strings (``str.isascii`` is O(1) in CPython) count their length; non-ASCII strings are
    collected and measured once at the end from their UTF-16 code units (a memcpy-speed encode for
    most text, then three numpy counts): UTF-8 bytes = units + units ≥ U+0080 + units ≥ U+0800 −
    surrogate units, exact for valid text (a lone surrogate from a ``\\ud800`` escape counts 2).
    Re-encoding every string to UTF-8 cost ~3× more on Cyrillic bodies (docs/estimator.md §Cost).
    """

    __slots__ = ("all", "ascii_total", "limit", "non_ascii", "parts", "sampled")

    def __init__(self, limit: int) -> None:
        self.all: list[str] = []
        self.ascii_total = 0
        self.non_ascii: list[str] = []
        self.sampled = 0
        self.limit = limit
        self.parts: list[bytes] = []

    def add(self, s: str) -> None:
        if not s:
            return
        self.all.append(s)
        room = self.limit - self.sampled
        if s.isascii():
            self.ascii_total += len(s)
            if room > 0:
                piece = s[:room].encode("ascii")
                self.parts.append(piece)
                self.sampled += len(piece) + 1
            return
        self.non_ascii.append(s)
        if room > 0:
            head = s[:room]
            try:
                b = head.encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates from \ud800 escapes
                b = head.encode("utf-8", "replace")
            piece = b[:room]
            self.parts.append(piece)
            self.sampled += len(piece) + 1

    @property
    def total(self) -> int:
        """UTF-8 bytes of all text added."""
        if not self.non_ascii:
            return self.ascii_total
        units = np.frombuffer("".join(self.non_ascii).encode("utf-16-le", "surrogatepass"), dtype=np.uint16)
        extra = np.count_nonzero(units >= 0x80) + np.count_nonzero(units >= 0x800)
        surrogates = np.count_nonzero((units >= 0xD800) & (units < 0xE000))
        return self.ascii_total + len(units) + int(extra) - int(surrogates)

    def sample(self) -> bytes:
        # joined with a space, not a newline: the estimator counts newlines as structure tokens
        return b" ".join(self.parts)


def _int_field(body: dict[str, Any], name: str) -> int | None:
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


def _content(
    content: Any, text: _Text, counts: list[int], images: list[ImageSize | None] | None = None
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
        elif kind in ("image_url", "input_image", "image"):
            counts[0] += 1
            if images is not None:
                images.append(_image_size(part))
        elif kind in ("input_audio", "audio"):
            counts[1] += 1
        elif kind in ("file", "input_file"):
            counts[0] += 1  # documents render to pages; budget like an image
        else:
            raise UnreadableRequest("unknown_content_part")


def _tool_calls(calls: Any, text: _Text, counts: list[int]) -> None:
    """An assistant's ``tool_calls``: name and arguments as the template prints them."""
    for call in calls or ():
        counts[2] += 1
        fn = call.get("function") if isinstance(call, dict) else None
        if isinstance(fn, dict):
            text.add(str(fn.get("name") or ""))
            text.add(_arguments_text(fn.get("arguments")))
        else:
            text.add(_json_text(call))


def _message(
    msg: dict[str, Any],
    text: _Text,
    counts: list[int],
    reasoning: list[str],
    images: list[ImageSize | None] | None = None,
) -> None:
    """Every field of one message the template can render (module docstring of the estimator)."""
    for field, value in msg.items():
        if field == "content":
            _content(value, text, counts, images)
        elif field == "tool_calls":
            _tool_calls(value, text, counts)
        elif field in ("reasoning", "reasoning_content"):
            if value is not None and not (field == "reasoning_content" and "reasoning" in msg):
                reasoning.append(_json_text(value))  # vLLM passes one of them, as both names
        elif field != "role" and value is not None:
            if field not in VLLM_MESSAGE_FIELDS:
                counts[3] += 1
            text.add(_json_text(value))


def _messages(
    messages: Any,
    text: _Text,
    counts: list[int],
    reasoning: list[str],
    images: list[ImageSize | None] | None = None,
) -> int:
    """Walk ``messages``; counts = [images, audio, tool calls, unknown fields]."""
    if not isinstance(messages, list):
        raise UnreadableRequest("bad_field_type", "messages")
    if not messages:
        raise UnreadableRequest("empty_prompt", "messages")
    for msg in messages:
        if not isinstance(msg, dict):
            raise UnreadableRequest("bad_field_type", "message")
        _message(msg, text, counts, reasoning, images)
    return len(messages)


def _prompt(prompt: Any, text: _Text) -> int:
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


def _tool_defs(parsed: dict[str, Any]) -> list[Any]:
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


def load_object(body: bytes) -> dict[str, Any]:
    """The request body as a JSON object.

    Raises:
        UnreadableRequest: empty, not UTF-8, not JSON, not an object, or a non-string ``model``.
    """
    if not body:
        raise UnreadableRequest("body_empty")
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        reason = "body_not_utf8" if "utf-8" in str(exc).lower() else "body_not_json"
        raise UnreadableRequest(reason) from None
    if not isinstance(parsed, dict):
        raise UnreadableRequest("body_not_object")
    if not isinstance(parsed.get("model", ""), str):
        raise UnreadableRequest("bad_field_type", "model")
    return parsed


def stream_flags(parsed: dict[str, Any]) -> tuple[bool, bool | None]:
    """``(stream, stream_options.include_usage or None)``."""
    include_usage: bool | None = None
    opts = parsed.get("stream_options")
    if isinstance(opts, dict) and isinstance(opts.get("include_usage"), bool):
        include_usage = opts["include_usage"]
    return parsed.get("stream") is True, include_usage


def int_field(parsed: dict[str, Any], name: str) -> int | None:
    """A non-negative integer field (integral floats accepted), None when absent.

    Raises:
        UnreadableRequest: wrong type or out of range.
    """
    return _int_field(parsed, name)


def tool_runs(tool_defs: list[Any]) -> tuple[RunCounts, RunCounts] | None:
    """Run counts of the tool schemas as compact JSON and as JSON with spaces (None without tools)."""
    if not tool_defs:
        return None
    return count_runs(orjson.dumps(tool_defs).decode()), count_runs(_json_text(tool_defs))


def parse_request_body(body: bytes, endpoint: str, *, sample_bytes: int = 16384) -> RequestFeatures:
    """Parse an OpenAI chat or completions request body into :class:`RequestFeatures`.

    Args:
        body: the raw HTTP request body (UTF-8 JSON).
        endpoint: ``"chat"`` or ``"completions"`` (see :func:`endpoint_for_path`; the other
            endpoints are parsed by :func:`extproc.core.api_bodies.parse_body`).
        sample_bytes: how much text to keep for the classifier.

    Raises:
        UnreadableRequest: empty, not JSON, not an object, wrong field types, or no prompt.
    """
    return features_of(load_object(body), endpoint, sample_bytes)


def features_of(parsed: dict[str, Any], endpoint: str, sample_bytes: int) -> RequestFeatures:
    """:func:`parse_request_body` of an already loaded object (see :func:`load_object`)."""
    model: str = parsed.get("model", "")
    text = _Text(sample_bytes)
    counts = [0, 0, 0, 0]
    reasoning: list[str] = []
    images: list[ImageSize | None] = []
    n_messages = 0
    exact = 0
    if endpoint == "chat":
        n_messages = _messages(parsed.get("messages"), text, counts, reasoning, images)
    elif endpoint == "completions":
        if "prompt" not in parsed:
            raise UnreadableRequest("empty_prompt", "prompt")
        exact = _prompt(parsed.get("prompt"), text)
        suffix = parsed.get("suffix")
        if isinstance(suffix, str):
            text.add(suffix)
    else:
        raise UnreadableRequest("unsupported_path")

    tool_defs = _tool_defs(parsed)
    tool_schema_bytes = len(orjson.dumps(tool_defs)) if tool_defs else 0
    template_texts = []
    for field in ("documents", "chat_template_kwargs"):
        value = parsed.get(field)
        if value is not None:
            template_texts.append(_json_text(value))

    max_completion = _int_field(parsed, "max_completion_tokens")
    max_tokens = _int_field(parsed, "max_tokens")
    max_output = max_completion if max_completion is not None else max_tokens
    n = _int_field(parsed, "n") or 1
    best_of = _int_field(parsed, "best_of") or 1
    stream, include_usage = stream_flags(parsed)

    return RequestFeatures(
        endpoint=endpoint,
        model=model,
        text_bytes=text.total,
        sample=text.sample(),
        n_messages=n_messages,
        exact_prompt_tokens=exact,
        tool_schema_bytes=tool_schema_bytes,
        n_tools=len(tool_defs),
        n_images=counts[0],
        n_audio=counts[1],
        max_output_tokens=max_output,
        n_sequences=max(1, n, best_of),
        stream=stream,
        include_usage=include_usage,
        runs=count_runs("\n".join(text.all + template_texts)),
        n_tool_calls=counts[2],
        unknown_fields=counts[3],
        reasoning_runs=count_runs("\n".join(reasoning)) if reasoning else None,
        tools_runs=tool_runs(tool_defs),
        image_sizes=tuple(images),
    )
