"""Route trace requests on the router's own token-budget estimates, replaying real prompt text.

Traces carry token counts but no text. Each trace request therefore borrows a real chat request
from ``shared/data/text`` (the corpus of :mod:`evaluation.corpus`, 13,932 requests whose
true prompt tokens per tokenizer are in ``shared/data/derived/request_token_counts.csv``). The
borrowed request is the one drawn (seeded) among the ``neighbours`` corpus requests whose true
prompt-token count is closest to the trace request's ``input_tokens``, so long trace requests
borrow long documents and short ones short chats.

The borrowed body (compact UTF-8 JSON, ``model`` = the served model name) is parsed by the
router's :func:`extproc.core.request.request_body.parse_request_body` once, and every trace request is then
decided by the router's own :func:`extproc.core.facade.decide` in arrival order, exactly as the
ext_proc server does for a request whose answer it reads (the exact estimate; store:
:meth:`extproc.core.estimate.calibration.InMemoryRatioStore.from_config`). After each request
:func:`extproc.core.facade.learn` learns from the true ``usage.prompt_tokens`` of the borrowed request
(the server's calibration path; feedback delay ignored). The pool choice is not used here: the
simulator routes the trace's own tokens (:mod:`planner.des.routers`), so the replay's router has one
pool as large as the configuration allows.

The estimate's relative error is carried over to the trace request:
``est_input = max(1, round(input_tokens · estimated / true))`` (tokens). The output reserve is the
trace's own output budget (the client's declared ``max_tokens``), as in :mod:`planner.des.plan`.

Imports only pure-Python parts of ``extproc`` (no gRPC).
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

from evaluation.corpus import (
    DEFAULT_BODY_MODEL,
    SOURCES,
    load_derived_counts,
    load_requests,
    request_body,
)
from extproc.config import CalibrationConfig, EstimatorConfig, PoolConfig, RouterConfig
from extproc.core.facade import CoreState, decide, learn
from extproc.core.learn.usage_reader import ResponseUsage
from extproc.core.request.endpoints import Endpoint, spec_of
from extproc.core.request.request_body import RequestFeatures, UnreadableRequest, parse_request_body
from planner.workload.trace import Trace, TraceError

__all__ = ["PromptCorpus", "ReplayStats", "load_prompt_corpus", "replay_estimates"]

TOKENIZERS = ("llama3", "qwen3", "cl100k")

REPLAY_POOL = PoolConfig(name="replay", max_model_len=16_777_216, header_value="replay")
"""The replay router's one pool: estimates are what the replay keeps, not pool choices."""


@dataclass(frozen=True)
class PromptCorpus:
    """Parsed real requests sorted by true prompt tokens (ascending).

    Attributes:
        features: parsed bodies (router's :class:`RequestFeatures`), aligned with ``prompt_tokens``.
        prompt_tokens: true templated prompt tokens of each request for ``tokenizer``.
        sources: corpus source id of each request (e.g. ``"lmsys"``).
        tokenizer: which ground-truth column was used.
        model: the ``model`` field of the bodies.
    """

    features: tuple[RequestFeatures, ...]
    prompt_tokens: tuple[int, ...]
    sources: tuple[str, ...]
    tokenizer: str
    model: str


@dataclass(frozen=True)
class ReplayStats:
    """Estimator replay summary: requests, mean and P1/P99 of ``estimated/true − 1``, share of
    underestimates, and how many trace requests used each corpus source."""

    requests: int
    mean_rel_error: float
    p1_rel_error: float
    p99_rel_error: float
    under_share: float
    by_source: dict[str, int]


def load_prompt_corpus(
    data_dir: str | Path,
    *,
    tokenizer: str = "llama3",
    model: str = DEFAULT_BODY_MODEL,
    sources: tuple[str, ...] = SOURCES,
) -> PromptCorpus:
    """Rebuild, serialise and parse the corpus of ``data_dir/text`` with its ground truth.

    Args:
        data_dir: the shared data directory (holds ``text/`` and ``derived/``).
        tokenizer: ground-truth column family: ``llama3``, ``qwen3`` or ``cl100k``.
        model: the ``model`` field written into every body (selects the router's framing profile).
        sources: corpus source ids to use (default: all of :data:`evaluation.corpus.SOURCES`).

    Raises:
        TraceError: the directory or a needed file is missing, or ``tokenizer`` is unknown.
    """
    if tokenizer not in TOKENIZERS:
        raise TraceError(f"unknown tokenizer {tokenizer!r}; choose from {', '.join(TOKENIZERS)}")
    root = Path(data_dir)
    try:
        requests = load_requests(root, sources)
        truth = load_derived_counts(root)
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise TraceError(f"prompt corpus not found under {root}: {exc}") from exc
    rows: list[tuple[int, str, RequestFeatures]] = []
    col = f"{tokenizer}_prompt_tokens"
    for req in requests:
        t = truth.get((req.source, req.req_id))
        if t is None or not t.get(col, "").isdigit() or int(t[col]) <= 0:
            continue
        try:
            feats = parse_request_body(request_body(req, model=model), "chat")
        except UnreadableRequest:
            continue
        rows.append((int(t[col]), req.source, feats))
    if not rows:
        raise TraceError(f"no usable requests with ground truth under {root}")
    rows.sort(key=lambda r: r[0])
    return PromptCorpus(
        features=tuple(r[2] for r in rows),
        prompt_tokens=tuple(r[0] for r in rows),
        sources=tuple(r[1] for r in rows),
        tokenizer=tokenizer,
        model=model,
    )


def replay_estimates(
    trace: Trace,
    corpus: PromptCorpus,
    *,
    seed: int,
    estimator: EstimatorConfig | None = None,
    calibration: CalibrationConfig | None = None,
    neighbours: int = 32,
) -> tuple[npt.NDArray[np.int64], ReplayStats]:
    """Estimated prompt tokens per trace request (shape ``(n,)``) and a :class:`ReplayStats`.

    ``estimator``/``calibration`` default to the router's defaults (``EstimatorConfig()``,
    ``CalibrationConfig()``); pass a router config's sections to replay exactly that router.
    Same trace, corpus, configs and seed -> same array.
    """
    est_cfg = estimator if estimator is not None else EstimatorConfig()
    cal_cfg = calibration if calibration is not None else CalibrationConfig()
    core = CoreState(
        RouterConfig.model_validate({"pools": [REPLAY_POOL], "estimator": est_cfg, "calibration": cal_cfg})
    )
    chat = spec_of(Endpoint.CHAT.value)
    rng = random.Random(seed)
    tokens = corpus.prompt_tokens
    m = len(tokens)
    k = max(1, min(neighbours, m))
    out = np.empty(len(trace), dtype=np.int64)
    rel = np.empty(len(trace), dtype=np.float64)
    by_source: dict[str, int] = {}
    for i, want in enumerate(trace.input_tokens.tolist()):
        pos = bisect.bisect_left(tokens, want)
        lo = min(max(0, pos - k // 2), m - k)
        j = lo + rng.randrange(k)
        true = tokens[j]
        decision = decide(core, corpus.features[j], chat, read=True, exact_estimate=True, clock=lambda: 0.0)
        learn(
            core,
            decision,
            ResponseUsage(true, None, None, ()),
            routed_pool=decision.pool,
            retried_to=None,
            retry_pending=False,
            clock=lambda: 0.0,
        )
        ratio = decision.budget.prompt_tokens / true
        rel[i] = ratio - 1.0
        out[i] = max(1, round(want * ratio))
        src = corpus.sources[j]
        by_source[src] = by_source.get(src, 0) + 1
    n = len(trace)
    stats = ReplayStats(
        requests=n,
        mean_rel_error=float(rel.mean()) if n else 0.0,
        p1_rel_error=float(np.percentile(rel, 1)) if n else 0.0,
        p99_rel_error=float(np.percentile(rel, 99)) if n else 0.0,
        under_share=float((rel < 0).mean()) if n else 0.0,
        by_source=dict(sorted(by_source.items())),
    )
    return out, stats
