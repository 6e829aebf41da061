"""What one ext_proc stream holds between its messages: :class:`StreamState`.

The request half (:mod:`extproc.adapter.processor`) and the response half
(:mod:`extproc.adapter.response_phases`) are two layers of one object: ``StreamProcessor`` extends
``ResponsePhases``, which extends this state. Each half writes the fields of its phases; the
decision itself is the core's (:class:`extproc.core.facade.Decision`).
"""

from __future__ import annotations

import random
import time

from extproc.adapter.exchange import OFF_PATH, TWO_MESSAGE, UNROUTED, Exchange
from extproc.adapter.runtime import Runtime
from extproc.core.estimate.budget import TokenBudget
from extproc.core.facade import Decision
from extproc.core.learn.outcomes import MisrouteOutcome
from extproc.core.learn.usage_reader import UsageReader
from extproc.core.request.endpoints import EndpointSpec

__all__ = ["StreamState"]


class StreamState:
    """The state of one stream (one HTTP request/response exchange).

    Args:
        router: the runtime the stream started with (a reload does not affect this stream).
        rng: source for calibration sampling (seeded in tests).
    """

    __slots__ = (
        "_route_answers",
        "batch_budgets",
        "budget",
        "calibrated",
        "category",
        "client_max_output_tokens",
        "completion_tokens",
        "counted_pool",
        "decision",
        "endpoint",
        "exchange",
        "finish_reason",
        "kind",
        "learn",
        "method",
        "misroute",
        "misroute_cause",
        "path",
        "pool",
        "prompt_tokens",
        "reader",
        "reason",
        "record_key",
        "request_id",
        "response_id",
        "retried_to",
        "retry_outcome",
        "rng",
        "router",
        "sampled",
        "status",
        "streamed",
        "t_start",
        "traceparent",
        "truncated",
    )

    def __init__(self, router: Runtime, rng: random.Random | None = None) -> None:
        self.router = router
        self.rng = rng
        self.kind = TWO_MESSAGE
        """Which stream this is (:class:`StreamKind`); set by the first message that tells."""
        self.path = ""
        self.method = ""
        self.request_id = ""
        self.traceparent = ""
        self.endpoint: EndpointSpec | None = None
        """The endpoint's row (:mod:`extproc.core.request.endpoints`), None for a request not budgeted."""
        self.decision: Decision | None = None
        """The core's decision for a budgeted request (or the payload's, on an off-path stream)."""
        self.budget: TokenBudget | None = None
        self.batch_budgets: tuple[TokenBudget, ...] | None = None
        self.learn = True
        self.response_id: str | None = None
        self.pool = ""
        self.reason = ""
        self.category = ""
        self.status = 0
        self.prompt_tokens: int | None = None
        self.completion_tokens: int | None = None
        self.client_max_output_tokens: int | None = None
        """The client's own output maximum (``max_completion_tokens`` / ``max_tokens`` /
        ``max_output_tokens``), None when it sent none."""
        self.finish_reason: str | None = None
        self.truncated: bool | None = None
        """Whether the serving pool cut the answer (None when the answer was not judged)."""
        self.calibrated = False
        self.sampled: bool | None = None
        self.exchange = Exchange.REQUEST_HEADERS
        self._route_answers = router.body_responses
        self.counted_pool: str | None = None
        self.retried_to: str | None = None
        self.misroute: str | None = None
        self.streamed = False
        """The budgeted request asked for SSE (``stream: true``)."""
        self.misroute_cause: str | None = None
        """Why the request is a misroute (:mod:`extproc.core.learn.misroute_cause`), None when it is not."""
        self.retry_outcome: MisrouteOutcome | None = None
        """Envoy's retry of this request (``recovered``, ``retry_failed``) until it is counted with
        its cause (:meth:`extproc.adapter.response_phases.ResponsePhases.settle_retry`)."""
        self.reader: UsageReader | None = None
        """The response body's reader while the body is read (:mod:`extproc.core.learn.usage_reader`)."""
        self.record_key = ""
        """Pairs this request's decision record across its two streams (off-path calibration); set
        on a routing stream once the payload went out, on an observability stream from it."""
        self.t_start = time.time()

    @property
    def silent(self) -> bool:
        """An off-path calibration stream (``extproc.adapter.off_path``): Envoy waits for no answer."""
        return self.kind is OFF_PATH

    @property
    def unrouted(self) -> bool:
        """A stream of Envoy's ``tbr_unrouted`` observability filter (gRPC metadata
        ``UNROUTED_STREAM``): a request no routing answer reached."""
        return self.kind is UNROUTED

    @unrouted.setter
    def unrouted(self, value: bool) -> None:
        if value:
            self.kind = UNROUTED
        elif self.kind is UNROUTED:
            self.kind = TWO_MESSAGE

    @property
    def routed_pool(self) -> str | None:
        """The pool the router sent this request to, while the stream can still see its response:
        the in-flight pool on the routing stream, the payload's pool on an off-path stream."""
        return self.pool if self.kind is OFF_PATH and self.pool else self.counted_pool

    def sample_at_request(self) -> bool | None:
        """Whether the response is read, as far as the request line tells: True for an endpoint whose
        answers are always read (Responses API: its id → pool entry serves ``previous_response_id``),
        a ``sample_rate`` draw, or None under ``response_reads.mode: adaptive`` (decided by
        :func:`extproc.core.facade.decide` once the body is read)."""
        if self.endpoint is not None and self.endpoint.always_read:
            return True
        if self.router.config.calibration.response_reads.mode == "adaptive":
            return None
        return self._draw_sample()

    def _draw_sample(self) -> bool:
        """Whether this request's response is read for calibration (``calibration.sample_rate``)."""
        rate = self.router.config.calibration.sample_rate
        if rate >= 1.0:
            return True
        if rate <= 0.0:
            return False
        return (self.rng or random).random() < rate
