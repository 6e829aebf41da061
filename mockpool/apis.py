"""The stand-in pool's Responses API, Anthropic Messages API and chat batch endpoints.

Shapes follow vLLM's servers (cited per function) and the published APIs:

* ``POST /v1/responses`` — vLLM ``vllm/entrypoints/openai/responses/serving.py`` and ``protocol.py``:
  ``instructions``/``input`` rendered as chat messages; ``usage.input_tokens``/``output_tokens``;
  ``store`` (default true) keeps the conversation in this process only, so a ``previous_response_id``
  this pool did not produce is answered 404 ``Response with id '…' not found.`` (vLLM's
  ``_make_not_found_error``). Streams are ``event: <type>`` / ``data: <json>`` pairs, no ``[DONE]``;
  ``response.created``/``in_progress`` carry ``usage: null``, ``response.completed`` the usage.
* ``POST /v1/messages`` — vLLM ``vllm/entrypoints/anthropic/serving.py`` converts to a chat request
  (system parts joined, ``tool_use`` → ``tool_calls`` with JSON arguments, a user ``tool_result``
  → a ``tool`` message); errors in Anthropic's shape ``{"type": "error", "error": {type, message}}``
  (``api_router.py`` ``translate_error_response``). Streams: ``message_start`` (``usage.input_tokens``),
  content block events, ``message_delta`` (``usage.input_tokens`` again, and ``output_tokens``),
  ``message_stop``.
* ``POST /v1/chat/completions/batch`` — vLLM ``chat_completion/batch_serving.py``: ``messages`` is a
  list of conversations, one choice per conversation, ``usage`` summed; no streaming, no tools.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

import orjson
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from mockpool import protocol, sse
from mockpool.api_shapes import (
    anthropic_error,
    anthropic_messages,
    anthropic_tools,
    max_tokens_of,
    model_of,
    output_message,
    response_object,
    responses_messages,
    responses_tools,
    responses_usage,
    sse_event,
)
from mockpool.generation import ChoicePlan, Token, generate, plan_choice
from mockpool.settings import PoolSettings
from mockpool.state import PoolState
from mockpool.templates import ChatInputError
from mockpool.validation import RequestError, read_json_object
from mockpool.vision import ImageInputError

__all__ = ["ServingPool", "routes"]


class ServingPool(Protocol):
    """What these endpoints use of the pool that serves them (:class:`mockpool.app.PoolApp`, which
    mounts them: a protocol here, so this module does not import the app that imports it)."""

    settings: PoolSettings
    state: PoolState

    def count_chat(self, messages: Any, tools: list[Any] | None = None) -> int:
        """``prompt_tokens`` of a chat request (its messages rendered with the chat template);
        raises ``ChatInputError``, ``ImageInputError`` or ``AudioInputError`` on unreadable input."""
        ...

    async def collect(
        self, request: Request, prompt_tokens: int, plans: list[ChoicePlan]
    ) -> list[str] | None:
        """Generate every choice to its end; the texts, or None when the client left."""
        ...


_STORE_MAX = 10_000
CLIENT_CLOSED_STATUS = 499


class Apis:
    """Handlers of the three endpoints, bound to one :class:`ServingPool`."""

    def __init__(self, pool: ServingPool) -> None:
        """Serve with ``pool``'s settings, tokenizer, state and generation."""
        self.pool = pool
        self.stored: OrderedDict[str, list[dict[str, Any]]] = OrderedDict()

    async def _count(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> int:
        return await asyncio.to_thread(self.pool.count_chat, messages, tools)

    async def _texts(self, request: Request, prompt_tokens: int, plans: list[ChoicePlan]) -> list[str] | None:
        texts = await self.pool.collect(request, prompt_tokens, plans)
        if texts is not None:
            completion = sum(p.tokens for p in plans)
            self.pool.state.record_finished(prompt_tokens, completion, [p.finish_reason for p in plans])
        return texts

    async def _stream(
        self,
        prompt_tokens: int,
        plan: ChoicePlan,
        head: list[bytes],
        delta: Callable[[str], bytes],
        tail: Callable[[str], list[bytes]],
    ) -> AsyncIterator[bytes]:
        split = self.pool.settings.sse_split_bytes
        text = ""
        for event in head:
            async for piece in sse.write_pieces(event, split):
                yield piece
        try:
            async for ev in generate(self.pool.state, self.pool.settings, prompt_tokens, [plan]):
                if isinstance(ev, Token):
                    text += ev.text
                    async for piece in sse.write_pieces(delta(ev.text), split):
                        yield piece
        except (asyncio.CancelledError, GeneratorExit):
            self.pool.state.finished["abort"] += 1
            raise
        self.pool.state.record_finished(prompt_tokens, plan.tokens, [plan.finish_reason])
        for event in tail(text):
            async for piece in sse.write_pieces(event, split):
                yield piece

    # -- /v1/responses ------------------------------------------------------------------------
    def _stored_turns(self, previous: Any) -> list[dict[str, Any]]:
        """The stored conversation of ``previous_response_id`` (none when absent).

        Raises:
            RequestError: 404 ``Response with id '…' not found.`` (vLLM's ``_make_not_found_error``).
        """
        if previous is None:
            return []
        if previous not in self.stored:
            raise RequestError(
                f"Response with id '{previous}' not found.", "response_id", 404, "invalid_request_error"
            )
        return self.stored[previous]

    async def responses(self, request: Request) -> Response:
        """``POST /v1/responses``."""
        try:
            body = await read_json_object(request)
            model = model_of(body, self.pool.settings)
            max_tokens = max_tokens_of(body, "max_output_tokens")
            messages = responses_messages(body, self._stored_turns(body.get("previous_response_id")))
            prompt_tokens = await self._count(messages, responses_tools(body.get("tools")))
        except RequestError as exc:
            return exc.response()
        except (ChatInputError, ImageInputError) as exc:
            return protocol.error_response(str(exc))
        fit = protocol.check_length(
            prompt_tokens, max_tokens, self.pool.settings.max_model_len, max_tokens_param="max_output_tokens"
        )
        if fit.error is not None:
            return fit.error
        plan = plan_choice(self.pool.settings, fit.max_tokens, self.pool.state.natural.draw(request.headers))
        rid, mid = protocol.new_id("resp").replace("-", "_"), protocol.new_id("msg").replace("-", "_")

        def envelope(status: str, text: str | None, usage: dict[str, Any] | None) -> dict[str, Any]:
            output = [] if text is None else [output_message(mid, text)]
            if status == "completed" and plan.finish_reason == "length":  # vLLM 0.32: out of budget
                obj = response_object(rid, model, body, "incomplete", output, usage)
                obj["incomplete_details"] = {"reason": "max_output_tokens"}
                return obj
            return response_object(rid, model, body, status, output, usage)

        def finish(text: str) -> dict[str, Any]:
            if body.get("store", True) is not False:
                self.stored[rid] = [*messages, {"role": "assistant", "content": text}]
                while len(self.stored) > _STORE_MAX:
                    self.stored.popitem(last=False)
            return responses_usage(prompt_tokens, plan.tokens)

        if body.get("stream") is True:
            seq = iter(range(1 << 30))

            def ev(kind: str, **fields: Any) -> bytes:
                return sse_event(kind, {"type": kind, "sequence_number": next(seq), **fields})

            part = {"type": "output_text", "text": "", "annotations": []}
            item = {"id": mid, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
            ids = {"item_id": mid, "output_index": 0, "content_index": 0}

            def tail(text: str) -> list[bytes]:
                usage = finish(text)
                done_part = {**part, "text": text}
                return [
                    ev("response.output_text.done", **ids, text=text, logprobs=[]),
                    ev("response.content_part.done", **ids, part=done_part),
                    ev("response.output_item.done", output_index=0, item=output_message(mid, text)),
                    ev("response.completed", response=envelope("completed", text, usage)),
                ]

            head = [
                ev("response.created", response=envelope("in_progress", None, None)),
                ev("response.in_progress", response=envelope("in_progress", None, None)),
                ev("response.output_item.added", output_index=0, item=item),
                ev("response.content_part.added", **ids, part=part),
            ]
            return StreamingResponse(
                self._stream(
                    prompt_tokens,
                    plan,
                    head,
                    lambda t: ev("response.output_text.delta", **ids, delta=t, logprobs=[]),
                    tail,
                ),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        texts = await self._texts(request, prompt_tokens, [plan])
        if texts is None:
            return Response(status_code=CLIENT_CLOSED_STATUS)
        return JSONResponse(envelope("completed", texts[0], finish(texts[0])))

    # -- /v1/messages -------------------------------------------------------------------------
    async def messages(self, request: Request) -> Response:
        """``POST /v1/messages`` (Anthropic Messages API)."""
        try:
            body = await read_json_object(request)
            model = model_of(body, self.pool.settings)
            max_tokens = max_tokens_of(body, "max_tokens")
            if max_tokens is None:
                raise RequestError("'max_tokens' is required", param="max_tokens")
            messages = anthropic_messages(body)
            prompt_tokens = await self._count(messages, anthropic_tools(body.get("tools")))
        except RequestError as exc:
            return anthropic_error(exc.message, exc.code, exc.err_type)
        except (ChatInputError, ImageInputError) as exc:
            return anthropic_error(str(exc))
        # vLLM converts Messages to chat with max_completion_tokens (the name its 400 reports)
        fit = protocol.check_length(
            prompt_tokens,
            max_tokens,
            self.pool.settings.max_model_len,
            max_tokens_param="max_completion_tokens",
        )
        if fit.error is not None:
            err = orjson.loads(bytes(fit.error.body))["error"]
            return anthropic_error(err["message"], 400, err["type"])
        plan = plan_choice(self.pool.settings, fit.max_tokens, self.pool.state.natural.draw(request.headers))
        mid = protocol.new_id("msg").replace("-", "_")
        stop = "max_tokens" if plan.finish_reason == "length" else "end_turn"
        if body.get("stream") is True:
            start: dict[str, Any] = {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "content": [],
                "model": model,
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt_tokens, "output_tokens": 0},
            }
            head = [
                sse_event("message_start", {"type": "message_start", "message": start}),
                sse_event(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": 0,
                        "content_block": {"type": "text", "text": ""},
                    },
                ),
            ]

            def delta(t: str) -> bytes:
                d = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}
                return sse_event("content_block_delta", d)

            def tail(text: str) -> list[bytes]:
                usage = {"input_tokens": prompt_tokens, "output_tokens": plan.tokens}
                return [
                    sse_event("content_block_stop", {"type": "content_block_stop", "index": 0}),
                    sse_event(
                        "message_delta",
                        {"type": "message_delta", "delta": {"stop_reason": stop}, "usage": usage},
                    ),
                    sse_event("message_stop", {"type": "message_stop"}),
                ]

            return StreamingResponse(
                self._stream(prompt_tokens, plan, head, delta, tail),
                media_type="text/event-stream",
                headers={"cache-control": "no-cache"},
            )
        texts = await self._texts(request, prompt_tokens, [plan])
        if texts is None:
            return Response(status_code=CLIENT_CLOSED_STATUS)
        return JSONResponse(
            {
                "id": mid,
                "type": "message",
                "role": "assistant",
                "content": [{"type": "text", "text": texts[0]}],
                "model": model,
                "stop_reason": stop,
                "stop_sequence": None,
                "usage": {"input_tokens": prompt_tokens, "output_tokens": plan.tokens},
            }
        )

    # -- /v1/chat/completions/batch -----------------------------------------------------------
    async def chat_batch(self, request: Request) -> Response:
        """``POST /v1/chat/completions/batch``: one choice per conversation, summed usage."""
        try:
            body = await read_json_object(request)
            model = model_of(body, self.pool.settings)
            if body.get("stream") is True:
                raise RequestError("Streaming is not supported for batch chat completions.", param="stream")
            if body.get("tools"):
                raise RequestError("Tool use is not supported for batch chat completions.", param="tools")
            conversations = body.get("messages")
            if (
                not isinstance(conversations, list)
                or not conversations
                or not all(isinstance(c, list) for c in conversations)
            ):
                raise RequestError("'messages' must be a non-empty array of conversations", param="messages")
            max_tokens = max_tokens_of(body, "max_completion_tokens") or max_tokens_of(body, "max_tokens")
            counts = [await self._count(c, None) for c in conversations]
        except RequestError as exc:
            return exc.response()
        except (ChatInputError, ImageInputError) as exc:
            return protocol.error_response(str(exc))
        limit = self.pool.settings.max_model_len
        plans: list[ChoicePlan] = []
        for count in counts:
            fit = protocol.check_length(count, max_tokens, limit)
            if fit.error is not None:
                return fit.error
            plans.append(
                plan_choice(self.pool.settings, fit.max_tokens, self.pool.state.natural.draw(request.headers))
            )
        texts = await self._texts(request, sum(counts), plans)  # one sequence per conversation
        if texts is None:
            return Response(status_code=CLIENT_CLOSED_STATUS)
        rid = protocol.new_id("chatcmpl")
        return JSONResponse(
            protocol.chat_response(
                rid, model, texts, [p.finish_reason for p in plans], sum(counts), sum(p.tokens for p in plans)
            )
        )


def routes(pool: ServingPool) -> list[Route]:
    """The Starlette routes of the three endpoints for ``pool``."""
    apis = Apis(pool)
    return [
        Route("/v1/responses", apis.responses, methods=["POST"]),
        Route("/v1/messages", apis.messages, methods=["POST"]),
        Route("/v1/chat/completions/batch", apis.chat_batch, methods=["POST"]),
    ]
