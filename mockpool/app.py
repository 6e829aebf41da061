"""The stand-in vLLM pool as a Starlette app: :func:`build_app` (one app per :class:`PoolSettings`).

Endpoints (OpenAI-compatible like ``vllm serve``):

* ``POST /v1/chat/completions``, ``POST /v1/completions`` — JSON or SSE (``stream: true``, optional
  ``stream_options.include_usage``); ``usage.prompt_tokens`` from a real tokenizer (:mod:`mockpool.tokencount`);
  vLLM's ``max_model_len`` check and 400 error shape (:mod:`mockpool.protocol`).
* ``POST /v1/responses``, ``POST /v1/messages`` (Anthropic), ``POST /v1/chat/completions/batch`` in vLLM's
  shapes and errors (:mod:`mockpool.apis`).
* Images: a flat ``image_tokens`` per part, or ``image_rule="qwen2.5-vl"``: decoded and counted as
  Qwen2.5-VL's processor does (:mod:`mockpool.vision`).
* ``GET /v1/models``, ``GET /health`` (200, empty body), ``GET /metrics`` (:mod:`mockpool.metrics`).
* Test/demo aids (not in vLLM): ``POST /admin/hold``, ``POST /admin/release``, ``GET /admin/stats``,
  ``POST /admin/reset``; ``POST /admin/engine-dead`` / ``engine-alive`` (vLLM after its engine process
  died: ``/health`` 503, requests 500 with ``EngineDeadError``'s body, streams in flight end with it)
  and ``POST /admin/engine-stop`` / ``engine-resume`` (its engine SIGSTOPped: requests stop without
  an end, ``/health`` 200); :mod:`mockpool.state`.

Identity: every response carries ``x-served-by-pool: <settings.name>`` (header only: the OpenAI body shape is
never changed). Test aid, after envoyproxy/ai-gateway's testupstream ``x-expected-testupstream-id``: a request
carrying ``x-expected-pool`` that differs from this pool's name is answered ``421 Misdirected Request`` with a
JSON error, so an end-to-end test fails loudly when the router sends a request to the wrong pool.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from typing import Any

from starlette.applications import Starlette
from starlette.datastructures import Headers, MutableHeaders
from starlette.middleware import Middleware
from starlette.middleware.gzip import GZipMiddleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mockpool import apis, metrics, protocol, sse, vision
from mockpool.audio import AUDIO_EXTRA_TOKENS, AudioInputError, audio_clips_seconds
from mockpool.generation import ChoicePlan, Started, Token, generate, piece, plan_choice
from mockpool.settings import PoolSettings
from mockpool.state import ENGINE_DEAD_MESSAGE, EngineDeadError, PoolState
from mockpool.templates import ChatInputError
from mockpool.tokencount import TokenCounter, load_counter
from mockpool.validation import (
    CommonParams,
    RequestError,
    chat_params,
    check_temperature,
    common_params,
    completion_prompts,
    read_json_object,
    requested_max_tokens,
)
from mockpool.vision import ImageInputError

SERVED_BY_HEADER = "x-served-by-pool"
EXPECTED_POOL_HEADER = "x-expected-pool"
SSE_HEADERS = {"cache-control": "no-cache"}
#: Status recorded in /admin/stats for requests whose client went away (nginx's 499; never reaches a client).
CLIENT_CLOSED_STATUS = 499


class PoolIdentityMiddleware:
    """ASGI middleware: adds ``x-served-by-pool``, enforces ``x-expected-pool``, counts responses by path."""

    def __init__(self, app: ASGIApp, state: PoolState) -> None:
        """Wrap ``app``; responses are counted into ``state``."""
        self.app = app
        self.state = state
        self.name = state.settings.name

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Handle one ASGI connection scope."""
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500

        async def send_with_identity(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                MutableHeaders(scope=message).append(SERVED_BY_HEADER, self.name)
            await send(message)

        expected = Headers(scope=scope).get(EXPECTED_POOL_HEADER)
        try:
            if self.state.engine_dead and scope["method"] == "POST" and scope["path"].startswith("/v1/"):
                # vLLM's engine_error_handler: create_error_response(EngineDeadError), a VLLMServerError.
                await protocol.error_response(ENGINE_DEAD_MESSAGE, 500, "InternalServerError")(
                    scope, receive, send_with_identity
                )
            elif expected is not None and expected != self.name:
                msg = f"{EXPECTED_POOL_HEADER} is {expected!r} but this is pool {self.name!r}"
                await protocol.error_response(msg, 421, "MisdirectedRequest", EXPECTED_POOL_HEADER)(
                    scope, receive, send_with_identity
                )
            else:
                await self.app(scope, receive, send_with_identity)
        finally:
            self.state.record_response(scope["path"], status)


class PoolApp:
    """Request handlers bound to one pool's settings, state, tokenizer and metrics registry."""

    def __init__(self, settings: PoolSettings, counter: TokenCounter) -> None:
        """Handlers for ``settings`` using ``counter`` for prompt tokens."""
        self.settings = settings
        self.state = PoolState(settings)
        self.counter = counter
        self.registry = metrics.make_registry(self.state)

    # -- OpenAI endpoints -----------------------------------------------------------------------------
    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``."""
        try:
            body = await read_json_object(request)
            common = common_params(body, self.settings)
            chat = chat_params(body)
            max_tokens = requested_max_tokens(body, chat=True)
            prompt_tokens = await asyncio.to_thread(
                self.count_chat, chat.messages, chat.tools, chat.add_generation_prompt, chat.template_kwargs
            )
        except RequestError as exc:
            return exc.response()
        except (ChatInputError, ImageInputError, AudioInputError) as exc:
            return protocol.error_response(str(exc))
        prompt_tokens = self._truncated(prompt_tokens, body)
        param = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
        fit = protocol.check_length(
            prompt_tokens, max_tokens, self.settings.max_model_len, max_tokens_param=param
        )
        if fit.error is not None:
            return self._too_long(fit.error, common)
        try:
            check_temperature(body)
        except RequestError as exc:
            return exc.response()
        plans = [
            plan_choice(self.settings, fit.max_tokens, self.state.natural.draw(request.headers))
        ] * common.n
        return await self._respond(
            request, common, prompt_tokens, plans, chat=True, top_logprobs=chat.top_logprobs
        )

    def count_chat(
        self,
        messages: Any,
        tools: list[Any] | None = None,
        add_generation_prompt: bool = True,
        template_kwargs: dict[str, Any] | None = None,
    ) -> int:
        """Prompt tokens of chat ``messages`` (template + images by ``settings.image_rule``).

        Raises:
            ChatInputError, ImageInputError: messages or an inline image the server would refuse.
        """
        rate = self.settings.audio_tokens_per_second
        if rate > 0.0:  # audio by duration; the other media parts as configured below
            clips = audio_clips_seconds(messages)
            audio = sum(math.ceil(s * rate) + AUDIO_EXTRA_TOKENS for s in clips)
            count = self.counter.count_chat(
                messages, tools, add_generation_prompt, template_kwargs, self.settings.image_tokens
            )
            return count.prompt_tokens - len(clips) * self.settings.image_tokens + audio
        if self.settings.image_rule == "flat":
            return self.counter.count_chat(
                messages, tools, add_generation_prompt, template_kwargs, self.settings.image_tokens
            ).prompt_tokens
        count = self.counter.count_chat(messages, tools, add_generation_prompt, template_kwargs, 0)
        return count.prompt_tokens + vision.messages_image_tokens(messages)[1]

    async def completions(self, request: Request) -> Response:
        """``POST /v1/completions`` (``prompt`` as text, texts, token ids or lists of token ids)."""
        try:
            body = await read_json_object(request)
            common = common_params(body, self.settings)
            max_tokens = requested_max_tokens(body, chat=False)
            prompts = completion_prompts(body, self.counter.vocab_size)
            counts = await asyncio.to_thread(self._count_prompts, prompts)
        except RequestError as exc:
            return exc.response()
        counts = [self._truncated(c, body) for c in counts]
        plans: list[ChoicePlan] = []
        natural = self.state.natural.draw(request.headers)
        for prompt, prompt_tokens in zip(prompts, counts, strict=True):
            fit = protocol.check_length(
                prompt_tokens, max_tokens, self.settings.max_model_len, token_ids=not isinstance(prompt, str)
            )
            if fit.error is not None:
                return self._too_long(fit.error, common)
            plans.extend([plan_choice(self.settings, fit.max_tokens, natural)] * common.n)
        try:
            check_temperature(body)
        except RequestError as exc:
            return exc.response()
        prompt_tokens = sum(counts)
        return await self._respond(request, common, prompt_tokens, plans, chat=False)

    def _truncated(self, prompt_tokens: int, body: dict[str, Any]) -> int:
        """vLLM's ``truncate_prompt_tokens``: N ≥ 1 keeps the last N tokens, -1 the pool's
        ``max_model_len``; anything else (absent, 0, not an integer) leaves the count."""
        n = body.get("truncate_prompt_tokens")
        if isinstance(n, bool) or not isinstance(n, int) or n == 0 or n < -1:
            return prompt_tokens
        return min(prompt_tokens, self.settings.max_model_len if n == -1 else n)

    async def _respond(
        self,
        request: Request,
        common: CommonParams,
        prompt_tokens: int,
        plans: list[ChoicePlan],
        *,
        chat: bool,
        top_logprobs: int | None = None,
    ) -> Response:
        """Answer a validated request: SSE when ``stream``, else one JSON body (chat or text completion;
        chat ``logprobs`` when ``top_logprobs`` is not None, non-streaming only)."""
        rid = protocol.new_id("chatcmpl" if chat else "cmpl")
        if common.stream:
            return self._stream(rid, common, prompt_tokens, plans, chat=chat)
        try:
            texts = await self._collect(request, prompt_tokens, plans)
        except EngineDeadError as exc:
            return protocol.error_response(str(exc), 500, "InternalServerError")
        if texts is None:
            return Response(status_code=CLIENT_CLOSED_STATUS)
        completion_tokens = sum(p.tokens for p in plans)
        reasons = [p.finish_reason for p in plans]
        self.state.record_finished(prompt_tokens, completion_tokens, reasons)
        if chat:
            logprobs = None
            if top_logprobs is not None:
                logprobs = [
                    protocol.chat_logprobs([piece(i) for i in range(p.tokens)], top_logprobs) for p in plans
                ]
            body = protocol.chat_response(
                rid, common.model, texts, reasons, prompt_tokens, completion_tokens, logprobs
            )
        else:
            body = protocol.completion_response(
                rid, common.model, texts, reasons, prompt_tokens, completion_tokens
            )
        return JSONResponse(body)

    def _too_long(self, error: Response, common: CommonParams) -> Response:
        """vLLM's 400, or with ``context_error_in_stream`` and ``stream: true`` a 200 SSE stream
        carrying the same error object as its only event (SGLang's behaviour)."""
        if not (self.settings.context_error_in_stream and common.stream):
            return error
        event = b"data: " + bytes(error.body) + b"\n\n"
        return Response(event + sse.DONE_EVENT, media_type="text/event-stream", headers=SSE_HEADERS)

    def _count_prompts(self, prompts: list[str | list[int]]) -> list[int]:
        """Prompt tokens per completions prompt (text encoded with special tokens, ids counted as given)."""
        return [
            self.counter.count_text(p, add_special_tokens=True) if isinstance(p, str) else len(p)
            for p in prompts
        ]

    async def collect(
        self, request: Request, prompt_tokens: int, plans: list[ChoicePlan]
    ) -> list[str] | None:
        """Generate every choice to its end (see :meth:`_collect`); None when the client left."""
        return await self._collect(request, prompt_tokens, plans)

    async def _collect(
        self, request: Request, prompt_tokens: int, plans: list[ChoicePlan]
    ) -> list[str] | None:
        """Run generation to the end and return the text of every choice, or ``None`` if the client left.

        Like vLLM's ``with_cancellation``, a client disconnect aborts the request: it leaves the waiting queue
        or frees its running slot at once (``finished_reason="abort"``).
        """
        texts = [""] * len(plans)

        async def run() -> None:
            async with aclosing(generate(self.state, self.settings, prompt_tokens, plans)) as events:
                async for event in events:
                    if isinstance(event, Token):
                        texts[event.choice] += event.text

        async def disconnected() -> None:
            while (await request.receive())["type"] != "http.disconnect":
                pass

        work = asyncio.create_task(run())
        watcher = asyncio.create_task(disconnected())
        try:
            await asyncio.wait({work, watcher}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (work, watcher):
                if not task.done():
                    task.cancel()
            await asyncio.gather(work, watcher, return_exceptions=True)
        if work.cancelled():
            self.state.finished["abort"] += 1
            return None
        work.result()
        return texts

    def _stream(
        self, rid: str, common: CommonParams, prompt_tokens: int, plans: list[ChoicePlan], chat: bool
    ) -> StreamingResponse:
        """SSE response: chunks per token, finish chunks, optional usage chunk, ``[DONE]``."""
        return StreamingResponse(
            self._sse_events(rid, common, prompt_tokens, plans, chat),
            media_type="text/event-stream",
            headers=SSE_HEADERS,
        )

    async def _sse_events(
        self, rid: str, common: CommonParams, prompt_tokens: int, plans: list[ChoicePlan], chat: bool
    ) -> AsyncIterator[bytes]:
        created = protocol.now_s()
        split = self.settings.sse_split_bytes
        usage_flag = common.include_usage

        def chunk(index: int, text: str | None, finish: str | None, role: bool = False) -> dict[str, Any]:
            if chat:
                delta: dict[str, Any] = {"role": "assistant", "content": ""} if role else {}
                if text is not None:
                    delta["content"] = text
                return protocol.chat_chunk(rid, created, common.model, index, delta, finish, usage_flag)
            return protocol.completion_chunk(
                rid, created, common.model, index, text or "", finish, usage_flag
            )

        try:
            async with aclosing(self._sse_token_events(chunk, prompt_tokens, plans, split, chat)) as parts:
                async for part in parts:
                    yield part
        except (asyncio.CancelledError, GeneratorExit):
            self.state.finished["abort"] += 1
            raise
        except EngineDeadError as exc:
            # vLLM's streaming generator: the error as the last event, then [DONE]
            error = protocol.error_body(str(exc), "InternalServerError", 500)
            async for part in sse.write_pieces(sse.encode_event(error) + sse.DONE_EVENT, split):
                yield part
            return
        for index, plan in enumerate(plans):
            last = chunk(index, None if chat else "", plan.finish_reason)
            async for part in sse.write_pieces(sse.encode_event(last), split):
                yield part
        completion_tokens = sum(p.tokens for p in plans)
        self.state.record_finished(prompt_tokens, completion_tokens, [p.finish_reason for p in plans])
        if usage_flag:
            obj = "chat.completion.chunk" if chat else "text_completion"
            final = protocol.usage_chunk(rid, created, common.model, obj, prompt_tokens, completion_tokens)
            async for part in sse.write_pieces(sse.encode_event(final), split):
                yield part
        async for part in sse.write_pieces(sse.DONE_EVENT, split):
            yield part

    async def _sse_token_events(
        self,
        chunk: Callable[..., dict[str, Any]],
        prompt_tokens: int,
        plans: list[ChoicePlan],
        split: int,
        chat: bool,
    ) -> AsyncGenerator[bytes, None]:
        """SSE bytes of the role chunks (chat) and one chunk per generated token."""
        async with aclosing(generate(self.state, self.settings, prompt_tokens, plans)) as events:
            async for event in events:
                if isinstance(event, Started):
                    if chat:
                        for index in range(len(plans)):
                            async for part in sse.write_pieces(
                                sse.encode_event(chunk(index, None, None, True)), split
                            ):
                                yield part
                    continue
                async for part in sse.write_pieces(
                    sse.encode_event(chunk(event.choice, event.text, None)), split
                ):
                    yield part

    async def models(self, request: Request) -> Response:
        """``GET /v1/models`` (vLLM ``ModelList``/``ModelCard`` shape, with ``max_model_len``)."""
        created = protocol.now_s()
        data: list[dict[str, Any]] = [
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": "vllm",
                "root": name,
                "parent": None,
                "max_model_len": self.settings.max_model_len,
                "permission": [],
            }
            for name in self.settings.model_names
        ]
        return JSONResponse({"object": "list", "data": data})

    async def health(self, request: Request) -> Response:
        """``GET /health``: 200 with an empty body, like vLLM; 503 (empty) once the engine is dead."""
        return Response(status_code=503 if self.state.engine_dead else 200)

    async def metrics(self, request: Request) -> Response:
        """``GET /metrics``: Prometheus text exposition."""
        return Response(metrics.render(self.registry), media_type="text/plain; version=0.0.4; charset=utf-8")

    # -- admin (test and demo aids) -------------------------------------------------------------------
    async def admin_hold(self, request: Request) -> Response:
        """``POST /admin/hold``: admitted requests pause before their first token until released."""
        self.state.hold()
        return JSONResponse({"pool": self.settings.name, "held": True})

    async def admin_release(self, request: Request) -> Response:
        """``POST /admin/release``: let held requests proceed."""
        self.state.release()
        return JSONResponse({"pool": self.settings.name, "held": False})

    async def admin_engine_dead(self, request: Request) -> Response:
        """``POST /admin/engine-dead``: the engine process died (:meth:`PoolState.kill_engine`)."""
        self.state.kill_engine()
        return JSONResponse({"pool": self.settings.name, "engine_dead": True})

    async def admin_engine_alive(self, request: Request) -> Response:
        """``POST /admin/engine-alive``: a restarted engine (:meth:`PoolState.revive_engine`)."""
        self.state.revive_engine()
        return JSONResponse({"pool": self.settings.name, "engine_dead": False})

    async def admin_engine_stop(self, request: Request) -> Response:
        """``POST /admin/engine-stop``: the engine stops producing (:meth:`PoolState.stop_engine`)."""
        self.state.stop_engine()
        return JSONResponse({"pool": self.settings.name, "engine_stopped": True})

    async def admin_engine_resume(self, request: Request) -> Response:
        """``POST /admin/engine-resume``: it goes on (:meth:`PoolState.resume_engine`)."""
        self.state.resume_engine()
        return JSONResponse({"pool": self.settings.name, "engine_stopped": False})

    async def admin_stats(self, request: Request) -> Response:
        """``GET /admin/stats``: :meth:`PoolState.stats` as JSON."""
        return JSONResponse(self.state.stats())

    async def admin_reset(self, request: Request) -> Response:
        """``POST /admin/reset``: zero the served counters."""
        self.state.reset_counters()
        return JSONResponse(self.state.stats())


def build_app(settings: PoolSettings, counter: TokenCounter | None = None) -> Starlette:
    """Build the ASGI app of one pool.

    Args:
        settings: the pool's configuration.
        counter: tokenizer to use; default :func:`mockpool.tokencount.load_counter` ``(settings.tokenizer)``
            (loads ~1 s the first time per process, then cached).

    Returns:
        A Starlette app; ``app.state.pool`` is the :class:`PoolApp` (its ``.state`` is the :class:`PoolState`).

    Raises:
        mockpool.tokencount.TokenizerUnavailableError: the tokenizer wheel is not installed.
    """
    pool = PoolApp(settings, counter or load_counter(settings.tokenizer))
    routes = [
        Route("/v1/chat/completions", pool.chat_completions, methods=["POST"]),
        Route("/v1/completions", pool.completions, methods=["POST"]),
        *apis.routes(pool),
        Route("/v1/models", pool.models, methods=["GET"]),
        Route("/health", pool.health, methods=["GET"]),
        Route("/metrics", pool.metrics, methods=["GET"]),
        Route("/admin/hold", pool.admin_hold, methods=["POST"]),
        Route("/admin/release", pool.admin_release, methods=["POST"]),
        Route("/admin/engine-dead", pool.admin_engine_dead, methods=["POST"]),
        Route("/admin/engine-alive", pool.admin_engine_alive, methods=["POST"]),
        Route("/admin/engine-stop", pool.admin_engine_stop, methods=["POST"]),
        Route("/admin/engine-resume", pool.admin_engine_resume, methods=["POST"]),
        Route("/admin/stats", pool.admin_stats, methods=["GET"]),
        Route("/admin/reset", pool.admin_reset, methods=["POST"]),
    ]
    middleware = [Middleware(PoolIdentityMiddleware, state=pool.state)]
    if settings.gzip:
        middleware.append(Middleware(GZipMiddleware, minimum_size=0))
    app = Starlette(routes=routes, middleware=middleware)
    app.state.pool = pool
    return app
