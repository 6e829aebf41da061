"""``tbr demo --two-models``: one gateway, two models with different tokenizers (a Qwen3 pair and a
Llama-3 pair of stand-in pools, :mod:`devstack.model_stack`). The workload is split between the
models (alternating requests); each model's share is replayed with its own ``model`` name, at the
same time, and summarised on its own, with its pools shown as ``short``/``long``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx

from tbr.demo.replay import Outcome, replay
from tbr.demo.summary import SummaryInputs, build_summary
from tbr.demo.workload import DemoRequest

__all__ = ["ModelRun", "run_two_models", "split_by_model"]


@dataclasses.dataclass
class ModelRun:
    """What one model's share of the demo produced."""

    model: str
    pools: list[tuple[str, int]]
    outcomes: list[Outcome]


def split_by_model(requests: list[DemoRequest], models: list[str]) -> dict[str, list[DemoRequest]]:
    """Request ``i`` goes to model ``i mod len(models)`` (so each model sees every category)."""
    out: dict[str, list[DemoRequest]] = {m: [] for m in models}
    for i, req in enumerate(requests):
        out[models[i % len(models)]].append(req)
    return out


def _renamed(pools: list[tuple[str, int]]) -> dict[str, str]:
    """Pool names of one model → ``short`` / ``long`` (smallest / largest) for the summary."""
    names = [n for n, _ in pools]
    return {names[0]: "short", names[-1]: "long"}


def run_two_models(
    work_dir: Path,
    requests: list[DemoRequest],
    *,
    concurrency: int,
    reserve: int,
    data_source: str,
    builtin: bool,
    on_done: Callable[[Outcome], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """Start the two-model stack, replay, and return one demo summary per model.

    Raises:
        StartupError: the stack could not start.
    """
    from devstack.model_stack import ModelSetsStack, cluster_of
    from tbr.demo.decision_log import read_decisions

    with ModelSetsStack(work_dir) as stack:
        shares = split_by_model(requests, list(stack.models))

        async def both() -> list[list[Outcome]]:
            per = max(1, concurrency // len(shares))
            return list(
                await asyncio.gather(
                    *(
                        replay(stack.base_url, reqs, model=m, concurrency=per, on_done=on_done)
                        for m, reqs in shares.items()
                    )
                )
            )

        t0 = time.perf_counter()
        results = asyncio.run(both())
        elapsed = time.perf_counter() - t0
        runs = [ModelRun(m, stack.models[m], outs) for m, outs in zip(shares, results, strict=True)]
        answered = sum(o.pool is not None for r in runs for o in r.outcomes)
        decisions = read_decisions(stack.decision_log_path, answered)
        ratios = httpx.get(f"{stack.router_admin_url}/ratios", timeout=5.0).json()["ratios"]
        assert stack.envoy is not None
        ext_proc = stack.envoy.stats("ext_proc.tbr.")
        clusters = stack.envoy.stats(
            r"cluster\..*_pool\.upstream_(rq_5xx|rq_retry|cx_destroy_remote_with_active_rq|rq_pending_failure_eject|cx_connect_fail)$"
        )
    out: dict[str, dict[str, Any]] = {}
    for run in runs:
        names = _renamed(run.pools)
        outcomes = [dataclasses.replace(o, pool=names.get(o.pool or "", o.pool)) for o in run.outcomes]
        ids = {o.request.request_id for o in outcomes}
        recs = {}
        for rid, rec in decisions.items():
            if rid in ids:
                rec = dict(rec)
                rec["pool"] = names.get(str(rec.get("pool")), rec.get("pool"))
                if rec.get("retried_to_pool"):
                    rec["retried_to_pool"] = names.get(str(rec["retried_to_pool"]), rec["retried_to_pool"])
                recs[rid] = rec
        stats = dict(ext_proc)
        for pool, alias in names.items():
            prefix = f"cluster.{cluster_of(pool)}."
            stats.update(
                {
                    f"cluster.{alias}_pool." + k[len(prefix) :]: v
                    for k, v in clusters.items()
                    if k.startswith(prefix)
                }
            )
        summary = build_summary(
            SummaryInputs(
                outcomes=outcomes,
                decisions=recs,
                ratios=[r for r in ratios if r.get("model") == run.model],
                envoy_stats=stats,
                short_max_model_len=run.pools[0][1],
                long_max_model_len=run.pools[-1][1],
                default_output_reserve_tokens=reserve,
                data_source=data_source,
                builtin=builtin,
                elapsed_s=elapsed,
                concurrency=concurrency,
            )
        )
        summary["model"] = run.model
        summary["pools"] = {alias: pool for pool, alias in names.items()}
        out[run.model] = summary
    return out
