"""Fleet advice: instances per pool, the live α and saving, the cheapest threshold B — from a window
of routing decisions (issue 33).

The one function :func:`advise` serves the live router (``tbr serve``, at scrape time, over
:class:`extproc.core.route.fleet_window.FleetWindow`) and the simulator's closed loop alike, so the
autoscaler evaluated offline follows the same advice the router exports. It is pure (no I/O, no
clock) and imports only the planner's closed-form model (:mod:`planner.model.costmodel`), its profile type
(:mod:`planner.model.profiles`) and the profile reader (:mod:`planner.model.profile_file`); import-linter keeps it that way (pyproject: "The live advice model stays
narrow"), because the router's service layer imports this module and nothing else of the planner.

Model (docs/method.md §5, docs/planner.md): each pool is ``N`` M/G/c instances (c = ``max_num_seqs``
at the pool's ``max_model_len``) under round robin; :func:`planner.model.costmodel.size_pool_mgc` gives the
smallest ``N`` whose P99 TTFT (Erlang-C wait with the Kimura two-moment correction plus the P99
prefill) meets the SLO at the window's arrival rate λ and token mix; ``required = ⌈N ×
capacity_correction⌉``, the pool's correction being the DES-verified size over this closed form's for its
profile (measured by :mod:`planner.des.advice_calibration`; 1.0 trusts the closed form). The mix comes from the window's
budget histogram: a bin stands for its geometric midpoint ``b``, of which ``output_share·b`` tokens are
generated and the rest is prompt (the router routes on budgets; it does not see each answer).
Headroom rule: ``desired`` is the size that holds the SLO at ``(1 + headroom)·λ`` (room for the load
to grow while a new instance starts), clamped to ``[min_instances, max_instances]``; a pool with no
arrival in the window is advised ``min_instances``.

Threshold: for a fleet of two pools, every power-of-two ``B`` below the long pool's ``max_model_len``
(and the configured one) is costed as a short pool at ``max_model_len = B`` with the short profile and
a long pool with the rest; the saving is against one homogeneous pool of the long profile serving
everything (the planner's baseline). Each pool's ``capacity_correction`` applies to it in every
candidate (the short pool's to every B, the long pool's to the rest and to the homogeneous pool), so
the savings are as good as the corrections. :class:`ThresholdHysteresis` turns the cheapest ``B`` into
advice only when it beats the configured ``B`` by a margin held for a while.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any, cast, overload

from extproc.core.route.fleet_window import BIN_UPPER_TOKENS, N_BINS, WindowSnapshot
from planner.model.costmodel import MixStats, full_batch_iteration_s, p99_wait_mgc_s, size_pool_mgc
from planner.model.profile_file import load_profile
from planner.model.profiles import PoolProfile

__all__ = [
    "AdvicePool",
    "AdviceRule",
    "FleetAdvice",
    "PoolAdvice",
    "ThresholdAdvice",
    "ThresholdCandidate",
    "ThresholdHysteresis",
    "advise",
    "bin_mid_tokens",
    "load_profile",
    "mix_from_bins",
]


@dataclass(frozen=True)
class AdvicePool:
    """One pool as the advice sees it: its name, the profile its instances run, its
    ``max_model_len``, and ``capacity_correction`` (≥ 1): the DES-verified size over the closed
    form's for this pool's profile and traffic (:mod:`planner.des.advice_calibration`; 1.0 trusts the
    closed form)."""

    name: str
    profile: PoolProfile
    max_model_len: int
    capacity_correction: float = 1.0


@dataclass(frozen=True)
class AdviceRule:
    """The SLO the advice holds (P99 TTFT and optional P99 TPOT, seconds), the headroom rule
    (the load growth the desired size must absorb, a fraction of λ; ``min_instances``..``max_instances``), the share of a
    budget the model counts as generated tokens."""

    slo_ttft_p99_s: float
    slo_tpot_p99_s: float | None = None
    headroom: float = 0.1
    min_instances: int = 1
    max_instances: int = 10_000
    output_share: float = 0.155


def bin_mid_tokens(i: int) -> float:
    """Geometric midpoint of budget bin ``i``, tokens (bin 0: 8 tokens … its upper edge 16)."""
    hi = BIN_UPPER_TOKENS[i]
    lo = BIN_UPPER_TOKENS[i - 1] if i > 0 else hi / 2
    return math.sqrt(lo * hi)


def _weighted_quantile(values: Sequence[float], weights: Sequence[int], q: float) -> float:
    """``numpy.percentile(np.repeat(values, weights), 100 q)`` (linear interpolation) without the repeat."""
    pairs = sorted(zip(values, weights, strict=True))
    pos = q * (sum(weights) - 1)
    lo_i, frac = math.floor(pos), pos - math.floor(pos)

    def at(i: int) -> float:
        acc = 0
        for v, w in pairs:
            acc += w
            if i < acc:
                return v
        return pairs[-1][0]

    lo = at(lo_i)
    return lo + frac * (at(lo_i + 1) - lo) if frac > 0 else lo


def mix_from_bins(counts: Sequence[int], output_share: float, chunk_tokens: int) -> MixStats | None:
    """The :class:`MixStats` of a budget histogram (``counts`` per bin, length :data:`N_BINS`): the
    moments :func:`planner.model.costmodel.mix_stats` computes, weighted by the counts, each bin at its
    midpoint ``b`` split into ``round((1 − output_share)·b)`` prompt and ``round(output_share·b)``
    generated tokens (each at least 1). None when every count is 0."""
    w: list[int] = []
    k: list[float] = []
    ctx: list[float] = []
    inp: list[float] = []
    pf: list[float] = []
    for i, c in enumerate(counts[:N_BINS]):
        if c <= 0:
            continue
        b = bin_mid_tokens(i)
        out_t = max(1, round(output_share * b))
        in_t = max(1, round(b - out_t))
        p = max(1, -(-in_t // chunk_tokens))
        w.append(c)
        pf.append(float(p))
        k.append(p + max(0, out_t - 1))
        ctx.append(in_t + out_t / 2.0)
        inp.append(float(in_t))
    n = sum(w)
    if n == 0:
        return None
    mk = sum(wi * ki for wi, ki in zip(w, k, strict=True)) / n
    var = sum(wi * (ki - mk) ** 2 for wi, ki in zip(w, k, strict=True)) / n
    return MixStats(
        n=n,
        mean_iters=mk,
        cs2_iters=var / (mk * mk),
        mean_context_tokens=sum(wi * ki * ci for wi, ki, ci in zip(w, k, ctx, strict=True)) / n / mk,
        mean_input_tokens=sum(wi * x for wi, x in zip(w, inp, strict=True)) / n,
        p99_prefill_iters=_weighted_quantile(pf, w, 0.99),
    )


@dataclass(frozen=True)
class PoolAdvice:
    """Advice for one pool: λ (req/s) and requests in the window (``unbudgeted`` of them without a
    budget), the P50/P99 budget (tokens; None without budgets), the model's ``required_instances``,
    the ``desired_instances`` after the headroom rule, the utilisation and P99 TTFT the model predicts
    at the desired size, one instance's throughput μ (req/s), and whether the SLO is attainable
    (False: the P99 prefill alone exceeds the TTFT SLO, or a full batch's iteration the TPOT SLO)."""

    pool: str
    arrival_rate_req_per_s: float
    requests: int
    unbudgeted: int
    budget_p50_tokens: int | None
    budget_p99_tokens: int | None
    required_instances: int
    desired_instances: int
    utilization: float
    predicted_p99_ttft_s: float
    mu_req_per_s: float
    slo_attainable: bool
    gpus: int
    cost_usd_per_h: float


@dataclass(frozen=True)
class ThresholdCandidate:
    """One threshold ``B`` (tokens): α = share of requests with a budget ≤ B, the short and long
    pools' required instances, the fleet's $/h and its saving against the homogeneous fleet."""

    threshold_tokens: int
    alpha: float
    short_instances: int
    long_instances: int
    cost_usd_per_h: float
    saving: float


@dataclass(frozen=True)
class ThresholdAdvice:
    """The threshold sweep: the configured B and its saving, the cheapest B and its saving, all
    candidates, and ``advised_threshold_tokens`` (set by :class:`ThresholdHysteresis`; None = keep B)."""

    current_threshold_tokens: int
    current_saving: float
    best_threshold_tokens: int
    best_saving: float
    candidates: tuple[ThresholdCandidate, ...]
    advised_threshold_tokens: int | None = None


@dataclass(frozen=True)
class FleetAdvice:
    """The fleet's advice at ``now_s`` over ``span_s`` seconds of traffic seen by ``replicas``
    replicas: per pool :class:`PoolAdvice`; ``alpha`` the share of requests routed to the shortest
    pool; the fleet's required cost and the homogeneous fleet's ($/h), the saving
    ``1 − fleet/homogeneous``; the threshold sweep (None with other than two pools or no traffic)."""

    now_s: float
    span_s: float
    replicas: int
    pools: tuple[PoolAdvice, ...]
    alpha: float | None
    fleet_cost_usd_per_h: float
    homogeneous_instances: int
    homogeneous_cost_usd_per_h: float
    saving_vs_homogeneous: float | None
    threshold: ThresholdAdvice | None

    def pool(self, name: str) -> PoolAdvice | None:
        """The advice of pool ``name`` (None when not a pool)."""
        return next((p for p in self.pools if p.pool == name), None)

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict of every field (floats rounded to 6 digits)."""
        return cast(dict[str, Any], _rounded(asdict(self)))


def _rounded(x: Any) -> Any:
    if isinstance(x, float):
        return round(x, 6) if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _rounded(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_rounded(v) for v in x]
    return x


def _size(
    lam: float, pool: AdvicePool, mix: MixStats | None, rule: AdviceRule
) -> tuple[int, float, float, float, bool]:
    """(required instances, utilisation, predicted P99 TTFT s, μ req/s, attainable) for λ and mix."""
    if lam <= 0 or mix is None:
        return 0, 0.0, 0.0, 0.0, True
    s = size_pool_mgc(
        lam,
        pool.profile,
        pool.max_model_len,
        mix,
        slo_ttft_p99_s=rule.slo_ttft_p99_s,
        slo_tpot_p99_s=rule.slo_tpot_p99_s,
        max_instances=max(rule.max_instances, 1) * 10,
    )
    ok = s.p99_ttft_s <= rule.slo_ttft_p99_s and (
        rule.slo_tpot_p99_s is None or s.p99_tpot_s <= rule.slo_tpot_p99_s
    )
    n = math.ceil(s.instances * pool.capacity_correction - 1e-9)
    return n, s.utilization * s.instances / n, s.p99_ttft_s, s.mu_req_per_s, ok


def _quantile_tokens(counts: Sequence[int], q: float) -> int | None:
    total = sum(counts[:N_BINS])
    if total == 0:
        return None
    acc = 0
    for i, c in enumerate(counts[:N_BINS]):
        acc += c
        if acc >= q * total:
            return BIN_UPPER_TOKENS[i]
    return BIN_UPPER_TOKENS[-1]


def _pool_advice(snap: WindowSnapshot, pool: AdvicePool, rule: AdviceRule) -> PoolAdvice:
    w = snap.pools.get(pool.name)
    counts: Sequence[int] = w.counts if w is not None else (0,) * N_BINS
    unbudgeted = w.unbudgeted if w is not None else 0
    lam = snap.rate_req_per_s(pool.name)
    mix = mix_from_bins(counts, rule.output_share, pool.profile.chunk_tokens)
    if mix is None and unbudgeted:  # only unreadable requests: sized at half the pool's limit
        half = [0] * N_BINS
        half[min(N_BINS - 1, _bin_at_most(pool.max_model_len // 2))] = 1
        mix = mix_from_bins(half, rule.output_share, pool.profile.chunk_tokens)
    required, _, _, mu, ok = _size(lam, pool, mix, rule)
    if lam <= 0:
        desired = rule.min_instances
    else:
        desired = min(
            rule.max_instances, max(rule.min_instances, math.ceil(required * (1.0 + rule.headroom)))
        )
    util = lam / (desired * mu) if desired > 0 and mu > 0 else 0.0
    ttft = 0.0
    if lam > 0 and mix is not None and desired > 0:
        n_slots = pool.profile.max_num_seqs(pool.max_model_len)
        t_iter = full_batch_iteration_s(pool.profile, n_slots, mix)
        wait = p99_wait_mgc_s(n_slots, lam / desired, 1.0 / (mix.mean_iters * t_iter), mix.cs2_iters)
        ttft = wait + mix.p99_prefill_iters * t_iter
    return PoolAdvice(
        pool=pool.name,
        arrival_rate_req_per_s=lam,
        requests=(w.requests if w is not None else 0),
        unbudgeted=unbudgeted,
        budget_p50_tokens=_quantile_tokens(counts, 0.5),
        budget_p99_tokens=_quantile_tokens(counts, 0.99),
        required_instances=required,
        desired_instances=desired,
        utilization=util,
        predicted_p99_ttft_s=ttft,
        mu_req_per_s=mu,
        slo_attainable=ok,
        gpus=desired * pool.profile.tp,
        cost_usd_per_h=desired * pool.profile.price_usd_per_instance_h,
    )


def _bin_at_most(tokens: int) -> int:
    """Largest bin whose upper edge is ≤ ``tokens`` (0 when none)."""
    best = 0
    for i, hi in enumerate(BIN_UPPER_TOKENS):
        if hi <= tokens:
            best = i
    return best


def _threshold_sweep(
    snap: WindowSnapshot, short: AdvicePool, long: AdvicePool, rule: AdviceRule
) -> tuple[ThresholdAdvice, int, float] | None:
    """Cost every candidate B; also returns the homogeneous fleet's (instances, $/h)."""
    total = [0] * N_BINS
    unbudgeted = 0
    for w in snap.pools.values():
        for i, c in enumerate(w.counts):
            total[i] += c
        unbudgeted += w.unbudgeted
    n_all = sum(total) + unbudgeted
    if n_all == 0 or snap.span_s <= 0:
        return None
    lam = n_all / snap.span_s
    homog, *_ = _size(lam, long, mix_from_bins(total, rule.output_share, long.profile.chunk_tokens), rule)
    homog_cost = homog * long.profile.price_usd_per_instance_h
    cands = sorted({2**e for e in range(10, 25) if 2**e < long.max_model_len} | {short.max_model_len})
    rows: list[ThresholdCandidate] = []
    for b in cands:
        try:
            short.profile.max_num_seqs(b)
        except ValueError:
            continue
        cut = _bin_at_most(b) + 1 if b >= BIN_UPPER_TOKENS[0] else 0
        lo = total[:cut] + [0] * (N_BINS - cut)
        hi = [0] * cut + total[cut:]
        n_lo = sum(lo)
        sp = AdvicePool(short.name, short.profile, b, short.capacity_correction)
        n_s, *_ = _size(
            n_lo / snap.span_s, sp, mix_from_bins(lo, rule.output_share, short.profile.chunk_tokens), rule
        )
        n_l, *_ = _size(
            (n_all - n_lo) / snap.span_s,
            long,
            mix_from_bins(hi, rule.output_share, long.profile.chunk_tokens),
            rule,
        )
        cost = n_s * short.profile.price_usd_per_instance_h + n_l * long.profile.price_usd_per_instance_h
        rows.append(
            ThresholdCandidate(
                b, n_lo / n_all, n_s, n_l, cost, 1.0 - cost / homog_cost if homog_cost > 0 else 0.0
            )
        )
    if not rows:
        return None
    current = next((r for r in rows if r.threshold_tokens == short.max_model_len), None)
    best = min(rows, key=lambda r: (r.cost_usd_per_h, r.threshold_tokens))
    if current is not None and current.cost_usd_per_h <= best.cost_usd_per_h:
        best = current  # a tie keeps the configured B
    advice = ThresholdAdvice(
        current_threshold_tokens=short.max_model_len,
        current_saving=current.saving if current is not None else 0.0,
        best_threshold_tokens=best.threshold_tokens,
        best_saving=best.saving,
        candidates=tuple(rows),
    )
    return advice, homog, homog_cost


def advise(
    snap: WindowSnapshot, pools: Sequence[AdvicePool], rule: AdviceRule, *, threshold_sweep: bool = True
) -> FleetAdvice:
    """Fleet advice from a window of decisions (module docstring). ``pools`` in any order; the
    shortest ``max_model_len`` is the short pool; ``threshold_sweep`` False leaves the threshold
    advice out (the simulator's autoscaler needs only the instances). Raises ``ValueError`` when
    ``pools`` is empty."""
    if not pools:
        raise ValueError("advise needs at least one pool")
    by_size = sorted(pools, key=lambda p: p.max_model_len)
    per_pool = tuple(_pool_advice(snap, p, rule) for p in pools)
    n_all = sum(p.requests for p in per_pool)
    short_req = next(p.requests for p in per_pool if p.pool == by_size[0].name)
    alpha = short_req / n_all if n_all and len(pools) > 1 else None
    required_cost = sum(
        a.required_instances * p.profile.price_usd_per_instance_h
        for a, p in zip(per_pool, pools, strict=True)
    )
    sweep = (
        _threshold_sweep(snap, by_size[0], by_size[-1], rule) if len(pools) == 2 and threshold_sweep else None
    )
    if sweep is None:
        long = by_size[-1]
        total = [0] * N_BINS
        for w in snap.pools.values():
            for i, c in enumerate(w.counts):
                total[i] += c
        lam = n_all / snap.span_s if snap.span_s > 0 else 0.0
        homog, *_ = _size(lam, long, mix_from_bins(total, rule.output_share, long.profile.chunk_tokens), rule)
        homog_cost = homog * long.profile.price_usd_per_instance_h
        threshold = None
    else:
        threshold, homog, homog_cost = sweep
    saving = 1.0 - required_cost / homog_cost if homog_cost > 0 else None
    return FleetAdvice(
        now_s=snap.now_s,
        span_s=snap.span_s,
        replicas=snap.replicas,
        pools=per_pool,
        alpha=alpha,
        fleet_cost_usd_per_h=required_cost,
        homogeneous_instances=homog,
        homogeneous_cost_usd_per_h=homog_cost,
        saving_vs_homogeneous=saving,
        threshold=threshold,
    )


class ThresholdHysteresis:
    """Turns the cheapest B of each :class:`ThresholdAdvice` into advice with hysteresis.

    A new B is advised when its saving beats the configured B's by at least ``margin`` (a fraction
    of the homogeneous fleet's cost) in every update for ``hold_s`` seconds; an advised B is withdrawn
    when its lead falls below ``margin / 2``. Time is an argument (seconds on the caller's clock).
    Pure state machine: nothing is ever applied.
    """

    def __init__(self, *, margin: float, hold_s: float) -> None:
        self.margin = margin
        self.hold_s = hold_s
        self.advised: int | None = None
        self._pending: int | None = None
        self._since_s = 0.0

    @overload
    def update(self, t: ThresholdAdvice, now_s: float) -> ThresholdAdvice: ...
    @overload
    def update(self, t: None, now_s: float) -> None: ...
    def update(self, t: ThresholdAdvice | None, now_s: float) -> ThresholdAdvice | None:
        """The advice with ``advised_threshold_tokens`` set (or None) after this observation."""
        if t is None:
            self._pending = None
            return None
        savings = {c.threshold_tokens: c.saving for c in t.candidates}
        if self.advised is not None:
            lead = savings.get(self.advised, -math.inf) - t.current_saving
            if lead < self.margin / 2 or self.advised == t.current_threshold_tokens:
                self.advised = None
        if self.advised is None:
            gain = t.best_saving - t.current_saving
            if gain >= self.margin and t.best_threshold_tokens != t.current_threshold_tokens:
                if self._pending != t.best_threshold_tokens:
                    self._pending, self._since_s = t.best_threshold_tokens, now_s
                if now_s - self._since_s >= self.hold_s:
                    self.advised, self._pending = self._pending, None
            else:
                self._pending = None
        return ThresholdAdvice(
            **{**asdict(t), "candidates": t.candidates, "advised_threshold_tokens": self.advised}
        )
