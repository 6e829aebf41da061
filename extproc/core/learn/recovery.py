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
   (a *confirmed* misroute), lower the key's routing value, or raise its media cost, by one
   bounded step (:meth:`extproc.core.estimate.estimator.Estimator.recover`).

A 400 that was not a context-length error is retried too (Envoy cannot read the body); the larger
pool then answers the same 400 (outcome ``retry_failed``), at the cost of one cheap validation.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Protocol

from extproc.config import PoolConfig, RecoveryConfig
from extproc.core.estimate.estimator import Estimator, TokenBudget
from extproc.core.learn.outcomes import MisrouteCalibrationOutcome, MisrouteOutcome
from extproc.core.route.load import LoadTracker


class PoolOrder(Protocol):
    """Pool order within a pool set (:class:`~extproc.core.route.policy.Policy`,
    :class:`~extproc.core.route.model_sets.ModelRouting`)."""

    def next_larger(self, pool_name: str) -> PoolConfig | None: ...

    def pool(self, pool_name: str) -> PoolConfig | None: ...


__all__ = ["MisrouteRecovery", "PoolOrder", "RetryOutcome", "parse_attempt_count"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RetryOutcome:
    """A request Envoy retried on the next larger pool: ``from_pool`` → ``to_pool``; ``outcome`` is
    ``recovered`` (the retry answered 2xx) or ``retry_failed``."""

    from_pool: str
    to_pool: str
    outcome: MisrouteOutcome


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


class MisrouteRecovery:
    """The router's side of misroute recovery (module docstring).

    Args:
        cfg: recovery settings.
        policy: the routing policy (for pool order and limits).
        load: the process-wide load tracker.
        estimator: the estimator whose keys a confirmed misroute corrects (:meth:`Estimator.recover`).
    """

    def __init__(
        self, cfg: RecoveryConfig, policy: PoolOrder, load: LoadTracker, estimator: Estimator
    ) -> None:
        self.estimator = estimator
        self.cfg = cfg
        self.policy = policy
        self.load = load

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
        self, budget: TokenBudget, pool: str, served_by: str, prompt_tokens: int
    ) -> tuple[MisrouteCalibrationOutcome, ...]:
        """Usage of a 2xx response served by ``served_by`` after a retry from ``pool``.

        Returns the outcomes to count in ``tbr_misroute_calibration``: ``("unconfirmed",)`` when
        usage does not prove the request overflowed ``pool`` (the 400 had another cause),
        ``("confirmed",)`` when it does, and ``("confirmed", "ratcheted")`` when
        :meth:`Estimator.recover` (``recovery.calibrate``) then changed the key's value or media cost.
        """
        first = self.policy.pool(pool)
        if first is None or not overflowed(budget, prompt_tokens, first.max_model_len):
            return ("unconfirmed",)
        if not self.cfg.calibrate or budget.model_tokens <= 0.0:
            return ("confirmed",)  # nothing to correct without modelled text (as before: media-only stays)
        value = self.estimator.recover(
            budget, prompt_tokens, max_step=self.cfg.max_step, max_media_step=self.cfg.max_media_step
        )
        if value is None:
            return ("confirmed",)
        log.info("misroute %s -> %s: %s/%s recovered to %.3f", pool, served_by, *budget.key, value)
        return ("confirmed", "ratcheted")
