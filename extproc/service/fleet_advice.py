"""Live fleet advice in ``tbr serve`` (issue 33): the window of decisions, the advice, its metrics.

Every routing decision is counted in a :class:`~extproc.core.route.fleet_window.FleetWindow` (the
observer's ``decision`` call; O(log bins), no allocation once the bucket exists). At scrape time (at
most every ``advice.recompute_interval_s``) :func:`planner.model.advice.advise` turns the window — this
replica's and, with Redis, every replica's (:mod:`extproc.service.fleet_sync`) — into advice, which
:class:`AdviceCollector` exports on ``/metrics`` and ``GET /advice`` returns as JSON.

Layering: this is the one module of the router that imports the planner, and only
:mod:`planner.model.advice` (pyproject's import-linter contracts). Advice is never applied: nothing
here feeds back into a routing decision.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from extproc.config import RouterConfig
from extproc.core.route.fleet_window import FleetWindow
from planner.model.advice import (
    AdvicePool,
    AdviceRule,
    FleetAdvice,
    ThresholdHysteresis,
    advise,
    load_profile,
)

__all__ = ["AdviceCollector", "FleetAdvisor", "advice_pools", "sync_rows_counter"]

log = logging.getLogger(__name__)


def advice_pools(cfg: RouterConfig) -> list[AdvicePool]:
    """The config's pools with their planner profiles (``advice.profiles``, else ``default_profile``).

    Raises:
        ValueError: a profile that is neither a known name nor a readable profile file, or a pool
            whose ``max_model_len`` its profile's KV cache cannot hold once.
    """
    out: list[AdvicePool] = []
    for p in cfg.pools:
        spec = cfg.advice.profiles.get(p.name, cfg.advice.default_profile)
        profile = load_profile(spec)
        try:
            profile.max_num_seqs(p.max_model_len)
        except ValueError as exc:
            raise ValueError(f"advice: pool {p.name} on profile {profile.name}: {exc}") from None
        out.append(
            AdvicePool(p.name, profile, p.max_model_len, cfg.advice.capacity_correction.get(p.name, 1.0))
        )
    return out


def sync_rows_counter(registry: CollectorRegistry) -> Counter:
    """``tbr_fleet_window_sync_rows_total{outcome}``: other replicas' windows read from Redis
    (``applied``, ``stale``: older than the window, deleted; ``bad_row``: did not parse, skipped)."""
    return Counter(
        "tbr_fleet_window_sync_rows",
        "Other replicas' advice windows read from Redis by outcome (applied, stale, bad_row).",
        ["outcome"],
        registry=registry,
    )


class FleetAdvisor:
    """The window of this replica's decisions and the advice computed from it (and the others').

    Args:
        cfg: the router config (``pools``, ``advice``); profiles are resolved here, so a bad one
            fails at start (``ValueError``, :func:`advice_pools`).
        clock: wall-clock seconds (``time.time``; replicas' buckets line up on it). Tests pass a
            fake clock.
    """

    def __init__(self, cfg: RouterConfig, clock: Callable[[], float] = time.time) -> None:
        a = cfg.advice
        self.pools = advice_pools(cfg)
        self.rule = AdviceRule(
            slo_ttft_p99_s=a.slo_ttft_p99_s,
            slo_tpot_p99_s=a.slo_tpot_p99_s,
            headroom=a.headroom,
            min_instances=a.min_instances,
            max_instances=a.max_instances,
            output_share=a.output_share,
        )
        self.clock = clock
        self.recompute_interval_s = a.recompute_interval_s
        self.window = FleetWindow([p.name for p in self.pools], window_s=a.window_s, bucket_s=a.bucket_s,
                                  started_s=clock())  # fmt: skip
        self.hysteresis = ThresholdHysteresis(margin=a.threshold_margin, hold_s=a.threshold_hold_s)
        self._last: FleetAdvice | None = None

    def decision(self, pool: str, budget_tokens: int | None) -> None:
        """Count one routing decision now (the observer calls this for every routed request)."""
        self.window.add(pool, budget_tokens, self.clock())

    def current(self, *, fresh: bool = False) -> FleetAdvice:
        """The advice now: the last one while younger than ``recompute_interval_s`` (unless
        ``fresh``), else recomputed from the window (the threshold advice passes the hysteresis)."""
        now = self.clock()
        last = self._last
        if not fresh and last is not None and 0 <= now - last.now_s < self.recompute_interval_s:
            return last
        adv = advise(self.window.snapshot(now), self.pools, self.rule)
        t = self.hysteresis.update(adv.threshold, now)
        self._last = FleetAdvice(**{**adv.__dict__, "threshold": t})
        return self._last

    def view(self) -> dict[str, Any]:
        """The ``GET /advice`` document: :meth:`FleetAdvice.as_json` plus the rule it applies."""
        doc = self.current().as_json()
        doc["rule"] = {
            "slo_ttft_p99_s": self.rule.slo_ttft_p99_s,
            "slo_tpot_p99_s": self.rule.slo_tpot_p99_s,
            "headroom": self.rule.headroom,
            "min_instances": self.rule.min_instances,
            "max_instances": self.rule.max_instances,
            "output_share": self.rule.output_share,
            "capacity_correction": {p.name: p.capacity_correction for p in self.pools},
            "window_s": self.window.window_s,
            "profiles": {p.name: p.profile.name for p in self.pools},
        }
        return doc


class AdviceCollector(Collector):
    """Exports the advice when /metrics is scraped (names in docs/metrics.md):

    per ``pool``: ``tbr_pool_desired_instances``, ``tbr_pool_required_instances``,
    ``tbr_pool_arrival_rate_req_per_s``, ``tbr_pool_predicted_utilization_ratio``; fleet: ``tbr_fleet_alpha_ratio``,
    ``tbr_fleet_saving_vs_homogeneous_ratio``, ``tbr_fleet_threshold_best_tokens``,
    ``tbr_fleet_threshold_best_saving_ratio``, ``tbr_fleet_threshold_advised_tokens`` (0 = keep B),
    ``tbr_fleet_advice_replicas``, ``tbr_fleet_advice_window_seconds``.
    """

    def __init__(self, advisor: Callable[[], FleetAdvisor | None]) -> None:
        self.advisor = advisor

    def collect(self) -> Iterator[Metric]:
        """One family per series above (nothing while advice is off)."""
        advisor = self.advisor()
        if advisor is None:
            return
        try:
            a = advisor.current()
        except (ValueError, ArithmeticError) as exc:  # never fail a scrape over the advice
            log.warning("fleet advice could not be computed: %s", exc)
            return

        def g(name: str, doc: str, labels: list[str] | None = None) -> GaugeMetricFamily:
            return GaugeMetricFamily(name, doc, labels=labels)

        desired = g("tbr_pool_desired_instances", "Instances the pool needs for the advice SLO, with headroom "
                    "(advice only; the autoscaler's target).", ["pool"])  # fmt: skip
        required = g("tbr_pool_required_instances", "Instances the planner's M/G/c model needs for the SLO "
                     "at the window's arrival rate and token mix, before headroom.", ["pool"])  # fmt: skip
        lam = g("tbr_pool_arrival_rate_req_per_s", "Arrival rate routed to the pool over the advice window "
                "(all replicas), requests per second.", ["pool"])  # fmt: skip
        util = g("tbr_pool_predicted_utilization_ratio", "Utilisation the model predicts at the desired "
                 "instance count (λ / (N μ)).", ["pool"])  # fmt: skip
        for p in a.pools:
            desired.add_metric([p.pool], p.desired_instances)
            required.add_metric([p.pool], p.required_instances)
            lam.add_metric([p.pool], p.arrival_rate_req_per_s)
            util.add_metric([p.pool], p.utilization)
        yield from (desired, required, lam, util)
        if a.alpha is not None:
            m = g("tbr_fleet_alpha_ratio", "Share of the window's requests routed to the shortest pool (α).")
            m.add_metric([], a.alpha)
            yield m
        if a.saving_vs_homogeneous is not None:
            m = g("tbr_fleet_saving_vs_homogeneous_ratio", "1 − (the pools' required cost / one homogeneous "
                  "pool's) for the window's traffic.")  # fmt: skip
            m.add_metric([], a.saving_vs_homogeneous)
            yield m
        t = a.threshold
        if t is not None:
            best = g("tbr_fleet_threshold_best_tokens", "Threshold B that would be cheapest for the window's "
                     "traffic (tokens; advice only).")  # fmt: skip
            best.add_metric([], t.best_threshold_tokens)
            saving = g("tbr_fleet_threshold_best_saving_ratio", "Saving against one homogeneous pool at the "
                       "cheapest B.")  # fmt: skip
            saving.add_metric([], t.best_saving)
            advised = g("tbr_fleet_threshold_advised_tokens", "B advised after hysteresis (0 = keep the "
                        "configured B).")  # fmt: skip
            advised.add_metric([], t.advised_threshold_tokens or 0)
            yield from (best, saving, advised)
        reps = g("tbr_fleet_advice_replicas", "Router replicas whose decisions the advice sums.")
        reps.add_metric([], a.replicas)
        span = g("tbr_fleet_advice_window_seconds", "Seconds of traffic the advice window covers.")
        span.add_metric([], a.span_s)
        yield from (reps, span)
