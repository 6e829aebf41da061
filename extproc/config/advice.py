"""The ``advice:`` section: live fleet advice from the router's own decisions (issue 33).

Off by default. When on, the router keeps sliding windows of its routing decisions (per pool: the
arrivals and their token budgets, :mod:`extproc.core.route.fleet_window`), shares them across replicas
through ``calibration.redis_url`` when set, and turns them into per-pool instance advice with the
planner's closed-form model (:mod:`planner.model.advice`) at scrape time. Advice only: nothing here changes
a routing decision (docs/operations.md, "Fleet advice and autoscaling").
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from extproc.config.base import Strict

__all__ = ["AdviceConfig"]


class AdviceConfig(Strict):
    """Fleet advice settings.

    ``profiles`` maps a pool name to the planner profile its instances run: a name of
    ``planner.model.profiles.PROFILES`` (``llama3-70b-a100``, …) or the path of a JSON/YAML profile file
    whose keys are :class:`planner.model.profiles.PoolProfile`'s fields; a pool without an entry uses
    ``default_profile``. ``output_share`` is the fraction of a request's token budget the model counts
    as generated tokens (the router sees budgets, not answers; default: the Azure LLM 2023
    conversation trace, 211 of 1,366 tokens per request).
    """

    enabled: bool = False
    window_s: Annotated[float, Field(gt=0.0, le=86_400.0)] = 300.0
    """Length of the sliding window the arrival rate and token mix are measured over, seconds."""
    bucket_s: Annotated[float, Field(gt=0.0, le=3_600.0)] = 10.0
    """Granularity of the window (it slides by whole buckets), seconds; at most ``window_s``."""
    slo_ttft_p99_s: Annotated[float, Field(gt=0.0, le=3_600.0)] = 2.0
    slo_tpot_p99_s: Annotated[float, Field(gt=0.0, le=60.0)] | None = None
    headroom: Annotated[float, Field(ge=0.0, le=10.0)] = 0.1
    """Desired instances hold the SLO at (1 + headroom) × the window's arrival rate: room for the
    load to grow while a new instance starts (its cold start)."""
    min_instances: Annotated[int, Field(ge=0, le=100_000)] = 1
    max_instances: Annotated[int, Field(ge=1, le=100_000)] = 10_000
    default_profile: Annotated[str, Field(min_length=1, max_length=4096)] = "llama3-70b-a100"
    profiles: dict[str, Annotated[str, Field(min_length=1, max_length=4096)]] = Field(default_factory=dict)
    output_share: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.155
    capacity_correction: dict[str, Annotated[float, Field(ge=1.0, le=100.0)]] = Field(default_factory=dict)
    """Pool name → multiplier on the closed form's instance count: the DES-verified size over the
    M/G/c size for the pool's profile and traffic (``tbr autoscale`` prints it; docs/operations.md);
    a pool without an entry uses 1.0."""
    threshold_margin: Annotated[float, Field(ge=0.0, le=1.0)] = 0.02
    """A change of B is advised only when the cheapest B saves this fraction of the homogeneous
    fleet's cost more than the current B (hysteresis: the advice is withdrawn below half of it)."""
    threshold_hold_s: Annotated[float, Field(ge=0.0, le=86_400.0)] = 600.0
    """…and only after that has held for this long, seconds."""
    recompute_interval_s: Annotated[float, Field(gt=0.0, le=3_600.0)] = 5.0
    """Advice is recomputed at most this often (scrapes in between read the last one), seconds."""

    @model_validator(mode="after")
    def _check(self) -> AdviceConfig:
        if self.bucket_s > self.window_s:
            raise ValueError("advice.bucket_s must not exceed advice.window_s")
        if self.window_s / self.bucket_s > 10_000:
            raise ValueError("advice.window_s / advice.bucket_s must be at most 10,000 buckets")
        if self.min_instances > self.max_instances:
            raise ValueError("advice.min_instances must not exceed advice.max_instances")
        return self
