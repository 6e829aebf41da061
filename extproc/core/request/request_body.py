"""Read what the token budget needs from an OpenAI request body, and nothing more.

Five endpoints (the table of :mod:`extproc.core.request.endpoints`): ``/v1/chat/completions`` (``messages``) and
``/v1/completions`` (``prompt``: a string, a list of strings, a list of token ids, or a list of
token-id lists) are read here; ``/v1/responses``, ``/v1/messages`` and
``/v1/chat/completions/batch`` by :mod:`extproc.core.request.api_bodies`, into the same
:class:`RequestFeatures`. Text is measured in UTF-8 bytes of the *decoded* JSON strings, not of the
escaped body: a Python client escapes every CJK character as ``\\uXXXX`` (6 bytes for 3), which
would double the byte count (docs/data.md §3.3, "Python default" columns).

Anything the router cannot read raises :class:`UnreadableRequest` whose ``reason`` is a short
fixed string (a bounded metric label); the caller sends such requests to the largest pool.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any

import numpy as np
import orjson

from extproc.core.records import record
from extproc.core.request.audio import AudioClip
from extproc.core.request.chat_messages import (
    MediaItem,
    PromptText,
    UnreadableRequest,
    int_field,
    json_text,
    tool_defs_of,
    walk_messages,
    walk_prompt,
)
from extproc.core.request.images import ImageSize
from extproc.core.text.runs import RunCounts, count_runs

__all__ = [
    "RequestFeatures",
    "UnreadableRequest",
    "parse_request_body",
    "reasoning_request_of",
    "rendered_bytes",
    "tool_json",
    "truncate_prompt_tokens",
    "utf8_bytes",
]


@record
class RequestFeatures:
    """What the estimator needs from one request.

    Attributes:
        endpoint: the endpoint the body was read as, one of ``"chat"``, ``"completions"``,
            ``"responses"``, ``"messages"`` and ``"chat_batch"`` (:data:`extproc.core.request.endpoints.ENDPOINTS`).
        model: the ``model`` field ('' when absent).
        text_bytes: UTF-8 bytes of all prompt text (message contents, tool results, tool-call
            arguments, completion prompts).
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
        n_tool_calls: assistant tool calls in the history.
        unknown_fields: message fields outside what vLLM's chat-message parsing passes to the
            template (budgeted as text; their presence makes an observation unexplained).
    """

    endpoint: str
    model: str
    text_bytes: int
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
    prompt_text: str = ""
    """Every string the chat template renders (message contents, names, tool calls, tool results,
    ``documents``, ``chat_template_kwargs``…; not reasoning or tool schemas), joined by newlines:
    the text of :attr:`runs`. Kept only while the request is being routed; never logged."""
    n_tool_calls: int = 0
    unknown_fields: int = 0
    tools_json: tuple[str, str] | None = None
    """The tool schemas as compact JSON and as JSON with spaces (templates differ:
    ``ModelProfile.tools_json_spaced``)."""
    reasoning_text: str = ""
    """``reasoning`` / ``reasoning_content`` of the history, joined (some templates drop it:
    budgeted per model profile, ``ModelProfile.renders_reasoning``)."""
    rendered_bytes: int = 0
    """UTF-8 bytes of everything the template may render: :attr:`text_bytes` plus reasoning, the
    spaced tool schemas, ``documents`` and ``chat_template_kwargs``. A byte-level BPE prompt has
    at most one token per byte of it (the estimator's byte bound, ``Estimator.bound``)."""
    audio_clips: tuple[AudioClip, ...] = ()
    """Duration of each audio part read from its header (``AudioClip.seconds`` None where unknown),
    in order; ``len(audio_clips) <= n_audio`` (extproc.core.request.audio)."""
    image_sizes: tuple[ImageSize | None, ...] = ()
    """Pixel size of each image part read from its header, None where unknown (remote URL,
    unreadable data); ``len(image_sizes) <= n_images`` (extproc.core.request.images)."""
    previous_response_id: str | None = None
    """Responses API ``previous_response_id`` (extproc.core.request.api_bodies)."""
    reasoning_request: str | None = None
    """What the request asks of a reasoning model (:func:`reasoning_request_of`): ``"off"``,
    ``"on"``, an effort (``"minimal"``, ``"low"``, ``"medium"``, ``"high"``), or None when it says
    nothing (the model's default applies)."""
    conversations: tuple[RequestFeatures, ...] = ()
    """``/v1/chat/completions/batch``, and ``/v1/completions`` with a list of text prompts: the
    features of each conversation or prompt (this object then describes the longest one); vLLM
    serves each as its own sequence, checks each against ``max_model_len`` alone and reports
    ``usage.prompt_tokens`` summed over them. Empty otherwise."""
    truncate_prompt_tokens: int | None = None
    """vLLM's ``truncate_prompt_tokens`` when ≥ 1: the pool keeps the prompt's last N tokens, so
    the prompt it holds is at most N tokens. None when absent, 0 or -1 (-1 truncates to the
    serving pool's own ``max_model_len``, which never makes a prompt plus its output fit)."""
    _counted: dict[str, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def _count(self, name: str, text: str, codes: np.ndarray | None = None) -> RunCounts:
        counts: RunCounts | None = self._counted.get(name)
        if counts is None:
            counts = self._counted[name] = count_runs(text, codes)
        return counts

    def with_prompt_codes(self, codes: np.ndarray | None) -> RequestFeatures:
        """This object, holding the code points of :attr:`prompt_text`
        (:func:`extproc.core.text.runs.code_points`) for :attr:`runs` when the parse computed them to
        count its UTF-8 bytes (None: nothing held)."""
        if codes is not None:
            self._counted["prompt_codes"] = codes
        return self

    def with_prompt_runs(self, counts: RunCounts) -> RequestFeatures:
        """This object, holding ``counts`` as :attr:`runs` (``count_runs(prompt_text)``, counted by
        the caller: :func:`extproc.core.estimate.screen.prefix_budget` counts it in pieces)."""
        self._counted["runs"] = counts
        self._counted.pop("prompt_codes", None)
        return self

    @property
    def runs(self) -> RunCounts:
        """Run counts (:mod:`extproc.core.text.runs`) of :attr:`prompt_text`, counted on first use
        (a request routed by the byte bound is never counted); the code points held by
        :meth:`with_prompt_codes` are used, then dropped."""
        counts: RunCounts | None = self._counted.get("runs")
        if counts is None:
            counts = self._count("runs", self.prompt_text, self._counted.pop("prompt_codes", None))
        return counts

    @property
    def reasoning_runs(self) -> RunCounts | None:
        """Run counts of :attr:`reasoning_text`; None without reasoning."""
        return self._count("reasoning", self.reasoning_text) if self.reasoning_text else None

    @property
    def tools_runs(self) -> tuple[RunCounts, RunCounts] | None:
        """Run counts of :attr:`tools_json` (compact, spaced); None without tools."""
        if self.tools_json is None:
            return None
        return self._count("tools", self.tools_json[0]), self._count("tools_spaced", self.tools_json[1])


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


def tool_json(tool_defs: list[Any]) -> tuple[str, str] | None:
    """The tool schemas as compact JSON and as JSON with spaces (None without tools)."""
    if not tool_defs:
        return None
    return orjson.dumps(tool_defs).decode(), json_text(tool_defs)


_EFFORTS = frozenset(("minimal", "low", "medium", "high"))


def reasoning_request_of(parsed: dict[str, Any]) -> str | None:
    """Whether a request body turns reasoning on or off, and how hard (never raises).

    Read, first match wins: ``chat_template_kwargs.enable_thinking`` or ``.thinking`` false (Qwen3,
    DeepSeek-V3.1 templates) → ``"off"``; ``reasoning_effort`` (chat/completions) or
    ``reasoning.effort`` (Responses API): ``"none"`` → ``"off"``, ``minimal``/``low``/``medium``/
    ``high`` as given, any other string → ``"on"``; Anthropic ``thinking.type`` ``"enabled"`` /
    ``"disabled"``; ``enable_thinking`` / ``thinking`` true → ``"on"``. None when the body says
    nothing (the model's default applies: ``OutputReserveConfig.reasoning_model_patterns``).
    """
    kwargs = parsed.get("chat_template_kwargs")
    switch: bool | None = None
    if isinstance(kwargs, dict):
        for name in ("enable_thinking", "thinking"):
            if isinstance(kwargs.get(name), bool):
                switch = kwargs[name]
                break
    if switch is False:
        return "off"
    effort = parsed.get("reasoning_effort")
    reasoning = parsed.get("reasoning")
    if effort is None and isinstance(reasoning, dict):
        effort = reasoning.get("effort")
    if isinstance(effort, str):
        value = effort.strip().lower()
        if value == "none":
            return "off"
        return value if value in _EFFORTS else "on"
    thinking = parsed.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "disabled"):
        return "on" if thinking["type"] == "enabled" else "off"
    return "on" if switch else None


def utf8_bytes(text: str) -> int:
    """UTF-8 bytes of ``text`` (a lone surrogate from a ``\\ud800`` escape counts its 3 bytes)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def rendered_bytes(text_bytes: int, extra_texts: list[str], tools: tuple[str, str] | None) -> int:
    """:attr:`RequestFeatures.rendered_bytes`: ``text_bytes`` plus the UTF-8 bytes of
    ``extra_texts`` (reasoning, documents…) and of the wider (spaced) tool JSON."""
    return text_bytes + sum(utf8_bytes(t) for t in extra_texts) + (utf8_bytes(tools[1]) if tools else 0)


def parse_request_body(body: bytes, endpoint: str) -> RequestFeatures:
    """Parse an OpenAI chat or completions request body into :class:`RequestFeatures`.

    Args:
        body: the raw HTTP request body (UTF-8 JSON).
        endpoint: ``"chat"`` or ``"completions"`` (see :mod:`extproc.core.request.endpoints`; the other
            endpoints are parsed by :mod:`extproc.core.request.api_bodies`).

    Raises:
        UnreadableRequest: empty, not JSON, not an object, wrong field types, or no prompt.
    """
    return features_of(load_object(body), endpoint)


_RARE_FIELDS = frozenset(
    (
        "tools",
        "functions",
        "documents",
        "chat_template_kwargs",
        "n",
        "best_of",
        "truncate_prompt_tokens",
        "reasoning_effort",
        "reasoning",
        "thinking",
    )
)
"""Every field :func:`features_of` reads besides the prompt, the output maximum and the stream flags:
a body holding none of them (most) skips their readers, whose answers for absent fields are the
defaults (no tools, no template texts, ``n`` 1, no truncation, no reasoning switch)."""


def features_of(parsed: dict[str, Any], endpoint: str) -> RequestFeatures:
    """:func:`parse_request_body` of an already loaded object (see :func:`load_object`)."""
    model: str = parsed.get("model", "")
    text = PromptText()
    counts = [0, 0, 0, 0]
    reasoning: list[str] = []
    images: list[MediaItem] = []
    n_messages = 0
    exact = 0
    if endpoint == "chat":
        n_messages = walk_messages(parsed.get("messages"), text, counts, reasoning, images)
    elif endpoint == "completions":
        if "prompt" not in parsed:
            raise UnreadableRequest("empty_prompt", "prompt")
        prompt = parsed.get("prompt")
        if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str) for p in prompt):
            return _prompt_list(parsed, prompt)
        exact = walk_prompt(prompt, text)
        suffix = parsed.get("suffix")
        if isinstance(suffix, str):
            text.add(suffix)
    else:
        raise UnreadableRequest("unsupported_path")

    # A body without any of the rare fields (most) skips their readers: absent, each reads its
    # default. The readers run in the order they raise in (the first bad field is the one reported).
    rare = not _RARE_FIELDS.isdisjoint(parsed)
    tool_defs: list[Any] = tool_defs_of(parsed) if rare else []
    tools = tool_json(tool_defs) if rare else None
    tool_schema_bytes = utf8_bytes(tools[0]) if tools else 0
    template_texts = []
    for name in ("documents", "chat_template_kwargs") if rare else ():
        value = parsed.get(name)
        if value is not None:
            template_texts.append(json_text(value))

    max_completion = int_field(parsed, "max_completion_tokens")
    max_tokens = int_field(parsed, "max_tokens")
    max_output = max_completion if max_completion is not None else max_tokens
    n = (int_field(parsed, "n") or 1) if rare else 1
    best_of = (int_field(parsed, "best_of") or 1) if rare else 1
    stream, include_usage = stream_flags(parsed)
    truncate = truncate_prompt_tokens(parsed) if rare else None
    reasoning_request = reasoning_request_of(parsed) if rare else None
    prompt_text, text_bytes, prompt_codes = text.joined(template_texts)

    return RequestFeatures(
        endpoint=endpoint,
        model=model,
        text_bytes=text_bytes,
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
        prompt_text=prompt_text,
        n_tool_calls=counts[2],
        unknown_fields=counts[3],
        reasoning_text="\n".join(reasoning),
        tools_json=tools,
        rendered_bytes=rendered_bytes(text_bytes, reasoning + template_texts, tools),
        image_sizes=tuple(x for x in images if not isinstance(x, AudioClip)),
        audio_clips=tuple(x for x in images if isinstance(x, AudioClip)),
        reasoning_request=reasoning_request,
        truncate_prompt_tokens=truncate,
    ).with_prompt_codes(prompt_codes)


def _prompt_list(parsed: dict[str, Any], prompts: list[str]) -> RequestFeatures:
    """A completions ``prompt`` list of texts: vLLM serves each text as its own request (its own
    ``max_model_len`` check, ``n`` sequences each) and sums their ``usage.prompt_tokens``. The
    features of the longest text, carrying every text's in ``conversations`` (routed by the
    longest budget, learned sum against sum: :mod:`extproc.core.learn.batch`)."""
    each = tuple(features_of({**parsed, "prompt": p}, "completions") for p in prompts)
    longest = max(each, key=lambda f: f.text_bytes)
    return dataclasses.replace(longest, conversations=each)


def truncate_prompt_tokens(parsed: dict[str, Any]) -> int | None:
    """vLLM's ``truncate_prompt_tokens`` when it bounds the prompt (≥ 1), else None (absent, 0,
    or -1: see :attr:`RequestFeatures.truncate_prompt_tokens`).

    vLLM (``serving_engine``/renderer, ``_validate_and_normalize_truncate_tokens``): None = no
    truncation; -1 = the serving model's ``max_model_len``; N ≥ 1 = tokenized with
    ``truncation=True, max_length=N`` (the last N tokens kept); the field is declared ``ge=-1``.

    Raises:
        UnreadableRequest: not an integer (``bad_field_type``), or below -1 (``bad_field_value``).
    """
    value = parsed.get("truncate_prompt_tokens")
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool) and value == -1:
        return None
    n = int_field(parsed, "truncate_prompt_tokens")
    return n if n else None
