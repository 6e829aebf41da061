"""Evaluate the estimator on any JSONL of OpenAI request bodies, cold and online, per content kind.

Ground truth per body (what the stand-in pool and a vLLM server report as ``usage.prompt_tokens``):

* ``llama3`` / ``qwen3``: :class:`mockpool.tokencount.TokenCounter` — the messages as vLLM hands them to
  the template (:func:`mockpool.templates.normalize_messages`), the chat template with ``tools``,
  ``documents`` and ``chat_template_kwargs``, the real tokenizer; completions encode the prompt.
* ``cl100k`` / ``o200k``: OpenAI's cookbook count ``3 + Σ (3 + tokens(role) + tokens(content))`` with, per message,
  ``1 + tokens(name)``, the tokens of the JSON of ``tool_calls`` and of ``reasoning``/``reasoning_content``
  and ``tool_call_id``, plus the tokens of the ``tools`` JSON.

Each body is replayed as-is except ``model`` (the tokenizer's served model); bodies without
``max_tokens`` get the router's default reserve. ``cold`` never learns (priors only); ``online``
observes the true count after each request. A body's content kind is ``metadata.kind`` when given,
else the estimator's key kind.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.metrics import abs_error_percentiles, misroutes
from evaluation.replay import ReplayItem, ReplayResult, Strategy, run_strategy
from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.request.request_body import parse_request_body

__all__ = ["body_items", "body_truth", "evaluate_modes", "load_bodies", "render_modes"]


def load_bodies(path: str | Path) -> list[dict[str, Any]]:
    """Request bodies of a JSONL file (one JSON object per line; blank lines skipped).

    Raises:
        ValueError: a line is not a JSON object.
    """
    out: list[dict[str, Any]] = []
    with Path(path).open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            body = json.loads(line)
            if not isinstance(body, dict):
                raise ValueError(f"{path}:{n}: not a JSON object")
            out.append(body)
    return out


def _cookbook_counter(name: str, data_dir: Path) -> Callable[[dict[str, Any]], int]:
    from evaluation.groundtruth import load_counter

    text = load_counter(name, data_dir).count_text

    def count(body: dict[str, Any]) -> int:
        if "prompt" in body:
            p = body["prompt"]
            return sum(text(x) if isinstance(x, str) else len(x) for x in (p if isinstance(p, list) else [p]))
        n = 3
        for m in body.get("messages", ()):
            c = m.get("content")
            if isinstance(c, list):
                c = "\n".join(p.get("text", "") for p in c if isinstance(p, dict))
            n += 3 + text(str(m.get("role", ""))) + text(c or "")
            if isinstance(m.get("name"), str):
                n += 1 + text(m["name"])
            for field in ("tool_calls",):
                if m.get(field):
                    n += text(json.dumps(m[field], ensure_ascii=False))
            for field in ("reasoning", "reasoning_content", "tool_call_id"):
                if isinstance(m.get(field), str):
                    n += text(m[field])
        if body.get("tools"):
            n += text(json.dumps(body["tools"], ensure_ascii=False, separators=(",", ":")))
        return n

    return count


def body_truth(name: str, bodies: list[dict[str, Any]], data_dir: str | Path) -> list[int]:
    """True prompt tokens of each body for tokenizer ``name`` (module docstring).

    Raises:
        ValueError: ``name`` has no body-level ground truth here (``mistral``: only text messages of
            the shared data are counted, :mod:`evaluation.groundtruth`).
    """
    if name not in ("llama3", "qwen3", "cl100k", "o200k"):
        raise ValueError(f"no request-body ground truth for {name!r} (llama3, qwen3, cl100k, o200k)")
    if name in ("cl100k", "o200k"):
        count = _cookbook_counter(name, Path(data_dir))
        return [count(b) for b in bodies]
    from mockpool.tokencount import load_counter

    counter = load_counter("qwen3" if name == "qwen3" else "llama3")
    out: list[int] = []
    for b in bodies:
        if "prompt" in b:
            p = b["prompt"]
            items = p if isinstance(p, list) and p and not isinstance(p[0], int) else [p]
            out.append(max(counter.count_text(x, True) if isinstance(x, str) else len(x) for x in items))
            continue
        kwargs = dict(b.get("chat_template_kwargs") or {})
        if b.get("documents") is not None:
            kwargs["documents"] = b["documents"]
        out.append(counter.count_chat(b["messages"], b.get("tools"), True, kwargs).prompt_tokens)
    return out


def body_items(bodies: list[dict[str, Any]], truth: list[int], *, model: str, seed: int) -> list[ReplayItem]:
    """Bodies with ``model`` set, in a seeded order, parsed by the router's parser."""
    order = list(range(len(bodies)))
    random.Random(seed).shuffle(order)
    items: list[ReplayItem] = []
    for i in order:
        b = dict(bodies[i])
        b["model"] = model
        meta_value = b.get("metadata")
        meta: dict[str, Any] = meta_value if isinstance(meta_value, dict) else {}
        raw = json.dumps(b, ensure_ascii=False).encode()
        endpoint = "completions" if "prompt" in b else "chat"
        f = parse_request_body(raw, endpoint)
        kind = str(meta.get("kind", ""))
        items.append(ReplayItem(kind, str(meta.get("id", i)), raw, f, truth[i], f.max_output_tokens))
    return items


def _mode_block(res: ReplayResult, kinds: np.ndarray, thresholds: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind in ["all", *sorted(set(kinds.tolist()))]:
        mask = np.ones(len(kinds), dtype=bool) if kind == "all" else kinds == kind
        row: dict[str, Any] = {"n": int(mask.sum())}
        row["abs_error"] = abs_error_percentiles(res.est_prompt[mask], res.true_prompt[mask])
        signed = (res.est_prompt[mask] - res.true_prompt[mask]) / np.maximum(res.true_prompt[mask], 1)
        row["under_p01"] = float(np.percentile(signed, 1)) if mask.any() else 0.0
        for b in thresholds:
            m = misroutes(res, b, mask)
            row[str(b)] = (m.harmful, m.wasteful, m.harmful_rate, m.wasteful_rate)
        out[kind] = row
    return out


def evaluate_modes(
    items: list[ReplayItem], thresholds: list[int], estimator: EstimatorConfig | None = None
) -> dict[str, Any]:
    """``{"cold": ..., "online": ..., "worst": [...]}``: per-kind blocks of both modes and the ten
    largest online under-estimates."""
    est = estimator if estimator is not None else EstimatorConfig()
    out: dict[str, Any] = {}
    for mode, learns in (("cold", False), ("online", True)):
        res = run_strategy(items, Strategy(mode, est, CalibrationConfig(), learns=learns))
        kinds = np.array([it.source or cat for it, cat in zip(items, res.category, strict=True)])
        out[mode] = _mode_block(res, kinds, thresholds)
        if mode == "online":
            ratio = res.est_prompt / np.maximum(res.true_prompt, 1)
            worst = np.argsort(ratio)[:10]
            out["worst"] = [
                {
                    "kind": str(kinds[i]),
                    "id": items[i].req_id,
                    "true": int(res.true_prompt[i]),
                    "est": int(res.est_prompt[i]),
                    "key": res.category[i],
                }
                for i in worst.tolist()
            ]
    return out


def _fmt(cell: tuple[int, int, float, float]) -> str:
    return f"{cell[0]} ({100 * cell[2]:.2f}%) / {cell[1]} ({100 * cell[3]:.2f}%)"


def render_modes(title: str, result: dict[str, Any], thresholds: list[int], *, per_kind: bool = True) -> str:
    """Markdown of :func:`evaluate_modes`: overall per mode, per kind (online and cold), worst cases."""
    head = "|mode|kind|n|abs err p50 / p90 / p99|1st pct signed err|" + "|".join(
        f"B={b} harmful / wasteful" for b in thresholds
    )
    lines = [f"#### {title}", "", head + "|", "|" + "---|" * (5 + len(thresholds))]
    for mode in ("cold", "online"):
        for kind, row in result[mode].items():
            if kind != "all" and not per_kind:
                continue
            e = row["abs_error"]
            cells = [
                mode,
                kind,
                str(row["n"]),
                f"{e[0]:.3f} / {e[1]:.3f} / {e[2]:.3f}",
                f"{row['under_p01']:+.3f}",
            ]
            cells += [_fmt(row[str(b)]) for b in thresholds]
            lines.append("|" + "|".join(cells) + "|")
    if "worst" in result and per_kind:
        lines += ["", "Largest online under-estimates (est / true):", ""]
        lines += [
            f"- {w['kind']} #{w['id']} (key {w['key']}): {w['est']} / {w['true']} = {w['est'] / max(w['true'], 1):.2f}"
            for w in result["worst"]
        ]
    return "\n".join(lines) + "\n"


def render_seed_summary(report: dict[str, Any], thresholds: list[int]) -> str:
    """Markdown: per tokenizer and mode, harmful / wasteful at each threshold as the worst and the mean
    over the seeds of a ``tbr eval-estimator --corpus`` report (``{"tokenizers": {name: [per seed]}}``)."""
    head = "|tokenizer|mode|seeds|n|" + "|".join(
        f"B={b}: harmful worst (mean) / wasteful worst (mean)" for b in thresholds
    )
    lines = [head + "|", "|" + "---|" * (4 + len(thresholds))]
    for name, rows in report["tokenizers"].items():
        for mode in ("cold", "online"):
            cells = [name, mode, str(len(rows)), str(rows[0][mode]["all"]["n"])]
            for b in thresholds:
                h = [r[mode]["all"][str(b)][2] for r in rows]
                w = [r[mode]["all"][str(b)][3] for r in rows]
                cells.append(
                    f"{100 * max(h):.2f}% ({100 * sum(h) / len(h):.2f}%) / {100 * max(w):.2f}% ({100 * sum(w) / len(w):.2f}%)"
                )
            lines.append("|" + "|".join(cells) + "|")
    return "\n".join(lines) + "\n"
