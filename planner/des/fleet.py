"""N-pool fleets described by a router configuration: sizing with and without spillover.

The fleet is the router's own ``pools[]`` and ``spillover:`` (:class:`extproc.config.RouterConfig`,
docs/design/002-spillover.md), so the simulator routes with exactly the pools and thresholds the
router would (:class:`planner.des.routers.PolicyRouter`).

Sizing (all checks by DES, SLO per pool as in :mod:`planner.des.sizing`):

1. *Token-budget sizes*: with shortest-fit routing each pool sees a fixed sub-stream, so each pool is
   sized alone on its sub-trace (:func:`planner.des.sizing.size_pool_des`).
2. *Spillover at those sizes*: one joint run with the configured spillover (latency effect only).
3. *Spillover-aware sizes*: spillover couples the pools, so they are sized jointly by coordinate
   descent from the token-budget sizes: for each pool but the largest, smallest to largest, the
   smallest count whose joint run still meets the SLO in every pool (walk down in steps of ~2%,
   then bisect). It never adds instances, so it finds the GPUs spillover saves by using the larger
   pools' headroom (integer rounding + SLO slack), not a global optimum.

Sweep values: ``max_inflight_per_pool`` / ``max_waiting`` are pool totals (the router's units); a
value written ``X/inst`` is X per instance of each pool's token-budget size, written into the
per-pool overrides (``pools[].max_inflight`` / ``pools[].max_waiting``) so the reported config can
be pasted into the router YAML. ``max_kv_cache_usage`` is a fraction.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from extproc.config import RouterConfig, parse_config
from planner.des import PoolSpec, SimResult, simulate
from planner.des.routers import PolicyRouter, make_router
from planner.des.sizing import Slo, meets_slo, size_pool_des
from planner.model.costmodel import annual_cost_usd, mix_stats, size_pool_mgc
from planner.model.profiles import PoolProfile
from planner.workload.trace import Trace, base_period_s

__all__ = [
    "SPILL_KNOBS",
    "FleetInputs",
    "SpillSetting",
    "describe_spillover",
    "parse_spill_sweep",
    "plan_fleet",
    "router_config_for",
    "run_fleet",
    "spill_config",
]

SPILL_KNOBS = {
    "max_inflight_per_pool": "max_inflight",
    "max_waiting": "max_waiting",
    "max_kv_cache_usage": "max_kv_cache_usage",
}
"""Sweepable ``spillover.<knob>`` -> the per-pool override field ``pools[].<field>``."""

Progress = Callable[[str], None]


@dataclass(frozen=True)
class SpillSetting:
    """One sweep point: ``spillover.<knob> = value`` (``per_instance``: value x pool instances)."""

    knob: str
    value: float
    per_instance: bool = False

    @property
    def label(self) -> str:
        """As written on the command line, e.g. ``max_waiting=2/inst``."""
        v = f"{self.value:g}"
        return f"{self.knob}={v}/inst" if self.per_instance else f"{self.knob}={v}"


def parse_spill_sweep(text: str) -> list[SpillSetting]:
    """``KNOB=V1,V2,...`` (values may end in ``/inst``) -> settings; raises ``ValueError`` if malformed."""
    knob, sep, values = text.partition("=")
    knob = knob.strip()
    if not sep or knob not in SPILL_KNOBS:
        raise ValueError(
            f"spill sweep must be KNOB=V1,V2,... with KNOB in {', '.join(SPILL_KNOBS)}; got {text!r}"
        )
    out = []
    for raw in values.split(","):
        v = raw.strip()
        per = v.endswith("/inst")
        num = v.removesuffix("/inst")
        try:
            x = float(num)
        except ValueError:
            raise ValueError(f"spill sweep value {raw!r} is not a number") from None
        if (
            x < 0
            or (knob == "max_kv_cache_usage" and not 0 < x <= 1)
            or (per and knob == "max_kv_cache_usage")
        ):
            raise ValueError(f"spill sweep value {raw!r} out of range for {knob}")
        out.append(SpillSetting(knob, x, per))
    return out


def router_config_for(max_model_lens: list[int], *, metrics: bool = True) -> RouterConfig:
    """A minimal router config with one pool per ``max_model_len`` (named ``p<len>``, spillover off)."""
    pools = [
        {
            "name": f"p{m}",
            "max_model_len": m,
            "header_value": f"p{m}",
            **({"metrics_url": f"http://p{m}.planner.invalid/metrics"} if metrics else {}),
        }
        for m in sorted(max_model_lens)
    ]
    return parse_config({"pools": pools})


def spill_config(cfg: RouterConfig, setting: SpillSetting, sizes: list[int]) -> RouterConfig:
    """``cfg`` with spillover enabled and ``setting`` applied (``sizes`` per ``pools_by_size``).

    The swept signal's per-pool overrides are cleared (absolute value) or set to ``ceil(value x
    instances)`` (per-instance value); scraped signals get a placeholder ``metrics_url`` on pools
    without one, since the simulator can always scrape. Raises ``extproc.config.ConfigError``.
    """
    data = cfg.model_dump(mode="json")
    field = SPILL_KNOBS[setting.knob]
    by_name = {p.name: n for p, n in zip(cfg.pools_by_size, sizes, strict=True)}
    for p in data["pools"]:
        p[field] = math.ceil(setting.value * by_name[p["name"]]) if setting.per_instance else None
        if field != "max_inflight" and not p.get("metrics_url"):
            p["metrics_url"] = f"http://{p['name']}.planner.invalid/metrics"
        if field == "max_inflight" and p[field] is not None:
            p[field] = max(1, int(p[field]))
    sp = data["spillover"]
    sp["enabled"] = True
    sp[setting.knob] = (
        None if setting.per_instance else (int(setting.value) if field == "max_inflight" else setting.value)
    )
    if field == "max_inflight" and sp[setting.knob] is not None:
        sp[setting.knob] = max(1, sp[setting.knob])
    return parse_config(data)


def describe_spillover(cfg: RouterConfig) -> str:
    """One line: the effective thresholds of every pool (router units), as the router resolves them."""
    sp = cfg.spillover
    if not sp.enabled:
        return "spillover disabled"
    parts = []
    for p in cfg.pools_by_size:
        th = {
            "max_inflight": p.max_inflight if p.max_inflight is not None else sp.max_inflight_per_pool,
            "max_waiting": p.max_waiting if p.max_waiting is not None else sp.max_waiting,
            "max_kv_cache_usage": p.max_kv_cache_usage
            if p.max_kv_cache_usage is not None
            else sp.max_kv_cache_usage,
        }
        on = [f"{k}={v:g}" for k, v in th.items() if v is not None]
        parts.append(f"{p.name}: {', '.join(on) or 'no thresholds'}")
    return f"spillover (scrape every {sp.scrape_interval_s:g} s): " + "; ".join(parts)


@dataclass(frozen=True)
class FleetInputs:
    """A trace, a profile, an SLO and the router config whose pools/spillover to plan.

    ``est_budget_tokens`` (shape ``(n,)``): the budgets the router sees (default: true budgets).
    """

    trace: Trace
    profile: PoolProfile
    slo: Slo
    config: RouterConfig
    seed: int = 0
    est_budget_tokens: npt.NDArray[np.int64] | None = None
    sweep: tuple[SpillSetting, ...] = ()
    size_with_spillover: bool = True
    token_budget_sizes: list[int] | None = None
    """Known token-budget sizes per pool (skips step 1), e.g. from :func:`planner.des.plan.des_two_pool`."""


def _specs(inp: FleetInputs, sizes: list[int]) -> list[PoolSpec]:
    return [
        PoolSpec(p.name, inp.profile, p.max_model_len, max(1, n))
        for p, n in zip(inp.config.pools_by_size, sizes, strict=True)
    ]


def _run(inp: FleetInputs, cfg: RouterConfig, sizes: list[int]) -> tuple[SimResult, dict[str, int]]:
    pools = cfg.pools_by_size
    if cfg.spillover.enabled:
        router: Any = PolicyRouter(pools, cfg.spillover)
    else:
        router = make_router("token-budget", [p.max_model_len for p in pools])
    res = simulate(
        inp.trace, _specs(inp, sizes), router, est_budget_tokens=inp.est_budget_tokens, seed=inp.seed
    )
    spills: dict[str, int] = {}
    if isinstance(router, PolicyRouter):
        for (src, dst, sig), n in router.spillover_counts().items():
            key = f"{src}->{dst} ({sig})"
            spills[key] = spills.get(key, 0) + n
    return res, spills


def run_fleet(inp: FleetInputs, cfg: RouterConfig, sizes: list[int], label: str) -> dict[str, Any]:
    """One joint run of ``cfg``'s policy at ``sizes`` (per ``pools_by_size``): a report row dict."""
    res, spills = _run(inp, cfg, sizes)
    return _row(inp, label, sizes, res, spills)


def _all_meet(res: SimResult, slo: Slo) -> bool:
    """Joint replays of the base trace are not steady-state runs: point P99 and halves only."""
    return all(meets_slo(b, slo, batch_bound=False) for b in res.summary()["pools"].values())


def _row(
    inp: FleetInputs, label: str, sizes: list[int], res: SimResult, spills: dict[str, int]
) -> dict[str, Any]:
    s = res.summary()
    f = s["fleet"]
    n = int(sum(max(1, x) for x in sizes))
    return {
        "label": label,
        "sizes": dict(
            zip([p.name for p in inp.config.pools_by_size], [max(1, x) for x in sizes], strict=True)
        ),
        "instances": n,
        "gpus": n * inp.profile.tp,
        "usd_per_year": annual_cost_usd(n, inp.profile),
        "p50_ttft_s": f["p50_ttft_s"],
        "p99_ttft_s": f["p99_ttft_s"],
        "pool_p99_ttft_s": {k: b["p99_ttft_s"] for k, b in s["pools"].items()},
        "pool_requests": {k: b["requests"] for k, b in s["pools"].items()},
        "preemptions_per_1000": f["preemptions_per_1000"],
        "rejection_rate": f["rejection_rate"],
        "slo_met": _all_meet(res, inp.slo),
        "spilled_requests": int(sum(spills.values())),
        "spilled_share": float(sum(spills.values())) / max(1, len(inp.trace)),
        "spills": spills,
    }


def _size_jointly(
    inp: FleetInputs, cfg: RouterConfig, start: list[int], progress: Progress | None
) -> list[int]:
    sizes = [max(1, x) for x in start]
    cache: dict[tuple[int, ...], bool] = {}

    def ok(sz: list[int]) -> bool:
        key = tuple(sz)
        if key not in cache:
            res, _ = _run(inp, cfg, sz)
            cache[key] = _all_meet(res, inp.slo)
            if progress is not None:
                progress(
                    f"  spillover sizing {dict(zip([p.name for p in cfg.pools_by_size], sz, strict=True))} -> {'ok' if cache[key] else 'miss'}"
                )
        return cache[key]

    if not ok(sizes):
        return sizes
    for i in range(len(sizes) - 1):
        hi = sizes[i]
        step = max(1, math.ceil(hi * 0.02))
        lo = hi
        while lo > 1:
            cand = max(1, lo - step)
            trial = [*sizes[:i], cand, *sizes[i + 1 :]]
            if ok(trial):
                hi = lo = cand
                step *= 2
            else:
                lo = cand
                break
        else:
            lo = hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if ok([*sizes[:i], mid, *sizes[i + 1 :]]):
                hi = mid
            else:
                lo = mid
        sizes[i] = hi
    return sizes


def _step_reporter(progress: Progress | None, label: str) -> Callable[[int, bool], None] | None:
    if progress is None:
        return None
    report = progress

    def step(k: int, good: bool) -> None:
        report(f"  {label}: {k} instances -> {'ok' if good else 'miss'}")

    return step


def plan_fleet(inp: FleetInputs, progress: Progress | None = None) -> dict[str, Any]:
    """Token-budget sizes of the config's pools, then spillover (configured + each sweep point)
    at those sizes and (``size_with_spillover``) sized with spillover on. JSON-ready dict."""
    cfg = inp.config
    pools = cfg.pools_by_size
    t = inp.trace
    budget = t.budget_tokens if inp.est_budget_tokens is None else inp.est_budget_tokens
    pool_of = np.full(len(t), len(pools) - 1, dtype=np.int64)
    total = t.total_tokens
    for i in range(len(pools) - 1, -1, -1):
        pool_of[np.asarray(budget <= pools[i].max_model_len)] = i
    # the pool that serves each request: a misrouted one is retried on the next larger pool that fits
    for i in range(len(pools) - 1):
        over = (pool_of == i) & np.asarray(total > pools[i].max_model_len)
        pool_of[over] = i + 1
    sizes: list[int] = []
    attainable = True
    for i, p in enumerate(pools):
        if inp.token_budget_sizes is not None:
            sizes = list(inp.token_budget_sizes)
            break
        mask = pool_of == i
        if not mask.any():
            sizes.append(1)
            continue
        sub = t.subset(mask)
        lam = t.rate_req_per_s * float(mask.mean())
        mix = mix_stats(sub.input_tokens, sub.output_tokens, inp.profile.chunk_tokens)
        start = size_pool_mgc(
            lam, inp.profile, p.max_model_len, mix, slo_ttft_p99_s=inp.slo.ttft_p99_s
        ).instances
        n, block = size_pool_des(
            sub,
            inp.profile,
            p.max_model_len,
            inp.slo,
            start_instances=start,
            seed=inp.seed,
            on_step=_step_reporter(progress, f"token-budget {p.name}"),
            period_s=base_period_s(t),
            lam_req_per_s=lam,
        )
        sizes.append(max(1, n))
        attainable = attainable and meets_slo(block, inp.slo)
    base_cfg = parse_config(
        {
            **cfg.model_dump(mode="json"),
            "spillover": {**cfg.spillover.model_dump(mode="json"), "enabled": False},
        }
    )
    res, sp = _run(inp, base_cfg, sizes)
    out: dict[str, Any] = {
        "pools": [{"name": p.name, "max_model_len": p.max_model_len} for p in pools],
        "token_budget": _row(inp, "token-budget (no spillover)", sizes, res, sp),
        "slo_attainable": attainable,
        "spillover": [],
    }
    settings: list[tuple[str, RouterConfig]] = []
    if cfg.spillover.enabled:
        settings.append(("router config", cfg))
    for s in inp.sweep:
        settings.append((s.label, spill_config(cfg, s, sizes)))
    for label, scfg in settings:
        if progress is not None:
            progress(f"spillover {label}: {describe_spillover(scfg)}")
        res, sp = _run(inp, scfg, sizes)
        entry: dict[str, Any] = {
            "label": label,
            "thresholds": describe_spillover(scfg),
            "at_token_budget_sizes": _row(inp, label, sizes, res, sp),
        }
        if inp.size_with_spillover and attainable:
            if not entry["at_token_budget_sizes"]["slo_met"]:
                entry["sizing_skipped"] = (
                    "spillover at this setting misses the SLO at the token-budget sizes (the pools it spills "
                    "into are overloaded); the downward search cannot help, so no spillover size is given"
                )
            else:
                sized = _size_jointly(inp, scfg, sizes, progress)
                res2, sp2 = _run(inp, scfg, sized)
                entry["sized"] = _row(inp, label, sized, res2, sp2)
        out["spillover"].append(entry)
    return out
