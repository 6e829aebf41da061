"""Markdown tables of an evaluation summary (what ``tbr eval-estimator`` prints)."""

from __future__ import annotations

from typing import Any

__all__ = ["render_markdown", "render_seeds", "render_sweep"]


def _pct(x: float) -> str:
    return f"{100.0 * x:.2f}%"


def _mis(block: dict[str, Any], thresholds: list[int]) -> list[str]:
    cells = []
    for b in thresholds:
        m = block["misroutes"][str(b)]
        cells.append(
            f"{m['harmful']} ({_pct(m['harmful_rate'])}) / {m['wasteful']} ({_pct(m['wasteful_rate'])})"
        )
    return cells


def _err(block: dict[str, Any], key: str = "abs_error") -> str:
    e = block[key]
    return f"{e['p50']:.3f} / {e['p90']:.3f} / {e['p99']:.3f}"


def render_markdown(tokenizer: str, summary: dict[str, Any], thresholds: list[int]) -> str:
    """Overall table per strategy, per-category and per-group tables of ``ours``, hindsight check."""
    th = " | ".join(f"B={b}: harmful / wasteful" for b in thresholds)
    sep = "|---" * (4 + len(thresholds)) + "|"
    lines = [
        f"### Tokenizer `{tokenizer}` ({summary['n']} requests)",
        "",
        "|strategy|prompt abs err p50 / p90 / p99|central p90|err p90 (≥1000 tok)|" + th + "|",
        sep,
    ]
    for name, s in summary["strategies"].items():
        o = s["overall"]
        lines.append(
            f"|{name}|{_err(o)}|{o['abs_error_central']['p90']:.3f}|{o['abs_error_large']['p90']:.3f}|"
            + "|".join(_mis(o, thresholds))
            + "|"
        )
    ours = summary["strategies"].get("ours")
    if ours is not None:
        lines += [
            "",
            "Per router category (`ours`; convergence = requests of the category until ĉ stays within 5 % of its final value):",
            "",
            "|category|n|abs err p50 / p90 / p99|convergence|final ĉ (modelled ÷ true tokens)|" + th + "|",
            "|---" * (5 + len(thresholds)) + "|",
        ]
        for cat, blk in ours["per_category"].items():
            final = blk["final_ratio"]
            lines.append(
                f"|{cat}|{blk['n']}|{_err(blk)}|{blk['convergence_requests']}|"
                + (f"{final:.3f}" if final is not None else "–")
                + "|"
                + "|".join(_mis(blk, thresholds))
                + "|"
            )
        lines += ["", "Per source group (`ours`):", "", "|group|n|abs err p50 / p90 / p99|" + th + "|"]
        lines.append("|---" * (3 + len(thresholds)) + "|")
        for g, blk in ours["per_group"].items():
            lines.append(f"|{g}|{blk['n']}|{_err(blk)}|" + "|".join(_mis(blk, thresholds)) + "|")
    for name, s in summary["strategies"].items():
        if name == "ours" or "per_category" not in s:
            continue
        lines += [
            "",
            f"Per router category (`{name}`):",
            "",
            "|category|n|abs err p50 / p90 / p99|" + th + "|",
        ]
        lines.append("|---" * (3 + len(thresholds)) + "|")
        for cat, blk in s["per_category"].items():
            lines.append(f"|{cat}|{blk['n']}|{_err(blk)}|" + "|".join(_mis(blk, thresholds)) + "|")
    h = summary.get("hindsight")
    if h and h.get("n"):
        lines += [
            "",
            f"Hindsight check (target 3; n = {h['n']} requests after warm-up with true prompt ≥ 1000 tokens; "
            "p90 of |est − true| / true of prompt tokens):",
            "",
            "|estimate|p90 abs err|over best fixed (hindsight)|",
            "|---|---:|---:|",
            f"|best fixed per-category ratio, hindsight|{h['p90_hindsight']:.4f}|1.00×|",
            f"|learner, central ratio ĉ (**the target metric**)|{h['p90_learner_central']:.4f}|"
            f"**{h['central_over_hindsight']:.2f}×**|",
            f"|fixed per-category weighted α = {h['quantile']} quantile, hindsight|"
            f"{h['p90_hindsight_conservative']:.4f}|"
            f"{h['p90_hindsight_conservative'] / h['p90_hindsight']:.2f}×|",
            f"|learner, routing ratio c* = ĉ·exp(q)|{h['p90_learner_routing']:.4f}|"
            f"{h['routing_over_hindsight']:.2f}× ({h['routing_over_hindsight_conservative']:.2f}× "
            "the hindsight quantile)|",
        ]
    pri = summary.get("priors")
    if pri:
        lines += [
            "",
            "Cold-start priors from this replay (1st percentile of per-request c_obs, rounded down to 0.1; "
            "compare the cold corrections in `extproc/core/text/run_costs.json`):",
            "",
            "|" + "|".join(pri) + "|",
            "|" + "---:|" * len(pri),
            "|" + "|".join(f"{v:.1f}" for v in pri.values()) + "|",
        ]
    return "\n".join(lines) + "\n"


def render_sweep(tokenizer: str, rows: list[dict[str, Any]], thresholds: list[int]) -> str:
    """One row per swept value: misroutes per B, overall p90 and the hindsight ratios."""
    th = "|".join(f"B={b} harmful / wasteful" for b in thresholds)
    lines = [
        f"### Sweep, tokenizer `{tokenizer}` (one parameter at a time around the defaults; "
        "`paper` rows: the paper's c* = ĉ − γσ̂ frontier)",
        "",
        "|strategy|param|value|err p90|" + th + "|central/hindsight|routing/hindsight|",
        "|---" * (6 + len(thresholds)) + "|",
    ]
    for r in rows:
        cells = []
        for b in thresholds:
            m = r["misroutes"][str(b)]
            cells.append(f"{m['harmful']} ({_pct(m['harmful_rate'])}) / {_pct(m['wasteful_rate'])}")
        h = r.get("hindsight") or {}
        c = h.get("central_over_hindsight")
        rt = h.get("routing_over_hindsight")
        lines.append(
            f"|{r['strategy']}|{r['param']}|{r['value']}|{r['abs_error']['p90']:.3f}|"
            + "|".join(cells)
            + (f"|{c:.2f}|{rt:.2f}|" if c is not None and rt is not None else "|–|–|")
        )
    return "\n".join(lines) + "\n"


def render_seeds(tokenizer: str, rows: list[dict[str, Any]], thresholds: list[int]) -> str:
    """Defaults per seed: harmful / wasteful per B, central and routing p90 over hindsight."""
    th = "|".join(f"B={b} harmful / wasteful" for b in thresholds)
    lines = [
        f"### Defaults across seeds, tokenizer `{tokenizer}`",
        "",
        "|seed|n|" + th + "|central ĉ p90 / hindsight|routing c* p90 / hindsight|",
        "|---" * (4 + len(thresholds)) + "|",
    ]
    for r in rows:
        h = r["hindsight"]
        lines.append(
            f"|{r['seed']}|{r['n']}|"
            + "|".join(_mis(r, thresholds))
            + f"|{h['p90_learner_central']:.4f} / {h['p90_hindsight']:.4f} = **{h['central_over_hindsight']:.2f}×**"
            + f"|{h['p90_learner_routing']:.4f} / {h['p90_hindsight']:.4f} = {h['routing_over_hindsight']:.2f}×|"
        )
    return "\n".join(lines) + "\n"
