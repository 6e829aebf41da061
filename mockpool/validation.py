"""Request-body validation with vLLM's status codes and messages (HTTP 400 unless stated).

Only what the stand-in needs is checked; unknown fields are ignored, as vLLM's ``OpenAIBaseModel`` does.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse

from mockpool.protocol import error_response, validation_message
from mockpool.settings import PoolSettings

MAX_N = 128
MAX_TOP_LOGPROBS = 20
"""vLLM's default ``max_logprobs``."""


class RequestError(Exception):
    """A request vLLM would refuse; :meth:`response` is the HTTP answer."""

    def __init__(
        self, message: str, param: str | None = None, code: int = 400, err_type: str = "BadRequestError"
    ) -> None:
        """Error with vLLM's ``message``/``param``; ``code`` is the HTTP status."""
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.err_type = err_type

    def response(self) -> JSONResponse:
        """The vLLM-shaped JSON error response."""
        return error_response(self.message, self.code, self.err_type, self.param)


async def read_json_object(request: Request) -> dict[str, Any]:
    """The request body as a JSON object.

    Raises:
        RequestError: body is not valid UTF-8 JSON or not an object (HTTP 400, like vLLM's FastAPI layer).
    """
    raw = await request.body()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(f"JSON decode error: {exc}") from exc
    if not isinstance(body, dict):
        raise RequestError("The request body must be a JSON object")
    return body


def _positive_int(body: dict[str, Any], key: str) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise RequestError(f"'{key}' must be an integer", param=key)
    if value < 1:
        raise RequestError(
            validation_message(f"{key} must be at least 1, got {value}.", key, value), param=key
        )
    return value


def check_temperature(body: dict[str, Any]) -> None:
    """vLLM 0.32's check of ``temperature`` (``SamplingParams._verify_args``), made after the length
    check (the request is rendered and tokenized before its sampling parameters are built).

    Raises:
        RequestError: below 0 ("temperature must be non-negative, got -1.0.") or above 2 ("temperature
            must be in [0, 2], got 2.5."), on ``temperature``, with vLLM's ``(parameter=…, value=…)``.
    """
    value = body.get("temperature")
    if value is None or isinstance(value, bool) or not isinstance(value, int | float):
        return
    t = float(value)
    if t < 0.0:
        message = f"temperature must be non-negative, got {t}."
    elif t > 2.0:
        message = f"temperature must be in [0, 2], got {t}."
    else:
        return
    raise RequestError(validation_message(message, "temperature", t), param="temperature")


def requested_max_tokens(body: dict[str, Any], chat: bool) -> int | None:
    """``max_completion_tokens or max_tokens`` for chat (vLLM prefers the former), ``max_tokens`` otherwise."""
    max_tokens = _positive_int(body, "max_tokens")
    if chat:
        return _positive_int(body, "max_completion_tokens") or max_tokens
    return max_tokens


def require_served_model(model: str, settings: PoolSettings) -> None:
    """vLLM's check of ``model`` against the served names (``engine/serving.py``,
    ``_check_model``), skipped when ``settings.strict_model`` is false (``--any-model``).

    Raises:
        RequestError: 404 ``NotFoundError`` on ``model``: "The model `x` does not exist. Valid
            aliases: a, b."
    """
    if settings.strict_model and model not in settings.model_names:
        raise RequestError(
            f"The model `{model}` does not exist. Valid aliases: {', '.join(settings.model_names)}.",
            "model",
            404,
            "NotFoundError",
        )


@dataclass(frozen=True)
class CommonParams:
    """Fields shared by chat and completions: echoed model name, ``n``, streaming flags."""

    model: str
    n: int
    stream: bool
    include_usage: bool


def common_params(body: dict[str, Any], settings: PoolSettings) -> CommonParams:
    """Validate ``model``, ``n``, ``stream`` and ``stream_options``.

    Raises:
        RequestError: 404 ``NotFoundError`` for a model the pool does not serve (unless
            ``settings.strict_model`` is false); 400 otherwise.
    """
    model = body.get("model")
    if model is None:
        model = settings.model_names[0]
    if not isinstance(model, str):
        raise RequestError("'model' must be a string", param="model")
    require_served_model(model, settings)
    n = _positive_int(body, "n") or 1
    if n > MAX_N:
        raise RequestError(f"n must be at most {MAX_N}, got {n}.", param="n")
    stream = body.get("stream", False)
    if stream is None:
        stream = False
    if not isinstance(stream, bool):
        raise RequestError("'stream' must be a boolean", param="stream")
    options = body.get("stream_options")
    include_usage = False
    if options is not None:
        if not stream:
            raise RequestError(
                "Stream options can only be defined when `stream=True`.", param="stream_options"
            )
        if not isinstance(options, dict):
            raise RequestError("'stream_options' must be an object", param="stream_options")
        include_usage = bool(options.get("include_usage", False))
    return CommonParams(model=model, n=n, stream=stream, include_usage=include_usage)


@dataclass(frozen=True)
class ChatParams:
    """Template inputs of a chat request."""

    messages: Any
    tools: list[Any] | None
    add_generation_prompt: bool
    template_kwargs: dict[str, Any]
    top_logprobs: int | None = None
    """None without ``logprobs: true``; else the alternatives returned per output token (0–20)."""


def chat_params(body: dict[str, Any]) -> ChatParams:
    """Validate ``tools``, ``add_generation_prompt``, ``continue_final_message``, ``chat_template_kwargs``.

    ``messages`` is validated later by :func:`mockpool.templates.normalize_messages`.
    """
    tools = body.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise RequestError("'tools' must be an array", param="tools")
    add_generation_prompt = body.get("add_generation_prompt", True)
    continue_final = body.get("continue_final_message", False)
    if not isinstance(add_generation_prompt, bool) or not isinstance(continue_final, bool):
        raise RequestError("'add_generation_prompt'/'continue_final_message' must be booleans")
    if add_generation_prompt and continue_final:
        raise RequestError("Cannot set both `continue_final_message` and `add_generation_prompt` to True.")
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise RequestError("'chat_template_kwargs' must be an object", param="chat_template_kwargs")
    kwargs = {k: v for k, v in kwargs.items() if k not in ("messages", "tools", "add_generation_prompt")}
    if body.get("documents") is not None:  # vLLM passes request.documents to the template
        kwargs["documents"] = body["documents"]
    return ChatParams(body.get("messages"), tools or None, add_generation_prompt, kwargs, _top_logprobs(body))


def _top_logprobs(body: dict[str, Any]) -> int | None:
    """OpenAI chat ``logprobs`` (bool) and ``top_logprobs`` (0–20, needs ``logprobs: true``)."""
    logprobs = body.get("logprobs", False)
    top = body.get("top_logprobs")
    if logprobs is None:
        logprobs = False
    if not isinstance(logprobs, bool):
        raise RequestError("'logprobs' must be a boolean", param="logprobs")
    if top is None:
        return 0 if logprobs else None
    if isinstance(top, bool) or not isinstance(top, int) or not 0 <= top <= MAX_TOP_LOGPROBS:
        raise RequestError(
            f"'top_logprobs' must be an integer in [0, {MAX_TOP_LOGPROBS}]", param="top_logprobs"
        )
    if not logprobs:
        raise RequestError("when using `top_logprobs`, `logprobs` must be set to true.", param="top_logprobs")
    return top


PromptInput = str | list[int]


def completion_prompts(body: dict[str, Any], vocab_size: int) -> list[PromptInput]:
    """The completions ``prompt``: ``str | list[str] | list[int] | list[list[int]]`` → list of prompts.

    Raises:
        RequestError: empty or ill-typed prompt, or a token id outside ``[0, vocab_size)``.
    """
    prompt = body.get("prompt")
    prompts: list[Any]
    if isinstance(prompt, str) or (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(x, int) and not isinstance(x, bool) for x in prompt)
    ):
        prompts = [prompt]
    elif isinstance(prompt, list) and prompt:
        prompts = prompt
    else:
        raise RequestError(
            "'prompt' must be a string, an array of strings or an array of token ids", "prompt"
        )
    for item in prompts:
        if isinstance(item, str):
            continue
        if not isinstance(item, list) or not item:
            raise RequestError("each prompt must be a string or a non-empty array of token ids", "prompt")
        for token in item:
            if isinstance(token, bool) or not isinstance(token, int):
                raise RequestError("token ids must be integers", "prompt")
            if not 0 <= token < vocab_size:
                raise RequestError(f"Token id {token} is out of vocabulary", "prompt")
    return prompts
