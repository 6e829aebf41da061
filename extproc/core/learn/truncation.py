"""Truncation misroutes: an answer the serving pool cut at its ``max_model_len`` (issue 30 item 3).

vLLM (0.32, ``get_max_tokens`` in ``entrypoints/serve/utils/api_utils.py``) caps the answer of a
request at ``max_model_len − prompt_tokens`` when the client sent no maximum, or a maximum that
does not fit, and answers **200** with the answer cut there: chat and completions
``finish_reason: "length"``, Responses ``status: "incomplete"`` with ``incomplete_details.reason:
"max_output_tokens"``, Anthropic ``stop_reason: "max_tokens"``. Nothing tells the client that a
larger pool would have let the answer finish. The router counts such an answer as a misroute of
the pool that served it (``tbr_misroutes_total{outcome="truncated"}``, decision-log ``truncated``)
and feeds the answer's length to the output learner as censored (the answer would have been
longer). The response itself passes unchanged.

:func:`judge_output` is the whole decision; the readers of ``finish_reason`` and
``completion_tokens`` are in :mod:`extproc.core.response.sse`, the Envoy side in
``extproc/adapter/response_phases.py``.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["LENGTH_REASONS", "OutputReport", "judge_output"]

LENGTH_REASONS = {"openai": "length", "responses": "max_output_tokens", "anthropic": "max_tokens"}
"""The finish reason that says "stopped by a token limit", per usage shape
(:data:`extproc.core.request.endpoints.ENDPOINTS`): chat / completions ``finish_reason``, the
Responses API's ``incomplete_details.reason`` (status ``incomplete``), Anthropic ``stop_reason``."""

_CATCH_ALL = {"responses": "completed"}
"""A finish reason that does not prove a natural stop: vLLM's Responses serving reports
``completed`` as its catch-all ("if the status is not completed, it is accurate", its comment in
``serving_responses.py``), so such an answer is judged by its counts like one without a reason."""


@dataclass(frozen=True, slots=True)
class OutputReport:
    """What a served answer says about the output budget.

    Attributes:
        finish_reason: the API's own term (``length``, ``stop``, ``max_output_tokens``,
            ``completed``, ``max_tokens``, ``end_turn``, ...): the length reason when any choice
            stopped at a token limit, else the first choice's; None when the response carried none.
        truncated: True when the serving pool cut the answer at its ``max_model_len`` while a
            larger pool would have allowed more and the client's own maximum was not the limit
            (a truncation misroute of the serving pool).
        sequences: per generated sequence, ``(completion tokens, censored)``: censored when the
            sequence stopped at a token limit (the pool's or the client's), so its natural length
            is at least that many tokens. Empty when the lengths cannot be told apart (no
            ``completion_tokens``, or ``n > 1`` without a finish reason per choice).
    """

    finish_reason: str | None
    truncated: bool
    sequences: tuple[tuple[int, bool], ...]


_NOTHING = OutputReport(None, False, ())


def judge_output(
    *,
    api: str,
    finish_reasons: tuple[str, ...],
    prompt_tokens: int | None,
    completion_tokens: int | None,
    n_sequences: int,
    served_max_model_len: int | None,
    larger_max_model_len: int | None,
    client_max_output_tokens: int | None,
) -> OutputReport:
    """Decide whether a served 2xx answer was cut by its pool, and what its sequences' lengths were.

    Args:
        api: the usage shape, ``openai``, ``responses`` or ``anthropic`` (:data:`LENGTH_REASONS`).
        finish_reasons: the finish reason of each choice, in choice order (may be empty).
        prompt_tokens: the served ``usage.prompt_tokens`` (input tokens); None when not read.
        completion_tokens: the served ``usage.completion_tokens`` (output tokens, summed over the
            choices); None when not read.
        n_sequences: sequences the request asked for (``n``, at least 1).
        served_max_model_len: ``max_model_len`` of the pool that served the answer (tokens); None
            when the pool is not configured.
        larger_max_model_len: ``max_model_len`` of the next larger pool; None when the serving
            pool is the largest (then nothing is a misroute: no pool would have done better).
        client_max_output_tokens: the client's own maximum (``max_completion_tokens`` /
            ``max_tokens`` / ``max_output_tokens``), None when it sent none.

    Returns:
        The :class:`OutputReport`. A sequence stopped at a token limit is the pool's cut when
        ``prompt + tokens`` reached ``served_max_model_len`` and the client's maximum (if any) was
        larger than ``served_max_model_len − prompt`` (vLLM lowered it, or there was none). With
        no finish reason at all (a JSON body whose reasons were not found), one sequence is judged
        by its counts alone. Nothing is decided without ``prompt_tokens``; bad values (negative,
        more reasons than sequences) give an empty report, never an error.
    """
    n = max(1, n_sequences)
    if prompt_tokens is None or prompt_tokens <= 0 or len(finish_reasons) > n:
        return _NOTHING
    length_reason = LENGTH_REASONS.get(api, "length")
    n_length = sum(1 for r in finish_reasons if r == length_reason)
    summary = length_reason if n_length else (finish_reasons[0] if finish_reasons else None)
    if finish_reasons == (_CATCH_ALL.get(api),):
        finish_reasons = ()
    if completion_tokens is None or completion_tokens < 0:
        return OutputReport(summary, False, ())
    cap = served_max_model_len - prompt_tokens if served_max_model_len is not None else None
    client_limited = client_max_output_tokens is not None and (cap is None or client_max_output_tokens <= cap)
    limit = client_max_output_tokens if client_limited else cap  # where a length stop lands
    if not finish_reasons:
        if n != 1 or limit is None:
            return OutputReport(summary, False, ((completion_tokens, False),) if n == 1 else ())
        n_length = 1 if completion_tokens >= limit else 0
        sequences: tuple[tuple[int, bool], ...] = ((completion_tokens, n_length == 1),)
    elif len(finish_reasons) == n:
        if limit is None:
            per = completion_tokens // n
            sequences = tuple((per, r == length_reason) for r in finish_reasons)
        else:
            rest = max(0, completion_tokens - n_length * limit)
            per_rest = rest // (n - n_length) if n > n_length else 0
            sequences = tuple(
                (limit, True) if r == length_reason else (per_rest, False) for r in finish_reasons
            )
    else:
        sequences = ()
    pool_cut = (
        n_length > 0
        and cap is not None
        and not client_limited
        and completion_tokens >= n_length * cap  # each cut sequence reached the pool's limit
    )
    larger_allows_more = (
        larger_max_model_len is not None and cap is not None and larger_max_model_len - prompt_tokens > cap
    )
    if n == 1 and sequences:
        sequences = ((completion_tokens, sequences[0][1]),)
    return OutputReport(summary, pool_cut and larger_allows_more, sequences)
