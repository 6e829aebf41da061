"""Arguments and trace preparation shared by the planner's `tbr` subcommands."""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from extproc.config import RouterConfig, load_config
from planner.des.fleet import SpillSetting, parse_spill_sweep
from planner.model.profiles import ADMISSION_MODES, PROFILES, PoolProfile, with_admission
from planner.workload.trace import NormalizationReport, Trace, merge_traces, normalize
from planner.workload.trace_loaders import load_trace

__all__ = [
    "add_router_config_args",
    "add_trace_args",
    "base_profile_from_args",
    "load_normalized",
    "load_router_config",
    "non_negative_float",
    "positive_float",
    "positive_int",
    "profile_arg",
    "profile_from_args",
    "replay_for",
]


def add_trace_args(p: argparse.ArgumentParser) -> None:
    """``--trace`` (repeatable: traces are merged by arrival time), ``--format``, rate and size options."""
    p.add_argument("--trace", action="append", required=True, help="trace file (repeat to merge several)")
    p.add_argument(
        "--format",
        choices=["azure", "mooncake", "burstgpt", "cdf", "decision-log"],
        default=None,
        help="trace format; None = detected from the file's first line",
    )
    p.add_argument(
        "--rate",
        type=positive_float,
        default=None,
        help="time-scale arrivals to this mean rate, req/s; None = the trace's own rate",
    )
    p.add_argument(
        "--min-requests",
        type=_positive_int,
        default=60_000,
        help="tile the trace (or draw from a CDF) up to this many requests: the base trace; "
        "`plan` then runs each pool for its own steady-state length",
    )
    p.add_argument(
        "--max-requests",
        type=_positive_int,
        default=None,
        help="truncate to this many requests; None = no truncation",
    )
    p.add_argument(
        "--clip-max-total-tokens",
        type=_positive_int,
        default=None,
        help="clip input + output of each request, tokens",
    )
    p.add_argument("--seed", type=int, default=0, help="seed of CDF synthesis and p2c load balancing")
    p.add_argument(
        "--profile",
        choices=sorted(PROFILES),
        default="llama3-70b-a100",
        help="model + GPU profile of one instance (planner/model/profiles.py)",
    )
    p.add_argument(
        "--profile-file",
        default=None,
        metavar="JSON",
        help="read the instance profile from a file (planner/model/profile_file.py; replaces --profile)",
    )
    p.add_argument(
        "--price-usd-per-gpu-h",
        type=non_negative_float,
        default=None,
        help="override the profile's $/GPU-hour",
    )
    p.add_argument(
        "--gpus-per-instance",
        type=_positive_int,
        default=None,
        help="override the profile's GPUs per instance (tp)",
    )
    p.add_argument(
        "--kv-capacity-tokens",
        type=_positive_int,
        default=None,
        help="override the profile's KV tokens per instance",
    )
    p.add_argument(
        "--admission",
        choices=ADMISSION_MODES,
        default="vllm",
        help="how an instance admits work: vllm = its scheduler (max_num_seqs cap, KV blocks on demand, "
        "recompute preemption, max_num_batched_tokens with chunked prefill); paper = floor(KV / "
        "max_model_len) slots, as if every sequence held a whole context of KV",
    )
    p.add_argument(
        "--max-num-seqs",
        type=_positive_int,
        default=None,
        help="vLLM max_num_seqs per instance; None = vLLM 0.32's default for the profile's GPU "
        "(A100: 256, H100: 1024, MI300X: 1024) under --admission vllm, the profile's cap under paper",
    )
    p.add_argument(
        "--max-num-batched-tokens",
        type=_positive_int,
        default=None,
        help="vLLM's per-iteration token budget (decodes + prefill chunks); None = vLLM 0.32's default "
        "for the GPU under --admission vllm (A100: 2048, H100: 8192, MI300X: 16384), off under paper",
    )


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be positive: {v}")
    return v


positive_int = _positive_int
"""argparse type: an integer ≥ 1 (a usage error otherwise, exit 2, one line)."""


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (``inf``, ``nan``, 0 and negatives are usage errors)."""
    v = _finite(text)
    if v <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0: {text}")
    return v


def non_negative_float(text: str) -> float:
    """argparse type: a finite number ≥ 0."""
    v = _finite(text)
    if v < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0: {text}")
    return v


def _finite(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"must be a finite number: {text}")
    return v


def profile_arg(name: str, max_num_batched_tokens: int | None = None) -> PoolProfile:
    """Profile by name (argparse already restricted the choices), optionally with vLLM's
    ``max_num_batched_tokens`` enforced (see :mod:`planner.des`)."""
    prof = PROFILES[name]
    if max_num_batched_tokens is not None:
        prof = replace(prof, max_num_batched_tokens=max_num_batched_tokens)
    return prof


def base_profile_from_args(args: argparse.Namespace) -> PoolProfile:
    """``--profile-file`` (else ``--profile``) with ``--price-usd-per-gpu-h``, ``--gpus-per-instance``
    and ``--kv-capacity-tokens`` applied, before any admission. Raises ``ValueError`` on a bad file."""
    path = getattr(args, "profile_file", None)
    if path:
        from planner.model.profile_file import load_profile_file

        prof = load_profile_file(path)
    else:
        prof = PROFILES[args.profile]
    changes = {
        "price_usd_per_gpu_h": getattr(args, "price_usd_per_gpu_h", None),
        "tp": getattr(args, "gpus_per_instance", None),
        "kv_capacity_tokens": getattr(args, "kv_capacity_tokens", None),
    }
    given = {k: v for k, v in changes.items() if v is not None}
    return replace(prof, **given) if given else prof


def profile_from_args(args: argparse.Namespace, admission: str | None = None) -> PoolProfile:
    """:func:`base_profile_from_args` under ``--admission`` (or ``admission``) with ``--max-num-seqs`` /
    ``--max-num-batched-tokens`` (:func:`planner.model.profiles.with_admission`). Raises ``ValueError`` on a
    bad profile file."""
    return with_admission(
        base_profile_from_args(args),
        admission or str(getattr(args, "admission", "paper")),
        max_num_seqs=getattr(args, "max_num_seqs", None),
        max_num_batched_tokens=getattr(args, "max_num_batched_tokens", None),
    )


def load_normalized(args: argparse.Namespace) -> tuple[Trace, NormalizationReport]:
    """Load every ``--trace``, merge them by arrival, then apply the requested normalisations."""
    traces = []
    reports = []
    for path in args.trace:
        t, r = load_trace(
            path, args.format, n_requests=args.min_requests, rate_req_per_s=args.rate or 1.0, seed=args.seed
        )
        traces.append(t)
        reports.append(r)
    if len(traces) == 1:
        trace, report = traces[0], reports[0]
    else:
        trace, how = merge_traces(traces)
        report = NormalizationReport(
            source=" + ".join(r.source for r in reports),
            fmt="+".join(r.fmt for r in reports),
            rows_read=sum(r.rows_read for r in reports),
        )
        for r in reports:
            for k, v in r.dropped.items():
                report.drop(k, v)
        report.notes.append(how)
        report.rate_before_req_per_s = trace.rate_req_per_s
    trace = normalize(
        trace,
        report,
        target_rate_req_per_s=args.rate if report.fmt != "cdf" else None,
        min_requests=args.min_requests if report.fmt != "cdf" else None,
        max_requests=args.max_requests,
        clip_max_total_tokens=args.clip_max_total_tokens,
    )
    return trace, report


def fmt_s(x: float | None) -> str:
    """Seconds with 3 decimals, or '-'."""
    return "-" if x is None else f"{x:.3f}"


def eprint(msg: str) -> None:
    """Progress line on stderr."""
    print(msg, file=sys.stderr, flush=True)


def add_router_config_args(p: argparse.ArgumentParser) -> None:
    """``--router-config`` (the router's YAML: pools + spillover + estimator) and ``--spill-sweep``."""
    p.add_argument(
        "--router-config",
        default=None,
        metavar="YAML",
        help="simulate the router's own pools[] and spillover: (e.g. config/router-3pools.yaml)",
    )
    p.add_argument(
        "--spill-sweep",
        action="append",
        default=[],
        metavar="KNOB=V1,V2",
        help="spillover threshold sweep, KNOB in max_inflight_per_pool|max_waiting|max_kv_cache_usage; "
        "a value ending in /inst is per instance of each pool (repeatable)",
    )


def load_router_config(args: argparse.Namespace) -> tuple[RouterConfig | None, list[SpillSetting]]:
    """The ``--router-config`` (validated by the router's own loader) and the parsed sweep.

    Raises ``ValueError`` (incl. ``extproc.config.ConfigError``) on a bad file or sweep.
    """
    cfg = load_config(args.router_config) if args.router_config else None
    sweep = [s for text in args.spill_sweep for s in parse_spill_sweep(text)]
    return cfg, sweep


def replay_for(
    args: argparse.Namespace, trace: Trace, report: NormalizationReport, cfg: RouterConfig | None
) -> npt.NDArray[np.int64] | None:
    """Estimated prompt tokens from ``--estimator-replay DATA_DIR`` (None without it).

    Uses the router config's ``estimator:``/``calibration:`` when given, else the router defaults.
    Raises :class:`TraceError` when the corpus is missing.
    """
    if not args.estimator_replay:
        return None
    from planner.des.estimator_replay import load_prompt_corpus, replay_estimates

    prof = base_profile_from_args(args)
    tok = args.replay_tokenizer
    if tok == "auto":
        tok = "qwen3" if "qwen" in prof.model.lower() else "llama3"
    model = "Qwen/Qwen3-235B-A22B" if tok == "qwen3" else "meta-llama/Llama-3.1-8B-Instruct"
    eprint(f"estimator replay: parsing the prompt corpus under {args.estimator_replay} ({tok}) ...")
    corpus = load_prompt_corpus(args.estimator_replay, tokenizer=tok, model=model)
    est, stats = replay_estimates(
        trace,
        corpus,
        seed=args.seed,
        estimator=cfg.estimator if cfg else None,
        calibration=cfg.calibration if cfg else None,
    )
    report.notes.append(
        f"routing on the router's estimates (extproc.core.estimate.estimator) replaying {len(corpus.features)} real prompts "
        f"({tok} ground truth): prompt-token error mean {stats.mean_rel_error:+.1%}, P1 {stats.p1_rel_error:+.1%}, "
        f"P99 {stats.p99_rel_error:+.1%}, underestimates {stats.under_share:.1%}"
    )
    return est
