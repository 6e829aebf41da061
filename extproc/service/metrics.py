"""Prometheus metrics of the router (prometheus-client), on their own registry.

Every label takes values from a bounded set: pools (config), categories (the content kinds
:data:`extproc.core.text.runs.CONTENT_KINDS`, ``all``, ``bounded``), reasons (fixed strings in the code), models (capped by
``estimator.max_models``) and phases. docs/metrics.md lists each metric with type, labels, unit.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from collections.abc import Callable
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    GCCollector,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    disable_created_metrics,
)

from extproc.core.learn.outcomes import (
    CalibrationOutcome,
    MisrouteCalibrationOutcome,
    MisrouteOutcome,
    StreamEnd,
)
from extproc.core.route.decision import DecisionRecord
from extproc.core.text.runs import RUNSCAN, RUNSCAN_PASS
from extproc.service.load_metrics import LoadMetrics
from extproc.service.otel import OtelRecorder
from extproc.service.pool_check import PoolCheckMetrics
from extproc.service.pool_health import PoolHealthMetrics
from extproc.service.request_metrics import CountedCounter, CountedHistogram

__all__ = ["PrometheusObserver", "RouterMetrics", "build_version"]

# No `<name>_created` gauge next to every counter and histogram series (it doubles the series
# count and nothing here reads it). prometheus-client setting, process-wide.
disable_created_metrics()  # type: ignore[no-untyped-call]


def build_version() -> str:
    """The installed token-budget-router version ("unknown" when not installed)."""
    try:
        return importlib.metadata.version("token-budget-router")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


_REL_ERROR_BUCKETS = (-0.5, -0.25, -0.1, -0.05, -0.02, 0.0, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0)
_PHASE_BUCKETS = (5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2)


class RouterMetrics:
    """All router metrics, registered on ``registry`` (a fresh one by default).

    Args:
        registry: where to register; tests and multiple routers in one process use their own.
    """

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        r = self.registry
        # Standard process (CPU, memory, file descriptors) and Python (platform, GC) collectors.
        ProcessCollector(registry=r)
        PlatformCollector(registry=r)
        GCCollector(registry=r)
        self.build_info = Gauge(
            "tbr_build_info",
            "Build of the running router (always 1): package version, source revision, Python version, "
            "run counter (c: the C extension; numpy: built without a C compiler) and its pass "
            "(sse2+popcnt, sse2: the SIMD fast path; scalar; numpy).",
            ["version", "revision", "python_version", "run_counter", "run_counter_pass"],
            registry=r,
        )
        self.build_info.labels(
            build_version(),
            os.environ.get("TBR_BUILD_REVISION", "unknown"),
            platform.python_version(),
            RUNSCAN,
            RUNSCAN_PASS,
        ).set(1)
        self.load = LoadMetrics(r)
        """Counters of pool load events (scrapes, saturation, spillover, misroutes)."""
        self.pool_check = PoolCheckMetrics(r)
        self.pool_health = PoolHealthMetrics(r)
        """``tbr_pool_health_checks_total``: pool ``GET /health`` outcomes (issue 34)."""
        """``tbr_pool_config_mismatch``: configured vs served ``max_model_len`` (checked at start)."""
        self.decisions = CountedCounter(
            "tbr_routing_decisions",
            "Routing decisions by chosen pool, content category and reason.",
            ["pool", "category", "reason"],
            registry=r,
        )
        self.unreadable = Counter(
            "tbr_unreadable_requests",
            "Requests the router could not budget (sent to the largest pool), by reason.",
            ["reason"],
            registry=r,
        )
        self.rel_error = Histogram(
            "tbr_prompt_estimate_relative_error",
            "Signed relative error of the prompt-token estimate, (estimated - actual) / actual.",
            ["category"],
            buckets=_REL_ERROR_BUCKETS,
            registry=r,
        )
        self.budget_tokens = CountedHistogram(
            "tbr_budget_tokens",
            "Estimated total token budget (prompt + output reserve) of routed requests.",
            ["pool"],
            buckets=(256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072),
            registry=r,
        )
        self.ratio = Gauge(
            "tbr_model_to_true_ratio",
            "Learned EMA model-to-true ratio (ĉ: modelled units per true prompt token) per model and category.",
            ["model_name", "category"],
            registry=r,
        )
        self.ratio_dev = Gauge(
            "tbr_model_to_true_ratio_deviation",
            "Learned EMA absolute deviation (σ̂) of the model-to-true ratio per model and category.",
            ["model_name", "category"],
            registry=r,
        )
        # The names before the learned ratio was named for what it is, kept one release as aliases
        # (same values) so that dashboards and alerts can move over (docs/metrics.md).
        self.ratio_alias = Gauge(
            "tbr_ratio_bytes_per_token",
            "Deprecated alias of tbr_model_to_true_ratio (same value; it is not bytes per token); removed in the next release.",
            ["model_name", "category"],
            registry=r,
        )
        self.ratio_dev_alias = Gauge(
            "tbr_ratio_deviation_bytes_per_token",
            "Deprecated alias of tbr_model_to_true_ratio_deviation (same value); removed in the next release.",
            ["model_name", "category"],
            registry=r,
        )
        self.ratio_samples = Gauge(
            "tbr_ratio_samples",
            "Observations folded into the ratio per model and category.",
            ["model_name", "category"],
            registry=r,
        )
        self.calibration = Counter(
            "tbr_calibration_events",
            "Outcome of reading usage from responses: applied, or why nothing was learned.",
            ["outcome"],
            registry=r,
        )
        self.response_reads = CountedCounter(
            "tbr_response_reads",
            "Adaptive read decisions (calibration.response_reads.mode: adaptive): decision read or skip, "
            "and why (extproc/core/learn/read_decision.py); read rate = read / all.",
            ["decision", "reason"],
            registry=r,
        )
        self.inflight = Gauge("tbr_inflight_streams", "ext_proc streams currently open.", registry=r)
        self.streams = CountedCounter(
            "tbr_streams",
            "ext_proc streams ended, by how they ended.",
            ["end"],
            registry=r,
        )
        self.phase_seconds = CountedHistogram(
            "tbr_phase_processing_seconds",
            "Router CPU time spent answering one ext_proc message, by phase.",
            ["phase"],
            buckets=_PHASE_BUCKETS,
            registry=r,
        )
        self.errors = Counter(
            "tbr_processing_errors",
            "Unexpected errors while processing a phase (answered with a safe pass-through).",
            ["phase"],
            registry=r,
        )
        self.config_reloads = Counter(
            "tbr_config_reloads",
            "Configuration reload attempts by outcome (applied, invalid, unchanged).",
            ["outcome"],
            registry=r,
        )
        self.config_generation = Gauge(
            "tbr_config_generation",
            "Number of configurations applied since start (1 = the initial one).",
            registry=r,
        )
        self.ready = Gauge(
            "tbr_ready",
            "1 while the router accepts new streams (readiness), 0 while starting or draining.",
            registry=r,
        )
        self.store_up = Gauge(
            "tbr_ratio_store_up",
            "1 when the shared (Redis) ratio store answered its last operation, else 0.",
            registry=r,
        )
        self.store_errors = Counter(
            "tbr_ratio_store_errors",
            "Failed shared-store operations (push of observations, pull of ratios).",
            ["operation"],
            registry=r,
        )
        self.store_pushed = Counter(
            "tbr_ratio_store_pushed_observations",
            "Observations applied to the shared store by its server-side learner script.",
            registry=r,
        )
        self.store_dropped = Counter(
            "tbr_ratio_store_dropped_observations",
            "Observations dropped (oldest first) because the push queue was full while the store was down.",
            registry=r,
        )
        self.store_seeded = Counter(
            "tbr_ratio_store_seeded_keys",
            "Keys this replica wrote into a shared store that had lost its data (Redis restarted empty).",
            registry=r,
        )
        self.store_queue = Gauge(
            "tbr_ratio_store_queue_length",
            "Observations waiting to be pushed to the shared store.",
            registry=r,
        )
        self.output_sync_rows = Counter(
            "tbr_output_sync_rows",
            "Answers of other replicas read from Redis (issue 30): applied to the output learner, or "
            "bad_row (did not parse, or a class beyond the limit): skipped.",
            ["outcome"],
            registry=r,
        )
        self.snapshots = Counter(
            "tbr_ratio_snapshots",
            "Ratio snapshot file operations: load (at start) ok/invalid, save (periodic and at shutdown) ok/error.",
            ["operation", "outcome"],
            registry=r,
        )
        self.shutdown_steps = Counter(
            "tbr_shutdown_steps",
            "Steps of the graceful shutdown by outcome (ok, error: logged, and the next steps still run).",
            ["step", "outcome"],
            registry=r,
        )
        self.decision_log_written = Counter(
            "tbr_decision_log_written_records",
            "Decision-log records written to the file (by the background flush).",
            registry=r,
        )
        self.decision_log_dropped = Counter(
            "tbr_decision_log_dropped_records",
            "Decision-log records dropped: queue full (the disk is slower than the traffic) or write error.",
            registry=r,
        )
        self.store_sync_seconds = Histogram(
            "tbr_ratio_store_sync_seconds",
            "Wall time of one pull of every shared ratio into the local cache.",
            buckets=(1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 2.5e-2, 5e-2, 0.1, 0.25, 1.0),
            registry=r,
        )


class PrometheusObserver:
    """The :class:`extproc.adapter.observer.StreamObserver` of ``tbr serve``: records each outcome
    in :class:`RouterMetrics` (names and labels in docs/metrics.md).

    Labelled children are cached per label tuple: prometheus_client's ``labels()`` takes a lock
    and builds a tuple on every call (~1–5 µs), several times per request on the hot path. Every
    label takes values from a bounded set (module docstring), so the caches are bounded too.

    Args:
        metrics: where to record.
        otel: also export each finished request to OpenTelemetry (a span joined to Envoy's trace
            and GenAI metrics, :mod:`extproc.service.otel`); None = off.
    """

    def __init__(self, metrics: RouterMetrics, otel: OtelRecorder | None = None) -> None:
        self.metrics = metrics
        self.otel = otel
        self.on_decision: Callable[[str, int | None], None] | None = None
        """Also told every decision's pool and budget (the fleet advice window); None = nobody."""
        self.records_requests = otel is not None
        self._children: dict[tuple[str, ...], Any] = {}
        # The per-request calls below look their bound ``inc`` / ``observe`` up in one dict keyed by
        # the label values alone (no key tuple built with the metric's name, no attribute lookups).
        self._decided: dict[tuple[str, str, str], tuple[Callable[[], None], Callable[[float], None]]] = {}
        self._ended: dict[str, Callable[[], None]] = {}
        self._phase: dict[str, Callable[[float], None]] = {}
        self._read: dict[tuple[bool, str], Callable[[], None]] = {}
        self.open_streams = 0
        """ext_proc streams open now; ``tbr_inflight_streams`` reads it when scraped (a plain int on
        the event loop instead of a locked gauge update twice per request)."""
        metrics.inflight.set_function(lambda: self.open_streams)

    def _child(self, name: str, metric: Any, *labels: str) -> Any:
        key = (name, *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def stream_started(self) -> None:
        """``tbr_inflight_streams`` + 1."""
        self.open_streams += 1

    def stream_ended(self, end: StreamEnd) -> None:
        """``tbr_inflight_streams`` − 1 and ``tbr_streams_total{end}``."""
        self.open_streams -= 1
        inc = self._ended.get(end)
        if inc is None:
            inc = self._ended[end] = self._child("streams", self.metrics.streams, end).inc
        inc()

    def decision(self, pool: str, category: str, reason: str, budget_tokens: int | None) -> None:
        """``tbr_routing_decisions_total`` and, when budgeted, ``tbr_budget_tokens``."""
        key = (pool, category, reason)
        record = self._decided.get(key)
        if record is None:
            m = self.metrics
            record = self._decided[key] = (
                self._child("decisions", m.decisions, pool, category, reason).inc,
                self._child("budget", m.budget_tokens, pool).observe,
            )
        record[0]()
        if budget_tokens is not None:
            record[1](budget_tokens)
        if self.on_decision is not None:
            self.on_decision(pool, budget_tokens)

    def unreadable(self, reason: str) -> None:
        """``tbr_unreadable_requests_total{reason}``."""
        self._child("unreadable", self.metrics.unreadable, reason).inc()

    def calibration(self, outcome: CalibrationOutcome) -> None:
        """``tbr_calibration_events_total{outcome}``."""
        self._child("calibration", self.metrics.calibration, outcome).inc()

    def response_read(self, read: bool, reason: str) -> None:
        """``tbr_response_reads_total{decision,reason}``."""
        inc = self._read.get((read, reason))
        if inc is None:
            decision = "read" if read else "skip"
            inc = self._read[(read, reason)] = self._child(
                "response_read", self.metrics.response_reads, decision, reason
            ).inc
        inc()

    def estimate_error(self, category: str, rel_error: float) -> None:
        """``tbr_prompt_estimate_relative_error{category}``."""
        self._child("rel_error", self.metrics.rel_error, category).observe(rel_error)

    def ratio_updated(
        self, model: str, category: str, mean_ratio: float, dev_ratio: float, samples: int
    ) -> None:
        """``tbr_model_to_true_ratio``, its deviation (and their deprecated aliases) and
        ``tbr_ratio_samples`` of ``(model, category)``."""
        m = self.metrics
        self._child("ratio", m.ratio, model, category).set(mean_ratio)
        self._child("ratio_dev", m.ratio_dev, model, category).set(dev_ratio)
        self._child("ratio_alias", m.ratio_alias, model, category).set(mean_ratio)
        self._child("ratio_dev_alias", m.ratio_dev_alias, model, category).set(dev_ratio)
        self._child("ratio_samples", m.ratio_samples, model, category).set(samples)

    def request_finished(self, record: DecisionRecord, traceparent: str) -> None:
        """Forward the finished request to OpenTelemetry (only called when it is on)."""
        if self.otel is not None:
            self.otel.request_finished(record, traceparent)

    def phase_timing(self, phase: str, seconds: float) -> None:
        """``tbr_phase_processing_seconds{phase}``."""
        observe = self._phase.get(phase)
        if observe is None:
            observe = self._phase[phase] = self._child("phase", self.metrics.phase_seconds, phase).observe
        observe(seconds)

    def phase_error(self, phase: str) -> None:
        """``tbr_processing_errors_total{phase}``."""
        self._child("errors", self.metrics.errors, phase).inc()

    def saturated(self, pool: str, signal: str) -> None:
        """``tbr_pool_saturated_checks_total{pool,signal}``."""
        self._child("saturated", self.metrics.load.saturated_checks, pool, signal).inc()

    def spillover(self, from_pool: str, to_pool: str, signal: str) -> None:
        """``tbr_spillover_total{from_pool,to_pool,signal}``."""
        self._child("spillover", self.metrics.load.spillover, from_pool, to_pool, signal).inc()

    def misroute(self, from_pool: str, to_pool: str, outcome: MisrouteOutcome, cause: str) -> None:
        """``tbr_misroutes_total{from_pool,to_pool,outcome,cause}``."""
        self._child("misroutes", self.metrics.load.misroutes, from_pool, to_pool, outcome, cause).inc()

    def misroute_calibration(self, pool: str, outcome: MisrouteCalibrationOutcome) -> None:
        """``tbr_misroute_calibration_total{pool,outcome}``."""
        self._child("misroute_cal", self.metrics.load.misroute_calibration, pool, outcome).inc()
