"""What an ext_proc stream reports, as a typed protocol the adapter calls with outcomes.

The adapter never imports the service layer: the processor and the servicer tell a
:class:`StreamObserver` what happened (a routing decision, why a body was unreadable, how a
calibration ended, …) and the implementation decides what to record. ``tbr serve`` records them
as Prometheus metrics (:class:`extproc.service.metrics.PrometheusObserver`; the metric names are
listed in docs/metrics.md); benchmarks and tests that need no metrics use :class:`NullObserver`.

Every argument is a value from a bounded set (pools from the config, categories, reasons and
outcomes from fixed strings in the code, models capped by ``estimator.max_models``), so an
implementation may cache per-label state. The calls run on the event loop and must not block.
"""

from __future__ import annotations

import contextvars
from typing import Protocol

from extproc.core.learn.outcomes import (
    CalibrationOutcome,
    MisrouteCalibrationOutcome,
    MisrouteOutcome,
    StreamEnd,
)
from extproc.core.route.decision import DecisionRecord

__all__ = ["NullObserver", "StreamObserver", "request_id_var"]

request_id_var: contextvars.ContextVar[str] = contextvars.ContextVar("tbr_request_id", default="")
"""The ``x-request-id`` of the ext_proc stream being handled in this task ("" if none); the
servicer sets it per stream, the service's log formatter adds it to every log line."""


class StreamObserver(Protocol):
    """Receives the outcomes of ext_proc streams (one process-wide instance, shared by reloads)."""

    records_requests: bool
    """Whether :meth:`request_finished` is wanted (the adapter builds the record only then)."""

    def stream_started(self) -> None:
        """An ext_proc stream opened (one per HTTP request)."""

    def stream_ended(self, end: StreamEnd) -> None:
        """The stream ended: ``complete`` (its exchange finished), ``cancelled`` or ``error``."""

    def decision(self, pool: str, category: str, reason: str, budget_tokens: int | None) -> None:
        """A request was routed to ``pool``; ``budget_tokens`` (prompt estimate + output reserve,
        tokens) is None when the request was not budgeted (unreadable or not handled)."""

    def unreadable(self, reason: str) -> None:
        """A request could not be budgeted and went to the largest pool, for ``reason``."""

    def calibration(self, outcome: CalibrationOutcome) -> None:
        """Reading usage from a response ended with ``outcome`` (``applied`` or why nothing was learned)."""

    def estimate_error(self, category: str, rel_error: float) -> None:
        """Signed relative error of the prompt estimate, (estimated − actual) / actual."""

    def ratio_updated(
        self, model: str, category: str, mean_ratio: float, dev_ratio: float, samples: int
    ) -> None:
        """The learned model-to-true ratio of ``(model, category)`` is now ``mean_ratio`` ±
        ``dev_ratio`` (modelled units per true prompt token) after ``samples`` observations."""

    def phase_timing(self, phase: str, seconds: float) -> None:
        """Answering one message of ``phase`` took ``seconds`` of the router's time."""

    def phase_error(self, phase: str) -> None:
        """An unexpected error while answering ``phase`` (answered with a safe pass-through)."""

    def saturated(self, pool: str, signal: str) -> None:
        """A routing decision found ``pool`` saturated by ``signal`` (``inflight``, ``waiting``, ``kv_cache``)."""

    def spillover(self, from_pool: str, to_pool: str, signal: str) -> None:
        """A request went to ``to_pool`` because its preferred ``from_pool`` was saturated by ``signal``."""

    def misroute(self, from_pool: str, to_pool: str, outcome: MisrouteOutcome, cause: str) -> None:
        """A misroute of ``from_pool``: Envoy retried it on ``to_pool`` (``recovered`` or
        ``retry_failed``), or ``error_in_stream`` / ``truncated`` (``to_pool`` = ``from_pool``);
        ``cause`` from :mod:`extproc.core.learn.misroute_cause`."""

    def misroute_calibration(self, pool: str, outcome: MisrouteCalibrationOutcome) -> None:
        """What usage showed for a recovered misroute from ``pool`` (``confirmed``, ``unconfirmed``,
        ``ratcheted``)."""

    def response_read(self, read: bool, reason: str) -> None:
        """The adaptive read decision (``calibration.response_reads.mode: adaptive``) chose to read
        (``read``) a request's response or not, for ``reason`` (:mod:`extproc.core.learn.read_decision`)."""

    def request_finished(self, record: DecisionRecord, traceparent: str) -> None:
        """A routed request's stream ended (only when :attr:`records_requests`): its decision
        record and the W3C ``traceparent`` request header Envoy sent ("" if none). Unlike the
        other calls, ``record`` carries per-request values (request id, token counts)."""


class NullObserver:
    """A :class:`StreamObserver` that records nothing (benchmarks, tests, embedding)."""

    __slots__ = ()

    records_requests = False

    def stream_started(self) -> None:
        """Record nothing."""

    def stream_ended(self, end: StreamEnd) -> None:
        """Record nothing."""

    def decision(self, pool: str, category: str, reason: str, budget_tokens: int | None) -> None:
        """Record nothing."""

    def unreadable(self, reason: str) -> None:
        """Record nothing."""

    def calibration(self, outcome: CalibrationOutcome) -> None:
        """Record nothing."""

    def estimate_error(self, category: str, rel_error: float) -> None:
        """Record nothing."""

    def ratio_updated(
        self, model: str, category: str, mean_ratio: float, dev_ratio: float, samples: int
    ) -> None:
        """Record nothing."""

    def phase_timing(self, phase: str, seconds: float) -> None:
        """Record nothing."""

    def phase_error(self, phase: str) -> None:
        """Record nothing."""

    def saturated(self, pool: str, signal: str) -> None:
        """Record nothing."""

    def spillover(self, from_pool: str, to_pool: str, signal: str) -> None:
        """Record nothing."""

    def misroute(self, from_pool: str, to_pool: str, outcome: MisrouteOutcome, cause: str) -> None:
        """Record nothing."""

    def misroute_calibration(self, pool: str, outcome: MisrouteCalibrationOutcome) -> None:
        """Record nothing."""

    def response_read(self, read: bool, reason: str) -> None:
        """Record nothing."""

    def request_finished(self, record: DecisionRecord, traceparent: str) -> None:
        """Record nothing."""
