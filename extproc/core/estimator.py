"""Token-budget estimate of a request, and calibration from its response (arXiv 2604.09613; docs/method.md §3).

``L_total = prompt_tokens_est + n_sequences · output_reserve`` where

``prompt_tokens_est = ceil(ratio_bytes / c*_k) + framing + structure + images · image_tokens
+ audio · audio_tokens + exact_token_ids``

* ``ratio_bytes`` = UTF-8 bytes of the decoded prompt text plus the compact JSON of the tool
  schemas, minus the ASCII digits, punctuation and newlines; a request with tools is in the
  ``tools`` category (its ratio is learned per model: the Qwen3 template re-serialises schemas
  with spaces, Llama-3 does not).
* ``structure`` = digits, punctuation and newlines at the model's tokens per character: BPE
  pre-tokenisers split them from words, so their tokens per byte are far higher than those of
  letters, and numeric/markup-heavy text would otherwise get a ratio far below its category's
  (docs/estimator.md §Structure).
* ``c*_k`` is the conservative learned ratio of the request's (model, category) key, or the
  category's conservative prior for the model's tokenizer family during warm-up
  (:mod:`extproc.core.calibration`, docs/estimator.md).
* ``framing`` = chat-template tokens from the model's :class:`~extproc.config.ModelProfile`
  (per message, per request, per tool, tool boilerplate), modelled so it does not pollute the ratio.
* ``n_sequences · output_reserve`` is the KV footprint of the generated tokens: vLLM keeps one
  KV sequence per choice (``n`` / ``best_of``).

Calibration subtracts the modelled non-text parts from ``usage.prompt_tokens`` and learns
``c_obs = ratio_bytes / ratio_tokens`` only when the ratio part dominates (so images and token-id
prompts do not poison text ratios), weighting each observation by ``min(1, ratio_tokens /
weight_ref_tokens)``.
"""

from __future__ import annotations

import math
import re
from typing import Any

from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.budget import Framing, Observation, TokenBudget
from extproc.core.calibration import RatioKey, RatioStore
from extproc.core.categories import TextProfile, profile_text
from extproc.core.images import ImageBudget
from extproc.core.output_reserve import OutputClassKey, OutputLengthLearner
from extproc.core.priors import CATEGORY_PRIORS_BPT, FAMILY_PRIORS_BPT
from extproc.core.request_body import RequestFeatures
from extproc.core.run_costs import run_costs
from extproc.core.runs import RunCounts

__all__ = [
    "CATEGORY_PRIORS_BPT",
    "FAMILY_PRIORS_BPT",
    "Estimator",
    "Framing",
    "Observation",
    "TokenBudget",
]

_MIN_TEXT_SHARE = 0.5
"""Calibrate only when text is at least this share of the modelled prompt tokens."""

TOOL_CALL_FRAMING_TOKENS = 12
"""Template tokens around one assistant tool call beyond its name and arguments (Qwen3:
``<tool_call>\n{"name": "…", "arguments": …}\n</tool_call>`` = 12 tokens; Llama-3.1 ≈ 8)."""

TOOLS_CATEGORY = "tools"
ALL_CATEGORY = "all"


class Estimator:
    """Estimates budgets and learns ratios; one instance serves all streams of a process.

    Args:
        estimator: estimator parameters.
        calibration: calibration parameters (β is applied by ``store``; γ and warm-up here).
        store: where ratios live.
        output_learner: the learned answer lengths (:mod:`extproc.core.output_reserve`); None = a
            new one when ``estimator.output_reserve.learned``, else none (the default reserve).
        max_model_len_tokens: the largest pool's ``max_model_len``: no output reserve exceeds it
            minus the prompt estimate (None = unbounded).
    """

    def __init__(
        self,
        *,
        estimator: EstimatorConfig,
        calibration: CalibrationConfig,
        store: RatioStore,
        output_learner: OutputLengthLearner | None = None,
        max_model_len_tokens: int | None = None,
    ) -> None:
        self.cfg = estimator
        out_cfg = estimator.output_reserve
        self.output_learner: OutputLengthLearner | None = (
            output_learner
            if output_learner is not None
            else (OutputLengthLearner(out_cfg) if out_cfg.learned else None)
        )
        self.max_model_len_tokens = max_model_len_tokens
        self.cal = calibration
        self.store = store
        self._models: dict[str, str] = {}
        self._framing: dict[str, Framing] = {}
        self._profiles = [(re.compile(p.pattern, re.IGNORECASE), p) for p in estimator.model_profiles]
        self._recovered: dict[RatioKey, tuple[float, int]] = {}
        """Keys lowered by misroute recovery: (value, observations left); process-local, so the
        in-memory and Redis stores behave the same."""
        self._media: dict[str, float] = {}
        """Learned tokens per media item of each model key (never below the configured budget)."""
        self.images = ImageBudget(estimator.image_rules, estimator.image_tokens)

    def model_key(self, model: str) -> str:
        """Bounded model key: the first ``max_models`` distinct names, then ``_other``."""
        key = self._models.get(model)
        if key is None:
            key = model if len(self._models) < self.cfg.max_models else "_other"
            if len(model) > 128:
                key = "_other"
            if len(self._models) < 4 * self.cfg.max_models:
                self._models[model] = key
        return key

    def framing(self, model_key: str) -> Framing:
        """The :class:`Framing` of a model key: first matching profile, else the config defaults."""
        fr = self._framing.get(model_key)
        if fr is None:
            c = self.cfg
            fr = Framing(
                "",
                c.message_framing_tokens,
                c.request_framing_tokens,
                c.tool_framing_tokens,
                0,
                c.digit_tokens_per_digit,
                c.punct_tokens_per_char,
                c.newline_tokens_per_char,
            )
            if model_key != "_other":
                for rx, p in self._profiles:
                    if rx.search(model_key):
                        fr = Framing(
                            p.family,
                            p.message_framing_tokens,
                            p.request_framing_tokens,
                            p.tool_framing_tokens,
                            p.per_tool_tokens,
                            p.digit_tokens_per_digit,
                            p.punct_tokens_per_char,
                            p.newline_tokens_per_char,
                            p.renders_reasoning,
                            p.tools_json_spaced,
                        )
                        break
            self._framing[model_key] = fr
        return fr

    def prior(self, key: RatioKey) -> float:
        """Cold-start ratio of a key: the family prior, else the global conservative prior.

        ``runs`` model: the cold correction of (family, content kind) (:mod:`extproc.core.run_costs`).
        """
        if self.cfg.cost_model == "runs":
            return run_costs(self.framing(key[0]).family).cold_ratio.get(key[1], 0.8)
        if not self.cfg.family_priors:
            return self.cfg.prior_bytes_per_token
        family = self.framing(key[0]).family
        table = FAMILY_PRIORS_BPT.get(family, CATEGORY_PRIORS_BPT)
        value = table.get(key[1])
        if value is None:
            value = CATEGORY_PRIORS_BPT.get(key[1], self.cfg.prior_bytes_per_token)
        return value

    def _routing(self, key: RatioKey) -> tuple[float, float, bool]:
        """``(conservative ratio, central ratio, warm)`` of a key (recovery override applied)."""
        ratio, central, warm = self._learned(key)
        held = self._recovered.get(key)
        if held is not None:
            ratio = min(ratio, held[0])
        return ratio, central, warm

    def _learned(self, key: RatioKey) -> tuple[float, float, bool]:
        runs = self.cfg.cost_model == "runs"
        floor = self.cfg.min_model_ratio if runs else self.cfg.min_bytes_per_token
        state = self.store.get(key)
        if state is None or state.samples < max(1, self.cal.warmup_samples):
            prior = max(self.prior(key), floor)
            central = state.mean_bpt if state is not None else (1.0 if runs else prior)
            return prior, max(central, floor), False
        if self.cal.learner == "quantile" and state.low_bpt > 0.0:
            ratio = state.low_bpt
        else:
            ratio = state.mean_bpt - self.cal.gamma * state.dev_bpt
        if runs:
            w = min(1.0, state.samples / self.cfg.prior_ramp_samples)
            ratio = math.exp(w * math.log(max(ratio, floor)) + (1.0 - w) * math.log(self.prior(key)))
        return max(ratio, floor), max(state.mean_bpt, floor), True

    def routing_ratio(self, key: RatioKey) -> tuple[float, bool]:
        """Return ``(c*, warm)``: the learned conservative ratio after warm-up, else the prior."""
        ratio, _, warm = self._routing(key)
        return ratio, warm

    def media_tokens(self, model_key: str) -> tuple[float, float]:
        """``(tokens per image, tokens per audio part)`` budgeted for a model: the configured values,
        raised by what observations and misroute recovery attributed to media."""
        learned = self._media.get(model_key, 0.0)
        return max(float(self.cfg.image_tokens), learned), max(float(self.cfg.audio_tokens), learned)

    def fixed_tokens(self, f: RequestFeatures) -> int:
        """Modelled non-ratio prompt tokens: template framing, media, token ids."""
        image, audio = self.media_tokens(self.model_key(f.model))
        # images of a model with an image rule cost their pixel size (extproc.core.images)
        if self.images.rule(f.model) is not None:
            image_total = float(self.images.tokens(f.model, f.n_images, f.image_sizes))
        else:
            image_total = f.n_images * image
        fixed = f.exact_prompt_tokens + math.ceil(image_total + f.n_audio * audio)
        if f.endpoint != "completions":  # chat, responses, messages, chat_batch: chat template
            fr = self.framing(self.model_key(f.model))
            fixed += fr.request_tokens + fr.message_tokens * f.n_messages
            if f.n_tools:
                fixed += fr.tool_tokens + fr.per_tool_tokens * f.n_tools
            fixed += TOOL_CALL_FRAMING_TOKENS * f.n_tool_calls
        return fixed

    def _category(self, f: RequestFeatures, prof: TextProfile | None) -> str:
        """Content category of a request: ``tools`` when it defines tools, else the text class."""
        if not self.cfg.per_category:
            return ALL_CATEGORY
        if f.n_tools:
            return TOOLS_CATEGORY
        return prof.category if prof is not None else "no_letters"

    def _structure(self, f: RequestFeatures, prof: TextProfile | None) -> tuple[int, int]:
        """``(bytes, tokens)`` of the text budgeted outside the ratio: ASCII digits (and, with
        ``count_punctuation``, ASCII punctuation and newlines), counted in the classifier sample
        and scaled to the whole text, at the model's tokens per character."""
        if prof is None or not f.text_bytes:
            return 0, 0
        fr = self.framing(self.model_key(f.model))
        digits = prof.digits if self.cfg.count_digits else 0
        punct, newlines = (prof.punctuation, prof.newlines) if self.cfg.count_punctuation else (0, 0)
        in_sample = digits + punct + newlines
        if not in_sample:
            return 0, 0
        # scale the sample counts to the whole text (never more bytes than the text has)
        scale = min(max(1.0, f.text_bytes / len(f.sample)), f.text_bytes / in_sample)
        tokens = digits * fr.digit_tokens + (punct * fr.punct_tokens + newlines * fr.newline_tokens) * (
            self.cfg.code_structure_scale if prof.category == "code" else 1.0
        )
        return round(in_sample * scale), math.ceil(tokens * scale)

    def _estimate_runs(self, f: RequestFeatures, prompt_counts: RunCounts | None = None) -> TokenBudget:
        """The ``runs`` cost model: ``ceil(modelled_text_tokens / c*_key) + framing + media + ids``;
        ``prompt_counts`` replaces ``f.runs`` (the window screen, :mod:`extproc.core.screen`)."""
        model_key = self.model_key(f.model)
        fr = self.framing(model_key)
        costs = run_costs(fr.family)
        counts = f.runs if prompt_counts is None else prompt_counts
        if f.reasoning_runs is not None and fr.renders_reasoning:
            counts = counts + f.reasoning_runs
        if f.tools_runs is not None:
            counts = counts + f.tools_runs[1 if fr.tools_json_spaced else 0]
        text_tokens, kind = costs.text_tokens(counts)
        key = (model_key, kind if self.cfg.per_category else ALL_CATEGORY)
        return self._budget(
            f,
            key,
            text_tokens,
            self.fixed_tokens(f),
            ratio_bytes=round(text_tokens),
            model_tokens=text_tokens,
            unexplained=f.unknown_fields > 0,
        )

    def _budget(
        self,
        f: RequestFeatures,
        key: RatioKey,
        units: float,
        fixed: int,
        *,
        ratio_bytes: int,
        model_tokens: float = 0.0,
        unexplained: bool = False,
    ) -> TokenBudget:
        """The budget of ``f`` when ``units`` (bytes, or modelled tokens) are divided by the
        routing value of ``key`` and ``fixed`` prompt tokens are added: ``L_total = prompt +
        n_sequences · output_reserve`` (docs/method.md §2)."""
        ratio, central, warm = self._routing(key)
        return self.budget_for(
            f,
            key=key,
            ratio_bpt=ratio,
            fixed_prompt_tokens=fixed,
            prompt_tokens=math.ceil(units / ratio) + fixed,
            warm=warm,
            ratio_bytes=ratio_bytes,
            central_prompt_tokens=math.ceil(units / central) + fixed,
            model_tokens=model_tokens,
            n_media=f.n_images + f.n_audio,
            unexplained=unexplained,
        )

    def budget_for(self, f: RequestFeatures, **fields: Any) -> TokenBudget:
        """A :class:`TokenBudget` of ``f`` from its prompt fields (``prompt_tokens``, ``key``, ...):
        adds the text bytes, the output reserve, ``n_sequences`` and ``total_tokens = prompt +
        n_sequences · output_reserve`` (docs/method.md §2), the prompt counted as vLLM holds it:
        at most ``truncate_prompt_tokens`` when the request sets it (vLLM keeps the last N tokens)."""
        prompt = int(fields["prompt_tokens"])
        key = self.output_class(f, prompt)
        reserve, source = self.output_reserve(f, prompt, key)
        if key is not None and key.prompt_band and fields.get("screened") and source != "client":
            # a bound is above the true prompt, so its band may be too: reserve the most of the
            # bands it could be in (a bound never routes shorter than the estimate would)
            for band in range(key.prompt_band):
                other, _ = self.output_reserve(f, prompt, key._replace(prompt_band=band))
                reserve = max(reserve, other)
        cap = f.truncate_prompt_tokens or 0
        held = min(prompt, cap) if cap else prompt
        return TokenBudget(
            text_bytes=f.text_bytes,
            output_reserve_tokens=reserve,
            n_sequences=f.n_sequences,
            total_tokens=held + f.n_sequences * reserve,
            output_class=key,
            output_reserve_source=source,
            prompt_cap_tokens=cap,
            **fields,
        )

    def output_class(self, f: RequestFeatures, prompt_tokens_est: int) -> OutputClassKey | None:
        """The output class of a request (None when the output reserve is not learned)."""
        if self.output_learner is None:
            return None
        return self.output_learner.class_of(f, self.model_key(f.model), prompt_tokens_est)

    def output_reserve_tokens(self, f: RequestFeatures, prompt_tokens_est: int = 0) -> int:
        """Per-sequence output reserve (tokens): see :meth:`output_reserve`."""
        return self.output_reserve(f, prompt_tokens_est)[0]

    def output_reserve(
        self, f: RequestFeatures, prompt_tokens_est: int = 0, key: OutputClassKey | None = None
    ) -> tuple[int, str]:
        """``(per-sequence output reserve in tokens, its source)`` (docs/estimator.md §Output half).

        * a client maximum (``max_completion_tokens`` / ``max_tokens`` / ``max_output_tokens``):
          the maximum (``strict``, the default), or ``min(maximum, learned quantile)`` (``risk``);
        * none: the learned quantile of the request's output class when
          ``estimator.output_reserve.learned`` (the class's cold prior until it has learned), else
          ``default_output_reserve_tokens``.

        A learned reserve never exceeds the largest pool's ``max_model_len`` minus
        ``prompt_tokens_est`` (not capped when the prompt alone is over it: no pool holds the request). Sources: ``client``, ``risk``, ``learned``, ``default``.
        """
        learner = self.output_learner
        maximum = f.max_output_tokens
        if learner is None:
            if maximum is None:
                return self.cfg.default_output_reserve_tokens, "default"
            return maximum, "client"
        if maximum is not None and self.cfg.output_reserve.policy == "strict":
            return maximum, "client"
        if key is None:
            key = learner.class_of(f, self.model_key(f.model), prompt_tokens_est)
        room = 1 << 30
        if self.max_model_len_tokens is not None and prompt_tokens_est < self.max_model_len_tokens:
            room = self.max_model_len_tokens - prompt_tokens_est  # a prompt over every pool: no cap
        learned = learner.reserve_tokens(key, max_reserve_tokens=room)
        if maximum is None:
            return learned, "learned"
        return (learned, "risk") if learned < maximum else (maximum, "client")

    def estimate(self, f: RequestFeatures, prompt_counts: RunCounts | None = None) -> TokenBudget:
        """Compute the :class:`TokenBudget` of a parsed request (``prompt_counts``: see
        :meth:`_estimate_runs`)."""
        if self.cfg.cost_model == "runs":
            return self._estimate_runs(f, prompt_counts)
        prof = profile_text(f.sample) if f.sample else None
        key = (self.model_key(f.model), self._category(f, prof))
        structure_bytes, structure_tokens = self._structure(f, prof)
        ratio_bytes = f.text_bytes + f.tool_schema_bytes - structure_bytes
        return self._budget(
            f, key, ratio_bytes, self.fixed_tokens(f) + structure_tokens, ratio_bytes=ratio_bytes
        )

    def observe(self, budget: TokenBudget, prompt_tokens: int) -> Observation | None:
        """Learn from the served ``usage.prompt_tokens`` of a request estimated as ``budget``.

        Returns None (and learns nothing) when the observation carries no usable text signal:
        no text, non-positive usage, a prompt dominated by non-text parts, or a prompt vLLM cut
        to ``truncate_prompt_tokens``. ``runs`` model: see
        :meth:`_observe_runs`.
        """
        if budget.prompt_cap_tokens and prompt_tokens >= budget.prompt_cap_tokens:
            return None  # vLLM cut the prompt to truncate_prompt_tokens: the count is the cap's
        if budget.model_tokens > 0.0:
            return self._observe_runs(budget, prompt_tokens)
        nbytes = budget.ratio_bytes or budget.text_bytes
        if prompt_tokens <= 0 or nbytes <= 0:
            return None
        ratio_tokens = prompt_tokens - budget.fixed_prompt_tokens
        if ratio_tokens <= 0 or ratio_tokens < _MIN_TEXT_SHARE * prompt_tokens:
            return None
        c_obs = nbytes / ratio_tokens
        ref = self.cal.weight_ref_tokens
        weight = min(1.0, ratio_tokens / ref) if ref > 0 else 1.0
        state = self.store.observe(budget.key, c_obs, weight)
        rel = (budget.prompt_tokens - prompt_tokens) / prompt_tokens
        return Observation(key=budget.key, c_obs_bpt=c_obs, rel_error=rel, state=state)

    def _observe_runs(self, budget: TokenBudget, prompt_tokens: int) -> Observation | None:
        """Robust learning of the ``runs`` model (docs/estimator.md §Learning).

        * media in the request: the tokens the text model does not explain are attributed to the
          media (learned tokens per item of the model, never below the configured budget); the text
          key learns nothing;
        * unknown fields, or ``modelled/true`` off the key's value by more than ``reject_factor``:
          not learned (returns None);
        * otherwise ``c_obs`` is clipped to within ×/÷ (1 + ``max_step``) of the key's value, and a
          key's first observation is blended with the cold prior (``first_observation_weight``), then
          folded in by the store's EMA/quantile learner (the same in memory and in Redis).
        """
        cfg = self.cfg
        text_tokens = prompt_tokens - budget.fixed_prompt_tokens
        model_key = budget.key[0]
        if budget.n_media:
            per_item = self._media_per_item(budget, prompt_tokens)
            if per_item > self._media.get(model_key, 0.0):
                self._media[model_key] = min(per_item, float(cfg.max_media_tokens))
            return None
        if budget.unexplained or prompt_tokens <= 0 or text_tokens <= 0:
            return None
        c_obs = budget.model_tokens / text_tokens
        state = self.store.get(budget.key)
        current = state.mean_bpt if state is not None and state.samples else 1.0
        if not (current / cfg.reject_factor <= c_obs <= current * cfg.reject_factor):
            return None
        c_obs = min(max(c_obs, current / (1.0 + cfg.max_step)), current * (1.0 + cfg.max_step))
        if state is None or not state.samples:
            w = cfg.first_observation_weight
            c_obs = math.exp(w * math.log(c_obs) + (1.0 - w) * math.log(current))
        c_obs = max(c_obs, cfg.min_model_ratio)
        ref = self.cal.weight_ref_tokens
        weight = min(1.0, text_tokens / ref) if ref > 0 else 1.0
        new = self.store.observe(budget.key, c_obs, weight)
        held = self._recovered.get(budget.key)
        if held is not None:
            if held[1] <= 1 or new.low_bpt <= held[0]:
                del self._recovered[budget.key]
            else:
                self._recovered[budget.key] = (held[0], held[1] - 1)
        rel = (budget.prompt_tokens - prompt_tokens) / prompt_tokens
        return Observation(key=budget.key, c_obs_bpt=c_obs, rel_error=rel, state=new)

    def _media_per_item(self, budget: TokenBudget, prompt_tokens: int) -> float:
        """Tokens per media item the served prompt implies, once the central text estimate and the
        non-media fixed tokens are taken out."""
        text = budget.central_prompt_tokens - budget.fixed_prompt_tokens
        per_item_budget, _ = self.media_tokens(budget.key[0])
        others = budget.fixed_prompt_tokens - math.ceil(per_item_budget * budget.n_media)
        return (prompt_tokens - text - others) / budget.n_media

    def recover(self, budget: TokenBudget, prompt_tokens: int) -> float | None:
        """A confirmed misroute of ``budget`` whose served prompt was ``prompt_tokens``.

        ``runs`` model: with media, the unexplained tokens raise the model's per-item media budget
        at once; otherwise the key's routing value is lowered to the observed ``modelled/true``, but
        never below ``min_model_ratio``, for the next ``recovery_observations`` observations of the
        key. The key's warm-up is not touched and the store is not written (same with Redis).
        Returns the new value (tokens per item for media), or None when nothing changed.
        """
        cfg = self.cfg
        if budget.prompt_cap_tokens and prompt_tokens >= budget.prompt_cap_tokens:
            return None  # a prompt vLLM cut to truncate_prompt_tokens says nothing of the ratio
        if budget.n_media:
            image, _ = self.media_tokens(budget.key[0])
            per_item = self._media_per_item(budget, prompt_tokens)
            if per_item <= image:
                return None
            self._media[budget.key[0]] = min(per_item, float(cfg.max_media_tokens))
            return self._media[budget.key[0]]
        text_tokens = prompt_tokens - budget.fixed_prompt_tokens
        if budget.model_tokens <= 0.0 or text_tokens <= 0:
            return None
        c_obs = max(budget.model_tokens / text_tokens, cfg.min_model_ratio)
        if c_obs >= budget.ratio_bpt:
            return None
        self._recovered[budget.key] = (c_obs, cfg.recovery_observations)
        return c_obs
