"""The response half of an ext_proc stream: ``response_headers`` and ``response_body``.

On a 2xx answer the processor asks Envoy for the body (STREAMED, never BUFFERED: Envoy fails a
buffered body above its buffer limit with 500, which would change what the client gets), reads
``usage`` from a decoded copy in bounded memory (:class:`extproc.core.learn.usage_reader.UsageReader`),
and at the end of the stream hands it once to :func:`extproc.core.facade.learn`, which decides what
is learned (the ratio, the misroute recovery ratchet, the truncation judgement and answer lengths:
docs/design/003-misroute-recovery.md); this half reports the outcomes it returns. The body always
passes unchanged.

:class:`ResponsePhases` is the middle layer of the stream object (``StreamProcessor`` extends it;
the request half stays in :mod:`extproc.adapter.processor`).
"""

from __future__ import annotations

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.adapter import responses as R
from extproc.adapter.exchange import Exchange
from extproc.adapter.headers import plain_headers
from extproc.adapter.stream_state import StreamState
from extproc.core.facade import LearnOutcome, learn
from extproc.core.learn.misroute_cause import UNKNOWN, cause_of_failed_retry
from extproc.core.learn.recovery import parse_attempt_count
from extproc.core.learn.usage_reader import ReadKind, UsageReader

_SSE, _ERROR_BODY = ReadKind.SSE, ReadKind.ERROR_BODY
"""Module aliases (an enum member through its class costs ~0.1 µs in CPython 3.11)."""

__all__ = ["ResponsePhases"]


class ResponsePhases(StreamState):
    """The response phases of one stream (module docstring)."""

    __slots__ = ()

    def wants_calibration(self) -> bool:
        """Whether this answer is read: a misroute and an always-read endpoint always, else as
        sampled (at the request line or by the adaptive decision)."""
        if self.budget is None or self.calibrated:
            return False
        if self.retried_to is not None or (self.endpoint is not None and self.endpoint.always_read):
            return True  # a misroute is always read (docs/design/003-misroute-recovery.md)
        if self.sampled is None:  # no request_headers seen (not Envoy's order), or no read decision
            self.sampled = bool(self.sample_at_request())
        return self.sampled

    def on_response_headers(self, msg: pb.HttpHeaders) -> pb.ProcessingResponse:
        """On 2xx, ask Envoy for the body in the mode that suits its content type."""
        # Answered with a pass-through unless the body is requested below.
        self.exchange = Exchange.DONE
        router = self.router
        attempt_header = router.config.recovery.attempt_count_header
        h = plain_headers(msg.headers, (":status", "content-type", "content-encoding", attempt_header))
        try:
            self.status = int(h.get(":status", ""))
        except ValueError:
            self.status = 0
        content_type = h.get("content-type", "").lower()
        # Several content-encoding fields form one list, in order (RFC 9110 §5.3).
        encoding = h.get("content-encoding", "")
        attempts = h.get(attempt_header, "")
        routed = self.routed_pool
        if attempts and routed is not None and self.retried_to is None:
            # An off-path stream sees the retry too; the routing stream has already released its count.
            retry = router.recovery.on_retried(
                routed, parse_attempt_count(attempts), self.status, move_load=not self.silent
            )
            if retry is not None:
                self.retried_to = retry.to_pool
                self.misroute = retry.outcome
                self.retry_outcome = retry.outcome  # counted with its cause once the answer shows it
        obs = router.observer
        if not 200 <= self.status < 300:
            if self.budget is not None:
                obs.calibration("non_2xx")
            if self.retry_outcome is not None:
                # the retry failed too: its error body tells a length error from a client error
                reader = None if msg.end_of_stream else UsageReader.for_error_body(encoding)
                if reader is None:
                    self.settle_retry(cause_of_failed_retry(self.status, None))
                    return R.CONTINUE_RESPONSE_HEADERS
                self.reader = reader
                self.exchange = Exchange.RESPONSE_BODY
                return R.READ_JSON_RESPONSE
            return R.CONTINUE_RESPONSE_HEADERS
        if msg.end_of_stream or not self.wants_calibration():
            if self.budget is not None and msg.end_of_stream:
                obs.calibration("no_body")
            return R.CONTINUE_RESPONSE_HEADERS
        answer = UsageReader.for_answer(self.endpoint, content_type, encoding)
        if isinstance(answer, str):
            obs.calibration(answer)
            return R.CONTINUE_RESPONSE_HEADERS
        self.reader = answer
        self.exchange = Exchange.RESPONSE_BODY
        return R.READ_SSE_RESPONSE if answer.kind is _SSE else R.READ_JSON_RESPONSE

    def on_response_body(self, msg: pb.HttpBody) -> pb.ProcessingResponse:
        """Read usage from the body copy; learn at end of stream. The body passes unchanged."""
        if msg.end_of_stream:
            self.exchange = Exchange.DONE
        reader = self.reader
        decoded = reader is None or not reader.decoding or self.calibrated or reader.feed(msg.body)
        if not decoded and reader is not None and reader.kind is not _ERROR_BODY:
            self.router.observer.calibration("decode_error")  # nothing more is read
            self.reader = None
        if msg.end_of_stream:
            self.finish_response()
        return R.CONTINUE_RESPONSE_BODY

    def finish_response(self) -> None:
        """Read the final usage and learn from it; idempotent (exactly once per request)."""
        reader = self.reader
        if reader is not None and reader.kind is _ERROR_BODY:  # a failed retry's error answer
            self.settle_pending_retry()
            return
        if self.calibrated or self.budget is None or self.decision is None or reader is None:
            return
        self.reader = None
        usage = reader.close()
        if usage is None:
            return
        self.calibrated = True
        out = learn(
            self.router.core,
            self.decision,
            usage,
            routed_pool=self.routed_pool,
            retried_to=self.retried_to,
            retry_pending=self.retry_outcome is not None,
            misroute=self.misroute,
            misroute_cause=self.misroute_cause,
        )
        self._report(out)

    def _report(self, out: LearnOutcome) -> None:
        """Record and count what :func:`extproc.core.facade.learn` found."""
        r = self.router
        obs = r.observer
        if out.prompt_tokens is not None or out.response_id is not None or out.completion_tokens is not None:
            self.prompt_tokens, self.completion_tokens = out.prompt_tokens, out.completion_tokens
            self.response_id = out.response_id
        if out.retry_cause is not None:
            self.settle_retry(out.retry_cause)
        self.misroute, self.misroute_cause = out.misroute, out.misroute_cause
        if out.finish_reason is not None:
            self.finish_reason = out.finish_reason
        if out.truncated is not None:
            self.truncated = out.truncated
        for from_pool, to_pool, misroute, cause in out.misroutes:
            obs.misroute(from_pool, to_pool, misroute, cause)
        for label in out.calibration:
            obs.calibration(label)
        if out.estimate_error is not None:
            obs.estimate_error(*out.estimate_error)
        routed = self.routed_pool
        if routed is not None:
            for outcome in out.recovery:
                obs.misroute_calibration(routed, outcome)
        sink = r.output_sink
        if sink is not None:
            for seen in out.outputs:
                sink.add(seen.key, seen.completion_tokens, truncated=seen.truncated, capped=seen.capped)
        if out.ratio_key is not None:
            r.publish_ratio(*out.ratio_key)

    def settle_retry(self, cause: str) -> None:
        """Count Envoy's retry of this request, once, with its ``cause``
        (``tbr_misroutes_total{from_pool,to_pool,outcome,cause}``, :mod:`extproc.core.learn.misroute_cause`)."""
        outcome, routed = self.retry_outcome, self.routed_pool
        if outcome is None or routed is None or self.retried_to is None:
            return
        self.retry_outcome = None
        self.misroute_cause = cause
        self.router.observer.misroute(routed, self.retried_to, outcome, cause)

    def settle_pending_retry(self) -> None:
        """A retry not counted yet (the stream ends, or a failed retry's error body ended): counted
        with what its answer showed: the error body of a failed retry, else ``unknown`` (a 2xx whose
        usage was not read)."""
        reader = self.reader
        error_reader = reader if reader is not None and reader.kind is _ERROR_BODY else None
        if error_reader is not None:
            self.reader = None
        if self.retry_outcome is None:
            return
        if not 200 <= self.status < 300:
            error = error_reader.close_error() if error_reader is not None else None
            self.settle_retry(cause_of_failed_retry(self.status, error))
        else:
            self.settle_retry(UNKNOWN)
