"""Replay real requests through the router's own parser, estimator and calibration.

Each request is serialised as a real OpenAI body (with the served model's name and a drawn
``max_tokens``), parsed by :func:`extproc.core.request.request_body.parse_request_body` and estimated by
:class:`extproc.core.estimate.estimator.Estimator` exactly as the ext_proc server does; after each request the
estimator observes the true ``usage.prompt_tokens`` (the server's calibration path). Ground truth
comes from :mod:`evaluation.groundtruth`.

Output reserves (stated distribution, :class:`ReserveDistribution`): with probability
``p_absent`` the body has no ``max_tokens`` (the router's ``default_output_reserve_tokens``
applies); otherwise ``max_tokens`` is log-uniform on ``[low, high]`` (integer). The true total is
``true prompt tokens + reserve``: the reserve is the client's declared budget, known exactly, so
misroutes measure prompt estimation alone. ``ascii_share`` of the bodies use Python's default
ASCII-escaped serialisation, the rest compact UTF-8.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from evaluation.baselines.bytes_model import BytesModel, BytesModelConfig, classifier_sample
from evaluation.corpus import ReplayRequest, request_body
from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.request.request_body import RequestFeatures, parse_request_body

__all__ = [
    "SOURCE_GROUPS",
    "ReplayItem",
    "ReplayResult",
    "ReserveDistribution",
    "Strategy",
    "build_items",
    "run_strategy",
]

SOURCE_GROUPS: dict[str, str] = {
    "sharegpt_multiturn": "chat_en",
    "sharegpt_first_turn": "chat_en",
    "lmsys": "chat_en",
    "mt_bench_en": "chat_en",
    "wildchat_ru": "ru",
    "alignbench_zh": "zh",
    "mt_bench_ja": "ja",
    "mt_bench_ko": "ko",
    "humaneval": "code",
    "bfcl": "tools",
    "longbench_v2": "long_doc",
}
"""Reporting group of each source; MGSM sources report as ``mgsm_<lang>``."""


def source_group(source: str) -> str:
    """Reporting group of a source id (see :data:`SOURCE_GROUPS`)."""
    return SOURCE_GROUPS.get(source, source)


@dataclass(frozen=True, slots=True)
class ReserveDistribution:
    """The output-reserve and serialisation mix of the replay (see module docstring)."""

    p_absent: float = 0.2
    low: int = 16
    high: int = 8192
    ascii_share: float = 0.3

    def draw(self, rng: random.Random) -> tuple[int | None, bool]:
        """``(max_tokens or None, ascii_escaped)`` for one request."""
        max_tokens: int | None = None
        if rng.random() >= self.p_absent:
            max_tokens = round(math.exp(rng.uniform(math.log(self.low), math.log(self.high))))
        return max_tokens, rng.random() < self.ascii_share


@dataclass(frozen=True, slots=True)
class ReplayItem:
    """One replayed request: its real body, the parsed features and the ground truth."""

    source: str
    req_id: str
    body: bytes
    features: RequestFeatures
    prompt_tokens: int
    max_tokens: int | None


def build_items(
    requests: list[ReplayRequest],
    prompt_tokens: list[int],
    *,
    model: str,
    seed: int,
    reserves: ReserveDistribution | None = None,
    limit: int = 0,
) -> list[ReplayItem]:
    """Serialise, shuffle (seeded) and parse the requests.

    Args:
        requests: the requests, aligned with ``prompt_tokens`` (ground truth).
        model: the ``model`` field of every body.
        seed: seeds the order, the reserves and the serialisations.
        reserves: the reserve distribution (defaults when None).
        limit: keep only the first ``limit`` requests of the seeded order (0 = all).
    """
    dist = reserves if reserves is not None else ReserveDistribution()
    rng = random.Random(seed)
    order = list(range(len(requests)))
    rng.shuffle(order)
    draws = [dist.draw(rng) for _ in order]
    if limit > 0:
        order, draws = order[:limit], draws[:limit]
    items: list[ReplayItem] = []
    for i, (max_tokens, ascii_escaped) in zip(order, draws, strict=True):
        req = requests[i]
        body = request_body(req, model=model, max_tokens=max_tokens, ascii_escaped=ascii_escaped)
        features = parse_request_body(body, "chat")
        items.append(ReplayItem(req.source, req.req_id, body, features, prompt_tokens[i], max_tokens))
    return items


@dataclass(frozen=True, slots=True)
class Strategy:
    """A named estimator configuration to replay (ours or a baseline).

    ``estimator``/``calibration`` configure the router's own :class:`Estimator`; ``bytes_model``,
    when set, costs the prompt text with the ``bytes`` baseline instead
    (:mod:`evaluation.baselines.bytes_model`; framing, media and output reserve still come from the
    router's estimator); ``body_ratio``, when set, replaces both with ``ceil(len(body) /
    body_ratio)`` (the naive static baseline).
    """

    name: str
    estimator: EstimatorConfig = field(default_factory=EstimatorConfig)
    calibration: CalibrationConfig = field(default_factory=CalibrationConfig)
    body_ratio: float | None = None
    learns: bool = True
    bytes_model: BytesModelConfig | None = None


@dataclass(slots=True)
class ReplayResult:
    """Per-request arrays (aligned with the items) of one strategy's replay."""

    strategy: str
    category: list[str]
    group: list[str]
    true_prompt: np.ndarray
    est_prompt: np.ndarray
    central_prompt: np.ndarray
    reserve: np.ndarray
    warm: np.ndarray
    modelled_units: np.ndarray
    fixed: np.ndarray
    trajectories: dict[str, list[float]]
    """Per category: the learned central ratio ĉ after each observation (convergence)."""

    def true_total(self) -> np.ndarray:
        """True prompt + reserve per request."""
        return np.asarray(self.true_prompt + self.reserve)

    def est_total(self) -> np.ndarray:
        """Estimated prompt + reserve per request (what the router compares with B)."""
        return np.asarray(self.est_prompt + self.reserve)


def run_strategy(
    items: list[ReplayItem], strategy: Strategy, *, progress: Callable[[int], None] | None = None
) -> ReplayResult:
    """Replay ``items`` in order through ``strategy`` (estimate, then observe the truth)."""
    cal = strategy.calibration
    est = Estimator(estimator=strategy.estimator, calibration=cal, store=InMemoryRatioStore.from_config(cal))
    baseline = BytesModel(strategy.bytes_model, est) if strategy.bytes_model is not None else None
    n = len(items)
    true_prompt = np.zeros(n, dtype=np.int64)
    est_prompt = np.zeros(n, dtype=np.int64)
    central = np.zeros(n, dtype=np.int64)
    reserve = np.zeros(n, dtype=np.int64)
    warm = np.zeros(n, dtype=bool)
    modelled_units = np.zeros(n, dtype=np.int64)
    fixed = np.zeros(n, dtype=np.int64)
    categories: list[str] = []
    groups: list[str] = []
    traj: dict[str, list[float]] = {}
    for i, item in enumerate(items):
        if baseline is not None:
            budget = baseline.estimate(item.features, classifier_sample(item.body, baseline.cfg.sample_bytes))
        else:
            budget = est.estimate(item.features)
        true_prompt[i] = item.prompt_tokens
        reserve[i] = budget.output_reserve_tokens * budget.n_sequences
        categories.append(budget.key[1])
        groups.append(source_group(item.source))
        modelled_units[i] = budget.modelled_units
        fixed[i] = budget.fixed_prompt_tokens
        if strategy.body_ratio is not None:
            est_prompt[i] = central[i] = math.ceil(len(item.body) / strategy.body_ratio)
            continue
        est_prompt[i] = budget.prompt_tokens
        central[i] = budget.central_prompt_tokens
        warm[i] = budget.warm
        if strategy.learns:
            learner = baseline if baseline is not None else est
            obs = learner.observe(budget, item.prompt_tokens)
            if obs is not None:
                traj.setdefault(obs.key[1], []).append(obs.state.mean_ratio)
        if progress is not None and i % 1000 == 0:
            progress(i)
    return ReplayResult(
        strategy.name,
        categories,
        groups,
        true_prompt,
        est_prompt,
        central,
        reserve,
        warm,
        modelled_units,
        fixed,
        traj,
    )
