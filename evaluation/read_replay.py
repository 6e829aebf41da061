"""Does the adaptive read decision learn as fast as reading every response? (issue 35, item 2)

The same seeded replay of real requests (:func:`evaluation.replay.build_items`, or the broad corpus's
bodies) through the router's own core, :func:`extproc.core.facade.decide` and
:func:`extproc.core.facade.learn` over a :class:`~extproc.core.facade.CoreState` of the shipped
configuration (config/router.yaml), twice from a cold start:

* ``read_all``: every response is read and learned from (``decide(read=True)``: the shipped
  default before issue 35);
* ``adaptive``: ``decide(read=None)`` takes the router's own read decision
  (:mod:`extproc.core.learn.read_decision`: routing by the byte bound where nobody reads the exact
  estimate, the cold / drift / output-class / truncation / floor reasons, the per-key read budget);
  only the answers it reads are learned from. Requests arrive at ``rate_rps`` on a virtual clock
  (the decision's budget is reads per key per second); the floor rate's draws are seeded.

What a read answer reports (:class:`~extproc.core.learn.usage_reader.ResponseUsage`) is what vLLM
would: ``prompt_tokens`` is the true count; ``completion_tokens`` the true length of the answer that
followed the request in its conversation (:func:`evaluation.output_pairs.load_output_pairs`: ShareGPT,
LMSYS-Chat-1M, MT-Bench, AlignBench, HumanEval; counted with the offline tokenizer, plus the stop
token), cut where vLLM cuts it: at the client's maximum, or at the serving pool's ``max_model_len −
prompt`` (``finish_reason: length``). A request whose source holds no answer (ShareGPT first turns,
WildChat-ru, MGSM, BFCL, LongBench v2, every body of the broad corpus) is answered as the router's
own defaults assume: its client maximum when it sent one (a capped answer), else
``estimator.default_output_reserve_tokens`` (:data:`NO_ANSWER`); the report counts those requests
(``answers_known``). A prompt that does not fit its pool at all is rejected there and retried by
Envoy to the next larger pool, which serves it (``learn(retried_to=…)``); one that fits no pool is
answered 400 and teaches nothing.

Both replays report, per tenth of the replay (the first tenth is the cold start), the mean
|routing estimate − true| / true of the exact estimate and the harmful / wasteful misroutes at each
threshold B (:func:`evaluation.metrics.misroutes`, on the prompt plus the output reserve the router
holds at that moment), the share of responses read and the reason of each decision. Deterministic
for a seed.

Run: ``python -m evaluation.read_replay --corpus shared`` (the repository's shared corpus, ground
truth from its derived counts) or ``--corpus <broad.jsonl>`` (bodies counted by the real tokenizer).
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import sys
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from evaluation.metrics import misroutes
from evaluation.replay import ReplayItem, ReplayResult
from extproc.config import RouterConfig, load_config
from extproc.core.facade import CoreState, Decision, decide, learn
from extproc.core.learn.usage_reader import ResponseUsage
from extproc.core.request.endpoints import spec_of

__all__ = [
    "NO_ANSWER",
    "SHIPPED_CONFIG",
    "ReadReplay",
    "compare",
    "load_answers",
    "render_rows",
    "replay_reads",
    "served_usage",
    "summarise_reads",
]

SHIPPED_CONFIG = Path(__file__).resolve().parents[1] / "config" / "router.yaml"
"""The configuration the replay's core is built from (pools, estimator, calibration, read policy)."""

NO_ANSWER = "default_output_reserve"
"""How a request without a known answer is answered (module docstring)."""

AnswerKey = tuple[str, str]
"""``(source, req_id)`` of a replayed request (:class:`~evaluation.replay.ReplayItem`)."""


@dataclass
class ReadReplay:
    """One replay: the arrays of :class:`~evaluation.replay.ReplayResult` plus what was read.

    Attributes:
        result: per-request arrays (exact estimate, true prompt, output reserve held).
        read: per request, whether its answer was read (bool array).
        reasons: decision reason → count (``read_all`` for the replay that reads everything).
        answers_known: requests whose true answer length was known.
        uncapped_answer_tokens: per request, the true answer length (tokens) of a request without a
            client maximum whose answer is known; −1 otherwise (int array).
    """

    result: ReplayResult
    read: np.ndarray
    reasons: dict[str, int]
    answers_known: int
    uncapped_answer_tokens: np.ndarray


def served_usage(
    prompt_tokens: int,
    answer_tokens: int,
    *,
    client_max_output_tokens: int | None,
    pool_max_model_len: int,
) -> ResponseUsage:
    """What vLLM reports for an answer of ``answer_tokens`` to a prompt of ``prompt_tokens``: the
    answer cut at the client's maximum or at the pool's room ``pool_max_model_len − prompt_tokens``
    (``finish_reason: length``), else whole (``stop``). One choice, no response id.

    Args:
        prompt_tokens: the true prompt count (tokens), below ``pool_max_model_len``.
        answer_tokens: the answer's full length (tokens, stop token included).
        client_max_output_tokens: the request's own maximum (tokens), None when absent.
        pool_max_model_len: the serving pool's ``max_model_len`` (tokens).
    """
    limit = pool_max_model_len - prompt_tokens
    if client_max_output_tokens is not None:
        limit = min(limit, client_max_output_tokens)
    completion = max(1, min(answer_tokens, limit))
    finish = "length" if answer_tokens >= limit else "stop"
    return ResponseUsage(prompt_tokens, completion, None, (finish,), None)


def _serving_pool(core: CoreState, decision: Decision, prompt_tokens: int) -> tuple[str | None, int]:
    """``(retried_to, its max_model_len)``: the pool that serves a request whose prompt may not fit
    the routed pool (vLLM rejects it; Envoy retries to the next larger pool)."""
    pool_len = core.pool_max_model_len_tokens[decision.pool]
    larger = core.models.next_larger(decision.pool)
    if prompt_tokens < pool_len or larger is None:
        return None, pool_len
    return larger.name, larger.max_model_len


def replay_reads(
    items: list[ReplayItem],
    answers: Mapping[AnswerKey, int],
    *,
    adaptive: bool,
    rate_rps: float = 100.0,
    seed: int = 0,
    config: RouterConfig | None = None,
) -> ReadReplay:
    """Replay ``items`` from a cold start through the core, reading every answer or those the adaptive
    decision reads (module docstring).

    Args:
        items: the requests, in arrival order.
        answers: true answer length (tokens) per ``(source, req_id)``; a missing key: no known answer.
        adaptive: take the router's read decision (else read every answer).
        rate_rps: requests per second on the virtual clock.
        seed: seeds the floor rate's draws.
        config: the router's configuration (the shipped one when None).
    """
    cfg = config if config is not None else load_config(SHIPPED_CONFIG)
    core = CoreState(cfg)
    est = core.estimator
    rng = random.Random(seed)
    default_answer = cfg.estimator.default_output_reserve_tokens
    n = len(items)
    true_prompt = np.zeros(n, dtype=np.int64)
    est_prompt = np.zeros(n, dtype=np.int64)
    central = np.zeros(n, dtype=np.int64)
    reserve = np.zeros(n, dtype=np.int64)
    read = np.zeros(n, dtype=bool)
    uncapped = np.full(n, -1, dtype=np.int64)
    categories: list[str] = []
    reasons: Counter[str] = Counter()
    known = 0
    for i, item in enumerate(items):
        now_s = i / rate_rps

        def clock(t: float = now_s) -> float:
            return t

        exact = est.estimate(item.features)
        true_prompt[i] = item.prompt_tokens
        est_prompt[i] = exact.prompt_tokens
        central[i] = exact.central_prompt_tokens
        reserve[i] = exact.output_reserve_tokens * exact.n_sequences
        categories.append(exact.key[1])
        d = decide(
            core,
            item.features,
            spec_of(item.features.endpoint),
            read=None if adaptive else True,
            exact_estimate=False,
            draw=rng.random,
            clock=clock,
        )
        reasons[d.read_reason or "read_all"] += 1
        answer = answers.get((item.source, item.req_id))
        known += answer is not None
        if answer is not None and item.max_tokens is None:
            uncapped[i] = answer
        if not d.read:
            continue
        read[i] = True
        retried_to, served_len = _serving_pool(core, d, item.prompt_tokens)
        if item.prompt_tokens >= served_len:
            continue  # no pool holds the prompt: vLLM answers 400, nothing to learn
        if answer is None:
            answer = item.max_tokens if item.max_tokens is not None else default_answer
        usage = served_usage(
            item.prompt_tokens,
            answer,
            client_max_output_tokens=item.max_tokens,
            pool_max_model_len=served_len,
        )
        learn(
            core,
            d,
            usage,
            routed_pool=d.pool,
            retried_to=retried_to,
            retry_pending=retried_to is not None,
            clock=clock,
        )
    result = ReplayResult(
        "adaptive" if adaptive else "read_all",
        categories,
        categories,
        true_prompt,
        est_prompt,
        central,
        reserve,
        np.zeros(n, dtype=bool),
        np.zeros(n, dtype=np.int64),
        np.zeros(n, dtype=np.int64),
        {},
    )
    return ReadReplay(result, read, dict(reasons), known, uncapped)


def summarise_reads(rr: ReadReplay, thresholds: list[int], windows: int = 10) -> dict[str, Any]:
    """Share read, reasons, and per tenth of the replay: mean |estimate − true| / true of the routing
    (conservative) estimate (``window_abs_err``) and of the central one (``window_central_abs_err``:
    the learned mean ratio's accuracy), the share of known answers without a client maximum longer
    than the output reserve held for them (``window_over_reserve``: the output learner's state), and
    misroutes per B."""
    res = rr.result
    n = len(res.true_prompt)
    edges = np.linspace(0, n, windows + 1).astype(int)
    err = np.abs(res.est_prompt - res.true_prompt) / np.maximum(res.true_prompt, 1)
    out: dict[str, Any] = {
        "n": n,
        "read_share": float(rr.read.mean()) if n else 0.0,
        "reasons": dict(sorted(rr.reasons.items())),
        "answers_known": rr.answers_known,
    }
    central = np.abs(res.central_prompt - res.true_prompt) / np.maximum(res.true_prompt, 1)
    known = rr.uncapped_answer_tokens >= 0
    over = known & (rr.uncapped_answer_tokens > res.reserve)
    pairs = list(itertools.pairwise(edges))
    out["window_abs_err"] = [float(err[a:b].mean()) if b > a else 0.0 for a, b in pairs]
    out["window_central_abs_err"] = [float(central[a:b].mean()) if b > a else 0.0 for a, b in pairs]
    out["window_over_reserve"] = [
        float(over[a:b].sum() / known[a:b].sum()) if known[a:b].any() else 0.0 for a, b in pairs
    ]
    out["misroutes"] = {}
    for b in thresholds:
        rows = []
        for lo, hi in pairs:
            mask = np.zeros(n, dtype=bool)
            mask[lo:hi] = True
            m = misroutes(res, b, mask)
            rows.append([m.harmful, m.wasteful])
        whole = misroutes(res, b, np.ones(n, dtype=bool))
        out["misroutes"][str(b)] = {"per_window": rows, "harmful": whole.harmful, "wasteful": whole.wasteful}
    return out


def load_answers(data: str | Path, tokenizer: str = "llama3") -> dict[AnswerKey, int]:
    """True answer lengths (tokens) per ``(source, req_id)`` of the shared corpus's conversations
    that hold the answer (:func:`evaluation.output_pairs.load_output_pairs`, the offline Llama-3
    tokenizer: the derived prompt counts are Llama-3's; other tokenizers have no answers).

    Raises:
        OSError: a needed file is missing.
    """
    if tokenizer != "llama3":
        return {}
    from tokenizers import Tokenizer

    from evaluation.output_pairs import load_output_pairs

    tok = Tokenizer.from_file(str(Path(data) / "tokenizers" / "llama3" / "tokenizer.json"))
    return {(p.source, p.req_id): p.output_tokens for p in load_output_pairs(data, tok)}


def _items(corpus: str, data: str, tokenizer: str, seed: int, limit: int) -> list[ReplayItem]:
    from evaluation.groundtruth import SERVED_MODELS

    model = SERVED_MODELS[tokenizer]
    if corpus == "shared":
        from evaluation.corpus import load_derived_counts, load_requests
        from evaluation.replay import build_items

        requests = load_requests(data)
        derived = load_derived_counts(data)
        truth = [int(derived[(r.source, r.req_id)][f"{tokenizer}_prompt_tokens"]) for r in requests]
        return build_items(requests, truth, model=model, seed=seed, limit=limit)
    from evaluation.broad import body_items, body_truth, load_bodies

    bodies = load_bodies(corpus)
    items = body_items(bodies, body_truth(tokenizer, bodies, data), model=model, seed=seed)
    return items[:limit] if limit else items


def compare(
    corpus: str,
    data: str,
    *,
    tokenizer: str = "llama3",
    seed: int = 0,
    limit: int = 0,
    rates: tuple[float, ...] = (10.0, 100.0, 1000.0),
    thresholds: tuple[int, ...] = (2048, 4096, 8192),
) -> dict[str, Any]:
    """Read-all against the adaptive decision at each of ``rates`` (req/s) on ``corpus`` ('shared' or
    a JSONL of bodies, which holds no answers): ``{"corpus", "tokenizer", "seed", "read_all":
    summary, "adaptive_<r>rps": summary, ...}`` (:func:`summarise_reads`).

    Raises:
        OSError, ValueError, KeyError: the corpus or its ground truth cannot be loaded.
    """
    items = _items(corpus, data, tokenizer, seed, limit)
    answers = load_answers(data, tokenizer) if corpus == "shared" else {}
    report: dict[str, Any] = {"corpus": corpus, "tokenizer": tokenizer, "seed": seed}
    report["read_all"] = summarise_reads(replay_reads(items, answers, adaptive=False), list(thresholds))
    for rate in rates:
        rr = replay_reads(items, answers, adaptive=True, rate_rps=rate, seed=seed)
        report[f"adaptive_{rate:g}rps"] = summarise_reads(rr, list(thresholds))
    return report


def render_rows(report: dict[str, Any]) -> list[str]:
    """Markdown rows ``| corpus | reads | share read | error first tenth | tenths 2–5 | tenths 6–10 |
    central error first tenth / tenths 6–10 | answers over reserve first tenth / tenths 6–10 |
    misroutes harmful/wasteful per B |`` of one :func:`compare` report."""
    rows = []
    name = "repository" if report["corpus"] == "shared" else Path(report["corpus"]).name

    def late(w: list[float]) -> float:
        return sum(w[5:]) / max(len(w[5:]), 1)

    for key, v in report.items():
        if not (isinstance(v, dict) and "read_share" in v):
            continue
        reads = (
            "every response"
            if key == "read_all"
            else f"adaptive, {key.split('_')[1].removesuffix('rps')} req/s"
        )
        w, c, o = v["window_abs_err"], v["window_central_abs_err"], v["window_over_reserve"]
        mis = " / ".join(f"{m['harmful']}/{m['wasteful']}" for m in v["misroutes"].values())
        over = f"{o[0]:.1%} / {late(o):.1%}" if v["answers_known"] else "no answers"
        rows.append(
            f"| {name} ({v['n']:,}) | {reads} | {v['read_share']:.1%} | {w[0]:.1%} | "
            f"{sum(w[1:5]) / max(len(w[1:5]), 1):.1%} | {late(w):.1%} | {c[0]:.1%} / {late(c):.1%} | "
            f"{over} | {mis} |"
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    """Print read-all against adaptive as JSON (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--corpus", default="shared", help="'shared' or a JSONL of request bodies")
    ap.add_argument("--data", default="../shared/data", help="shared data directory")
    ap.add_argument("--tokenizer", default="llama3")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--rates", default="10,100,1000", help="request rates (req/s) of the adaptive replays")
    ap.add_argument("--thresholds", default="2048,4096,8192")
    args = ap.parse_args(argv)
    try:
        report = compare(
            args.corpus,
            args.data,
            tokenizer=args.tokenizer,
            seed=args.seed,
            limit=args.limit,
            rates=tuple(float(x) for x in args.rates.split(",")),
            thresholds=tuple(int(x) for x in args.thresholds.split(",")),
        )
    except (OSError, ValueError, KeyError) as exc:
        print(f"error: cannot load {args.corpus}: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(report, indent=1))
    print("\n".join(render_rows(report)), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
