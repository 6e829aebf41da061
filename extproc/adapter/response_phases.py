"""The response half of an ext_proc stream: ``response_headers`` and ``response_body``.

On a 2xx answer the processor asks Envoy for the body (STREAMED, never BUFFERED: Envoy fails a
buffered body above its buffer limit with 500, which would change what the client gets), reads
``usage`` from a decoded copy in bounded memory (:mod:`extproc.core.response.sse`,
:mod:`extproc.core.response.encoding`), and at the end of the stream calibrates once: the estimator
learns from the served ``usage.prompt_tokens`` and misroute recovery ratchets a confirmed
underestimate (docs/design/003-misroute-recovery.md). The body always passes unchanged.

These functions act on one :class:`~extproc.adapter.processor.StreamProcessor`, whose
``on_response_*`` methods call them; the request half stays in :mod:`extproc.adapter.processor`.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.adapter import responses as R
from extproc.adapter.exchange import Exchange
from extproc.adapter.headers import plain_headers
from extproc.core.estimate.estimator import TokenBudget
from extproc.core.learn.batch import batch_budget
from extproc.core.learn.misroute_cause import (
    ESTIMATE_TOO_LOW,
    TRUNCATED,
    UNKNOWN,
    ErrorBodyReader,
    cause_of_failed_retry,
    cause_of_served_retry,
)
from extproc.core.learn.recovery import overflowed, parse_attempt_count
from extproc.core.learn.truncation import LENGTH_REASONS, judge_output
from extproc.core.response.api_usage import API_OF_ENDPOINT
from extproc.core.response.encoding import DecodeError, make_decoder
from extproc.core.response.sse import JSONUsageReader, SSEUsageReader, StreamError, is_context_length_error

if TYPE_CHECKING:
    from extproc.adapter.processor import StreamProcessor

__all__ = ["finish_response", "on_response_body", "on_response_headers", "settle_pending_retry"]


def wants_calibration(proc: StreamProcessor) -> bool:
    if proc.budget is None or proc.calibrated:
        return False
    if proc.retried_to is not None or proc.endpoint == "responses":
        return True  # a misroute is always read (docs/design/003-misroute-recovery.md)
    if proc.sampled is None:  # no request_headers seen (not Envoy's order), or no read decision
        proc.sampled = bool(proc._sample_at_request())
    return proc.sampled


def on_response_headers(proc: StreamProcessor, msg: pb.HttpHeaders) -> pb.ProcessingResponse:
    """On 2xx, ask Envoy for the body in the mode that suits its content type."""
    # Answered with a pass-through unless the body is requested below.
    proc.exchange = Exchange.DONE
    attempt_header = proc.router.config.recovery.attempt_count_header
    h = plain_headers(msg.headers, (":status", "content-type", "content-encoding", attempt_header))
    try:
        proc.status = int(h.get(":status", ""))
    except ValueError:
        proc.status = 0
    content_type = h.get("content-type", "").lower()
    # Several content-encoding fields form one list, in order (RFC 9110 §5.3).
    encoding = h.get("content-encoding", "")
    attempts = h.get(attempt_header, "")
    routed = proc.routed_pool
    if attempts and routed is not None and proc.retried_to is None:
        # An off-path stream sees the retry too; the routing stream has already released its count.
        retry = proc.router.recovery.on_retried(
            routed, parse_attempt_count(attempts), proc.status, move_load=not proc.silent
        )
        if retry is not None:
            proc.retried_to = retry.to_pool
            proc.misroute = retry.outcome
            proc.retry_outcome = retry.outcome  # counted with its cause once the answer shows it
    obs = proc.router.observer
    if not 200 <= proc.status < 300:
        if proc.budget is not None:
            obs.calibration("non_2xx")
        if proc.retry_outcome is not None:
            # the retry failed too: its error body tells a length error from a client error
            decoder = None if msg.end_of_stream else make_decoder(encoding)
            if decoder is None:
                settle_retry(proc, cause_of_failed_retry(proc.status, None))
                return R.CONTINUE_RESPONSE_HEADERS
            proc._decoder = decoder
            proc._error = ErrorBodyReader()
            proc.exchange = Exchange.RESPONSE_BODY
            return R.READ_JSON_RESPONSE
        return R.CONTINUE_RESPONSE_HEADERS
    if msg.end_of_stream or not wants_calibration(proc):
        if proc.budget is not None and msg.end_of_stream:
            obs.calibration("no_body")
        return R.CONTINUE_RESPONSE_HEADERS
    decoder = make_decoder(encoding)
    if decoder is None:
        obs.calibration("unsupported_encoding")
        return R.CONTINUE_RESPONSE_HEADERS
    proc._decoder = decoder
    if content_type.startswith("text/event-stream"):
        proc._sse = SSEUsageReader(api=API_OF_ENDPOINT.get(proc.endpoint or "", "openai"))
        proc.exchange = Exchange.RESPONSE_BODY
        return R.READ_SSE_RESPONSE
    if "json" in content_type:
        proc._json = JSONUsageReader(api=API_OF_ENDPOINT.get(proc.endpoint or "", "openai"))
        proc.exchange = Exchange.RESPONSE_BODY
        return R.READ_JSON_RESPONSE
    obs.calibration("unsupported_content_type")
    return R.CONTINUE_RESPONSE_HEADERS


def on_response_body(proc: StreamProcessor, msg: pb.HttpBody) -> pb.ProcessingResponse:
    """Read usage from the body copy; calibrate at end of stream. The body passes unchanged."""
    if msg.end_of_stream:
        proc.exchange = Exchange.DONE
    if proc._decoder is not None and not proc.calibrated:
        try:
            data = proc._decoder.decode(msg.body)
        except DecodeError:
            if proc._error is None:
                proc.router.observer.calibration("decode_error")
            proc._decoder = None
            proc._sse = None
            proc._json = None
            data = b""
        if proc._sse is not None:
            proc._sse.feed(data)
        elif proc._json is not None:
            proc._json.feed(data)
        elif proc._error is not None:
            proc._error.feed(data)
    if msg.end_of_stream:
        finish_response(proc)
    return R.CONTINUE_RESPONSE_BODY


def finish_response(proc: StreamProcessor) -> None:
    """Read the final usage and calibrate; idempotent (exactly once per request)."""
    if proc._error is not None:  # a failed retry's error answer
        settle_pending_retry(proc)
        return
    if proc.calibrated or proc.budget is None:
        return
    if proc._sse is not None:
        proc._sse.close()
        if proc._sse.error is not None:
            stream_error(proc, proc._sse.error)
            return
        proc.prompt_tokens = proc._sse.prompt_tokens
        proc.completion_tokens = proc._sse.completion_tokens
        proc.response_id = proc._sse.response_id
        finish_reasons = proc._sse.finish_reasons
    elif proc._json is not None:
        proc._json.close()
        proc.prompt_tokens = proc._json.prompt_tokens
        proc.completion_tokens = proc._json.completion_tokens
        proc.response_id = proc._json.response_id
        finish_reasons = tuple(proc._json.finish_reasons)
    else:
        return
    proc._sse = None
    proc._json = None
    proc._decoder = None
    proc.calibrated = True
    r = proc.router
    if proc.response_id is not None:
        r.response_pools.put(proc.response_id, proc.retried_to or proc.pool)
    if proc.prompt_tokens is None:
        r.observer.calibration("no_usage")
        judge_without_usage(proc, finish_reasons)
        return
    settle_served_retry(proc, proc.budget, proc.prompt_tokens)
    judge_answer(proc, finish_reasons)
    learned = learned_budget(proc)
    if learned is None:
        return
    before = r.store.get(learned.key) if proc.retried_to is not None else None
    obs = r.estimator.observe(learned, proc.prompt_tokens)
    # the observation's own key: a model admitted by this very answer learns under its name
    r.read_policy.observed(
        obs.key if obs is not None else learned.key,
        obs.rel_error if obs is not None else None,
        time.monotonic(),
    )
    if obs is None:
        r.observer.calibration("not_text_dominated")
    else:
        r.observer.calibration("applied")
        r.observer.estimate_error(obs.key[1], obs.rel_error)
    # recovery runs even when the observation taught the text key nothing (media, unexplained)
    routed = proc.routed_pool
    if proc.retried_to is not None and routed is not None and proc.batch_budgets is None:
        dev_before = before.dev_ratio if before is not None else 0.0
        for outcome in r.recovery.on_usage(
            proc.budget, routed, proc.retried_to, proc.prompt_tokens, dev_before
        ):
            r.observer.misroute_calibration(routed, outcome)
    if obs is not None:
        r.publish_ratio(*obs.key)


def judge_answer(proc: StreamProcessor, finish_reasons: tuple[str, ...]) -> None:
    """Was the answer cut by the pool that served it (:func:`extproc.core.learn.truncation.judge_output`)?
    A cut answer is a misroute of that pool: ``tbr_misroutes_total{outcome="truncated"}`` (``to_pool``
    = the serving pool: nothing was retried) and the decision record's ``truncated``; the record's
    ``misroute`` says ``truncated`` unless a retry already named the request a misroute. Each
    sequence's length then teaches the output learner the request's class (censored when a limit cut
    it). The response passes unchanged. A chat batch (usage summed over conversations) is not judged."""
    budget = proc.budget
    routed = proc.routed_pool
    if budget is None or routed is None:
        return
    r = proc.router
    if proc.endpoint == "chat_batch" or proc.batch_budgets is not None:
        r.output_unjudged("chat_batch" if proc.endpoint == "chat_batch" else "multi_prompt")
        return
    served = proc.retried_to or routed
    pool, larger = r.models.pool(served), r.models.next_larger(served)
    # where the server really cuts: its reported max_model_len when the pool check read it
    served_len = r.served_limits.get(served, pool.max_model_len) if pool is not None else None
    larger_len = r.served_limits.get(larger.name, larger.max_model_len) if larger is not None else None
    report = judge_output(
        api=API_OF_ENDPOINT.get(proc.endpoint or "", "openai"),
        finish_reasons=finish_reasons,
        prompt_tokens=proc.prompt_tokens,
        completion_tokens=proc.completion_tokens,
        n_sequences=budget.n_sequences,
        served_max_model_len=served_len,
        larger_max_model_len=larger_len,
        client_max_output_tokens=proc.client_max_output_tokens,
    )
    proc.finish_reason = report.finish_reason
    proc.truncated = report.truncated
    if report.truncated:
        proc.misroute = proc.misroute or "truncated"
        proc.misroute_cause = proc.misroute_cause or TRUNCATED
        r.observer.misroute(served, served, "truncated", TRUNCATED)
    key = budget.output_class
    if key is not None and not report.sequences:
        if len(finish_reasons) > max(1, budget.n_sequences):  # a prompt list read off the path
            r.output_unjudged("multi_prompt")
        else:
            r.output_unjudged("no_choice_reasons" if budget.n_sequences > 1 else "no_usage")
    if key is not None:  # an answer's length is exact also where its prompt is not learned from
        for tokens, censored in report.sequences:
            r.observe_output(
                key, tokens, truncated=censored and report.truncated, capped=censored and not report.truncated
            )


def judge_without_usage(proc: StreamProcessor, finish_reasons: tuple[str, ...]) -> None:
    """A served answer without usage (a stream without ``stream_options.include_usage``): its
    length is unknown, so the output learner is not taught (counted ``no_usage``). A token-limit stop of a single-prompt request without a
    client maximum is still the serving pool's cut (vLLM's only limit is then ``max_model_len −
    prompt``): a truncation misroute of that pool when a larger pool exists, counted and recorded
    as in :func:`judge_answer`. The response passes unchanged."""
    budget = proc.budget
    routed = proc.routed_pool
    if budget is None or routed is None:
        return
    r = proc.router
    if budget.output_class is not None:
        r.output_unjudged("no_usage")
    length = LENGTH_REASONS.get(API_OF_ENDPOINT.get(proc.endpoint or "", "openai"), "length")
    if length not in finish_reasons:
        return
    proc.finish_reason = length
    served = proc.retried_to or routed
    batch = proc.endpoint == "chat_batch" or proc.batch_budgets is not None
    if batch or proc.client_max_output_tokens is not None or r.models.next_larger(served) is None:
        return
    proc.truncated = True
    proc.misroute = proc.misroute or "truncated"
    proc.misroute_cause = proc.misroute_cause or TRUNCATED
    r.observer.misroute(served, served, "truncated", TRUNCATED)


def learned_budget(proc: StreamProcessor) -> TokenBudget | None:
    """The budget the served usage is learned against, or None (outcome counted): a
    ``previous_response_id`` continuation's usage counts stored turns; a chat batch's usage is
    the sum over its conversations, learned against the summed estimate (extproc.core.learn.batch)."""
    if not proc.learn:
        proc.router.observer.calibration("previous_response")
        return None
    if proc.budget is not None and proc.budget.screened:
        proc.router.observer.calibration("screened")  # a routing-only budget (extproc.core.estimate.screen)
        return None
    if proc.batch_budgets is None:
        return proc.budget
    learned = batch_budget(proc.batch_budgets)
    if learned is None:
        proc.router.observer.calibration("batch_mixed_keys")
    return learned


def stream_error(proc: StreamProcessor, err: StreamError) -> None:
    """A 2xx SSE stream carried an error event: never learned from (its usage, if any, is not
    the served request's); a context-length error is a misroute of the pool that served it,
    counted like the 400 Envoy retries (``tbr_misroutes_total``, decision-log ``misroute``)."""
    proc._sse = None
    proc._decoder = None
    proc.calibrated = True
    obs = proc.router.observer
    obs.calibration("error_in_stream")
    routed = proc.routed_pool
    length_error = is_context_length_error(err)
    settle_retry(proc, ESTIMATE_TOO_LOW if length_error else UNKNOWN)
    if routed is not None and length_error:
        served = proc.retried_to or routed
        proc.misroute = "error_in_stream"
        proc.misroute_cause = ESTIMATE_TOO_LOW
        obs.misroute(served, served, "error_in_stream", ESTIMATE_TOO_LOW)


def settle_served_retry(proc: StreamProcessor, budget: TokenBudget, prompt_tokens: int) -> None:
    """A retried request the larger pool served with usage: ``estimate_too_low`` when the served
    ``prompt_tokens`` cannot have fitted the first pool, else ``pool_unavailable``."""
    routed = proc.routed_pool
    if proc.retry_outcome is None or routed is None:
        return
    first = proc.router.recovery.policy.pool(routed)
    over = None if first is None else overflowed(budget, prompt_tokens, first.max_model_len)
    settle_retry(proc, cause_of_served_retry(over))


def settle_retry(proc: StreamProcessor, cause: str) -> None:
    """Count Envoy's retry of this request, once, with its ``cause``
    (``tbr_misroutes_total{from_pool,to_pool,outcome,cause}``, :mod:`extproc.core.learn.misroute_cause`)."""
    outcome, routed = proc.retry_outcome, proc.routed_pool
    if outcome is None or routed is None or proc.retried_to is None:
        return
    proc.retry_outcome = None
    proc.misroute_cause = cause
    proc.router.observer.misroute(routed, proc.retried_to, outcome, cause)


def settle_pending_retry(proc: StreamProcessor) -> None:
    """A retry not counted yet (the stream ends, or a failed retry's error body ended): counted
    with what its answer showed: the error body of a failed retry, else ``unknown`` (a 2xx whose
    usage was not read)."""
    error_reader, proc._error = proc._error, None
    if proc.retry_outcome is None:
        return
    if not 200 <= proc.status < 300:
        error = error_reader.close() if error_reader is not None else None
        settle_retry(proc, cause_of_failed_retry(proc.status, error))
    else:
        settle_retry(proc, UNKNOWN)
