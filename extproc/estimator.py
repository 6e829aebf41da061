"""Token-budget estimate of a request, and calibration from its response (arXiv 2604.09613 §3).

``L_total = prompt_tokens_est + n_sequences · output_reserve`` where

``prompt_tokens_est = ceil(text_bytes / c*_k) + framing + ceil(tool_schema_bytes / c_tool)
+ tool_framing + images · image_tokens + audio · audio_tokens + exact_token_ids``

* ``c*_k`` is the conservative learned ratio of the request's (model, category) key, or the
  category's conservative prior during warm-up (:mod:`extproc.calibration`).
* Chat-template framing (``message_framing_tokens`` per message + ``request_framing_tokens``)
  is modelled separately so it does not pollute the text ratio.
* ``n_sequences · output_reserve`` is the KV footprint of the generated tokens: vLLM keeps one
  KV sequence per choice (``n`` / ``best_of``).

Calibration subtracts the modelled non-text parts from ``usage.prompt_tokens`` and learns
``c_obs = text_bytes / text_tokens`` only when the text part dominates (so tool schemas and
images do not poison text ratios).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from extproc.calibration import RatioKey, RatioState, RatioStore
from extproc.categories import classify_text
from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.request_body import RequestFeatures

__all__ = ["CATEGORY_PRIORS_BPT", "Estimator", "Observation", "TokenBudget"]

CATEGORY_PRIORS_BPT: dict[str, float] = {
    "latin": 3.2,
    "code": 3.0,
    "json": 3.4,
    "cjk_zh": 1.9,
    "cjk_ja": 2.3,
    "cjk_ko": 2.0,
    "cyrillic": 3.2,
    "thai": 2.8,
    "indic_bn": 2.0,
    "indic_te": 1.5,
    "indic": 1.5,
    "arabic": 2.0,
    "greek": 2.0,
    "hebrew": 2.0,
    "no_letters": 1.5,
}
"""Cold-start ratios (bytes/token) per category: roughly the 5th percentile of per-message
ratios over Llama-3, Qwen3 and cl100k (data-stats.md §3), so a new category errs towards the
long pool. See docs/estimator.md."""

_MIN_TEXT_SHARE = 0.5
"""Calibrate only when text is at least this share of the modelled prompt tokens."""


@dataclass(frozen=True, slots=True)
class TokenBudget:
    """The routing estimate of one request (all counts in tokens).

    Attributes:
        key: (model key, category) whose ratio was used.
        ratio_bpt: the bytes/token ratio applied to the text.
        text_bytes: UTF-8 bytes of prompt text.
        fixed_prompt_tokens: non-text prompt tokens (framing, tools, media, token ids).
        prompt_tokens: estimated prompt tokens (text + fixed).
        output_reserve_tokens: per-sequence output reserve.
        n_sequences: sequences generated.
        total_tokens: ``prompt_tokens + n_sequences · output_reserve_tokens``.
        warm: the learned ratio (not the prior) was used.
    """

    key: RatioKey
    ratio_bpt: float
    text_bytes: int
    fixed_prompt_tokens: int
    prompt_tokens: int
    output_reserve_tokens: int
    n_sequences: int
    total_tokens: int
    warm: bool


@dataclass(frozen=True, slots=True)
class Observation:
    """One calibration observation: ``c_obs`` for ``key`` and the signed relative error of the
    prompt estimate, ``(estimated − actual) / actual``."""

    key: RatioKey
    c_obs_bpt: float
    rel_error: float
    state: RatioState


class Estimator:
    """Estimates budgets and learns ratios; one instance serves all streams of a process.

    Args:
        estimator: estimator parameters.
        calibration: calibration parameters (β is applied by ``store``; γ and warm-up here).
        store: where ratios live.
    """

    def __init__(
        self, *, estimator: EstimatorConfig, calibration: CalibrationConfig, store: RatioStore
    ) -> None:
        self.cfg = estimator
        self.cal = calibration
        self.store = store
        self._models: dict[str, str] = {}

    def model_key(self, model: str) -> str:
        """Bounded model key: the first ``max_models`` distinct names, then ``_other``."""
        key = self._models.get(model)
        if key is None:
            key = model if len(self._models) < self.cfg.max_models else "_other"
            if len(model) > 128:
                key = "_other"
            self._models[model] = key
        return key

    def routing_ratio(self, key: RatioKey) -> tuple[float, bool]:
        """Return ``(c*, warm)``: ``ĉ − γσ̂`` after warm-up, else the category prior (bytes/token)."""
        prior = CATEGORY_PRIORS_BPT.get(key[1], self.cfg.prior_bytes_per_token)
        state = self.store.get(key)
        if state is None or state.samples < max(1, self.cal.warmup_samples):
            return max(prior, self.cfg.min_bytes_per_token), False
        ratio = state.mean_bpt - self.cal.gamma * state.dev_bpt
        return max(ratio, self.cfg.min_bytes_per_token), True

    def fixed_tokens(self, f: RequestFeatures) -> int:
        """Modelled non-text prompt tokens: framing, tool schemas, media, token ids."""
        c = self.cfg
        fixed = f.exact_prompt_tokens + f.n_images * c.image_tokens + f.n_audio * c.audio_tokens
        if f.endpoint == "chat":
            fixed += c.request_framing_tokens + c.message_framing_tokens * f.n_messages
        if f.tool_schema_bytes:
            fixed += math.ceil(f.tool_schema_bytes / c.tool_schema_bytes_per_token) + c.tool_framing_tokens
        return fixed

    def estimate(self, f: RequestFeatures) -> TokenBudget:
        """Compute the :class:`TokenBudget` of a parsed request."""
        key = (self.model_key(f.model), classify_text(f.sample))
        ratio, warm = self.routing_ratio(key)
        fixed = self.fixed_tokens(f)
        prompt = math.ceil(f.text_bytes / ratio) + fixed
        reserve = (
            self.cfg.default_output_reserve_tokens if f.max_output_tokens is None else f.max_output_tokens
        )
        total = prompt + f.n_sequences * reserve
        return TokenBudget(
            key=key,
            ratio_bpt=ratio,
            text_bytes=f.text_bytes,
            fixed_prompt_tokens=fixed,
            prompt_tokens=prompt,
            output_reserve_tokens=reserve,
            n_sequences=f.n_sequences,
            total_tokens=total,
            warm=warm,
        )

    def observe(self, budget: TokenBudget, prompt_tokens: int) -> Observation | None:
        """Learn from the served ``usage.prompt_tokens`` of a request estimated as ``budget``.

        Returns None (and learns nothing) when the observation carries no usable text signal:
        no text, non-positive usage, or a prompt dominated by non-text parts.
        """
        if prompt_tokens <= 0 or budget.text_bytes <= 0:
            return None
        text_tokens = prompt_tokens - budget.fixed_prompt_tokens
        if text_tokens <= 0 or text_tokens < _MIN_TEXT_SHARE * prompt_tokens:
            return None
        c_obs = budget.text_bytes / text_tokens
        state = self.store.observe(budget.key, c_obs)
        rel = (budget.prompt_tokens - prompt_tokens) / prompt_tokens
        return Observation(key=budget.key, c_obs_bpt=c_obs, rel_error=rel, state=state)
