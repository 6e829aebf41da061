"""Pools, load-aware spillover, misroute recovery and per-model pool sets (docs/design/002, 003)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import Field, field_validator

from extproc.config.base import HEADER_VALUE, Strict


class PoolConfig(Strict):
    """One vLLM pool Envoy can route to.

    ``max_model_len`` is the pool's context limit in tokens (prompt + generated, per sequence),
    as set by vLLM's ``--max-model-len``; ``header_value`` is what the router writes into the
    routing header so that Envoy's route table picks this pool's cluster.
    """

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    max_model_len: Annotated[int, Field(gt=0, le=16_777_216)]
    header_value: Annotated[str, Field(min_length=1, max_length=64)]
    metrics_url: str | None = None
    """Optional vLLM ``/metrics`` URL scraped for load-aware routing (``spillover``). Its server's
    ``/health`` is checked for pool health (``pool_health``) unless ``health_url`` is set."""
    health_url: str | None = None
    """Optional URL of the pool's health endpoint (vLLM ``GET /health``: 200 = serving; 503 = engine
    dead; no answer = stopped); default: ``/health`` on the ``metrics_url`` server."""
    max_inflight: Annotated[int, Field(ge=1)] | None = None
    """This pool's limit on the router's own in-flight count (requests routed here whose
    ext_proc stream has not ended); overrides ``spillover.max_inflight_per_pool``."""
    max_waiting: Annotated[float, Field(ge=0.0)] | None = None
    """Overrides ``spillover.max_waiting`` for this pool (``vllm:num_requests_waiting``)."""
    max_kv_cache_usage: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Overrides ``spillover.max_kv_cache_usage`` for this pool (``vllm:kv_cache_usage_perc``)."""

    @field_validator("metrics_url", "health_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^\s/]+(/\S*)?$", v):
            raise ValueError("must be an http:// or https:// URL")
        return v

    @field_validator("header_value")
    @classmethod
    def _visible_ascii(cls, v: str) -> str:
        if not HEADER_VALUE.match(v):
            raise ValueError("must be visible ASCII without spaces (it is sent as an HTTP header value)")
        return v


class SpilloverConfig(Strict):
    """Load-aware spillover (arXiv 2604.08075 "load-aware spillover + safety check"; design:
    docs/design/002-spillover.md).

    A request goes to the smallest pool whose ``max_model_len`` fits its budget (the preferred
    pool). When spillover is enabled and that pool is *saturated*, it goes to the next larger
    pool that is not saturated; never to a smaller one. When every larger pool is saturated too,
    it stays on the preferred pool. A pool is saturated when any configured signal reaches its
    threshold (``>=``):

    * ``inflight``: the router's own count of requests routed to the pool whose ext_proc stream
      has not ended, against ``pools[].max_inflight`` or ``max_inflight_per_pool``;
    * ``waiting``: scraped ``vllm:num_requests_waiting`` (summed over the endpoint's engines);
    * ``kv_cache``: scraped ``vllm:kv_cache_usage_perc`` (0..1; mean over engines; the older
      ``vllm:gpu_cache_usage_perc`` is read when the new name is absent).

    Scraped signals older than ``max_staleness_s`` (scrapes failing) are ignored and counted.
    A threshold left at None disables that signal.
    """

    enabled: bool = False
    max_inflight_per_pool: Annotated[int, Field(ge=1)] | None = None
    """Default in-flight limit per pool (requests); None = no in-flight signal."""
    max_waiting: Annotated[float, Field(ge=0.0)] | None = None
    """Default threshold on ``vllm:num_requests_waiting`` (requests); None = not used."""
    max_kv_cache_usage: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Default threshold on ``vllm:kv_cache_usage_perc`` (fraction 0..1); None = not used."""
    scrape_interval_s: Annotated[float, Field(gt=0.0, le=3600.0)] = 1.0
    """Period of the ``/metrics`` scrape of every pool with a ``metrics_url``."""
    scrape_timeout_s: Annotated[float, Field(gt=0.0, le=60.0)] = 0.5
    """Timeout of one scrape request."""
    max_staleness_s: Annotated[float, Field(gt=0.0, le=3600.0)] = 5.0
    """Scraped values older than this are ignored (the pool is judged on its other signals)."""


class PoolHealthConfig(Strict):
    """Pool health in the router (issue 34; docs/operations.md, "Pool health").

    Every ``check_interval_s`` the router asks each pool with a ``health_url`` (or a ``metrics_url``,
    whose server's ``/health`` is used) for vLLM's ``GET /health``: 200 is up; any other status
    (vLLM answers 503 once its engine is dead, while every request gets 500), no answer within
    ``check_timeout_s``, or a refused connection is down. A pool that is down counts as saturated
    (signal ``unavailable``), with or without ``spillover.enabled``: a request it would get goes to
    the next larger pool that is up (decision reason ``pool_unavailable``); a request whose larger
    pools are all down stays where it fits. A verdict older than ``max_staleness_s`` (the checks
    stopped) is ignored, so a pool is never kept down by stale news, and the next 200 brings it back.
    """

    enabled: bool = True
    check_interval_s: Annotated[float, Field(gt=0.0, le=3600.0)] = 1.0
    """Period of the health check of every pool (seconds)."""
    check_timeout_s: Annotated[float, Field(gt=0.0, le=60.0)] = 1.0
    """Timeout of one health check (seconds); no answer in time is ``timeout`` (down)."""
    max_staleness_s: Annotated[float, Field(gt=0.0, le=3600.0)] = 10.0
    """A verdict older than this is ignored (the pool is judged up)."""


class RecoveryConfig(Strict):
    """Misroute recovery (docs/design/003-misroute-recovery.md).

    Envoy retries a request that a smaller pool rejected with HTTP 400 once on the next larger
    pool (route ``retry_policy`` + priority-group cluster specifier in envoy/envoy-3pools.yaml).
    The router sees the retry (``x-envoy-attempt-count`` > 1 on the response) and, when the
    served ``usage.prompt_tokens`` proves the request did not fit the first pool, corrects the
    key's ratio strongly (``calibrate``).
    """

    calibrate: bool = True
    """Apply the strong ratio correction on a confirmed misroute."""
    max_step: Annotated[float, Field(gt=0.0, le=4.0)] = 0.1
    """Largest relative move one confirmed misroute can cause in a text key's learned value: the
    corrected value is at least the value the request was routed with ÷ (1 + this) (issue 34: one
    crafted request must not push a key to its floor). ``k`` misroutes of a key move it by at most
    (1 + this)^k; ordinary learning (its low-quantile tracker) does the rest."""
    max_media_step: Annotated[float, Field(gt=0.0, le=15.0)] = 1.0
    """The same bound for a learned media factor (``runs`` model): one misroute raises it at most
    × (1 + this). Wider than ``max_step``: a media part's rule (duration × tokens per second,
    pixels per tile) can be off by its encoder's pooling, a whole factor of 2."""
    attempt_count_header: str = "x-envoy-attempt-count"
    """Response header carrying Envoy's attempt count (virtual host
    ``include_attempt_count_in_response: true``)."""


class ModelSet(Strict):
    """The pools that serve one model (or one family of model names).

    A request's ``model`` selects the set: first a set listing it in ``models`` (exact), else the
    first set whose ``pattern`` matches (``re.search``, case-insensitive), else
    ``RouterConfig.default_model_set``. The router then picks the pool of the set by budget.
    """

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    models: tuple[Annotated[str, Field(min_length=1, max_length=256)], ...] = ()
    """Exact model names (the ``model`` field as clients send it)."""
    pattern: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    pools: Annotated[list[str], Field(min_length=1, max_length=16)]
    """Names of entries of the top-level ``pools``; each pool belongs to exactly one set."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from exc
        return v
