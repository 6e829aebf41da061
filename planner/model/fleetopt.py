"""FleetOpt's analytical two-pool optimum (arXiv 2603.16514), on our profiles and a real trace.

Source. FleetOpt (Chen, Liu, Liu, Jiang, He, Liu; arXiv 2603.16514v1, 17 March 2026), abstract and
docs/method.md §10 [F1]: every pool is an M/G/c queue; given the length CDF and a P99 TTFT target the
cheapest fleet is two pools, short (max_model_len B) and long, with the boundary B* where the marginal
GPU cost is equal on both sides; a request just above B* costs 8x-42x the capacity of one just below
(the "cost cliff", the ratio of the two pools' per-request GPU time); Compress-and-Route (C&R) trims a
share ``p_c`` of the borderline prompts in ``(B, γB]`` down to B, so the short pool takes
``α' = F(B) + p_c (F(γB) − F(B))`` of the load; the planner returns ``(n_s*, n_l*, B*, γ*)``. The
paper's per-pool sizing is the authors' released planner (vllm-sr-sim 0.1.0,
``fleet_sim/optimizer/base.py`` ``FleetOptimizer.sweep_analytical`` and ``optimizer/analytical.py``):

- a pool of N instances is one queue with ``c = N x slots`` servers (every KV slot a server), each
  busy for a request's full-batch service time ``S = (prefill iterations + output tokens) x t_iter``;
- ``P99 TTFT = P99 wait + mean prefill``, the wait from Erlang C with Kimura's M/G/c correction
  ``t_99 = ln(C / 0.01) (1 + C_s²) / (2 (cμ − λ))`` (:func:`planner.model.costmodel.p99_wait_mgc_s`);
- N is the smallest count meeting that and the utilisation cap ``λ / (N μ_instance) <= ρ_max``
  (0.85, the authors' guard against Kimura's error near ρ = 1).

What is ours: the service times come from our :class:`planner.model.profiles.PoolProfile` (``W + H·context
+ P·prefill`` at the pool's full batch, :mod:`planner.model.costmodel`) and the requests from the trace, not
from vllm-sr-sim's own GPU profile and a 0.8/0.2 input/output split of a CDF; the borderline share
that C&R compresses is drawn per request with a seeded generator, and a compressed request keeps its
output and loses input down to ``B − output`` (none when that is <= 0). B* is the cheapest candidate
boundary meeting the SLO (the discrete form of the equal-marginal-cost condition); the result's
``step_in``/``step_out`` give both pools' GPU change either side of B* so the condition can be read off.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from planner.model.costmodel import (
    concurrency,
    full_batch_iteration_s,
    mix_stats,
    p99_wait_mgc_s,
    ttft_floor_s,
)
from planner.model.profiles import PoolProfile

__all__ = [
    "BoundaryStep",
    "FleetOptPoint",
    "FleetOptPool",
    "FleetOptResult",
    "cost_cliff",
    "fleetopt",
    "size_pool",
]

RHO_MAX = 0.85
"""FleetOpt's utilisation cap (vllm-sr-sim ``min_gpus_analytical(rho_max=0.85)``)."""
GAMMAS_DEFAULT = (1.0, 1.1, 1.2, 1.3, 1.4, 1.5, 1.6, 1.7, 1.8, 1.9, 2.0)
"""vllm-sr-sim's C&R sweep (``optimize --gamma-max 2.0``: 1.0 to 2.0 by 0.1)."""
P_C_DEFAULT = 0.75
"""vllm-sr-sim's default C&R success share (``FleetOptimizer(p_c=0.75)``: 75 % prose/RAG/mixed)."""

IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class FleetOptPool:
    """One pool in FleetOpt's model: ``instances`` of ``max_model_len`` serving ``lam_req_per_s``.

    ``slots`` concurrent sequences per instance (:func:`planner.model.costmodel.concurrency`); ``service_s``
    a request's mean slot-holding time (s); ``cs2`` its squared coefficient of variation;
    ``p99_ttft_s`` the model's P99 wait + mean prefill (s, ``inf`` when unstable); ``utilization``
    ``λ / (N μ_instance)``; ``slo_met`` False when no count meets the SLO (prefill alone too long).
    """

    max_model_len: int
    lam_req_per_s: float
    instances: int
    gpus: int
    slots: int
    service_s: float
    cs2: float
    p99_ttft_s: float
    utilization: float
    slo_met: bool


@dataclass(frozen=True)
class FleetOptPoint:
    """A two-pool fleet at boundary ``boundary_tokens`` and C&R factor ``gamma`` (1.0 = no C&R).

    ``alpha`` = F(B), ``alpha_prime`` the short pool's share after C&R; ``usd_per_h`` the fleet's
    price per hour; ``slo_met`` both pools meet the SLO.
    """

    boundary_tokens: int
    gamma: float
    alpha: float
    alpha_prime: float
    short: FleetOptPool
    long: FleetOptPool
    usd_per_h: float
    slo_met: bool

    @property
    def gpus(self) -> int:
        """GPUs of both pools."""
        return self.short.gpus + self.long.gpus

    @property
    def instances(self) -> int:
        """Instances of both pools."""
        return self.short.instances + self.long.instances


@dataclass(frozen=True)
class BoundaryStep:
    """Moving the boundary from ``from_tokens`` to ``to_tokens`` (γ = 1): ``short_gpus_delta`` GPUs the
    short pool gains, ``long_gpus_delta`` GPUs the long pool loses, for ``moved_share`` of the requests
    (F(to) − F(from)). At B* the short pool's marginal cost is at least the long pool's saving on the
    step to the right and at most it on the step from the left: the discrete equal-marginal-cost
    condition."""

    from_tokens: int
    to_tokens: int
    moved_share: float
    short_gpus_delta: int
    long_gpus_delta: int


@dataclass(frozen=True)
class FleetOptResult:
    """FleetOpt's answer: ``best`` ``(n_s*, n_l*, B*, γ*)`` over every candidate, ``best_routing`` the
    cheapest without compression (γ = 1), the ``homogeneous`` baseline (one pool at the long
    max_model_len), every evaluated point in ``sweep``; around ``best_routing``'s B* the
    :class:`BoundaryStep` from the previous candidate (``step_in``) and to the next (``step_out``),
    None at the ends; ``cost_cliff`` is :func:`cost_cliff` at that B* for a request of the short
    pool's longest half (None when it has none)."""

    best: FleetOptPoint | None
    best_routing: FleetOptPoint | None
    homogeneous: FleetOptPool
    homogeneous_usd_per_h: float
    sweep: tuple[FleetOptPoint, ...]
    step_in: BoundaryStep | None
    step_out: BoundaryStep | None
    cost_cliff: float | None


def _pool_moments(
    profile: PoolProfile, max_model_len: int, input_tokens: IntArray, output_tokens: IntArray
) -> tuple[int, float, float, float]:
    """``(slots, mean service s, C_s², mean prefill s)`` of a pool serving these requests."""
    mix = mix_stats(input_tokens, output_tokens, profile.chunk_tokens)
    slots = concurrency(profile, max_model_len, mix)
    t_iter = full_batch_iteration_s(profile, slots, mix)
    prefill_s = float(ttft_floor_s(profile, input_tokens, output_tokens).mean())
    return slots, mix.mean_iters * t_iter, mix.cs2_iters, prefill_s


def size_pool(
    lam_req_per_s: float,
    profile: PoolProfile,
    max_model_len: int,
    input_tokens: IntArray,
    output_tokens: IntArray,
    slo_ttft_p99_s: float,
    *,
    rho_max: float = RHO_MAX,
    max_instances: int = 100_000,
) -> FleetOptPool:
    """FleetOpt's pool size: the smallest N with ``λ/(N μ_inst) <= rho_max`` and Kimura's P99 wait of
    an M/G/(N·slots) queue plus the mean prefill within ``slo_ttft_p99_s`` (module docstring).

    ``input_tokens``/``output_tokens`` shape ``(n,)``: the pool's request mix (n = 0 gives an empty
    pool of 0 instances). Example (tests): W = 10 ms, H = P = 0, 4 slots, every request 100
    iterations -> S = 1 s, μ_inst = 4 req/s; λ = 10 req/s -> N = ceil(10 / (4·0.85)) = 3 when the SLO
    is loose. Raises ``ValueError`` for ``rho_max`` outside (0, 1].
    """
    if not 0.0 < rho_max <= 1.0:
        raise ValueError(f"rho_max must be in (0, 1], got {rho_max}")
    if lam_req_per_s <= 0 or input_tokens.shape[0] == 0:
        return FleetOptPool(max_model_len, 0.0, 0, 0, 0, 0.0, 0.0, 0.0, 0.0, True)
    slots, service_s, cs2, prefill_s = _pool_moments(profile, max_model_len, input_tokens, output_tokens)
    mu_slot = 1.0 / service_s
    mu_inst = slots * mu_slot
    n = max(1, math.ceil(lam_req_per_s / (mu_inst * rho_max) - 1e-12))
    met = prefill_s <= slo_ttft_p99_s
    while n < max_instances:
        wait = p99_wait_mgc_s(n * slots, lam_req_per_s, mu_slot, cs2)
        if wait + prefill_s <= slo_ttft_p99_s or (not met and math.isfinite(wait) and wait == 0.0):
            break
        n += 1
    wait = p99_wait_mgc_s(n * slots, lam_req_per_s, mu_slot, cs2)
    return FleetOptPool(
        max_model_len=max_model_len,
        lam_req_per_s=lam_req_per_s,
        instances=n,
        gpus=n * profile.tp,
        slots=slots,
        service_s=service_s,
        cs2=cs2,
        p99_ttft_s=wait + prefill_s,
        utilization=lam_req_per_s / (n * mu_inst),
        slo_met=met and wait + prefill_s <= slo_ttft_p99_s,
    )


def cost_cliff(
    profile: PoolProfile, boundary_tokens: int, long_max_model_len: int, input_tokens: int, output_tokens: int
) -> float:
    """FleetOpt's cost cliff at B: GPU time of one request of ``input_tokens`` + ``output_tokens`` in the
    long pool over the same request in the short pool, ``(S_l / slots_l) / (S_s / slots_s)`` (each pool
    at full batch of such requests). Under the paper's admission with both pools KV-bound this is
    about ``long_max_model_len / B`` (65,536 / 8,192 -> 8); under vLLM's admission, where both pools
    run ``max_num_seqs`` sequences, about 1. Raises ``ValueError`` when the request exceeds B."""
    if input_tokens + output_tokens > boundary_tokens:
        raise ValueError(
            f"a request of {input_tokens + output_tokens} tokens does not fit B = {boundary_tokens}"
        )
    i = np.array([max(1, input_tokens)], dtype=np.int64)
    o = np.array([max(1, output_tokens)], dtype=np.int64)
    s_slots, s_service, _, _ = _pool_moments(profile, boundary_tokens, i, o)
    l_slots, l_service, _, _ = _pool_moments(profile, long_max_model_len, i, o)
    return (l_service / l_slots) / (s_service / s_slots)


def _point(
    b: int,
    gamma: float,
    compressible: npt.NDArray[np.bool_],
    input_tokens: IntArray,
    output_tokens: IntArray,
    lam: float,
    profile: PoolProfile,
    long_max_model_len: int,
    slo_s: float,
    rho_max: float,
) -> FleetOptPoint:
    total = input_tokens + output_tokens
    short = total <= b
    border = (total > b) & (total <= int(gamma * b)) & compressible & (output_tokens < b)
    to_short = short | border
    s_in = np.where(border, np.minimum(input_tokens, b - output_tokens), input_tokens)[to_short]
    s_out = output_tokens[to_short]
    alpha = float(short.mean())
    alpha_p = float(to_short.mean())
    sp = size_pool(lam * alpha_p, profile, b, s_in, s_out, slo_s, rho_max=rho_max)
    lp = size_pool(lam * (1 - alpha_p), profile, long_max_model_len, input_tokens[~to_short],
                   output_tokens[~to_short], slo_s, rho_max=rho_max)  # fmt: skip
    usd = (sp.gpus + lp.gpus) * profile.price_usd_per_gpu_h
    return FleetOptPoint(b, gamma, alpha, alpha_p, sp, lp, usd, sp.slo_met and lp.slo_met)


def fleetopt(
    input_tokens: IntArray,
    output_tokens: IntArray,
    lam_req_per_s: float,
    profile: PoolProfile,
    long_max_model_len: int,
    slo_ttft_p99_s: float,
    *,
    boundaries: tuple[int, ...] = (1024, 2048, 4096, 8192, 16384, 32768),
    gammas: tuple[float, ...] = GAMMAS_DEFAULT,
    p_c: float = P_C_DEFAULT,
    rho_max: float = RHO_MAX,
    seed: int = 0,
) -> FleetOptResult:
    """FleetOpt's ``(n_s*, n_l*, B*, γ*)`` for requests ``input_tokens``/``output_tokens`` (shape
    ``(n,)``, tokens) arriving at ``lam_req_per_s``: every boundary below ``long_max_model_len`` x every
    γ in ``gammas`` (vllm-sr-sim's default sweep 1.0, 1.1, ..., 2.0), each pool sized by
    :func:`size_pool`; the cheapest point meeting the SLO (else the cheapest) is ``best``.

    Requests longer than ``long_max_model_len`` are left out (no pool serves them). A borderline
    request is compressible with probability ``p_c`` (seeded by ``seed``: same seed, same answer).
    Raises ``ValueError`` on empty or mismatched arrays, a non-positive rate, ``p_c`` outside [0, 1] or
    no boundary below ``long_max_model_len``.
    """
    if input_tokens.shape != output_tokens.shape or input_tokens.shape[0] == 0:
        raise ValueError("input_tokens and output_tokens must be non-empty arrays of the same shape")
    if lam_req_per_s <= 0:
        raise ValueError(f"lam_req_per_s must be > 0, got {lam_req_per_s}")
    if not 0.0 <= p_c <= 1.0:
        raise ValueError(f"p_c must be in [0, 1], got {p_c}")
    bs = sorted({b for b in boundaries if 0 < b < long_max_model_len})
    if not bs:
        raise ValueError(f"no boundary below the long pool's max_model_len {long_max_model_len}")
    fits = (input_tokens + output_tokens) <= long_max_model_len
    inp, out = input_tokens[fits], output_tokens[fits]
    lam = lam_req_per_s * float(fits.mean())
    compressible = np.asarray(np.random.default_rng(seed).random(inp.shape[0]) < p_c, dtype=np.bool_)
    homog = size_pool(lam, profile, long_max_model_len, inp, out, slo_ttft_p99_s, rho_max=rho_max)
    sweep = tuple(
        _point(b, g, compressible, inp, out, lam, profile, long_max_model_len, slo_ttft_p99_s, rho_max)
        for b in bs
        for g in sorted(set(gammas) | {1.0})
        if g >= 1.0
    )

    def cheapest(points: list[FleetOptPoint]) -> FleetOptPoint | None:
        ok = [p for p in points if p.slo_met] or points
        return min(ok, key=lambda p: (p.usd_per_h, -p.boundary_tokens, p.gamma)) if ok else None

    best = cheapest(list(sweep))
    routing = [p for p in sweep if p.gamma == 1.0]
    best_routing = cheapest(routing)
    step_in = step_out = None
    cliff = None
    if best_routing is not None:
        b = best_routing.boundary_tokens
        i = [p.boundary_tokens for p in routing].index(b)

        def step(x: FleetOptPoint, y: FleetOptPoint) -> BoundaryStep:
            return BoundaryStep(x.boundary_tokens, y.boundary_tokens, y.alpha - x.alpha,
                                y.short.gpus - x.short.gpus, x.long.gpus - y.long.gpus)  # fmt: skip

        step_in = step(routing[i - 1], routing[i]) if i > 0 else None
        step_out = step(routing[i], routing[i + 1]) if i + 1 < len(routing) else None
        near = (inp + out <= b) & (inp + out > b // 2)
        if near.any():
            k = int(np.flatnonzero(near)[0])
            cliff = cost_cliff(profile, b, long_max_model_len, int(inp[k]), int(out[k]))
    return FleetOptResult(
        best=best,
        best_routing=best_routing,
        homogeneous=homog,
        homogeneous_usd_per_h=homog.gpus * profile.price_usd_per_gpu_h,
        sweep=sweep,
        step_in=step_in,
        step_out=step_out,
        cost_cliff=cliff,
    )
