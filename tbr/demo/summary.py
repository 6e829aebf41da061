"""The demo's report: where requests went, misroutes, learned ratios, estimate errors.

Definitions (all sizes in tokens, true counts from the serving pool's ``usage.prompt_tokens``):

* **true budget** = ``prompt_tokens + output reserve``, where the reserve is what the router
  reserved for the request (its decision record's ``output_reserve_tokens``: the request's
  ``max_tokens``, or the learned reserve of its output class), else the request's ``max_tokens`` or
  the router's ``default_output_reserve_tokens``.
* **harmful misroute**: sent to the short pool although over its limit: either the client saw the
  pool's refusal, or Envoy's misroute recovery retried it on the long pool (``retried_to_pool`` in
  the router's decision log; the client then got a 200). Before recovery existed:
  served by the short pool, which refused it (HTTP 400 from vLLM's
  ``max_model_len`` check).
* **wasteful misroute**: served by the long pool although its true budget fit the short pool.
* **truncated misroute**: answered 200 by a pool that cut the answer at its ``max_model_len``
  although a larger pool would have let it finish and the client's own maximum was not the limit
  (vLLM caps an answer at ``max_model_len − prompt`` silently, ``finish_reason: "length"``): the
  router's decision log says ``truncated: true`` (``extproc/core/learn/truncation.py``). Only answers the
  router read are judged (``calibration.sample_rate``, 1 in the demo).
* **estimate error** = ``(estimated_prompt_tokens − prompt_tokens) / prompt_tokens`` per request,
  joining the router's decision log on ``x-request-id``; negative = under-estimate (the risky side).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np

from tbr.demo.replay import Outcome

__all__ = ["SummaryInputs", "build_summary", "format_summary"]

PERCENTILES = (1, 5, 50, 95, 99)


@dataclass(frozen=True)
class SummaryInputs:
    """Everything the summary is computed from.

    Attributes:
        outcomes: one per request sent.
        decisions: router decision-log records by request_id.
        ratios: rows of the router's ``GET /ratios``.
        envoy_stats: Envoy's ext_proc filter counters (``…ext_proc.tbr.*``).
        short_max_model_len / long_max_model_len: the pools' limits.
        default_output_reserve_tokens: the router's reserve for requests without ``max_tokens``.
        data_source: human-readable origin of the prompts.
        builtin: True when the built-in sample was used.
        elapsed_s: wall time of the replay.
        concurrency: requests in flight.
    """

    outcomes: list[Outcome]
    decisions: dict[str, dict[str, Any]]
    ratios: list[dict[str, Any]]
    envoy_stats: dict[str, int]
    short_max_model_len: int
    long_max_model_len: int
    default_output_reserve_tokens: int
    data_source: str
    builtin: bool
    elapsed_s: float
    concurrency: int


def _pct(values: list[float]) -> dict[str, float] | None:
    if not values:
        return None
    arr = np.asarray(values, dtype=float)
    out = {f"p{p}": round(float(np.percentile(arr, p)), 2) for p in PERCENTILES}
    out["min"] = round(float(arr.min()), 2)
    out["max"] = round(float(arr.max()), 2)
    return out


def _true_prompt_tokens(o: Outcome, rec: dict[str, Any] | None) -> int | None:
    if o.prompt_tokens is not None:
        return o.prompt_tokens
    if rec is not None and isinstance(rec.get("prompt_tokens"), int):
        return int(rec["prompt_tokens"])
    return None


def build_summary(inp: SummaryInputs) -> dict[str, Any]:
    """Compute the summary as a JSON-ready dict (the same content :func:`format_summary` prints)."""
    by_pool: Counter[str] = Counter()
    by_pool_category: dict[str, Counter[str]] = defaultdict(Counter)
    statuses: Counter[str] = Counter()
    harmful: list[str] = []
    recovered: list[str] = []
    wasteful: list[str] = []
    wasteful_detail: list[dict[str, Any]] = []
    truncated: list[str] = []
    # routing vs truth for answered requests of known size: (fits short?, pool) -> count
    matrix: Counter[tuple[bool, str]] = Counter()
    near_boundary = 0
    over_all_pools: list[str] = []
    failed: list[str] = []
    unknown_size = 0
    errors_pct: list[float] = []
    errors_by_cat: dict[str, list[float]] = defaultdict(list)
    latency: dict[str, list[float]] = defaultdict(list)
    logged = 0
    for o in inp.outcomes:
        req = o.request
        pool = o.pool or "none"
        by_pool[pool] += 1
        statuses[str(o.status)] += 1
        rec = inp.decisions.get(req.request_id)
        # one vocabulary: the router's content kind (its decision record), else the workload's label
        kind = str(rec.get("category")) if rec and rec.get("category") else req.category
        by_pool_category[kind][pool] += 1
        logged += rec is not None
        if o.status == 0 or (o.status >= 400 and o.pool is None):
            failed.append(req.request_id)
            continue
        if o.status == 400 and o.pool == "short":
            harmful.append(req.request_id)
            continue
        if o.status == 400 and o.pool == "long":
            over_all_pools.append(req.request_id)
            continue
        if o.status >= 400:
            failed.append(req.request_id)
            continue
        if rec is not None and rec.get("truncated") is True:
            truncated.append(req.request_id)
        if rec is not None and rec.get("retried_to_pool"):
            # Routed short, refused there (over its limit), retried by Envoy on the next larger pool
            # (misroute recovery): the client got a 200, but the routing decision was harmful.
            recovered.append(req.request_id)
        latency[pool].append(o.latency_s * 1000.0)
        true_prompt = _true_prompt_tokens(o, rec)
        if true_prompt is None:
            unknown_size += 1
            continue
        logged_reserve = rec.get("output_reserve_tokens") if rec else None
        if isinstance(logged_reserve, int) and not isinstance(logged_reserve, bool):
            reserve = logged_reserve * max(1, _int(rec, "n_sequences"))  # the router's own reserve
        else:
            reserve = req.max_tokens if req.max_tokens is not None else inp.default_output_reserve_tokens
        true_budget = true_prompt + reserve
        fits_short = true_budget <= inp.short_max_model_len
        matrix[(fits_short, pool)] += 1
        near_boundary += inp.short_max_model_len / 2 < true_budget <= 2 * inp.short_max_model_len
        est = rec.get("estimated_prompt_tokens") if rec else None
        if o.pool == "long" and fits_short:
            wasteful.append(req.request_id)
            wasteful_detail.append(
                {
                    "request_id": req.request_id,
                    "category": req.category,
                    "router_category": rec.get("category") if rec else None,
                    "prompt_tokens": true_prompt,
                    "estimated_prompt_tokens": est,
                    "output_reserve_tokens": reserve,
                }
            )
        if isinstance(est, int) and true_prompt > 0:
            err = 100.0 * (est - true_prompt) / true_prompt
            errors_pct.append(err)
            errors_by_cat[kind].append(err)
    stats = inp.envoy_stats

    def stat(suffix: str) -> int:
        return sum(v for k, v in stats.items() if k.endswith(suffix))

    under = [e for e in errors_pct if e < 0]
    return {
        "data_source": inp.data_source,
        "builtin_sample": inp.builtin,
        "requests": len(inp.outcomes),
        "concurrency": inp.concurrency,
        "elapsed_s": round(inp.elapsed_s, 2),
        "requests_per_s": round(len(inp.outcomes) / inp.elapsed_s, 1) if inp.elapsed_s > 0 else None,
        "limits_tokens": {"short": inp.short_max_model_len, "long": inp.long_max_model_len},
        "default_output_reserve_tokens": inp.default_output_reserve_tokens,
        "http_status": dict(sorted(statuses.items())),
        "requests_per_pool": dict(sorted(by_pool.items())),
        "requests_per_category_and_pool": {
            c: dict(sorted(v.items())) for c, v in sorted(by_pool_category.items())
        },
        "harmful_misroutes": len(harmful) + len(recovered),
        "harmful_request_ids": harmful + recovered,
        "harmful_refused_to_client": len(harmful),
        "harmful_recovered_by_retry": len(recovered),
        "wasteful_misroutes": len(wasteful),
        "wasteful_detail": wasteful_detail,
        "truncated_misroutes": len(truncated),
        "truncated_request_ids": truncated,
        "routing_vs_truth": {
            "fits_short_sent_short": matrix[(True, "short")],
            "fits_short_sent_long": matrix[(True, "long")],
            "needs_long_sent_long": matrix[(False, "long")],
            "needs_long_sent_short_accepted": matrix[(False, "short")],
            "needs_long_sent_short_refused": len(harmful),
        },
        "near_boundary_requests": near_boundary,
        "over_every_pool_limit": len(over_all_pools),
        "failed_requests": len(failed),
        "failed_request_ids": failed,
        "unknown_true_size": unknown_size,
        "decisions_logged": logged,
        "estimate_error_pct": _pct(errors_pct),
        "estimate_error_samples": len(errors_pct),
        "under_estimates": len(under),
        "estimate_error_pct_by_category": {c: _pct(v) for c, v in sorted(errors_by_cat.items())},
        "latency_ms_by_pool": {p: _pct(v) for p, v in sorted(latency.items())},
        "learned_ratios": inp.ratios,
        "envoy_ext_proc": {
            "streams_started": stat(".streams_started"),
            "failure_mode_allowed": stat(".failure_mode_allowed"),
            "message_timeouts": stat(".message_timeouts"),
            "streams_failed": stat(".streams_failed"),
        },
        "envoy_pool_clusters": {k: v for k, v in sorted(stats.items()) if k.startswith("cluster.")},
    }


def _fmt_pct(p: dict[str, float] | None) -> str:
    if p is None:
        return "n/a"
    return "  ".join(f"{k} {v:+.1f}" for k, v in p.items() if k.startswith("p"))


def format_summary(s: dict[str, Any]) -> str:
    """Human-readable text of a :func:`build_summary` dict."""
    lines: list[str] = []
    add = lines.append
    add("=" * 78)
    add("Token Budget Router demo")
    add(f"prompts: {s['data_source']}")
    add(
        f"{s['requests']} requests, concurrency {s['concurrency']}, {s['elapsed_s']:.1f} s "
        f"({s['requests_per_s']} req/s); pools: short max_model_len {s['limits_tokens']['short']}, "
        f"long {s['limits_tokens']['long']}"
    )
    add(f"HTTP status: {s['http_status']}")
    add("")
    add("requests per pool: " + ", ".join(f"{p} {n}" for p, n in s["requests_per_pool"].items()))
    add("  content kind = the router's key kind for the request (docs/estimator.md §Content kinds)")
    add(f"  {'content kind':<14}" + "".join(f"{p:>8}" for p in s["requests_per_pool"]))
    for cat, counts in s["requests_per_category_and_pool"].items():
        add(f"  {cat:<14}" + "".join(f"{counts.get(p, 0):>8}" for p in s["requests_per_pool"]))
    add("")
    add(
        f"harmful misroutes (sent short but over its limit): {s['harmful_misroutes']}"
        f" ({s['harmful_refused_to_client']} reached the client as vLLM's 400,"
        f" {s['harmful_recovered_by_retry']} recovered by Envoy's retry on the long pool)"
    )
    add(
        f"wasteful misroutes (sent long, true prompt + reserve <= {s['limits_tokens']['short']}): "
        f"{s['wasteful_misroutes']}"
    )
    add(
        f"truncated misroutes (answer cut at the serving pool's max_model_len, a larger pool would "
        f"have let it finish): {s['truncated_misroutes']}"
    )
    rv = s["routing_vs_truth"]
    add(
        f"routing vs true budget: fits short → short {rv['fits_short_sent_short']}, → long "
        f"{rv['fits_short_sent_long']}; needs long → long {rv['needs_long_sent_long']}, → short "
        f"{rv['needs_long_sent_short_accepted'] + rv['needs_long_sent_short_refused']}"
    )
    add(
        f"requests with a true budget within ×2 of {s['limits_tokens']['short']} tokens: "
        f"{s['near_boundary_requests']}"
    )
    add(f"over every pool's limit (long pool 400): {s['over_every_pool_limit']}")
    add(f"failed requests (no pool answered): {s['failed_requests']}")
    if s["unknown_true_size"]:
        add(f"true size unknown (stream without usage): {s['unknown_true_size']}")
    add("")
    add(
        f"estimate error, % of true prompt tokens ({s['estimate_error_samples']} requests, "
        f"{s['under_estimates']} under-estimates):"
    )
    add(f"  all            {_fmt_pct(s['estimate_error_pct'])}")
    for cat, p in s["estimate_error_pct_by_category"].items():
        add(f"  {cat:<14} {_fmt_pct(p)}")
    add("")
    add("learned value per (model, content kind) from the router's GET /ratios:")
    add("  mean = learned modelled/true prompt tokens (1.0: the run-cost model is exact; below 1: the text")
    add("  costs more tokens than modelled); dev = its mean absolute deviation; routing = the conservative")
    add("  value the router divides the modelled tokens by now (prior blended in over the first samples);")
    add(
        "  samples = observations learned; warm = past warm-up (the learned value, not the cold prior, routes)"
    )
    add(f"  {'model':<24} {'kind':<12} {'mean':>7} {'dev':>7} {'routing':>8} {'samples':>8} warm")
    for r in s["learned_ratios"]:
        add(
            f"  {str(r.get('model'))[:24]:<24} {r.get('category')!s:<12} "
            f"{_num(r.get('mean_model_to_true_ratio')):>7} {_num(r.get('dev_model_to_true_ratio')):>7} "
            f"{_num(r.get('routing_model_to_true_ratio')):>8} {r.get('samples', ''):>8} {r.get('warm', '')}"
        )
    add("")
    e = s["envoy_ext_proc"]
    add(
        f"Envoy ext_proc: {e['streams_started']} streams, {e['failure_mode_allowed']} failed open, "
        f"{e['message_timeouts']} message timeouts"
    )
    trouble = {k: v for k, v in s["envoy_pool_clusters"].items() if v}
    if trouble:
        add(f"Envoy pool clusters: {trouble}")
    add("=" * 78)
    return "\n".join(lines)


def _int(rec: dict[str, Any] | None, key: str) -> int:
    """``rec[key]`` when it is an int, else 0."""
    v = rec.get(key) if rec else None
    return v if isinstance(v, int) and not isinstance(v, bool) else 0


def _num(v: Any) -> str:
    if isinstance(v, int | float) and math.isfinite(v):
        return f"{v:.3f}"
    return "-"
