"""Which responses the router reads: the per-request read decision (issue 35, item 2).

Reading a response costs the router a second ext_proc stream (docs/performance.md, "Cost of a
read"); what it teaches is worth that only while it can still change a decision. After routing, the
router asks :meth:`ResponseReadPolicy.decide` whether this request's response is worth reading:

* ``required``: the answer must be read whatever it teaches (a Responses API answer: its ``id`` →
  pool entry serves ``previous_response_id``). Never budgeted.
* ``truncation_possible``: the serving pool may cut the answer at its ``max_model_len`` while a
  larger pool would not (:func:`truncation_possible`); only the response shows a truncation
  misroute (:mod:`extproc.core.learn.truncation`).
* ``cold``: the request's prompt key (model, category) has fewer than ``cold_samples``
  observations. For a request routed by the byte bound (category ``bounded``: no category was
  computed) the count is the observations this policy saw for the model's keys.
* ``drift``: one of the key's last reads showed a central estimate (the key's learned mean ratio ĉ,
  not the conservative routing estimate, which overestimates by design) that missed the true prompt
  by more than ``drift_rel_error`` (relative to the true count): the key's ratio no longer explains
  its requests; the next ``drift_reads`` responses of the key are read.
* ``output_cold``: the request's output class has fewer than ``output_cold_samples`` answers.
* ``floor``: a ``floor_rate`` share of the other responses, so that drift stays visible.

Every reason but ``required`` spends from a per-key token bucket (``reads_per_key_per_s``, at most
``burst_reads`` at once): a key's cold start reads its first ``burst_reads`` responses at once, then
at most ``reads_per_key_per_s``. A request not read is skipped as ``learned`` (nothing to learn) or
``over_budget``.

The policy is pure: the caller passes the time (``now_s``) and a uniform draw in [0, 1); the same
inputs give the same decisions (tests, the calibration-convergence replay). Its state (one bucket
and drift counter per key, one read count per model) is bounded by ``max_keys``: beyond it the
oldest entries are forgotten (a forgotten key reads as cold again, within its new bucket).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

__all__ = [
    "READ_REASONS",
    "SKIP_REASONS",
    "ReadDecision",
    "ReadPolicyParams",
    "ResponseReadPolicy",
    "truncation_possible",
]

READ_REASONS = ("required", "truncation_possible", "cold", "drift", "output_cold", "floor")
"""Why a response is read, in the order they are tested."""
SKIP_REASONS = ("learned", "over_budget")
"""Why a response is not read."""

_BOUNDED = "bounded"
"""The category of a budget routed by the byte bound (:data:`extproc.core.estimate.screen.BOUND_CATEGORY`)."""


@dataclass(frozen=True, slots=True)
class ReadPolicyParams:
    """Parameters of :class:`ResponseReadPolicy` (``calibration.response_reads`` in the config).

    Attributes:
        cold_samples: a prompt key with fewer observations is read (``cold``).
        output_cold_samples: an output class with fewer answers is read (``output_cold``).
        drift_rel_error: a read whose ``|central estimate − true| / true`` exceeds this marks its key
            drifting.
        drift_reads: responses of a drifting key read after such a miss.
        floor_rate: share of the remaining responses read (``floor``), in [0, 1].
        reads_per_key_per_s: refill rate of each key's read budget (reads per second).
        burst_reads: the budget's capacity (reads at once).
        max_keys: keys (and models) whose state is kept; the oldest beyond it are forgotten.
    """

    cold_samples: int = 32
    output_cold_samples: int = 32
    drift_rel_error: float = 0.25
    drift_reads: int = 16
    floor_rate: float = 0.01
    reads_per_key_per_s: float = 2.0
    burst_reads: float = 32.0
    max_keys: int = 4096


class ReadDecision(NamedTuple):
    """Whether to read the response (``read``) and why (a :data:`READ_REASONS` or
    :data:`SKIP_REASONS` string)."""

    read: bool
    reason: str


class _KeyState:
    __slots__ = ("drift_left", "tokens", "updated_s")

    def __init__(self, tokens: float, now_s: float) -> None:
        self.tokens = tokens
        self.updated_s = now_s
        self.drift_left = 0


def truncation_possible(
    *,
    prompt_tokens: int,
    output_reserve_tokens: int,
    client_max_output_tokens: int | None,
    pool_max_model_len: int,
    larger_pool: bool,
    reserve_factor: float = 2.0,
) -> bool:
    """Whether the pool a request was routed to could cut its answer where a larger pool would not.

    vLLM stops an answer at ``max_model_len − prompt_tokens`` when the client's maximum is absent or
    does not fit (:mod:`extproc.core.learn.truncation`). The room left, ``pool_max_model_len −
    prompt_tokens`` (``prompt_tokens``: the routing estimate, conservative, or the byte bound, an
    upper bound), can cut the answer only if it is under the client's maximum; and is a real risk only
    when it is under ``reserve_factor`` times the per-sequence output reserve (the answer would have
    to run that many times its class's learned quantile). The largest pool's cuts are not misroutes
    (``larger_pool`` False → False).

    Args:
        prompt_tokens: the prompt estimate (tokens).
        output_reserve_tokens: the per-sequence output reserve of the budget (tokens).
        client_max_output_tokens: the client's own output maximum (tokens), None when absent.
        pool_max_model_len: the serving pool's ``max_model_len`` (tokens).
        larger_pool: whether a larger pool exists.
        reserve_factor: how many output reserves of room count as safe.
    """
    if not larger_pool:
        return False
    room = pool_max_model_len - prompt_tokens
    if client_max_output_tokens is not None and client_max_output_tokens <= room:
        return False
    return room < reserve_factor * max(output_reserve_tokens, 1)


class ResponseReadPolicy:
    """The per-request read decision (module docstring); one per router process, kept across reloads.

    Args:
        params: the policy's parameters.
    """

    __slots__ = ("_keys", "_models", "params")

    def __init__(self, params: ReadPolicyParams) -> None:
        self.params = params
        self._keys: dict[tuple[str, str], _KeyState] = {}
        self._models: dict[str, list[int]] = {}
        """model key → [responses learned from, drift reads left over its keys]"""

    def decide(
        self,
        key: tuple[str, str],
        *,
        ratio_samples: int,
        output_samples: int | None,
        truncation: bool,
        required: bool,
        now_s: float,
        draw: float,
    ) -> ReadDecision:
        """Whether to read the response of a request routed with prompt key ``key``.

        Args:
            key: ``(model key, category)`` of the request's budget (category ``bounded`` when it was
                routed by the byte bound).
            ratio_samples: observations the ratio store holds for ``key`` (ignored for ``bounded``).
            output_samples: answers the output learner holds for the request's class (None: output
                lengths are not learned).
            truncation: :func:`truncation_possible` for this request.
            required: the response must be read (``required``, never budgeted).
            now_s: the current time (seconds, any monotonic origin).
            draw: a uniform draw in [0, 1) for the floor rate.
        """
        if required:
            return ReadDecision(True, "required")
        p = self.params
        state = self._state(key, now_s)
        if key[1] == _BOUNDED:
            model = self._models.get(key[0])
            cold = (model[0] if model is not None else 0) < p.cold_samples
            drifting = model is not None and model[1] > 0
        else:
            cold = ratio_samples < p.cold_samples
            drifting = state.drift_left > 0
        if truncation:
            reason = "truncation_possible"
        elif cold:
            reason = "cold"
        elif drifting:
            reason = "drift"
        elif output_samples is not None and output_samples < p.output_cold_samples:
            reason = "output_cold"
        elif draw < p.floor_rate:
            reason = "floor"
        else:
            return ReadDecision(False, "learned")
        if state.tokens < 1.0:
            return ReadDecision(False, "over_budget")
        state.tokens -= 1.0
        return ReadDecision(True, reason)

    def observed(self, key: tuple[str, str], rel_error: float | None, now_s: float) -> None:
        """A read response of ``key`` was learned from: ``rel_error`` = (central estimate − true) / true
        of its prompt (:attr:`extproc.core.estimate.budget.Observation.central_rel_error`; None when the
        response taught the prompt key nothing). A miss beyond ``drift_rel_error`` marks the key
        drifting for the next ``drift_reads`` reads."""
        p = self.params
        model = self._models.get(key[0])
        if model is None:
            model = self._models[key[0]] = [0, 0]
            if len(self._models) > p.max_keys:
                del self._models[next(iter(self._models))]
        model[0] += 1
        if rel_error is None:
            return
        state = self._state(key, now_s)
        if abs(rel_error) > p.drift_rel_error:
            state.drift_left = model[1] = p.drift_reads
        else:
            state.drift_left = max(0, state.drift_left - 1)
            model[1] = max(0, model[1] - 1)

    def _state(self, key: tuple[str, str], now_s: float) -> _KeyState:
        p = self.params
        state = self._keys.get(key)
        if state is None:
            state = _KeyState(p.burst_reads, now_s)
            self._keys[key] = state
            if len(self._keys) > p.max_keys:
                del self._keys[next(iter(self._keys))]
            return state
        elapsed = now_s - state.updated_s
        if elapsed > 0.0:
            state.tokens = min(p.burst_reads, state.tokens + elapsed * p.reads_per_key_per_s)
            state.updated_s = now_s
        return state
