"""Text rendering of :func:`planner.des.fleet.plan_fleet` results (for ``tbr plan``/``tbr simulate``)."""

from __future__ import annotations

from typing import Any

__all__ = ["format_fleet", "format_rows"]


def _s(x: float | None) -> str:
    return "-" if x is None else f"{x:.3f}"


def format_rows(rows: list[dict[str, Any]], pool_names: list[str]) -> list[str]:
    """One line per fleet row (label, instances per pool, GPUs, $/yr, P50/P99 TTFT, spilled share, SLO)."""
    head = "/".join(pool_names)
    out = [
        f"{'configuration':<56}{head:>20}{'GPUs':>7}{'$/yr':>14}{'P50 TTFT':>10}{'P99 TTFT':>10}"
        f"{'spilled':>9}{'reject':>8}  SLO"
    ]
    for r in rows:
        sizes = "/".join(str(r["sizes"][n]) for n in pool_names)
        out.append(
            f"{r['label'][:56]:<56}{sizes:>20}{r['gpus']:>7}{r['usd_per_year']:>14,.0f}{_s(r['p50_ttft_s']):>10}"
            f"{_s(r['p99_ttft_s']):>10}{r['spilled_share']:>9.2%}{r['rejection_rate']:>8.4f}  {'met' if r['slo_met'] else 'MISSED'}"
        )
    return out


def format_fleet(fleet: dict[str, Any], homogeneous: dict[str, Any] | None = None) -> list[str]:
    """The fleet section of ``tbr plan``: token-budget sizes, then each spillover setting at those
    sizes and sized with spillover on."""
    names = [p["name"] for p in fleet["pools"]]
    lines = [
        "router-config fleet: "
        + ", ".join(f"{p['name']} (max_model_len {p['max_model_len']})" for p in fleet["pools"])
    ]
    rows = [fleet["token_budget"]]
    for e in fleet["spillover"]:
        a = dict(e["at_token_budget_sizes"], label=f"{e['label']}, token-budget sizes")
        rows.append(a)
        if "sized" in e:
            rows.append(dict(e["sized"], label=f"{e['label']}, sized with spillover"))
    lines += format_rows(rows, names)
    for e in fleet["spillover"]:
        lines.append(f"  {e['label']}: {e['thresholds']}")
        if "sizing_skipped" in e:
            lines.append(f"    not sized: {e['sizing_skipped']}")
    if not fleet["slo_attainable"]:
        lines.append("  WARNING: a pool misses the SLO at the search cap; spillover sizing skipped")
    if homogeneous is not None:
        tb = fleet["token_budget"]
        lines.append(
            f"  vs homogeneous {homogeneous['gpus']} GPUs: token-budget fleet {tb['gpus']} GPUs "
            f"({1 - tb['gpus'] / homogeneous['gpus']:.1%} fewer)"
        )
    return lines
