"""The output half of the token budget: learn how long answers are, per class of request.

``L_total = prompt_tokens_est + n · output_reserve`` (docs/method.md §2). A request without a client
maximum (``max_completion_tokens`` / ``max_tokens`` / ``max_output_tokens``) reserves the learned high
quantile of its **output class** (:class:`OutputClassKey`: model, endpoint, reasoning, tools, prompt
band; why these: docs/estimator.md §Output half). The router learns each class's answer lengths from
the ``usage.completion_tokens`` it already reads, and how often a pool cut an answer short.

**What a class keeps** (:class:`OutputLengthState`): a histogram of answer lengths on a log scale
(``BINS_PER_OCTAVE`` = 8 bins per doubling, 1 to 2^18 tokens) with exponential forgetting (an
observation's weight falls to 1/e after ``horizon_observations`` answers of the class). Its quantile
is read at the upper edge of the bin where the weight above falls to the tail share. Until the class
has ``prior_weight`` answers' worth of weight, the reserve is the geometric blend
``q_prior^(1−w) · q_learned^w`` with ``w = weight / prior_weight`` of its cold prior's quantile
(:data:`OUTPUT_PRIORS`) and its own (the prompt learner's ramp from prior to learned,
docs/estimator.md §Learning): a few answers cannot undo the prior. Every answer also teaches the
class's **parent**, the same class over all prompt bands (``prompt_band`` = :data:`ALL_BANDS`); a band
class ramps from its parent's quantile rather than from the cold prior once the parent has learned,
so a rarely seen band starts from what its model has shown, not from the published prior.

**Censored answers.** An answer cut short (``finish_reason: "length"``, truncated by a pool or capped
by the client) is at least ``completion_tokens`` long; its weight is spread over the bins above that
length in proportion to the weight they already hold plus the class's prior probability (Efron's
redistribution to the right, the Kaplan–Meier estimator's step; B. Efron, "The two sample problem with
censored data", 1967), or, when nothing lies above, put at twice the length.

**Bounded steps.** The reserve a class routes with moves towards its histogram quantile by at most
×/÷ (1 + ``max_step``) per observation of the class, so no single answer (or a burst of odd ones)
moves it far; a class with no observation routes on its prior's quantile.

**The truncation budget.** A class's quantile level is ``1 − tail_share``. A truncation needs an
answer above the reserve *and* beyond the free room of the pool that served it (``max_model_len −
prompt``), so the truncation rate is far below the tail share. One tail share λ for all classes is the
best split of a fleet-wide budget: a request is routed short when its risk ``P(answer > B − prompt |
class)`` is at most λ, so the requests routed short are those of lowest risk, whatever their class
(each request routed short counts once in α and adds its risk to the expected truncations, so for a
given expected number of truncations the most requests go short when they are taken in order of risk;
this assumes each class's histogram is its true distribution). A controller steers λ so that the
observed truncation rate stays under ``truncation_budget``: each truncation multiplies λ by
``exp(−controller_step)``, each untruncated answer by ``exp(controller_step · t / (1 − t))`` with
``t = controller_margin · truncation_budget`` (they balance when truncations are ``t`` of the answers:
a stochastic-approximation controller, the quantile tracker's pinball step applied to the truncation
indicator), within ``[min_tail_share, max_tail_share]``. ``controller_scope: class`` gives each class
(and each all-bands parent) its own λ and controller instead (measured worse: docs/estimator.md).

Everything here is pure (no I/O, no clock): the same observations in the same order give the same
reserves. Shared state (Redis) and snapshots use :meth:`OutputLengthState.to_dict` /
:meth:`OutputLengthState.from_dict`, :func:`encode_class_key` / :func:`decode_class_key`,
:meth:`OutputLengthLearner.items`, :meth:`OutputLengthLearner.restore` and
:meth:`OutputLengthLearner.merge`.
"""

from __future__ import annotations

import itertools
import math
import operator
import re
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from extproc.config.estimation import DEFAULT_REASONING_MODEL_PATTERNS, OutputReserveConfig
from extproc.core.request.request_body import RequestFeatures

__all__ = [
    "ALL_BANDS",
    "BINS_PER_OCTAVE",
    "DEFAULT_PROMPT_BAND_EDGES_TOKENS",
    "N_BINS",
    "OUTPUT_PRIORS",
    "UNJUDGED_REASONS",
    "OutputClassKey",
    "OutputLengthLearner",
    "OutputLengthState",
    "OutputPrior",
    "bin_of",
    "bin_upper_tokens",
    "decode_class_key",
    "encode_class_key",
    "learned_total_tokens",
    "output_class_of",
    "prior_class_of",
    "prompt_band_of",
    "reasoning_of",
]

BINS_PER_OCTAVE = 8
"""Histogram bins per doubling of the answer length (each bin ≈ 9 % wide)."""
MAX_OCTAVES = 18
N_BINS = BINS_PER_OCTAVE * MAX_OCTAVES + 1
"""Bins 0 … N_BINS − 1 cover 1 to 2^18 = 262,144 tokens (longer answers fall in the last bin)."""
DEFAULT_PROMPT_BAND_EDGES_TOKENS: tuple[int, ...] = OutputReserveConfig().prompt_band_edges_tokens
ALL_BANDS = -1
"""``prompt_band`` of a class's parent: the answers of all its prompt bands. A band class's reserve
starts from its parent's (learned) quantile instead of the cold prior."""
UNJUDGED_REASONS: tuple[str, ...] = ("chat_batch", "multi_prompt", "no_usage", "no_choice_reasons")
"""Why a served answer teaches the output learner nothing (:meth:`OutputLengthLearner.count_unjudged`):
``chat_batch`` (``/v1/chat/completions/batch``: one usage summed over conversations), ``multi_prompt``
(a completions ``prompt`` list: usage summed over prompts, each with its own room), ``no_usage`` (a
stream without ``stream_options.include_usage``, or a body without usage: no length), and
``no_choice_reasons`` (``n > 1`` without a finish reason per choice: the lengths cannot be split)."""
_Z99 = 2.3263478740408408
"""The standard normal's 0.99 quantile."""


def bin_of(tokens: int) -> int:
    """Histogram bin of an answer of ``tokens`` tokens: ``floor(8 · log2(max(1, tokens)))``, capped."""
    if tokens <= 1:
        return 0
    return min(N_BINS - 1, int(math.log2(tokens) * BINS_PER_OCTAVE))


def bin_upper_tokens(b: int) -> int:
    """The largest answer length (tokens) bin ``b`` holds: ``ceil(2^((b + 1) / 8)) − 1``, at least 1."""
    return max(1, math.ceil(math.pow(2.0, (b + 1) / BINS_PER_OCTAVE)) - 1)


class OutputClassKey(NamedTuple):
    """The class of a request whose answers are learned together (bounded cardinality).

    Attributes:
        model: the estimator's bounded model key (``Estimator.model_key``).
        endpoint: ``chat``, ``completions``, ``responses``, ``messages`` or ``chat_batch``.
        reasoning: ``off``, ``on`` (the model's default effort), ``minimal``, ``low``, ``medium``
            or ``high`` (:func:`reasoning_of`).
        tools: the request defines tools (agent turns answer with tool calls or short text).
        prompt_band: index of the estimated prompt length among the band edges (0 = shortest);
            :data:`ALL_BANDS` (−1) for the parent class that learns from every band.
    """

    model: str
    endpoint: str = "chat"
    reasoning: str = "off"
    tools: bool = False
    prompt_band: int = 0


def encode_class_key(key: OutputClassKey) -> str:
    """A class key as one string (a Redis hash field, a JSON object key): fields joined by ``|``
    with the model last (a model name may hold ``|``): ``endpoint|reasoning|tools|band|model``."""
    return f"{key.endpoint}|{key.reasoning}|{int(key.tools)}|{key.prompt_band}|{key.model}"


def decode_class_key(text: str) -> OutputClassKey:
    """Inverse of :func:`encode_class_key`.

    Raises:
        ValueError: not an encoded class key.
    """
    parts = text.split("|", 4)
    if len(parts) != 5 or parts[2] not in ("0", "1"):
        raise ValueError(f"not an output class key: {text!r}")
    return OutputClassKey(parts[4], parts[0], parts[1], parts[2] == "1", int(parts[3]))


def prompt_band_of(prompt_tokens_est: int, edges: tuple[int, ...] = DEFAULT_PROMPT_BAND_EDGES_TOKENS) -> int:
    """Index of the band of ``prompt_tokens_est`` (tokens) among increasing ``edges``: 0 below the first."""
    band = 0
    for edge in edges:
        if prompt_tokens_est < edge:
            break
        band += 1
    return band


_DEFAULT_REASONING_RX = tuple(re.compile(p, re.IGNORECASE) for p in DEFAULT_REASONING_MODEL_PATTERNS)


def reasoning_of(
    features: RequestFeatures,
    model_reasons: bool | None = None,
    patterns: tuple[re.Pattern[str], ...] = _DEFAULT_REASONING_RX,
) -> str:
    """The reasoning label of a request: what the body asks (``features.reasoning_request``), else
    the model's default: ``on`` when ``model_reasons`` (or, when None, a pattern matching the
    ``model`` name), else ``off``."""
    if features.reasoning_request is not None:
        return features.reasoning_request
    if model_reasons is None:
        model_reasons = any(rx.search(features.model) for rx in patterns)
    return "on" if model_reasons else "off"


def output_class_of(
    features: RequestFeatures,
    model_key: str,
    prompt_tokens_est: int,
    *,
    band_edges_tokens: tuple[int, ...] = DEFAULT_PROMPT_BAND_EDGES_TOKENS,
    model_reasons: bool | None = None,
) -> OutputClassKey:
    """The :class:`OutputClassKey` of a parsed request.

    Args:
        features: the parsed request.
        model_key: the estimator's bounded model key of ``features.model``.
        prompt_tokens_est: the prompt estimate (tokens), for the prompt band.
        band_edges_tokens: increasing band edges (tokens).
        model_reasons: whether the model thinks by default; None = match the built-in patterns
            (:data:`extproc.config.estimation.DEFAULT_REASONING_MODEL_PATTERNS`).
    """
    return OutputClassKey(
        model_key,
        features.endpoint,
        reasoning_of(features, model_reasons),
        features.n_tools > 0,
        prompt_band_of(prompt_tokens_est, band_edges_tokens),
    )


def learned_total_tokens(
    prompt_tokens: int,
    central_prompt_tokens: int,
    reserve_tokens: int,
    n_sequences: int = 1,
    *,
    min_reserve_tokens: int = 16,
) -> int:
    """The routing budget (tokens) of a request whose output reserve is learned (a quantile, not a
    client's maximum): ``max(prompt + n · min(reserve, min_reserve), central_prompt + n · reserve)``.

    One margin per failure (docs/estimator.md §Output half): a prompt over ``max_model_len`` is
    refused, so the conservative prompt estimate (``prompt_tokens``) must fit with at least
    ``min_reserve_tokens`` per sequence; an answer longer than the pool's free room is cut (a
    truncation, counted and steered by the truncation controller), and that risk,
    ``P(answer > B − true prompt)``, is what the reserve's quantile bounds, so the reserve is added
    to the central prompt estimate (``central_prompt_tokens``: the prompt with the learned central
    ratio, at most ``prompt_tokens``). Stacking the prompt's conservative margin under the answer's
    high quantile sent 3.3 % of the conversation pairs long at B = 2,048 although their true prompt
    plus the reserve fit.
    """
    central = min(prompt_tokens, central_prompt_tokens) if central_prompt_tokens > 0 else prompt_tokens
    return max(
        prompt_tokens + n_sequences * min(reserve_tokens, min_reserve_tokens),
        central + n_sequences * reserve_tokens,
    )


@dataclass(frozen=True, slots=True)
class OutputPrior:
    """A cold prior of answer lengths: a log-normal with the given median and 99th percentile.

    Attributes:
        median_tokens: median answer length (tokens).
        p99_tokens: 99th percentile (tokens), > median.
        source: where the two numbers come from.
    """

    median_tokens: float
    p99_tokens: float
    source: str

    @property
    def sigma(self) -> float:
        """σ of the log-normal: ``ln(p99 / median) / z_0.99``."""
        return math.log(self.p99_tokens / self.median_tokens) / _Z99

    def pmf(self) -> list[float]:
        """Probability of each histogram bin (sums to 1; the last bin takes the tail)."""
        mu, sigma = math.log(self.median_tokens), self.sigma
        cdf = [0.0]
        for b in range(N_BINS - 1):
            upper = math.pow(2.0, (b + 1) / BINS_PER_OCTAVE)
            cdf.append(0.5 * math.erfc(-(math.log(upper) - mu) / (sigma * math.sqrt(2.0))))
        cdf.append(1.0)
        return [max(0.0, cdf[i + 1] - cdf[i]) for i in range(N_BINS)]


_CHAT_SOURCE = (
    "answer lengths of five public chat workloads, measured in docs/estimator.md §Output half: "
    "ShareGPT V3 (ChatGPT) p50/p99 251/770, LMSYS-Chat-1M 134/466, MT-Bench GPT-4 references "
    "226-246/493-615, Azure LLM inference trace 2023 conv 129/601, Mooncake FAST'25 conversation "
    "trace 350/1119 tokens; median ≈ the middle median, p99 = the largest p99"
)
OUTPUT_PRIORS: dict[str, OutputPrior] = {
    "chat": OutputPrior(235.0, 1120.0, _CHAT_SOURCE),
    "tools": OutputPrior(
        235.0,
        1120.0,
        "the chat prior: no public answers to requests with tools were at hand (a tool call is shorter)",
    ),
    "completions": OutputPrior(
        46.0,
        1120.0,
        "median of the HumanEval canonical solutions (46 tokens; the Azure 2023 code trace: 13), "
        "the chat prior's p99 as the tail (a completions endpoint also serves prose)",
    ),
    "reasoning": OutputPrior(
        2260.0,
        25000.0,
        "928 answers of 11 open-weight reasoning models (Qwen3 thinking, DeepSeek-R1 and a distill, "
        "GLM-4.5, GLM-Z1, MiniMax-M1, Magistral Small, Nemotron Super, DeepHermes 3, gpt-oss) to "
        "knowledge, logic and competition-math prompts, p50 2,258 / p99 25,004 tokens "
        "(cpldcpu/LRMTokenEconomy, Apache-2.0; evaluation/reasoning_lengths.py)",
    ),
    "reasoning_low": OutputPrior(
        690.0,
        12300.0,
        "580 answers of the short-chain-of-thought models of the same set (gpt-oss 20b/120b, "
        "o1-mini, o3-mini-high, o4-mini), p50 688 / p99 12,267 tokens: no low-effort answers were at "
        "hand, so this is what the shortest reasoners produce at their default effort",
    ),
}
"""Cold priors by prior class (:func:`prior_class_of`)."""


def prior_class_of(key: OutputClassKey) -> str:
    """Which :data:`OUTPUT_PRIORS` entry a class starts from: ``reasoning`` (on, medium, high),
    ``reasoning_low`` (minimal, low), else ``tools`` when tools are defined, ``completions`` for
    the completions endpoint, else ``chat``."""
    if key.reasoning in ("on", "medium", "high"):
        return "reasoning"
    if key.reasoning in ("minimal", "low"):
        return "reasoning_low"
    if key.tools:
        return "tools"
    if key.endpoint == "completions":
        return "completions"
    return "chat"


@dataclass(slots=True)
class OutputLengthState:
    """What a class has learned (JSON-safe through :meth:`to_dict`).

    Attributes:
        counts: histogram bin → decayed weight of the observed answers (sparse; see
            :func:`bin_of`). Cold prior not included.
        samples: answers observed (censored ones included).
        censored: answers observed cut short (truncated or client-capped).
        truncated: answers a pool cut short (a subset of ``censored``).
        reserve_tokens: the bounded reserve the class routes with (0 = not set yet: the prior's).
        tail_share: the class's share of answers allowed above its reserve, steered by its
            truncations (0.0 = not set yet: ``OutputReserveConfig.tail_share``).
    """

    counts: dict[int, float] = field(default_factory=dict)
    samples: int = 0
    censored: int = 0
    truncated: int = 0
    reserve_tokens: int = 0
    tail_share: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """``{"counts": {"<bin>": weight, ...}, "samples", "censored", "truncated",
        "reserve_tokens", "tail_share"}`` (bins as strings: JSON object keys)."""
        return {
            "counts": {str(b): round(w, 9) for b, w in sorted(self.counts.items()) if w > 0.0},
            "samples": self.samples,
            "censored": self.censored,
            "truncated": self.truncated,
            "reserve_tokens": self.reserve_tokens,
            "tail_share": self.tail_share,
        }

    @classmethod
    def from_dict(cls, data: Any) -> OutputLengthState:
        """Inverse of :meth:`to_dict`.

        Raises:
            ValueError: not a state document (wrong types, a bin outside the histogram, a negative
                or non-finite weight or count).
        """
        try:
            counts = {int(b): float(w) for b, w in dict(data["counts"]).items()}
            state = cls(
                counts,
                int(data["samples"]),
                int(data.get("censored", 0)),
                int(data.get("truncated", 0)),
                int(data.get("reserve_tokens", 0)),
                float(data.get("tail_share", 0.0)),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ValueError(f"not an output length state: {exc!r}") from exc
        if any(not 0 <= b < N_BINS or not (w >= 0.0 and math.isfinite(w)) for b, w in counts.items()):
            raise ValueError("not an output length state: bad histogram")
        if min(state.samples, state.censored, state.truncated, state.reserve_tokens) < 0:
            raise ValueError("not an output length state: negative count")
        if not 0.0 <= state.tail_share < 1.0:
            raise ValueError("not an output length state: tail share outside [0, 1)")
        return state

    @property
    def weight(self) -> float:
        """Total decayed weight of the observed answers."""
        return sum(self.counts.values())


def _snap(share: float) -> float:
    """``share`` on a 2 % log grid (cached reserves change only when it moves by a grid step)."""
    g = math.log(1.02)
    return math.exp(round(math.log(share) / g) * g)


def _tail_quantile_bin(
    pmf: list[float], counts: dict[int, float], count_total: float, pmf_weight: float, tail_share: float
) -> int:
    """The first bin, from the top, where the mass above (``pmf_weight · pmf`` plus ``counts``)
    exceeds ``tail_share`` of the total (``pmf_weight + count_total``); 0 when none."""
    allowed = tail_share * (pmf_weight + count_total)
    above = 0.0
    if not pmf:  # only the bins with counts can move the sum (the same sums, in the same order)
        for b in sorted(counts, reverse=True):
            above += counts[b]
            if above > allowed:
                return b
        return 0
    if not counts:  # the prior alone: the running sums from the top, at C speed
        for i, acc in enumerate(
            itertools.accumulate(map(operator.mul, itertools.repeat(pmf_weight), reversed(pmf)))
        ):
            if acc > allowed:
                return N_BINS - 1 - i
        return 0
    for b in range(N_BINS - 1, -1, -1):
        above += (pmf_weight * pmf[b] if pmf else 0.0) + counts.get(b, 0.0)
        if above > allowed:
            return b
    return 0


class OutputLengthLearner:
    """Learned answer lengths of every output class, and the reserve each class routes with.

    Args:
        config: the output-reserve settings (:class:`~extproc.config.OutputReserveConfig`).
        priors: cold priors by prior class (default :data:`OUTPUT_PRIORS`).

    Not thread-safe (one per router process, used from its event loop, like the ratio store).
    """

    def __init__(
        self, config: OutputReserveConfig | None = None, *, priors: dict[str, OutputPrior] | None = None
    ) -> None:
        self.cfg = config if config is not None else OutputReserveConfig()
        self.priors = dict(OUTPUT_PRIORS if priors is None else priors)
        self._decay = math.exp(-1.0 / self.cfg.horizon_observations)
        self._rx = tuple(re.compile(p, re.IGNORECASE) for p in self.cfg.reasoning_model_patterns)
        self._model_reasons: dict[str, bool] = {}
        self._states: dict[OutputClassKey, OutputLengthState] = {}
        self._pmf: dict[str, list[float]] = {}
        self._cold: dict[str, tuple[float, int]] = {}
        self._tail_used: dict[OutputClassKey, float] = {}
        self.fleet_tail_share = self.cfg.tail_share
        """The tail share of every class under ``controller_scope: fleet``, steered by all truncations
        (process state: a restarted router starts again from ``tail_share``)."""
        self.truncations = 0
        """Truncations observed since start (all classes)."""
        self.observations = 0
        """Answers observed since start (all classes)."""
        self.unjudged: dict[str, int] = dict.fromkeys(UNJUDGED_REASONS, 0)
        """Served answers not learned from, by reason (:data:`UNJUDGED_REASONS`), since start."""

    # -- classes ---------------------------------------------------------------------------

    def model_reasons(self, model: str) -> bool:
        """Whether ``model`` thinks by default (``reasoning_model_patterns``), memoised (bounded)."""
        hit = self._model_reasons.get(model)
        if hit is None:
            hit = any(rx.search(model) for rx in self._rx)
            if len(self._model_reasons) < 4096:
                self._model_reasons[model] = hit
        return hit

    def class_of(self, features: RequestFeatures, model_key: str, prompt_tokens_est: int) -> OutputClassKey:
        """:func:`output_class_of` with this learner's band edges and reasoning models."""
        return output_class_of(
            features,
            model_key,
            prompt_tokens_est,
            band_edges_tokens=self.cfg.prompt_band_edges_tokens,
            model_reasons=self.model_reasons(features.model),
        )

    def prior(self, key: OutputClassKey) -> OutputPrior:
        """The cold prior of a class."""
        name = prior_class_of(key)
        return self.priors.get(name) or self.priors.get("chat") or OUTPUT_PRIORS["chat"]

    def _prior_pmf(self, key: OutputClassKey) -> list[float]:
        name = prior_class_of(key)
        pmf = self._pmf.get(name)
        if pmf is None:
            pmf = self._pmf[name] = self.prior(key).pmf()
        return pmf

    # -- reading ---------------------------------------------------------------------------

    def tail_share(self, key: OutputClassKey) -> float:
        """The class's current tail share (its quantile level is ``1 − tail_share``): the fleet's
        (:attr:`fleet_tail_share`) under ``controller_scope: fleet``, else the class's own."""
        if self.cfg.controller_scope == "fleet":
            return self.fleet_tail_share
        state = self._states.get(key)
        return state.tail_share if state is not None and state.tail_share > 0.0 else self.cfg.tail_share

    def read_tail_share(self, key: OutputClassKey) -> float:
        """The tail share the class's quantile is read at: :meth:`tail_share` snapped to a 2 % log
        grid, so a reserve is recomputed only when the controller has moved it by a grid step."""
        return _snap(self.tail_share(key))

    def quantile_tokens(self, key: OutputClassKey, tail_share: float | None = None) -> int:
        """The ``1 − tail_share`` quantile (tokens) of the class's answers blended with its base (its
        parent's quantile, else its prior's; module docstring); no bounded step. ``tail_share`` None
        = :meth:`read_tail_share`."""
        state = self._states.get(key)
        eps = self.read_tail_share(key) if tail_share is None else tail_share
        return self._quantile(key, state.counts if state is not None else {}, eps)

    def prior_quantile_tokens(self, key: OutputClassKey, tail_share: float | None = None) -> int:
        """The ``1 − tail_share`` quantile (tokens) of the class's cold prior alone (``tail_share``
        None = ``OutputReserveConfig.tail_share``)."""
        eps = _snap(self.cfg.tail_share) if tail_share is None else tail_share
        return self._quantile(key, {}, eps, use_parent=False)

    def _quantile(
        self,
        key: OutputClassKey,
        counts: dict[int, float],
        eps: float,
        *,
        use_parent: bool = True,
    ) -> int:
        """Geometric blend of the base quantile (the class's all-bands parent, else its prior) and
        its own histogram's, both at tail share ``eps`` (module docstring)."""
        parent = (
            self._states.get(key._replace(prompt_band=ALL_BANDS))
            if use_parent and key.prompt_band != ALL_BANDS
            else None
        )
        if parent is not None and parent.counts:
            base = self._quantile(key._replace(prompt_band=ALL_BANDS), parent.counts, eps)
        else:
            base = bin_upper_tokens(_tail_quantile_bin(self._prior_pmf(key), {}, 0.0, 1.0, eps))
        weight = sum(counts.values())
        ramp = self.cfg.prior_weight
        w = 1.0 if ramp <= 0.0 else min(1.0, weight / ramp)
        if w <= 0.0:
            tokens = base
        else:
            learned = bin_upper_tokens(_tail_quantile_bin([], counts, weight, 0.0, eps))
            tokens = math.ceil(math.exp(w * math.log(learned) + (1.0 - w) * math.log(base)))
        return max(self.cfg.min_reserve_tokens, tokens)

    def reserve_tokens(self, key: OutputClassKey, *, max_reserve_tokens: int) -> int:
        """The output reserve (tokens per sequence) of a request of class ``key`` without a client
        maximum: the class's bounded learned quantile; a class that has seen nothing takes its
        all-bands parent's, else its prior's quantile. At least ``min_reserve_tokens``, at most
        ``max_reserve_tokens`` (what the largest pool allows) and ``OutputReserveConfig.max_reserve_tokens``."""
        value = 0
        for k in (key, key._replace(prompt_band=ALL_BANDS)):
            state = self._states.get(k)
            if state is not None and state.reserve_tokens > 0:
                if self._tail_used.get(k) != self.read_tail_share(k):
                    self._refresh(k, state)
                value = state.reserve_tokens
                break
        if not value:
            name = prior_class_of(key)
            cached = self._cold.get(name)
            if cached is None:
                cached = self._cold[name] = (self.cfg.tail_share, self.prior_quantile_tokens(key))
            value = cached[1]
        cap = self.cfg.max_reserve_tokens
        if cap is not None:
            value = min(value, cap)
        return max(1, min(value, max_reserve_tokens))

    def _refresh(self, key: OutputClassKey, state: OutputLengthState) -> None:
        """Move the class's reserve towards its quantile by one bounded step."""
        eps = self.read_tail_share(key)
        target = self._quantile(key, state.counts, eps)
        current = state.reserve_tokens
        if not current:
            parent = (
                self._states.get(key._replace(prompt_band=ALL_BANDS))
                if key.prompt_band != ALL_BANDS
                else None
            )
            current = parent.reserve_tokens if parent is not None and parent.reserve_tokens else 0
            current = current or self.prior_quantile_tokens(key)
        step = 1.0 + self.cfg.max_step
        low, high = math.floor(current / step), math.ceil(current * step)
        state.reserve_tokens = max(self.cfg.min_reserve_tokens, min(max(target, low), high))
        self._tail_used[key] = eps

    # -- learning --------------------------------------------------------------------------

    def observe(
        self, key: OutputClassKey, completion_tokens: int, *, truncated: bool, capped: bool = False
    ) -> None:
        """Learn one answer of class ``key`` (and of its all-bands parent).

        Args:
            key: the request's class.
            completion_tokens: the answer's ``usage.completion_tokens`` (per choice when n > 1: call
                once per choice).
            truncated: a pool cut the answer short (its ``max_model_len`` was reached while a larger
                pool would have allowed more and the client's maximum was not the limit): the true
                length is at least ``completion_tokens`` (censored), and the class's truncation
                controller lowers its tail share.
            capped: the client's own maximum cut the answer short (censored too, not a truncation).

        Non-positive ``completion_tokens`` of an uncensored answer are learned as one token; a
        censored answer of 0 tokens teaches nothing.
        """
        censored = truncated or capped
        if censored and completion_tokens <= 0:
            return
        tokens = max(1, int(completion_tokens))
        keys = [key] if key.prompt_band == ALL_BANDS else [key, key._replace(prompt_band=ALL_BANDS)]
        for k in keys:
            state = self._states.get(k)
            if state is None:
                state = self._states[k] = OutputLengthState(tail_share=self.cfg.tail_share)
            d = self._decay
            if state.counts:
                state.counts = {b: w * d for b, w in state.counts.items() if w * d > 1e-6}
            if censored:
                self._add_censored(k, state, tokens, 1.0)
                state.censored += 1
            else:
                b = bin_of(tokens)
                state.counts[b] = state.counts.get(b, 0.0) + 1.0
            state.samples += 1
            state.truncated += truncated
            state.tail_share = self._steer(state.tail_share or self.cfg.tail_share, truncated)
        self.observations += 1
        self.truncations += truncated
        self.fleet_tail_share = self._steer(self.fleet_tail_share, truncated)
        for k in reversed(keys):  # the parent first: a new band class starts from it
            self._refresh(k, self._states[k])

    def count_untruncated(self, key: OutputClassKey) -> None:
        """One untruncated answer for the truncation controller, without its length: a request of
        class ``key`` whose answer is not read because it cannot be truncated (the adaptive read
        decision reads every request its pool may cut, :mod:`extproc.core.learn.read_decision`).
        Steps the fleet's tail share and, under ``controller_scope: class``, the class's and its
        parent's (those that have answers) as :meth:`observe` does for an untruncated answer, so that
        the controller sees every request once, read or not, instead of a sample that holds every
        possible truncation and few of the rest (which would hold the tail share far too low). The
        histograms learn nothing."""
        self.fleet_tail_share = self._steer(self.fleet_tail_share, False)
        if self.cfg.controller_scope != "class":
            return
        keys = [key] if key.prompt_band == ALL_BANDS else [key, key._replace(prompt_band=ALL_BANDS)]
        for k in keys:
            state = self._states.get(k)
            if state is not None:
                state.tail_share = self._steer(state.tail_share or self.cfg.tail_share, False)

    def _add_censored(
        self, key: OutputClassKey, state: OutputLengthState, tokens: int, weight: float
    ) -> None:
        """Spread ``weight`` over the bins above ``tokens`` in proportion to their mass (prior
        included), or at twice the length when nothing lies above (module docstring)."""
        first = bin_of(tokens) + 1
        pmf = self._prior_pmf(key)
        masses = [(b, pmf[b] + state.counts.get(b, 0.0)) for b in range(first, N_BINS)]
        total = sum(m for _, m in masses)
        if total <= 1e-12:
            b = bin_of(2 * tokens)
            state.counts[b] = state.counts.get(b, 0.0) + weight
            return
        for b, m in masses:
            if m > 0.0:
                state.counts[b] = state.counts.get(b, 0.0) + weight * m / total

    def _steer(self, share: float, truncated: bool) -> float:
        """One step of a class's truncation controller (module docstring): in log space, a
        truncation lowers the tail share by ``controller_step``, an untruncated answer raises it by
        ``controller_step · t / (1 − t)`` with ``t = controller_margin · truncation_budget``; the two
        balance when truncations are ``t`` of the class's answers."""
        step = self.cfg.controller_step
        if step <= 0.0:
            return share
        target = self.cfg.controller_margin * self.cfg.truncation_budget
        delta = -step if truncated else step * target / (1.0 - target)
        return min(self.cfg.max_tail_share, max(self.cfg.min_tail_share, share * math.exp(delta)))

    def count_unjudged(self, reason: str) -> None:
        """Count one served answer the learner cannot learn from (``reason`` in
        :data:`UNJUDGED_REASONS`; any other is counted as ``no_usage``)."""
        key = reason if reason in self.unjudged else "no_usage"
        self.unjudged[key] += 1

    # -- sharing ---------------------------------------------------------------------------

    def restore_fleet_tail_share(self, tail_share: float) -> float:
        """Start the fleet controller from a shared or saved tail share (a replica joining a fleet
        takes the fleet's λ instead of ``tail_share``), clamped to ``[min_tail_share,
        max_tail_share]``; a non-finite or non-positive value is ignored. Returns the tail share in use."""
        if math.isfinite(tail_share) and tail_share > 0.0:
            self.fleet_tail_share = min(self.cfg.max_tail_share, max(self.cfg.min_tail_share, tail_share))
        return self.fleet_tail_share

    def get(self, key: OutputClassKey) -> OutputLengthState | None:
        """The state of a class, or None when it never observed an answer."""
        return self._states.get(key)

    def items(self) -> list[tuple[OutputClassKey, OutputLengthState]]:
        """Every class with its state (snapshots, admin views, metrics), sorted by key."""
        return sorted(self._states.items())

    def restore(
        self, states: dict[OutputClassKey, OutputLengthState] | list[tuple[OutputClassKey, OutputLengthState]]
    ) -> int:
        """Replace the states of the given classes (a snapshot or a shared store's pull); returns
        how many. A state without a reserve gets its class's quantile."""
        pairs = list(states.items()) if isinstance(states, dict) else list(states)
        for key, state in pairs:
            self._states[key] = state
            if state.tail_share <= 0.0:
                state.tail_share = self.cfg.tail_share
            if state.reserve_tokens <= 0:
                state.reserve_tokens = self.quantile_tokens(key)
            self._tail_used[key] = self.read_tail_share(key)
        return len(pairs)

    def merge(self, key: OutputClassKey, state: OutputLengthState) -> OutputLengthState:
        """Fold the answers another replica learned (``state``: its observations since it last
        shared, or its whole state) into this replica's class: histogram weights and counts add;
        the reserve then moves one bounded step towards the merged quantile. Returns the merged state.

        Adding a replica's whole state twice counts its answers twice: a shared store should pass
        each replica's answers once (its delta since the last sync), then :meth:`restore` the sum.
        """
        local = self._states.get(key)
        if local is None:
            local = self._states[key] = OutputLengthState()
        for b, w in state.counts.items():
            if 0 <= b < N_BINS and w > 0.0 and math.isfinite(w):
                local.counts[b] = local.counts.get(b, 0.0) + w
        local.samples += max(0, state.samples)
        local.censored += max(0, state.censored)
        local.truncated += max(0, state.truncated)
        self._refresh(key, local)
        return local
