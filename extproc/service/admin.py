"""Admin HTTP endpoints (Starlette, served by uvicorn in the router's event loop).

* ``GET /metrics``: Prometheus text exposition of the router's registry.
* ``GET /healthz``: liveness (the process and its event loop answer).
* ``GET /readyz``: readiness (gRPC listener up, config loaded, not shutting down); 503 otherwise.
* ``GET /ratios``: learned model-to-true ratios as JSON (model, category, ĉ, σ̂, c*, samples: the
  ratio is modelled units per true prompt token, extproc.core.estimate.calibration),
  plus the store's state (``memory`` or ``redis``, Redis reachability, queue length).
* ``GET /output-lengths``: learned answer lengths per output class (issue 30): answers, censored,
  truncated, the reserve the class routes with, its quantile and its prior's, its tail share, plus
  the fleet's tail share; ``{"learned": false}`` while ``estimator.output_reserve.learned`` is off.
* ``GET /advice``: live fleet advice (issue 33; :mod:`extproc.service.fleet_advice`): per pool λ, token
  mix, required and desired instances; α, the saving against one homogeneous pool, the threshold sweep;
  ``{"enabled": false}`` while ``advice.enabled`` is off.
* ``GET /debug/memory``: tracemalloc growth by allocation site when ``TBR_TRACEMALLOC`` is set
  (:mod:`extproc.service.memprof`); ``{"tracing": false}`` otherwise.

Binds to loopback by default (``admin.host``); it exposes no prompt text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from extproc.adapter.runtime import Runtime
from extproc.service.memprof import MemoryProfiler, trim_malloc

__all__ = ["build_admin_app", "output_lengths_view", "ratios_view"]


def ratios_view(router: Runtime) -> list[dict[str, object]]:
    """Rows of the learned-ratio table, sorted by (model, category)."""
    rows: list[dict[str, object]] = []
    for (model, category), state in sorted(router.store.items()):
        ratio, warm = router.estimator.routing_ratio((model, category))
        rows.append(
            {
                "model": model,
                "category": category,
                "mean_model_to_true_ratio": round(state.mean_ratio, 4),
                "dev_model_to_true_ratio": round(state.dev_ratio, 4),
                "routing_model_to_true_ratio": round(ratio, 4),
                "warm": warm,
                "samples": state.samples,
            }
        )
    return rows


def output_lengths_view(router: Runtime) -> dict[str, object]:
    """The ``/output-lengths`` document: the learner's state and one row per class, sorted by key."""
    learner = router.estimator.output_learner
    if learner is None:
        return {"learned": False, "classes": []}
    rows: list[dict[str, object]] = []
    for key, state in learner.items():
        prior = learner.prior(key)
        rows.append(
            {
                "model": key.model,
                "endpoint": key.endpoint,
                "reasoning": key.reasoning,
                "tools": key.tools,
                "prompt_band": key.prompt_band,
                "answers": state.samples,
                "censored": state.censored,
                "truncated": state.truncated,
                "reserve_tokens": state.reserve_tokens,
                "quantile_tokens": learner.quantile_tokens(key),
                "prior_quantile_tokens": learner.prior_quantile_tokens(key),
                "tail_share": learner.tail_share(key),
                "prior_source": prior.source,
            }
        )
    return {
        "learned": True,
        "policy": learner.cfg.policy,
        "truncation_budget": learner.cfg.truncation_budget,
        "controller_scope": learner.cfg.controller_scope,
        "fleet_tail_share": learner.fleet_tail_share,
        "answers": learner.observations,
        "truncations": learner.truncations,
        "classes": rows,
    }


def build_admin_app(
    get_router: Callable[[], Runtime],
    is_ready: Callable[[], bool],
    status: Callable[[], Mapping[str, object]] | None = None,
    *,
    registry: CollectorRegistry,
    advice: Callable[[], Mapping[str, object] | None] | None = None,
) -> Starlette:
    """The admin application; ``get_router`` returns the current runtime (swapped on reload),
    ``status`` the operational state shown with the ratios, ``registry`` what ``/metrics`` exposes,
    ``advice`` the ``/advice`` document (None: advice off)."""

    async def metrics(_: Request) -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    async def healthz(_: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(_: Request) -> Response:
        if is_ready():
            return PlainTextResponse("ready\n")
        return PlainTextResponse("not ready\n", status_code=503)

    async def ratios(_: Request) -> Response:
        body: dict[str, object] = {"ratios": ratios_view(get_router())}
        if status is not None:
            body["status"] = dict(status())
        return JSONResponse(body)

    async def output_lengths(_: Request) -> Response:
        return JSONResponse(output_lengths_view(get_router()))

    async def advice_view(_: Request) -> Response:
        doc = advice() if advice is not None else None
        return JSONResponse({"enabled": False} if doc is None else {"enabled": True, **doc})

    profiler = MemoryProfiler()

    async def debug_memory(request: Request) -> Response:
        if request.query_params.get("trim", "") in ("1", "true"):
            return JSONResponse(await asyncio.to_thread(trim_malloc))
        reset = request.query_params.get("baseline", "") in ("1", "true")
        # In a thread: a snapshot of a busy process takes long enough to time out ext_proc
        # messages if it held the event loop; the GIL is released between Python steps.
        return JSONResponse(await asyncio.to_thread(profiler.report, reset_baseline=reset))

    return Starlette(
        routes=[
            Route("/debug/memory", debug_memory),
            Route("/metrics", metrics),
            Route("/healthz", healthz),
            Route("/readyz", readyz),
            Route("/ratios", ratios),
            Route("/output-lengths", output_lengths),
            Route("/advice", advice_view),
        ]
    )
