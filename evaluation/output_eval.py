"""Replay real answer lengths through the router's output reserve (issue 30; docs/estimator.md §Output half).

For each threshold B (the short pool's ``max_model_len``; the long pool holds
``long_max_model_len_tokens``) every request is replayed in order:

1. the prompt estimate: the router's own :class:`~extproc.core.estimate.estimator.Estimator` on the real body
   (conversation pairs), or the trace's true prompt count (traces have no text);
2. the reserve: what the router reserves for a request without ``max_tokens`` under the reserve
   being evaluated (``learned`` online or ``cold``, ``fixed:N``, ``oracle`` = the true answer);
3. routed short when the budget fits B: ``prompt_est + reserve`` for a fixed reserve, a client's
   maximum or the oracle; for a learned reserve the router's
   :func:`~extproc.core.estimate.output_reserve.learned_total_tokens` (the reserve added to the central
   prompt estimate, the conservative prompt estimate with ``min_reserve_tokens``; one sequence);
4. outcomes: *truncated* when routed short and the true answer does not fit (``prompt + output >
   B``: vLLM stops at ``max_model_len``), every answer the short pool cuts; *harmful* when routed
   short although the true prompt itself leaves less than ``min(reserve, min_reserve_tokens)``
   (vLLM refuses it); *wasteful* when ``true prompt + reserve ≤ B`` but routed long (the prompt
   estimate's margin);
5. ``online``: the learner then observes the answer: its full length, or, when truncated, the
   ``B − prompt`` tokens the short pool produced, as a truncation (censored).

α = share of requests routed short; ideal α = share whose true ``prompt + output ≤ B`` (an oracle
knowing both halves). Every B is a separate replay (truncations steer the learner).
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from evaluation.corpus import request_body
from evaluation.output_pairs import OutputPair
from evaluation.reasoning_lengths import ReasoningAnswer
from extproc.config import CalibrationConfig, EstimatorConfig, OutputReserveConfig
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.estimate.output_reserve import (
    OutputClassKey,
    OutputLengthLearner,
    learned_total_tokens,
    output_class_of,
    prompt_band_of,
)
from extproc.core.request.request_body import RequestFeatures, parse_request_body

__all__ = [
    "LONG_MAX_MODEL_LEN_TOKENS",
    "OutputItem",
    "OutputOutcome",
    "build_output_items",
    "reasoning_items",
    "replay_output",
    "with_client_max",
]

LONG_MAX_MODEL_LEN_TOKENS = 65536
"""The long pool of the replay (config/router.yaml's long pool)."""

PAIRS_BODY_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
"""The ``model`` of the conversation bodies (their true prompt counts are Llama-3's)."""


@dataclass(frozen=True, slots=True)
class OutputItem:
    """One replayed request: its output class inputs, its prompt estimate and the truth."""

    source: str
    model_key: str
    features: RequestFeatures | None
    endpoint: str
    prompt_tokens: int
    prompt_est_tokens: int
    output_tokens: int
    reasoning: str = "off"
    """The reasoning label of requests without a body (traces, reasoning answers)."""
    max_tokens: int | None = None
    """The client's maximum (``max_tokens``), None when absent (:func:`with_client_max`)."""
    prompt_central_tokens: int = 0
    """The prompt estimate with the central ratio (``TokenBudget.central_prompt_tokens``); 0 = the
    same as ``prompt_est_tokens`` (traces: their true count)."""


@dataclass(slots=True)
class OutputOutcome:
    """Counts of one replay at one threshold (rates over ``n``)."""

    threshold_tokens: int
    reserve: str
    n: int = 0
    short: int = 0
    ideal_short: int = 0
    truncated: int = 0
    harmful: int = 0
    wasteful: int = 0
    reserve_sum: float = 0.0
    per_class: dict[str, int] = field(default_factory=dict)

    @property
    def alpha(self) -> float:
        """Share of requests routed short."""
        return self.short / self.n if self.n else 0.0

    @property
    def ideal_alpha(self) -> float:
        """Share whose true prompt + output fits B."""
        return self.ideal_short / self.n if self.n else 0.0

    @property
    def alpha_ratio(self) -> float:
        """α / ideal α (1.0 when the ideal is 0)."""
        return self.alpha / self.ideal_alpha if self.ideal_short else 1.0

    @property
    def truncation_rate(self) -> float:
        """Truncated / requests."""
        return self.truncated / self.n if self.n else 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready counts and rates."""
        return {
            "threshold_tokens": self.threshold_tokens,
            "reserve": self.reserve,
            "n": self.n,
            "alpha": self.alpha,
            "ideal_alpha": self.ideal_alpha,
            "alpha_ratio": self.alpha_ratio,
            "truncated": self.truncated,
            "truncation_rate": self.truncation_rate,
            "harmful": self.harmful,
            "wasteful": self.wasteful,
            "mean_reserve_tokens": self.reserve_sum / self.n if self.n else 0.0,
        }


def build_output_items(
    pairs: Sequence[OutputPair],
    *,
    seed: int | None,
    estimate_prompts: bool,
    model_key: str | None = None,
) -> list[OutputItem]:
    """Items of the replay, in a seeded shuffled order (``seed`` None: the given order, e.g. a
    trace's arrivals).

    Args:
        pairs: requests with their true counts.
        estimate_prompts: run the router's prompt estimator on each request's real body (pairs with
            text); False = the true prompt count is the estimate (traces).
        model_key: the model (deployment) every request goes to; None = one per source (each
            source's answers come from its own models).
    """
    order = list(range(len(pairs)))
    if seed is not None:
        random.Random(seed).shuffle(order)
    est: Estimator | None = None
    if estimate_prompts:
        cal = CalibrationConfig()
        est = Estimator(
            estimator=EstimatorConfig(), calibration=cal, store=InMemoryRatioStore.from_config(cal)
        )
    items: list[OutputItem] = []
    for i in order:
        p = pairs[i]
        features: RequestFeatures | None = None
        prompt_est = central = p.prompt_tokens
        if p.request is not None:
            if p.endpoint == "completions":
                import orjson

                body = orjson.dumps({"model": PAIRS_BODY_MODEL, "prompt": p.request.messages[0]["content"]})
                features = parse_request_body(body, "completions")
            else:
                features = parse_request_body(request_body(p.request, model=PAIRS_BODY_MODEL), "chat")
            if est is not None:
                budget = est.estimate(features)
                prompt_est = budget.prompt_tokens
                central = budget.central_prompt_tokens or prompt_est
                est.observe(budget, p.prompt_tokens)  # the prompt learner learns as in the router
        key = model_key if model_key is not None else p.source
        items.append(
            OutputItem(
                p.source,
                key,
                features,
                p.endpoint,
                p.prompt_tokens,
                prompt_est,
                p.output_tokens,
                prompt_central_tokens=central,
            )
        )
    return items


def reasoning_items(
    answers: Sequence[ReasoningAnswer], *, seed: int, open_weights_only: bool = True
) -> list[OutputItem]:
    """Items of the reasoning-model answers (:mod:`evaluation.reasoning_lengths`) in a seeded order:
    one model key per model, reasoning ``on`` (their default), the prompt count as its estimate."""
    rows = [a for a in answers if a.open_weights or not open_weights_only]
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    return [
        OutputItem(
            "reasoning",
            rows[i].model,
            None,
            "chat",
            rows[i].prompt_tokens,
            rows[i].prompt_tokens,
            rows[i].completion_tokens,
            "on",
        )
        for i in order
    ]


def _class(item: OutputItem, learner: OutputLengthLearner) -> OutputClassKey:
    if item.features is not None:
        return output_class_of(
            item.features,
            item.model_key,
            item.prompt_est_tokens,
            band_edges_tokens=learner.cfg.prompt_band_edges_tokens,
            model_reasons=learner.model_reasons(item.features.model),
        )
    band = prompt_band_of(item.prompt_est_tokens, learner.cfg.prompt_band_edges_tokens)
    return OutputClassKey(item.model_key, item.endpoint, item.reasoning, False, band)


def with_client_max(
    items: Sequence[OutputItem], share: float, *, seed: int, low: int = 16, high: int = 8192
) -> list[OutputItem]:
    """The items with a client maximum on ``share`` of them (seeded): ``max_tokens`` log-uniform on
    ``[low, high]``, the distribution of ``tbr eval-estimator``'s replay
    (:class:`evaluation.replay.ReserveDistribution`)."""
    rng = random.Random(seed)
    out = []
    for item in items:
        m = None
        if rng.random() < share:
            m = round(math.exp(rng.uniform(math.log(low), math.log(high))))
        out.append(dataclasses.replace(item, max_tokens=m))
    return out


def _budget(
    item: OutputItem, reserve_tokens: int, *, learned: bool, policy: str, min_reserve_tokens: int
) -> tuple[int, int]:
    """``(reserve, routing budget)`` of one item as :meth:`Estimator.budget_for` computes them: a
    client maximum is the reserve (``strict``) or caps it (``risk``); a learned reserve's budget is
    :func:`~extproc.core.estimate.output_reserve.learned_total_tokens`, any other ``prompt_est + reserve``."""
    r = reserve_tokens
    if item.max_tokens is not None:
        learned = learned and policy == "risk" and r < item.max_tokens
        r = item.max_tokens if policy == "strict" else min(r, item.max_tokens)
    if learned:
        total = learned_total_tokens(
            item.prompt_est_tokens, item.prompt_central_tokens, r, min_reserve_tokens=min_reserve_tokens
        )
        return r, total
    return r, item.prompt_est_tokens + r


def replay_output(
    items: Sequence[OutputItem],
    threshold_tokens: int,
    reserve: str,
    *,
    config: OutputReserveConfig | None = None,
    long_max_model_len_tokens: int = LONG_MAX_MODEL_LEN_TOKENS,
    policy: str = "strict",
) -> OutputOutcome:
    """Replay ``items`` at B = ``threshold_tokens`` under ``reserve`` (module docstring).

    A request with a client maximum answers ``min(output, max_tokens)`` tokens (capped answers are
    learned as censored) and reserves the maximum (``policy`` ``strict``) or the smaller of the
    maximum and ``reserve``'s value (``risk``).

    Args:
        reserve: ``online`` (learned, observing every answer), ``cold`` (the learner's priors,
            never observing), ``fixed:N`` (N tokens for every request) or ``oracle`` (the true answer).
        config: the learner's settings (default :class:`OutputReserveConfig` with ``learned``).
        policy: ``strict`` or ``risk`` (requests with a client maximum).

    Raises:
        ValueError: unknown ``reserve`` or ``policy``.
    """
    cfg = config if config is not None else OutputReserveConfig(learned=True)
    learner = OutputLengthLearner(cfg)
    fixed: int | None = None
    if reserve.startswith("fixed:"):
        fixed = int(reserve.removeprefix("fixed:"))
    elif reserve not in ("online", "cold", "oracle"):
        raise ValueError(f"unknown reserve {reserve!r}: online, cold, fixed:N or oracle")
    if policy not in ("strict", "risk"):
        raise ValueError(f"unknown policy {policy!r}: strict or risk")
    out = OutputOutcome(threshold_tokens, reserve)
    b = threshold_tokens
    floor = cfg.min_reserve_tokens
    for item in items:
        key = _class(item, learner)
        room = max(1, long_max_model_len_tokens - item.prompt_est_tokens)
        answer = item.output_tokens if item.max_tokens is None else min(item.output_tokens, item.max_tokens)
        capped = item.max_tokens is not None and item.output_tokens >= item.max_tokens
        if reserve == "oracle":
            fixed = answer
        r = fixed if fixed is not None else learner.reserve_tokens(key, max_reserve_tokens=room)
        r, total = _budget(item, r, learned=fixed is None, policy=policy, min_reserve_tokens=floor)
        out.n += 1
        out.reserve_sum += r
        short = total <= b
        true_fits = item.prompt_tokens + r <= b
        ideal = item.prompt_tokens + answer <= b
        out.ideal_short += ideal
        truncated = False
        if short:
            out.short += 1
            if item.prompt_tokens + min(r, floor) > b:
                out.harmful += 1  # the prompt itself leaves no room: vLLM refuses it
            elif not ideal:
                truncated = True
                out.truncated += 1
                name = f"{key.model}|{key.endpoint}|{key.reasoning}|{int(key.tools)}|{key.prompt_band}"
                out.per_class[name] = out.per_class.get(name, 0) + 1
        elif true_fits:
            out.wasteful += 1
        if reserve == "online":
            if truncated:
                learner.observe(key, max(1, b - item.prompt_tokens), truncated=True)
            else:
                learner.observe(key, answer, truncated=False, capped=capped)
    return out
