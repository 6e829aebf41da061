"""Discrete-event fleet simulator: per-instance continuous batching with KV accounting.

- :mod:`planner.des.instance`: one vLLM instance (iteration-time model, chunked prefill, KV growth,
  recompute preemption, admission rules) and the per-request struct of arrays;
- :mod:`planner.des.engine`: the event loop (arrivals, routing, load balancing inside a pool, named
  :class:`~planner.des.engine.EventKind` order);
- :mod:`planner.des.result`: :class:`~planner.des.result.SimResult`, the summary after warm-up and the
  steady-state checks.

What runs it lives beside it: DES-verified sizing (:mod:`~planner.des.sizing`) with its steady-state
guards (:mod:`~planner.des.steady`), the ``tbr plan`` logic (:mod:`~planner.des.plan`,
:mod:`~planner.des.plan_des`), fleets and routers, the per-pool request streams, the autoscaling
closed loop and its experiments, the estimator replay and the vllm-sr-sim adapter.

Iteration time ``t_iter = W + H * Σ c_i + P * Σ chunk_i`` (:mod:`planner.model.profiles`); chunked prefill
takes ``ceil(input/chunk)`` iterations, the first token comes at the end of the last one, then
``output − 1`` decode iterations. Milestones are kept in iteration space, so the simulator
processes O(1) events per request, never one per token, while staying exact at iteration granularity.
"""

from planner.des.engine import EventKind, simulate
from planner.des.instance import LB_POLICIES, Milestone, PoolSpec, SimInvariantError
from planner.des.result import SimResult

__all__ = ["LB_POLICIES", "EventKind", "Milestone", "PoolSpec", "SimInvariantError", "SimResult", "simulate"]
