"""Per-stream ext_proc state machine: one :class:`StreamProcessor` per HTTP request.

Phases, in the order Envoy sends them with envoy/envoy.yaml's processing mode:

1. ``request_headers`` (SEND): remember ``:path``, ``:method`` and ``x-request-id``. Requests
   we do not budget (other paths or methods, or no body) are routed right here and the body is
   skipped via ``mode_override``. The calibration sample (``calibration.sample_rate``) is drawn
   here; with ``calibration.skip_unsampled_responses`` an unsampled request gets a
   ``mode_override`` that turns the response phases off, so it costs Envoy and the router two
   messages instead of three or four (docs/performance.md).
2. ``request_body`` (BUFFERED): parse, classify, estimate, choose the pool; answer with the
   routing header and ``clear_route_cache``. Unreadable bodies go to the largest pool.
3. ``response_headers`` (SEND): on 2xx, ask for the body STREAMED via ``mode_override`` (for
   ``text/event-stream`` also drop ``content-length``). JSON is streamed too, never BUFFERED:
   Envoy fails a buffered body above its buffer limit with 500, which would change what the
   client gets.
4. ``response_body``: read ``usage.prompt_tokens`` (decoding gzip/br/deflate/zstd copies) in
   bounded memory whatever the body size, and calibrate once, at end of stream.

The processor never raises to the server: any unexpected error is counted and answered with a
pass-through for the phase that was sent (for ``request_body``: the largest pool). Responses
are never altered except for the documented ``content-length`` removal on SSE.
"""

from __future__ import annotations

import dataclasses
import logging
import random
import time

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.adapter import responses as R
from extproc.adapter.exchange import OFF_PATH, ONE_MESSAGE, UNROUTED, Exchange
from extproc.adapter.headers import plain_headers, request_attributes
from extproc.adapter.held_records import new_record_key
from extproc.adapter.off_path import (
    CALIB_HEADER,
    CalibPayload,
    decode_payload,
    payload_from_metadata,
    route_and_sample,
)
from extproc.adapter.response_phases import ResponsePhases
from extproc.core.estimate.estimator import TokenBudget
from extproc.core.facade import Decision, decide, fallback_pool
from extproc.core.learn.batch import batch_budget
from extproc.core.learn.outcomes import StreamEnd
from extproc.core.request.endpoints import parse_body, spec_for_path, spec_of
from extproc.core.request.request_body import UnreadableRequest
from extproc.core.route.decision import DecisionRecord
from extproc.core.route.policy import PoolDecision

__all__ = ["Exchange", "StreamProcessor"]

log = logging.getLogger(__name__)

_REQUEST_HEADERS = frozenset((":path", ":method", "x-request-id", "traceparent"))
_OFF_PATH_HEADERS = _REQUEST_HEADERS | {CALIB_HEADER}
_REQUEST_ATTRIBUTES = ("request.path", "request.method", "request.id")
"""What the one-message design's ext_proc filter lists in ``request_attributes``."""


class StreamProcessor(ResponsePhases):
    """Handles the messages of one ext_proc stream (one HTTP request/response exchange): translates
    Envoy's messages to the core's :func:`~extproc.core.facade.decide` /
    :func:`~extproc.core.facade.learn` and their results back to Envoy's answers.

    Args:
        router: the runtime the stream started with (a reload does not affect this stream).
        rng: source for calibration sampling (seeded in tests).
    """

    __slots__ = ()

    # -- dispatch ---------------------------------------------------------------------------

    @property
    def exchange_done(self) -> bool:
        """True once the last message of this HTTP exchange was answered (:class:`Exchange`)."""
        return self.exchange is Exchange.DONE

    @property
    def response_phases_may_follow(self) -> bool:
        """True while a finished exchange may still get response phases the router cannot turn
        off: a one-message stream (request headers SKIPped) before its response headers, whose
        body answer carries no ``mode_override`` (docs/design/004-one-message.md)."""
        return self.kind is ONE_MESSAGE and self.status == 0

    def handle(self, req: pb.ProcessingRequest) -> pb.ProcessingResponse:
        """Answer one message; always returns a response for the phase that was sent."""
        phase = req.WhichOneof("request")
        label: str = phase or "unknown"
        t0 = time.perf_counter()
        try:
            if phase == "request_headers":
                # Dynamic metadata cannot come from a client: always read (one-message design).
                resp = self.on_request_headers(req.request_headers, payload_from_metadata(req))
            elif phase == "request_body":
                if self.exchange is Exchange.REQUEST_HEADERS:
                    self.on_body_first(req)
                resp = self.on_request_body(req.request_body)
            elif phase == "response_headers":
                resp = self.on_response_headers(req.response_headers)
            elif phase == "response_body":
                resp = self.on_response_body(req.response_body)
            elif phase == "request_trailers":
                resp = R.CONTINUE_REQUEST_TRAILERS
            elif phase == "response_trailers":
                self.exchange = Exchange.DONE
                self.finish_response()
                resp = R.CONTINUE_RESPONSE_TRAILERS
            else:
                # Not a phase (unknown oneof): answering nothing would stall Envoy; a
                # request-headers continue is the least harmful well-formed answer.
                label = "unknown"
                resp = R.CONTINUE_REQUEST_HEADERS
        except Exception:
            self.router.observer.phase_error(label)
            log.exception("error in phase %s (request_id=%s)", label, self.request_id)
            resp = self._safe_answer(phase)
        self.router.observer.phase_timing(label, time.perf_counter() - t0)
        return resp

    def _safe_answer(self, phase: str | None) -> pb.ProcessingResponse:
        if phase == "request_headers":
            self.exchange = Exchange.REQUEST_BODY
            return R.CONTINUE_REQUEST_HEADERS
        if phase == "request_body":
            resp = self._route_fallback("internal_error", body=True)
            self.exchange = self._after_request_body()
            return resp
        if phase == "response_headers":
            self.exchange = Exchange.DONE
            return R.CONTINUE_RESPONSE_HEADERS
        if phase == "response_body":
            return R.CONTINUE_RESPONSE_BODY
        if phase == "response_trailers":
            return R.CONTINUE_RESPONSE_TRAILERS
        if phase == "request_trailers":
            return R.CONTINUE_REQUEST_TRAILERS
        return R.CONTINUE_REQUEST_HEADERS

    # -- request path -----------------------------------------------------------------------

    def on_request_headers(
        self, msg: pb.HttpHeaders, calib_metadata: str | None = None
    ) -> pb.ProcessingResponse:
        """Record the request line; route bodiless or unhandled requests immediately. With
        ``calibration.off_path``, a stream whose request headers carry the router's payload (header
        :data:`CALIB_HEADER`) is an observability stream; so is one that brings ``calib_metadata``
        (forwarded from dynamic metadata in the one-message design, whatever ``off_path`` says: a
        client cannot write dynamic metadata)."""
        if self.kind is UNROUTED:
            return self._observe_unrouted(msg)
        r = self.router
        h = plain_headers(
            msg.headers, _OFF_PATH_HEADERS if r.config.calibration.off_path else _REQUEST_HEADERS
        )
        value = h.get(CALIB_HEADER, calib_metadata)  # the header is only read with off_path
        if value is not None:
            return self._start_off_path(value)
        self.path = h.get(":path", "")
        self.method = h.get(":method", "")
        self.request_id = h.get("x-request-id", "")[:128]
        self.traceparent = h.get("traceparent", "")[:64]  # W3C trace context (55 characters)
        self.endpoint = spec_for_path(self.path) if self.method == "POST" else None
        if self.endpoint is None or msg.end_of_stream:
            # Routed now; the override turns the body and response phases off.
            self.exchange = Exchange.DONE
            return self._route_fallback(
                "unsupported_path" if self.endpoint is None else "body_empty", body=False
            )
        self.exchange = Exchange.REQUEST_BODY
        # Responses API answers are always read: their id → pool entry serves previous_response_id.
        self.sampled = self.sample_at_request()
        cal = r.config.calibration
        # off path, the response comes through the observability filter, never this stream; an
        # adaptive decision (sampled None until the body is routed) keeps the response phases on
        reads_response = not cal.off_path and (self.sampled is not False or not cal.skip_unsampled_responses)
        return R.CONTINUE_REQUEST_HEADERS if reads_response else R.CONTINUE_REQUEST_HEADERS_SKIP_RESPONSE

    def _observe_unrouted(self, msg: pb.HttpHeaders) -> pb.ProcessingResponse:
        """Request headers on a stream of Envoy's ``tbr_unrouted`` filter (observability mode,
        envoy/envoy.yaml): Envoy opens it for a request that reached the upstream filters without the
        router's decision. In the one-message design that is every bodiless request (Envoy opens
        no routing stream when the headers end the request): counted as the two-message design
        counts them, ``body_empty`` for a budgeted POST, ``unsupported_path`` for anything else, on
        the largest pool (where Envoy's catch-all sends it), with a decision record. A request with
        a body here is one the routing filter failed open on (Envoy counts those,
        ``failure_mode_allowed``): not counted again."""
        self.exchange = Exchange.DONE
        if not msg.end_of_stream:
            return R.CONTINUE_REQUEST_HEADERS
        r = self.router
        h = plain_headers(msg.headers, _REQUEST_HEADERS)
        self.path, self.method = h.get(":path", ""), h.get(":method", "")
        self.request_id = h.get("x-request-id", "")[:128]
        self.traceparent = h.get("traceparent", "")[:64]
        budgeted = self.method == "POST" and spec_for_path(self.path) is not None
        self.reason = "body_empty" if budgeted else "unsupported_path"
        self.pool = fallback_pool(r.core, None)
        self.category = "unknown"
        r.observer.decision(self.pool, "unknown", self.reason, None)
        if budgeted:
            r.observer.unreadable(self.reason)
        return R.CONTINUE_REQUEST_HEADERS

    def _start_off_path(self, value: str) -> pb.ProcessingResponse:
        """Request headers of an off-path calibration stream (observability mode): read the
        router's payload; the response phases follow and are read silently."""
        self.kind = OFF_PATH
        payload = decode_payload(value)
        if payload is None:
            self.router.observer.calibration("bad_payload")
            self.exchange = Exchange.DONE
            return R.CONTINUE_REQUEST_HEADERS
        self.budget, self.pool, self.endpoint = payload.budget, payload.pool, spec_of(payload.endpoint)
        self.decision = Decision.routed_elsewhere(
            payload.budget,
            payload.pool,
            payload.endpoint,
            learn=payload.learn,
            client_max_output_tokens=payload.client_max_output_tokens,
        )
        self.client_max_output_tokens = payload.client_max_output_tokens
        self.learn, self.request_id, self.sampled = payload.learn, payload.request_id, True
        self.record_key = payload.record_key
        self.router.held_records.claim(self.record_key)
        self.category = payload.budget.key[1]
        self.exchange = Exchange.RESPONSE_HEADERS
        return R.CONTINUE_REQUEST_HEADERS

    def on_body_first(self, req: pb.ProcessingRequest) -> None:
        """The stream starts with ``request_body``: request headers are SKIPped (one message per
        request, docs/design/004-one-message.md). The request line comes from the filter's
        ``request_attributes`` and the decision goes out as dynamic metadata, since a header
        mutation can no longer reach the headers. Response phases, if configured, re-set the state.
        """
        self.exchange = Exchange.DONE
        self.kind = ONE_MESSAGE
        self._route_answers = self.router.metadata_responses
        a = request_attributes(req, _REQUEST_ATTRIBUTES)
        self.path = a.get("request.path", "")
        self.method = a.get("request.method", "")
        self.request_id = a.get("request.id", "")[:128]
        self.endpoint = spec_for_path(self.path) if self.method == "POST" else None
        self.sampled = self.sample_at_request()

    def _after_request_body(self) -> Exchange:
        """What follows ``request_body``: nothing when the response phases were turned off at
        ``request_headers`` (an unsampled request with ``skip_unsampled_responses``), or when
        there were no request headers (one message: nothing more is announced)."""
        if self.kind is ONE_MESSAGE or self.router.config.calibration.off_path:
            return Exchange.DONE
        if self.sampled is False and self.router.config.calibration.skip_unsampled_responses:
            return Exchange.DONE
        return Exchange.RESPONSE_HEADERS

    def on_request_body(self, msg: pb.HttpBody) -> pb.ProcessingResponse:
        """Budget the request and set the routing header (BUFFERED: the whole body at once)."""
        self.exchange = self._after_request_body()
        if self.pool:
            # Already routed (at request_headers, or by an earlier body message: STREAMED
            # chunks or a duplicate). Routing again would double-count the decision.
            return R.CONTINUE_REQUEST_BODY
        if self.endpoint is None:
            if self.kind is ONE_MESSAGE:
                # One message: no request_headers answer could route it; route it here.
                return self._route_fallback("unsupported_path", body=True)
            return R.CONTINUE_REQUEST_BODY
        r = self.router
        try:
            features = parse_body(msg.body, self.endpoint)
        except UnreadableRequest as exc:
            # A first chunk that is not the whole body (STREAMED / BUFFERED_PARTIAL) rarely
            # parses: it is routed to the largest pool like any body we cannot read.
            reason = exc.reason if msg.end_of_stream else "body_incomplete"
            return self._route_fallback(reason, body=True, model=exc.model)
        d = decide(
            r.core,
            features,
            self.endpoint,
            read=self.sampled,
            exact_estimate=r.decision_log is not None or r.observer.records_requests,
            draw=(self.rng or random).random,
        )
        self.decision = d
        self.batch_budgets = d.batch_budgets
        self.learn = d.learn
        self.client_max_output_tokens = d.client_max_output_tokens
        self.pool = d.pool
        self.reason = d.reason
        if d.read_reason is not None:
            r.observer.response_read(bool(d.read), d.read_reason)
        self.sampled = d.read
        self.budget = d.budget
        self.category = d.budget.key[1]
        self._count_inflight()
        if d.pool_decision is not None and d.pool_decision.saturated:
            self._report_saturation(d.pool_decision)
        r.observer.decision(self.pool, d.routed_budget.key[1], self.reason, d.routed_budget.total_tokens)
        self.streamed = features.stream
        if self.sampled and self.samples_off_path:
            return self._sample_off_path(d.budget)
        return self._routing_answer()

    def _routing_answer(self) -> pb.ProcessingResponse:
        """The prebuilt answer routing a budgeted request to :attr:`pool`; in the one-message design a
        streaming request's says so (``tbr.stream``: envoy/envoy.yaml's streaming routes)."""
        if self.streamed and self.kind is ONE_MESSAGE:
            return self.router.metadata_stream_responses[self.pool]
        return self._route_answers[self.pool]

    @property
    def samples_off_path(self) -> bool:
        """Sampled responses come through the observability filter: with ``calibration.off_path``,
        and always in the one-message design, whose routing stream cannot turn response phases on
        (docs/design/004-one-message.md)."""
        return self.router.config.calibration.off_path or self.kind is ONE_MESSAGE

    def _sample_off_path(self, budget: TokenBudget) -> pb.ProcessingResponse:
        """The routing answer plus the payload (the ``x-tbr-calib`` header, or dynamic metadata in the
        one-message design) that brings this request's response to the router through the
        observability filter (``extproc.adapter.off_path``)."""
        learned = budget if self.batch_budgets is None else batch_budget(list(self.batch_budgets))
        if learned is None:
            self.router.observer.calibration("batch_mixed_keys")
            return self._route_answers[self.pool]
        self.record_key = new_record_key()
        payload = CalibPayload(
            learned,
            self.pool,
            self.endpoint.endpoint.value if self.endpoint is not None else "",
            self.learn,
            self.request_id,
            self.record_key,
            client_max_output_tokens=self.client_max_output_tokens,
        )
        # The observability stream learns this response; were Envoy to send it here too (response
        # phases configured on a one-message filter), it would be learned twice.
        self.calibrated = True
        return route_and_sample(self._routing_answer(), payload)

    def _report_saturation(self, decision: PoolDecision) -> None:
        """Report the saturated pools a spillover decision saw, and the spillover itself."""
        obs = self.router.observer
        for pool, signal in decision.saturated:
            obs.saturated(pool, signal)
        if decision.preferred is not None:
            obs.spillover(decision.preferred.name, decision.pool.name, decision.signal)

    def _route_fallback(self, reason: str, *, body: bool, model: str | None = None) -> pb.ProcessingResponse:
        r = self.router
        self.pool = fallback_pool(r.core, model)
        self.reason = reason
        self.category = "unknown"
        self._count_inflight()
        r.observer.decision(self.pool, "unknown", reason, None)
        if reason != "unsupported_path":
            r.observer.unreadable(reason)
        return self._route_answers[self.pool] if body else r.header_responses[self.pool]

    def _count_unrouted(self, reason: str) -> None:
        """A request the router never answered: counted against the largest pool (where Envoy's
        catch-all sent it) with ``reason``, and recorded like a routed one."""
        r = self.router
        self.pool = fallback_pool(r.core, None)
        self.reason = reason
        self.category = "unknown"
        r.observer.decision(self.pool, "unknown", reason, None)
        r.observer.unreadable(reason)

    def _count_inflight(self) -> None:
        """Count this request against its pool until :meth:`finish` (once per stream)."""
        if self.counted_pool is None:
            self.counted_pool = self.pool
            self.router.load.acquire(self.pool)

    # -- end of stream ----------------------------------------------------------------------

    def finish(self, end: StreamEnd) -> None:
        """The stream ended (``end``: ``complete``, ``cancelled`` or ``error``); record the decision.

        A usage already read from a stream the client aborted still calibrates (it is a true
        count of the prompt). Called exactly once by the server.
        """
        if self.reader is not None and self.reader.stream_usage_seen:
            self.finish_response()
        self.settle_pending_retry()
        r = self.router
        if self.counted_pool is not None:
            counted, self.counted_pool = self.retried_to or self.counted_pool, None
            r.load.release(counted)
        if self.kind is OFF_PATH:  # releases its claim also when there is nothing to write
            self._complete_held_record(end)
            return
        if not self.pool and self.exchange is Exchange.REQUEST_BODY:
            # The request headers came, the body message never did (a client that gave up while
            # uploading, a body Envoy did not send): no answer of the router routed it (Envoy's
            # catch-all goes to the largest pool). Counted, so no request goes unseen. A reset
            # and a half-close look the same here (both end the read), hence one reason.
            self._count_unrouted("body_missing")
        if r.decision_log is None and not r.observer.records_requests:
            return
        if not self.pool:
            return
        b = self.budget
        record = DecisionRecord(
            ts_s=self.t_start,
            request_id=self.request_id,
            model=(b.model or b.key[0]) if b else "",
            category=self.category,
            pool=self.pool,
            reason=self.reason,
            estimated_prompt_tokens=b.prompt_tokens if b else None,
            output_reserve_tokens=b.output_reserve_tokens if b else None,
            n_sequences=b.n_sequences if b else None,
            budget_tokens=b.total_tokens if b else None,
            status=self.status or None,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            end=end,
            retried_to_pool=self.retried_to,
            misroute=self.misroute,
            finish_reason=self.finish_reason,
            truncated=self.truncated,
            misroute_cause=self.misroute_cause,
        )
        if self.record_key:
            # the observability stream fills in the response half (extproc.adapter.held_records)
            r.held_records.hold(self.record_key, record, self.traceparent)
        else:
            r.write_record(record, self.traceparent)

    def _complete_held_record(self, end: str) -> None:
        """An off-path stream ended: complete its routing record with what the response showed
        (now, or when the routing stream's end is processed: :mod:`extproc.adapter.held_records`)."""
        status, prompt, completion = self.status or None, self.prompt_tokens, self.completion_tokens
        retried_to, misroute, cause = self.retried_to, self.misroute, self.misroute_cause
        finish_reason, truncated = self.finish_reason, self.truncated

        def complete(record: DecisionRecord) -> DecisionRecord:
            return dataclasses.replace(
                record,
                status=status,
                prompt_tokens=prompt,
                completion_tokens=completion,
                end=end,
                retried_to_pool=retried_to,
                misroute=misroute,
                finish_reason=finish_reason,
                truncated=truncated,
                misroute_cause=cause,
            )

        self.router.held_records.release(self.record_key, complete)
