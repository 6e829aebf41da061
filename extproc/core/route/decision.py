"""The decision record: one line of the router's decision log per routed request (no prompt text).

Written by the Envoy adapter when an ext_proc stream ends (JSON Lines, ``decision_log_path``) and
read back by the planner (``tbr plan --format decision-log``) and the demo summary: both sides use
this one type, so the log's schema lives in one place (docs/planner.md lists the fields).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["DecisionRecord", "DecisionRecordError"]


class DecisionRecordError(ValueError):
    """A decision-log row that cannot be read; ``reason`` is a short, bounded description such as
    ``"missing ts_s"`` or ``"non-integer prompt_tokens"`` (used as a drop-reason label)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class DecisionRecord:
    """What the router decided for one request and what the pool reported back.

    Attributes:
        ts_s: wall-clock time the stream started (Unix seconds).
        request_id: Envoy's ``x-request-id`` (at most 128 characters).
        model: the model key the estimate used ("" when the body was unreadable).
        category: the content category (``unknown`` when unreadable).
        pool: the pool the request was routed to.
        reason: why (``fits``, ``spillover``, ``exceeds_all_pools``, an unreadable reason, ...).
        estimated_prompt_tokens: the router's prompt estimate (None when unreadable).
        output_reserve_tokens: the output reserve per sequence (tokens).
        n_sequences: ``n`` (parallel sequences).
        budget_tokens: the total budget that was routed on (tokens).
        status: the HTTP status of the response (None when none was seen).
        prompt_tokens: ``usage.prompt_tokens`` reported by the pool (None when not read).
        completion_tokens: ``usage.completion_tokens`` (None when not read).
        end: how the stream ended (``complete``, ``cancelled``, ``error``).
        retried_to_pool: the pool Envoy's misroute retry reached (None when not retried).
        misroute: why the request counts as a misroute of ``pool`` (None when it does not): Envoy's
            retry after the pool's 400 (``recovered`` / ``retry_failed``), or the pool's
            context-length error inside a 2xx SSE stream (``error_in_stream``); the same values as
            ``tbr_misroutes_total{outcome}``; ``truncated`` when the pool cut the answer at its
            ``max_model_len`` (:mod:`extproc.core.learn.truncation`) and nothing else named it a misroute.
        misroute_cause: why the misroute happened, the ``cause`` label of ``tbr_misroutes_total``
            (:mod:`extproc.core.learn.misroute_cause`): ``estimate_too_low``, ``truncated``,
            ``pool_unavailable``, ``client_error`` or ``unknown``; None when not a misroute.
        finish_reason: the answer's finish reason in the API's terms (``length``, ``stop``,
            ``max_output_tokens``, ``max_tokens``, ...; the length reason when any choice stopped at
            a token limit); None when not read.
        truncated: True when the serving pool cut the answer at its ``max_model_len`` while a
            larger pool would have allowed more and the client's maximum was not the limit; None
            when the answer was not judged (not read, no usage).
    """

    ts_s: float
    request_id: str
    model: str
    category: str
    pool: str
    reason: str
    estimated_prompt_tokens: int | None
    output_reserve_tokens: int | None
    n_sequences: int | None
    budget_tokens: int | None
    status: int | None
    prompt_tokens: int | None
    completion_tokens: int | None
    end: str
    retried_to_pool: str | None
    misroute: str | None = None
    finish_reason: str | None = None
    truncated: bool | None = None
    misroute_cause: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The record as a JSON object (``ts_s`` rounded to microseconds)."""
        out = asdict(self)
        out["ts_s"] = round(self.ts_s, 6)
        return out

    @classmethod
    def from_json(cls, row: dict[str, Any]) -> DecisionRecord:
        """Read one decision-log row; unknown keys are ignored, absent optional keys are None.

        Raises:
            DecisionRecordError: ``ts_s`` missing or not a finite number, or an integer field that
                is not a non-negative integer.
        """
        t = row.get("ts_s")
        if not isinstance(t, int | float) or isinstance(t, bool) or not math.isfinite(t):
            raise DecisionRecordError("missing or non-numeric ts_s")
        ints = {
            k: _opt_int(row, k)
            for k in (
                "estimated_prompt_tokens",
                "output_reserve_tokens",
                "n_sequences",
                "budget_tokens",
                "status",
                "prompt_tokens",
                "completion_tokens",
            )
        }
        retried = row.get("retried_to_pool")
        misroute = row.get("misroute")
        finish = row.get("finish_reason")
        truncated = row.get("truncated")
        cause = row.get("misroute_cause")
        return cls(
            ts_s=float(t),
            request_id=str(row.get("request_id") or ""),
            model=str(row.get("model") or ""),
            category=str(row.get("category") or ""),
            pool=str(row.get("pool") or ""),
            reason=str(row.get("reason") or ""),
            end=str(row.get("end") or ""),
            retried_to_pool=None if retried is None else str(retried),
            misroute=None if misroute is None else str(misroute),
            finish_reason=None if finish is None else str(finish)[:64],
            truncated=truncated if isinstance(truncated, bool) else None,
            misroute_cause=None if cause is None else str(cause)[:32],
            **ints,
        )


def _opt_int(row: dict[str, Any], key: str) -> int | None:
    raw = row.get(key)
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool):
        raise DecisionRecordError(f"non-numeric {key}")
    if isinstance(raw, int):
        val = raw
    else:
        try:
            f = float(raw)
        except (TypeError, ValueError):
            raise DecisionRecordError(f"non-numeric {key}") from None
        if not math.isfinite(f) or f != int(f):
            raise DecisionRecordError(f"non-integer {key}")
        val = int(f)
    if val < 0:
        raise DecisionRecordError(f"{key} < 0")
    return val
