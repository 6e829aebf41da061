"""Misroute recovery: what the router does when Envoy retried a request on the next larger pool.

Mechanism (docs/design/003-misroute-recovery.md): the Envoy route of every pool but the largest
carries ``retry_policy {retry_on: retriable-status-codes, retriable_status_codes: [400],
num_retries: 1, refresh_cluster_on_retry: true}`` and a priority-group cluster specifier whose
second group is the next larger pool. vLLM's context-length 400 from the first pool is therefore
never seen by the client: Envoy sends the buffered request once more, to the next larger pool, and
reports ``x-envoy-attempt-count: 2`` on the response (``include_attempt_count_in_response``).

The router's part, in the response phases of the same ext_proc stream:

1. :meth:`MisrouteRecovery.on_retried` (response headers, attempt count > 1): count the event,
   move the in-flight count to the pool that served it.
2. :meth:`MisrouteRecovery.on_usage` (after the ordinary calibration of the served
   ``usage.prompt_tokens``): when usage proves the request did not fit the first pool
   (a *confirmed* misroute) and the ratio used was above the observed one, apply a strong
   correction to the key's ratio (:func:`strong_correction`).

A 400 that was not a context-length error is retried too (Envoy cannot read the body); the larger
pool then answers the same 400 (outcome ``retry_failed``), at the cost of one cheap validation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from extproc.config import PoolConfig, RecoveryConfig
from extproc.core.estimate.calibration import INITIAL_REL_DEV, RatioKey, RatioState, RatioStore
from extproc.core.estimate.estimator import Estimator, TokenBudget
from extproc.core.learn.outcomes import MisrouteCalibrationOutcome, MisrouteOutcome
from extproc.core.route.load import LoadTracker


class PoolOrder(Protocol):
    """Pool order within a pool set (:class:`~extproc.core.route.policy.Policy`,
    :class:`~extproc.core.route.model_sets.ModelRouting`)."""

    def next_larger(self, pool_name: str) -> PoolConfig | None: ...

    def pool(self, pool_name: str) -> PoolConfig | None: ...


__all__ = ["MisrouteRecovery", "PoolOrder", "RetryOutcome", "parse_attempt_count", "strong_correction"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetryOutcome:
    """A request Envoy retried on the next larger pool: ``from_pool`` → ``to_pool``; ``outcome`` is
    ``recovered`` (the retry answered 2xx) or ``retry_failed``."""

    from_pool: str
    to_pool: str
    outcome: MisrouteOutcome


@runtime_checkable
class _WritableStore(Protocol):
    def put(self, key: RatioKey, state: RatioState) -> None: ...


def parse_attempt_count(value: str) -> int:
    """Envoy's ``x-envoy-attempt-count`` as an int (1 for absent or malformed values)."""
    try:
        n = int(value.strip())
    except ValueError:
        return 1
    return n if 1 <= n <= 1000 else 1


def overflowed(budget: TokenBudget, prompt_tokens: int, max_model_len: int) -> bool:
    """True when the served request cannot have fitted a pool of ``max_model_len`` tokens.

    vLLM rejects ``prompt_tokens >= max_model_len`` and ``prompt_tokens + max_tokens >
    max_model_len`` (``_validate_input``); the budget's per-sequence output reserve stands in for
    ``max_tokens``.
    """
    return prompt_tokens >= max_model_len or prompt_tokens + budget.output_reserve_tokens > max_model_len


def strong_correction(
    store: RatioStore,
    budget: TokenBudget,
    prompt_tokens: int,
    *,
    warmup_samples: int,
    dev_before_ratio: float,
    max_step: float = 0.1,
) -> RatioState | None:
    """Ratchet the key's learned ratio down toward the ratio this misrouted request really had,
    by at most ÷ (1 + ``max_step``) per misroute (``recovery.max_step``, issue 34).

       ``c_obs = ratio_bytes / (prompt_tokens − fixed_prompt_tokens)`` (the byte base of ``Estimator.observe``). With ``(mean, dev)`` the state
       after the ordinary EMA update (already applied by the caller) and ``dev_before`` the deviation
       before it, the state becomes

       * ``mean' = min(mean, max(c_obs, mean / (1 + max_step)))``: when the step bound does not
         bind, the conservative ratio ``c* = mean' − γ·dev'`` is then ≤ ``c_obs``, so the same
         request is now budgeted at least at its true size; when it binds, each further misroute of
         the key moves it one more step (one crafted request cannot move a key further);
       * ``dev' = min(dev, max(dev_before, INITIAL_REL_DEV · c_obs))``: the jump from a wrong mean to
         the truth is an error of the old state, not spread of the key, so it must not inflate σ̂
         (a stale mean of 40 corrected to 4 would otherwise give σ̂ ≈ 3.6 and send every
         request of the key to the largest pool);
       * ``samples' = max(samples, warmup_samples)``: the key leaves warm-up, because its prior or
         stale state has just been proven too high;
       * ``low' = min(low, max(c_obs, low / (1 + max_step)))`` when the quantile learner tracks a
         low ratio (it routes on it).
    Why a ratchet and not one more EMA step (β = 0.9 moves the mean
       only 10 % of the way): the costs are asymmetric. An underestimate costs a rejected attempt, a
       retry and, without recovery, a client-visible error; an overestimate costs a few requests on a
       larger pool until the EMA re-learns (about 1/(1−β) observations). See
       docs/design/003-misroute-recovery.md.

       Returns the new state, or None when nothing was changed: no text signal, the ratio used was
       not above ``c_obs`` (the underestimate came from elsewhere), no state, or a store that cannot
       be written directly.
    """
    text_tokens = prompt_tokens - budget.fixed_prompt_tokens
    nbytes = budget.ratio_bytes or budget.text_bytes  # the same byte base as Estimator.observe
    if nbytes <= 0 or text_tokens <= 0:
        return None
    c_obs = nbytes / text_tokens
    if budget.routing_ratio <= c_obs:
        return None
    state = store.get(budget.key)
    if state is None or not isinstance(store, _WritableStore):
        return None
    step = 1.0 + max_step
    mean = min(state.mean_ratio, max(c_obs, state.mean_ratio / step))
    dev = min(state.dev_ratio, max(dev_before_ratio, INITIAL_REL_DEV * mean))
    # The quantile learner routes on ``low_ratio``: ratchet it down too, by the same bounded step.
    low = min(state.low_ratio, max(c_obs, state.low_ratio / step), mean) if state.low_ratio > 0.0 else 0.0
    new = RatioState(mean, dev, max(state.samples, warmup_samples), low)
    store.put(budget.key, new)
    return new


class MisrouteRecovery:
    """The router's side of misroute recovery (module docstring).

    Args:
        cfg: recovery settings.
        policy: the routing policy (for pool order and limits).
        load: the process-wide load tracker.
        store: the ratio store (strong correction).
        warmup_samples: ``calibration.warmup_samples``.
    """

    def __init__(
        self,
        cfg: RecoveryConfig,
        policy: PoolOrder,
        load: LoadTracker,
        store: RatioStore,
        warmup_samples: int,
        estimator: Estimator | None = None,
    ) -> None:
        """``estimator``: the ``runs`` cost model's recovery (:meth:`Estimator.recover`) is used for
        its budgets; budgets of the ``bytes`` model use :func:`strong_correction` on ``store``."""
        self.estimator = estimator
        self.cfg = cfg
        self.policy = policy
        self.load = load
        self.store = store
        self.warmup_samples = warmup_samples

    def on_retried(
        self, pool: str, attempts: int, status: int, *, move_load: bool = True
    ) -> RetryOutcome | None:
        """Response headers with ``attempts`` > 1 for a request routed to ``pool``.

        Moves the in-flight count to the pool that served the retry (the next larger one; not with
        ``move_load=False``, for a stream that holds no count: off-path calibration) and returns the
        event, or None when ``pool`` is the largest (Envoy does not retry there; then it was a
        connection-level retry within the pool and is not a misroute).
        """
        if attempts <= 1:
            return None
        larger = self.policy.next_larger(pool)
        if larger is None:
            return None
        if move_load:
            self.load.move(pool, larger.name)
        return RetryOutcome(pool, larger.name, "recovered" if 200 <= status < 300 else "retry_failed")

    def on_usage(
        self, budget: TokenBudget, pool: str, served_by: str, prompt_tokens: int, dev_before_ratio: float
    ) -> tuple[MisrouteCalibrationOutcome, ...]:
        """Usage of a 2xx response served by ``served_by`` after a retry from ``pool``.

        Returns the outcomes to count in ``tbr_misroute_calibration``: ``("unconfirmed",)`` when
        usage does not prove the request overflowed ``pool`` (the 400 had another cause),
        ``("confirmed",)`` when it does, and ``("confirmed", "ratcheted")`` when
        :func:`strong_correction` (``recovery.calibrate``) then changed the ratio.
        """
        first = self.policy.pool(pool)
        if first is None or not overflowed(budget, prompt_tokens, first.max_model_len):
            return ("unconfirmed",)
        if not self.cfg.calibrate:
            return ("confirmed",)
        if self.estimator is not None and budget.model_tokens > 0.0:
            value = self.estimator.recover(
                budget, prompt_tokens, max_step=self.cfg.max_step, max_media_step=self.cfg.max_media_step
            )
            if value is None:
                return ("confirmed",)
            log.info("misroute %s -> %s: %s/%s recovered to %.3f", pool, served_by, *budget.key, value)
            return ("confirmed", "ratcheted")
        new = strong_correction(
            self.store,
            budget,
            prompt_tokens,
            warmup_samples=self.warmup_samples,
            dev_before_ratio=dev_before_ratio,
            max_step=self.cfg.max_step,
        )
        if new is None:
            return ("confirmed",)
        log.info(
            "misroute %s -> %s: model-to-true ratio of %s/%s ratcheted to %.3f",
            pool,
            served_by,
            budget.key[0],
            budget.key[1],
            new.mean_ratio,
        )
        return ("confirmed", "ratcheted")
