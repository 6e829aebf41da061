"""The estimator's value types: a model's chat-template :class:`Framing`, the routing estimate
of one request (:class:`TokenBudget`) and one calibration :class:`Observation`.

Kept apart from :mod:`extproc.core.estimate.estimator` so that the adapter, the recovery logic and the
planner can name a budget without importing the estimator's machinery.
"""

from __future__ import annotations

from dataclasses import dataclass

from extproc.core.estimate.calibration import RatioKey, RatioState
from extproc.core.estimate.output_reserve import OutputClassKey
from extproc.core.records import record

__all__ = ["Framing", "Observation", "TokenBudget"]


@dataclass(frozen=True, slots=True)
class Framing:
    """Chat-template framing of one model (tokens) and its tokenizer family ('' = unknown)."""

    family: str
    message_tokens: int
    request_tokens: int
    tool_tokens: int
    per_tool_tokens: int
    renders_reasoning: bool = True
    tools_json_spaced: bool = True


@record
class TokenBudget:
    """The routing estimate of one request (all counts in tokens).

    Attributes:
        key: (model key, category) whose ratio was used.
        routing_ratio: the model-to-true ratio the text's modelled units were divided by (the
            conservative one: ``c*`` or ``c_low``; :mod:`extproc.core.estimate.calibration`).
        text_bytes: UTF-8 bytes of prompt text.
        fixed_prompt_tokens: prompt tokens not estimated with the ratio (framing, media, token ids).
        prompt_tokens: estimated prompt tokens (text + fixed).
        output_reserve_tokens: per-sequence output reserve.
        n_sequences: sequences generated.
        total_tokens: ``min(prompt_tokens, prompt_cap_tokens) + n_sequences · output_reserve_tokens``
            (the routing budget).
        warm: the learned ratio (not the prior) was used.
        modelled_units: the text's modelled units, which the learned model-to-true ratio divides,
            as an integer: the run model's tokens, rounded (the byte bound: the rendered bytes; the
            evaluation's ``bytes`` baseline: text bytes).
        central_prompt_tokens: the prompt estimate with the central ratio ĉ (not the
            conservative one): the learner's accuracy, reported by the evaluation.
    """

    key: RatioKey
    routing_ratio: float
    text_bytes: int
    fixed_prompt_tokens: int
    prompt_tokens: int
    output_reserve_tokens: int
    n_sequences: int
    total_tokens: int
    warm: bool
    modelled_units: int = 0
    central_prompt_tokens: int = 0
    model_tokens: float = 0.0
    """Modelled tokens of the text (what the key's value divides); 0 for a bound or a baseline's budget."""
    n_media: int = 0
    """Image, audio and file parts (budgeted per part by rule, learned per kind and size class)."""
    unexplained: bool = False
    """The request carries fields the model does not explain (unknown message fields)."""
    prompt_cap_tokens: int = 0
    """vLLM's ``truncate_prompt_tokens`` (0 = none): the pool holds at most this many prompt
    tokens, so ``total_tokens`` counts ``min(prompt_tokens, prompt_cap_tokens)``; a served prompt of
    this size or more was cut and is not learned from."""
    screened: str = ""
    """'' for the exact estimate; ``bound`` for a routing-only budget of the byte bound
    (:mod:`extproc.core.estimate.screen`; never learned from)."""
    output_class: OutputClassKey | None = None
    """The request's output class (:mod:`extproc.core.estimate.output_reserve`), whose answers its
    ``usage.completion_tokens`` teach; None when the output reserve is not learned."""
    output_reserve_source: str = "default"
    """Where ``output_reserve_tokens`` came from: ``client`` (the request's maximum), ``learned``
    (the class's learned quantile, or its prior's before it has learned), ``risk`` (the learned
    quantile below the client's maximum) or ``default`` (``default_output_reserve_tokens``)."""
    media_tokens: int = 0
    """Tokens budgeted for the media parts (included in ``fixed_prompt_tokens``)."""
    media_key: str = ""
    """``<kind>:<size class>`` shared by every media part ('' when mixed or none): what the
    served usage teaches (``Estimator.observe``)."""
    media_base_tokens: float = 0.0
    """The media parts' tokens by their rules, before the learned factor."""
    model: str = ""
    """The request's ``model`` as sent ('' when longer than 128 characters): a name keyed
    ``_other`` takes a key slot when its 2xx usage is observed (``Estimator.admit``)."""


@dataclass(frozen=True, slots=True)
class Observation:
    """One calibration observation: the observed model-to-true ratio ``c_obs`` for ``key``
    (``observed_ratio``), the signed relative error of the prompt estimate, ``(estimated − actual)
    / actual``, and the key's state after it.

    ``rel_error`` is the routing (conservative) estimate's error: it overestimates by design (the
    learned low quantile of the ratio). ``central_rel_error`` is the same for the central estimate
    (the learned mean ratio ĉ, :attr:`TokenBudget.central_prompt_tokens`): what the key's ratio
    fails to explain, the read decision's drift signal (:mod:`extproc.core.learn.read_decision`)."""

    key: RatioKey
    observed_ratio: float
    rel_error: float
    state: RatioState
    central_rel_error: float = 0.0
