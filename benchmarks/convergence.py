"""Does online calibration still converge when only a sample of responses is read?

A scripted ext_proc replay over a real gRPC stream against the real router (no Envoy): each
request sends ``request_headers`` and ``request_body`` like Envoy does; when the router's
``request_headers`` answer turned the response phases off (``mode_override``
``response_header_mode: SKIP``, i.e. the request was not sampled) the stream ends there, exactly
as Envoy would end it; otherwise ``response_headers`` (200, JSON) and a ``response_body`` with the
true ``usage.prompt_tokens`` (cl100k_base count of the real prompt + chat framing) follow.

Before each request the router's current estimate of that request is recorded, so the error of
the estimate can be followed over the replay.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field

import grpc
from envoy.config.core.v3 import base_pb2 as core
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from benchmarks.bodies import encoder, prompt_tokens
from extproc.config import parse_config
from extproc.core.request.request_body import parse_request_body
from extproc.service.app import RouterApp

__all__ = ["ConvergenceResult", "replay"]


@dataclass
class ConvergenceResult:
    """Outcome of one replay.

    Attributes:
        sample_rate: ``calibration.sample_rate`` of the router.
        requests: requests replayed; routed: those answered with a routing header.
        sampled: requests whose response phases were kept (read for calibration).
        messages: ext_proc messages exchanged in total (Envoy → router).
        window_abs_err: mean |estimated − true| / true prompt tokens per tenth of the replay.
        window_under: share of under-estimates (estimate < true) per tenth of the replay.
        learned_samples: calibration observations held by the store at the end.
        learned_ratio: content kind → learned mean model-to-true ratio ĉ at the end (modelled ÷
            true text tokens).
        true_ratio: content kind → mean of the true per-request ratio over all replayed requests of
            that category (what ĉ estimates).
        counts: category → requests replayed.
    """

    sample_rate: float
    requests: int = 0
    routed: int = 0
    sampled: int = 0
    messages: int = 0
    window_abs_err: list[float] = field(default_factory=list)
    window_under: list[float] = field(default_factory=list)
    learned_samples: int = 0
    learned_ratio: dict[str, float] = field(default_factory=dict)
    true_ratio: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)


def _headers(pairs: dict[str, str], eos: bool = False) -> pb.HttpHeaders:
    hs = [core.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    return pb.HttpHeaders(headers=core.HeaderMap(headers=hs), end_of_stream=eos)


_REQ = _headers({":method": "POST", ":path": "/v1/chat/completions", "content-type": "application/json"})
_RESP = _headers({":status": "200", "content-type": "application/json"})


async def replay(
    prompts: list[str], sample_rate: float, *, seed: int = 1, windows: int = 10, ema_beta: float = 0.9
) -> ConvergenceResult:
    """Replay ``prompts`` (one user message each) through a fresh router with ``sample_rate``.

    ``ema_beta`` is fixed at 0.9 (memory ~20 observations) rather than the production default
    (0.99, memory ~200): a few hundred prompts sampled at 10–20 % give too few observations for a
    0.99 EMA to leave its first sample, which would measure the EMA's start-up, not sampling.

    Deterministic for a given seed (the processor draws from the module ``random``, seeded here).
    """
    cfg = parse_config(
        {
            "pools": [
                {"name": "short", "max_model_len": 8192, "header_value": "short"},
                {"name": "long", "max_model_len": 65536, "header_value": "long"},
            ],
            "calibration": {
                "sample_rate": sample_rate,
                "ema_beta": ema_beta,
                "warmup_samples": 10,
                "skip_unsampled_responses": True,
            },
            "admin": {"enabled": False},
        }
    )
    enc = encoder()
    random.seed(seed)
    res = ConvergenceResult(sample_rate=sample_rate)
    errs: list[tuple[float, bool]] = []
    c_obs: dict[str, list[float]] = {}
    async with (
        RouterApp(cfg, grpc_port=0) as app,
        grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as ch,
    ):
        stub = pb_grpc.ExternalProcessorStub(ch)
        router = app.current_router()
        for text in prompts:
            body = json.dumps(
                {"model": "m", "messages": [{"role": "user", "content": text}], "max_tokens": 64}
            )
            raw = body.encode()
            true_tokens = prompt_tokens([text], enc)
            budget = router.estimator.estimate(parse_request_body(raw, "chat"))
            est = budget.prompt_tokens
            cat = budget.key[1]
            text_tokens = true_tokens - budget.fixed_prompt_tokens
            if text_tokens > 0 and budget.model_tokens > 0:
                c_obs.setdefault(cat, []).append(budget.model_tokens / text_tokens)
            errs.append((abs(est - true_tokens) / true_tokens, est < true_tokens))
            call = stub.Process()
            await call.write(pb.ProcessingRequest(request_headers=_REQ))
            first = await call.read()
            await call.write(pb.ProcessingRequest(request_body=pb.HttpBody(body=raw, end_of_stream=True)))
            second = await call.read()
            res.messages += 2
            res.requests += 1
            if second.request_body.response.header_mutation.set_headers:
                res.routed += 1
            skip = first.mode_override.response_header_mode == pm.ProcessingMode.SKIP
            if not skip:
                res.sampled += 1
                await call.write(pb.ProcessingRequest(response_headers=_RESP))
                third = await call.read()
                res.messages += 1
                if third.mode_override.response_body_mode == pm.ProcessingMode.STREAMED:
                    usage = json.dumps({"usage": {"prompt_tokens": true_tokens}}).encode()
                    await call.write(
                        pb.ProcessingRequest(response_body=pb.HttpBody(body=usage, end_of_stream=True))
                    )
                    await call.read()
                    res.messages += 1
            await call.done_writing()
            await call.code()
        res.learned_samples = sum(state.samples for _, state in app.store.items())
        res.learned_ratio = {key[1]: state.mean_ratio for key, state in app.store.items()}
    res.true_ratio = {cat: sum(v) / len(v) for cat, v in c_obs.items()}
    res.counts = {cat: len(v) for cat, v in c_obs.items()}
    size = max(1, len(errs) // windows)
    for w in range(windows):
        chunk = errs[w * size : (w + 1) * size]
        if chunk:
            res.window_abs_err.append(sum(e for e, _ in chunk) / len(chunk))
            res.window_under.append(sum(1 for _, u in chunk if u) / len(chunk))
    return res
