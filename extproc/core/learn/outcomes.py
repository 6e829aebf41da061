"""The bounded outcome vocabularies of learning from responses, as ``Literal`` types.

Each is the exact set of label values of one metric (docs/metrics.md) and, where the decision
log carries it, of one decision-record field; a ``Literal`` keeps the wire strings unchanged
while mypy rejects a value outside the set. The ``*_VALUES`` tuples list every value in the
order docs/metrics.md gives it (for tests and dashboards that enumerate a label).
"""

from __future__ import annotations

from typing import Final, Literal, get_args

__all__ = [
    "CALIBRATION_OUTCOMES",
    "MISROUTE_CALIBRATION_OUTCOMES",
    "MISROUTE_OUTCOMES",
    "STREAM_ENDS",
    "CalibrationOutcome",
    "MisrouteCalibrationOutcome",
    "MisrouteOutcome",
    "StreamEnd",
]

CalibrationOutcome = Literal[
    "applied",
    "non_2xx",
    "no_body",
    "unsupported_encoding",
    "unsupported_content_type",
    "decode_error",
    "no_usage",
    "not_text_dominated",
    "previous_response",
    "screened",
    "batch_mixed_keys",
    "error_in_stream",
    "bad_payload",
]
"""How reading usage from one response ended (``tbr_calibration_events_total{outcome}``):
``applied`` (the ratio learned from ``usage.prompt_tokens``) or why nothing was learned."""

MisrouteOutcome = Literal["recovered", "retry_failed", "error_in_stream", "truncated"]
"""Why a request counts as a misroute of its pool (``tbr_misroutes_total{outcome}``, decision-log
``misroute``): Envoy's retry on the next larger pool answered 2xx (``recovered``) or not
(``retry_failed``); the pool's context-length error inside a 2xx SSE stream
(``error_in_stream``); the pool cut the answer at its ``max_model_len`` (``truncated``)."""

MisrouteCalibrationOutcome = Literal["confirmed", "unconfirmed", "ratcheted"]
"""What usage showed for a recovered misroute (``tbr_misroute_calibration_total{outcome}``):
the request did (``confirmed``) or did not (``unconfirmed``) overflow the first pool, and the
strong correction then changed the key's ratio (``ratcheted``)."""

StreamEnd = Literal["complete", "cancelled", "error"]
"""How an ext_proc stream ended (``tbr_streams_total{end}``, decision-log ``end``)."""

CALIBRATION_OUTCOMES: Final[tuple[CalibrationOutcome, ...]] = get_args(CalibrationOutcome)
MISROUTE_OUTCOMES: Final[tuple[MisrouteOutcome, ...]] = get_args(MisrouteOutcome)
MISROUTE_CALIBRATION_OUTCOMES: Final[tuple[MisrouteCalibrationOutcome, ...]] = get_args(
    MisrouteCalibrationOutcome
)
STREAM_ENDS: Final[tuple[StreamEnd, ...]] = get_args(StreamEnd)
