"""Autoscaling policies for the simulator's closed loop (issue 33, item 3): what an autoscaler
asks for, from what it observes. Pure; :mod:`planner.des.closed_loop` runs them against the DES.

Policies (the three the issue compares):

- ``static``: a fixed count per pool (sized for the peak), never changed;
- ``queue``: the HPA/KEDA rule on ``vllm:num_requests_waiting`` with an ``AverageValue`` target,
  as KEDA users configure it: ``desired = ⌈Σ waiting / queue_target⌉``;
- ``kv``: the same rule on ``vllm:kv_cache_usage_perc`` (a ``Value``-style target):
  ``desired = ⌈N · mean KV usage / kv_target⌉``;
- ``advice``: the router's advice, ``tbr_pool_desired_instances`` (``AverageValue`` 1:
  ``desired = advice``), computed by :func:`planner.model.advice.advise` — the function the live router
  exports — over the simulated router's own decisions.

Kubernetes' HPA semantics are kept (kubernetes.io, "Horizontal Pod Autoscaling", algorithm details):
a metric rule within ``tolerance`` (10 %) of its target keeps the current count; scale-up is
applied at once; scale-down takes the largest recommendation of the last
``scale_down_window_s`` (``behavior.scaleDown.stabilizationWindowSeconds``, default 300 s); the
result is clamped to ``[min_instances, max_instances]``.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["POLICIES", "AutoscalerSpec", "PoolObservation", "Stabilizer", "recommend"]

POLICIES = ("static", "queue", "kv", "advice")


@dataclass(frozen=True)
class AutoscalerSpec:
    """One autoscaler configuration, shared by every pool.

    ``cold_start_s``: from the decision to add an instance until it serves (vLLM start, weights,
    CUDA graphs; 60–600 s). ``interval_s``: how often the autoscaler decides (KEDA
    ``pollingInterval``). ``scale_down_window_s``: the scale-down stabilisation ("cooldown").
    ``queue_target``: waiting requests per instance (``queue``); ``kv_target``: KV usage (``kv``).
    Raises ``ValueError`` for an unknown policy or a bound out of order.
    """

    policy: str
    cold_start_s: float = 300.0
    min_instances: int = 1
    max_instances: int = 256
    interval_s: float = 30.0
    scale_down_window_s: float = 600.0
    queue_target: float = 4.0
    kv_target: float = 0.7
    tolerance: float = 0.1

    def __post_init__(self) -> None:
        if self.policy not in POLICIES:
            raise ValueError(f"unknown autoscaling policy {self.policy!r}; choose from {POLICIES}")
        if not 0 <= self.min_instances <= self.max_instances or self.max_instances < 1:
            raise ValueError("need 0 <= min_instances <= max_instances, max_instances >= 1")
        if self.cold_start_s < 0 or self.interval_s <= 0 or self.scale_down_window_s < 0:
            raise ValueError("cold_start_s and scale_down_window_s must be >= 0, interval_s > 0")


@dataclass(frozen=True)
class PoolObservation:
    """What the autoscaler sees of one pool at a decision: ``current`` instances (the Deployment's
    replicas: starting and ready), ``ready`` of them, ``waiting`` requests summed over the pool,
    ``kv_usage`` mean over the ready instances (0..1), and the router's ``advice`` (None: none)."""

    current: int
    ready: int
    waiting: float
    kv_usage: float
    advice: int | None


def recommend(spec: AutoscalerSpec, obs: PoolObservation, static_instances: int) -> int:
    """The policy's raw recommendation for one pool (before stabilisation and clamping)."""
    if spec.policy == "static":
        return static_instances
    if spec.policy == "advice":
        return obs.current if obs.advice is None else obs.advice
    if spec.policy == "queue":
        if obs.current == 0:
            return 1 if obs.waiting > 0 else 0
        ratio = (obs.waiting / obs.current) / spec.queue_target
    else:  # kv
        ratio = obs.kv_usage / spec.kv_target
    if abs(ratio - 1.0) <= spec.tolerance:
        return obs.current
    return math.ceil(obs.current * ratio)


class Stabilizer:
    """HPA's scale-down stabilisation for one pool: the applied count is the largest recommendation
    of the last ``window_s`` seconds (so up at once, down only once the window has passed),
    clamped to ``[lo, hi]``. Time is an argument."""

    def __init__(self, window_s: float, lo: int, hi: int) -> None:
        self.window_s = window_s
        self.lo = lo
        self.hi = hi
        self._recent: deque[tuple[float, int]] = deque()

    def apply(self, recommendation: int, now_s: float) -> int:
        """Record ``recommendation`` at ``now_s``; the count to scale to."""
        self._recent.append((now_s, recommendation))
        while self._recent and self._recent[0][0] < now_s - self.window_s:
            self._recent.popleft()
        return min(self.hi, max(self.lo, max(r for _, r in self._recent)))
