"""Token-budget estimate of a request, and calibration from its response (arXiv 2604.09613; docs/method.md §3).

``L_total = prompt_tokens_est + n_sequences · output_reserve`` where

``prompt_tokens_est = ceil(m / c*_k) + framing + media + exact_token_ids``

* ``m`` = the modelled tokens of the text the template renders: its run counts priced per run
  and per character for the model's tokenizer family (:mod:`extproc.core.text.runs`,
  :mod:`extproc.core.text.run_costs`; docs/estimator.md);
* ``c*_k`` = the conservative model-to-true ratio (modelled ÷ true tokens) of the request's
  (model, content kind) key: its cold correction until warm, then the learned low quantile
  ramped in from the cold correction (:mod:`extproc.core.estimate.calibration`);
* ``framing`` = chat-template tokens from the model's :class:`~extproc.config.ModelProfile`
  (per message, per request, per tool, tool boilerplate);
* ``media`` = image and audio parts by rule, times a factor learned per (model, kind, size class);
* ``n_sequences · output_reserve`` is the KV footprint of the generated tokens: vLLM keeps one
  KV sequence per choice (``n`` / ``best_of``).

Calibration (:meth:`Estimator.observe`) learns ``c_obs = m / (prompt_tokens − fixed)``, bounded per
step and rejected when far from the key's value; a request with media teaches the media's factor
instead. The paper's bytes/token ratio survives as an evaluation baseline
(``evaluation/baselines/bytes_model.py``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Collection, Sequence
from typing import Any

from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.estimate.budget import Framing, Observation, TokenBudget
from extproc.core.estimate.calibration import RatioKey, RatioStore
from extproc.core.estimate.output_reserve import OutputClassKey, OutputLengthLearner, learned_total_tokens
from extproc.core.request.audio import AudioBudget
from extproc.core.request.images import ImageBudget, rule_tokens
from extproc.core.request.request_body import RequestFeatures
from extproc.core.text.run_costs import run_costs
from extproc.core.text.runs import RunCounts

__all__ = [
    "OTHER",
    "Estimator",
    "Framing",
    "Observation",
    "TokenBudget",
]

TOOL_CALL_FRAMING_TOKENS = 12
"""Template tokens around one assistant tool call beyond its name and arguments (Qwen3:
``<tool_call>\n{"name": "…", "arguments": …}\n</tool_call>`` = 12 tokens; Llama-3.1 ≈ 8)."""

MEDIA_SIZE_CLASSES = (("s", 256), ("m", 2048), ("l", 16384))
"""Size classes of a media part by its tokens under the rule: below 256, 2048, 16384, else ``xl``
(a 5 s voice note and a 10-minute recording never share a learned cost)."""
MIN_MEDIA_FACTOR = 1.0 / 16.0
MAX_MEDIA_FACTOR = 16.0


def size_class(tokens: float) -> str:
    """The size class (``s``, ``m``, ``l``, ``xl``) of a media part of ``tokens`` by its rule."""
    for name, below in MEDIA_SIZE_CLASSES:
        if tokens < below:
            return name
    return "xl"


ALL_CATEGORY = "all"
"""The content kind of every key without ``estimator.per_category`` (one value per model)."""
OTHER = "_other"
"""The model key shared by every name without a key slot (:meth:`Estimator.model_key`)."""


class Estimator:
    """Estimates budgets and learns ratios; one instance serves all streams of a process.

    Args:
        estimator: estimator parameters.
        calibration: calibration parameters (β is applied by ``store``; γ and warm-up here).
        store: where ratios live.
        output_learner: the learned answer lengths (:mod:`extproc.core.estimate.output_reserve`); None = a
            new one when ``estimator.output_reserve.learned``, else none (the default reserve).
        max_model_len_tokens: the largest pool's ``max_model_len``: no output reserve exceeds it
            minus the prompt estimate (None = unbounded).
        reserved_models / reserved_patterns: the ``models:`` sets' exact names and patterns, whose
            names take a model-key slot at once (:meth:`model_key`).
    """

    def __init__(
        self,
        *,
        estimator: EstimatorConfig,
        calibration: CalibrationConfig,
        store: RatioStore,
        output_learner: OutputLengthLearner | None = None,
        max_model_len_tokens: int | None = None,
        reserved_models: Collection[str] = (),
        reserved_patterns: Sequence[str] = (),
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
        """Model names holding a key slot (the name is the key), at most ``max_models``."""
        self._keys_learned: set[str] = set()
        """Keys something was learned for (a ratio or a media cost): their slots are kept."""
        self._reserved = frozenset(reserved_models)
        self._reserved_rx = [re.compile(p, re.IGNORECASE) for p in reserved_patterns]
        self._verdicts: dict[str, bool] = {}
        """Whether a name not holding a slot may take one at once (bounded cache)."""
        self._framing: dict[str, Framing] = {}
        self._profiles = [(re.compile(p.pattern, re.IGNORECASE), p) for p in estimator.model_profiles]
        self._recovered: dict[RatioKey, tuple[float, int]] = {}
        """Keys lowered by misroute recovery: (value, observations left); process-local, so the
        in-memory and Redis stores behave the same."""
        self._media: dict[tuple[str, str, str], float] = {}
        """Learned factor on the rule's tokens of each (model key, media kind, size class)."""
        self.images = ImageBudget(estimator.image_rules, estimator.image_tokens)
        self.audio = AudioBudget(
            estimator.audio_rules, estimator.audio_tokens_per_second, estimator.audio_tokens
        )

    def model_key(self, model: str) -> str:
        """Bounded model key: the name itself when it holds one of the ``max_models`` slots, else
        ``_other``.

        A name takes a slot at once when it is *reserved*: listed in the router's ``models:`` sets,
        matching one of their patterns, or matching a model profile (its framing and tokenizer
        family are known). Any other name takes one only after a 2xx answer with usage
        (:meth:`admit`, called by :meth:`observe`): names the pools do not serve (404s) never do.
        A full table gives up a slot that never learned anything; names longer than 128
        characters are always ``_other``.
        """
        key = self._models.get(model)
        if key is not None:
            return key
        if len(model) > 128 or not self._is_reserved(model):
            return OTHER
        return self.admit(model)

    def _is_reserved(self, model: str) -> bool:
        verdict = self._verdicts.get(model)
        if verdict is None:
            verdict = (
                model in self._reserved
                or any(rx.search(model) for rx in self._reserved_rx)
                or any(rx.search(model) for rx, _ in self._profiles)
            )
            if len(self._verdicts) < 4 * self.cfg.max_models:
                self._verdicts[model] = verdict
        return verdict

    def admit(self, model: str, *, learned: bool = False) -> str:
        """Give ``model`` a key slot if it can have one; returns its key (``_other`` when not).

        Free slots are shared, except that an unreserved name leaves room for every exact
        ``models:`` name not yet seen; with no room a slot that never learned anything is
        reclaimed (its name falls back to ``_other`` until it takes a slot again). ``learned``
        marks the key as holding learned values (restored from a snapshot or Redis).
        """
        key = self._models.get(model)
        if key is None:
            if len(model) > 128 or model == OTHER:
                return OTHER
            reserved = self._is_reserved(model)
            waiting = 0 if reserved else len(self._reserved.difference(self._models))
            if len(self._models) + waiting >= self.cfg.max_models and not self._reclaim():
                return OTHER
            key = self._models[model] = model
        if learned:
            self._keys_learned.add(key)
        return key

    def _reclaim(self) -> bool:
        """Free the oldest slot that never learned anything; False when every slot has."""
        for name in self._models:
            if name not in self._keys_learned:
                del self._models[name]
                self._framing.pop(name, None)
                return True
        return False

    @property
    def model_keys(self) -> tuple[str, ...]:
        """The names holding a key slot, oldest first."""
        return tuple(self._models)

    def framing_of(self, model: str) -> Framing:
        """The :class:`Framing` of a request's raw ``model`` name: its profile is matched on the
        name even when the name has no key slot (``_other``)."""
        key = self.model_key(model)
        return self.framing(model if key == OTHER and len(model) <= 128 else key)

    def framing(self, model_key: str) -> Framing:
        """The :class:`Framing` of a model key (or raw name): first matching profile, else the
        config defaults."""
        fr = self._framing.get(model_key)
        if fr is None:
            c = self.cfg
            fr = Framing(
                "",
                c.message_framing_tokens,
                c.request_framing_tokens,
                c.tool_framing_tokens,
                0,
            )
            if model_key != OTHER:
                for rx, p in self._profiles:
                    if rx.search(model_key):
                        fr = Framing(
                            p.family,
                            p.message_framing_tokens,
                            p.request_framing_tokens,
                            p.tool_framing_tokens,
                            p.per_tool_tokens,
                            p.renders_reasoning,
                            p.tools_json_spaced,
                        )
                        break
            if len(self._framing) < 4 * self.cfg.max_models or model_key in self._models:
                self._framing[model_key] = fr
        return fr

    def prior(self, key: RatioKey) -> float:
        """Cold-start value of a key: the cold correction of (tokenizer family, content kind)
        (:mod:`extproc.core.text.run_costs`), 0.8 for a kind without one."""
        return run_costs(self.framing(key[0]).family).cold_ratio.get(key[1], 0.8)

    def _routing(self, key: RatioKey) -> tuple[float, float, bool]:
        """``(conservative ratio, central ratio, warm)`` of a key (recovery override applied)."""
        ratio, central, warm = self._learned(key)
        held = self._recovered.get(key)
        if held is not None:
            ratio = min(ratio, held[0])
        return ratio, central, warm

    def _learned(self, key: RatioKey) -> tuple[float, float, bool]:
        floor = self.cfg.min_model_ratio
        state = self.store.get(key)
        if state is None or state.samples < max(1, self.cal.warmup_samples):
            prior = max(self.prior(key), floor)
            central = state.mean_ratio if state is not None else 1.0
            return prior, max(central, floor), False
        if self.cal.learner == "quantile" and state.low_ratio > 0.0:
            ratio = state.low_ratio
        else:
            ratio = state.mean_ratio - self.cal.gamma * state.dev_ratio
        w = min(1.0, state.samples / self.cfg.prior_ramp_samples)
        ratio = math.exp(w * math.log(max(ratio, floor)) + (1.0 - w) * math.log(self.prior(key)))
        # the plausibility band is symmetric: no key budgets text below half its modelled
        # tokens either (a stale or foreign state of 40 routes as 2.0, issue 34)
        ratio = min(ratio, 1.0 / floor)
        return max(ratio, floor), max(state.mean_ratio, floor), True

    def routing_ratio(self, key: RatioKey) -> tuple[float, bool]:
        """Return ``(c*, warm)``: the learned conservative ratio after warm-up, else the prior."""
        ratio, _, warm = self._routing(key)
        return ratio, warm

    def media_items(self, f: RequestFeatures) -> list[tuple[str, int]]:
        """``(kind, tokens by rule)`` of each media part: images (and documents) by the model's
        image rule from their pixel size, else ``image_tokens``; audio by the model's audio rule
        from the duration in its header, else ``audio_tokens`` (extproc.core.request.images, .audio)."""
        items: list[tuple[str, int]] = []
        if f.n_images:
            rule = self.images.rule(f.model)
            if rule is None:
                items += [("image", self.cfg.image_tokens)] * f.n_images
            else:
                sizes = f.image_sizes[: f.n_images]
                items += [("image", rule_tokens(rule, size)) for size in sizes]
                items += [("image", rule.max_tokens)] * (f.n_images - len(sizes))
        if f.n_audio:
            clips = f.audio_clips[: f.n_audio]
            items += [("audio", self.audio.tokens(f.model, clip)) for clip in clips]
            items += [("audio", self.audio.unknown_tokens)] * (f.n_audio - len(clips))
        return items

    def media_budget(self, f: RequestFeatures) -> tuple[int, str, float]:
        """``(tokens, media key, tokens by rule)`` of the request's media: each part's rule tokens
        times the learned factor of its (model key, kind, size class), default 1; the media key is
        ``"<kind>:<class>"`` when every part shares one (what an observation can be learned on),
        else ''."""
        items = self.media_items(f)
        if not items:
            return 0, "", 0.0
        model_key = self.model_key(f.model)
        total = base = 0.0
        keys = set()
        for kind, tokens in items:
            cls = size_class(tokens)
            total += tokens * self._media.get((model_key, kind, cls), 1.0)
            base += tokens
            keys.add(f"{kind}:{cls}")
        return math.ceil(total), keys.pop() if len(keys) == 1 else "", base

    def media_factor(self, model_key: str, kind: str, cls: str) -> float:
        """The learned factor on the rule's tokens of (model key, media kind, size class); 1.0 until learned."""
        return self._media.get((model_key, kind, cls), 1.0)

    def fixed_tokens(self, f: RequestFeatures) -> int:
        """Modelled non-ratio prompt tokens: template framing, media, token ids."""
        fixed = f.exact_prompt_tokens + (self.media_budget(f)[0] if f.n_images or f.n_audio else 0)
        if f.endpoint != "completions":  # chat, responses, messages, chat_batch: chat template
            fr = self.framing_of(f.model)
            fixed += fr.request_tokens + fr.message_tokens * f.n_messages
            if f.n_tools:
                fixed += fr.tool_tokens + fr.per_tool_tokens * f.n_tools
            fixed += TOOL_CALL_FRAMING_TOKENS * f.n_tool_calls
        return fixed

    def _estimate_runs(self, f: RequestFeatures, prompt_counts: RunCounts | None = None) -> TokenBudget:
        """The ``runs`` cost model: ``ceil(modelled_text_tokens / c*_key) + framing + media + ids``;
        ``prompt_counts`` replaces ``f.runs`` (the window screen, :mod:`extproc.core.estimate.screen`)."""
        model_key = self.model_key(f.model)
        fr = self.framing_of(f.model)
        costs = run_costs(fr.family)
        counts = f.runs if prompt_counts is None else prompt_counts
        if f.reasoning_runs is not None and fr.renders_reasoning:
            counts = counts + f.reasoning_runs
        if f.tools_runs is not None:
            counts = counts + f.tools_runs[1 if fr.tools_json_spaced else 0]
        text_tokens, kind = costs.text_tokens(counts)
        key = (model_key, kind if self.cfg.per_category else ALL_CATEGORY)
        ratio, central, warm = self._routing(key)
        return self.ratio_budget(
            f,
            key,
            text_tokens,
            self.fixed_tokens(f),
            ratio=ratio,
            central_ratio=central,
            warm=warm,
            modelled_units=round(text_tokens),
            model_tokens=text_tokens,
            unexplained=f.unknown_fields > 0,
        )

    def ratio_budget(
        self,
        f: RequestFeatures,
        key: RatioKey,
        units: float,
        fixed: int,
        *,
        ratio: float,
        central_ratio: float,
        warm: bool,
        modelled_units: int,
        model_tokens: float = 0.0,
        unexplained: bool = False,
    ) -> TokenBudget:
        """The budget of ``f`` when its text's ``units`` (modelled tokens; bytes for the evaluation's
        ``bytes`` baseline) are divided by ``ratio`` (conservative) and ``central_ratio`` (the mean
        ĉ), plus ``fixed`` prompt tokens and the request's media budget: ``prompt_tokens =
        ceil(units / ratio) + fixed``, ``L_total = prompt + n_sequences · output_reserve``
        (docs/method.md §2; :meth:`budget_for`). ``ratio`` and ``central_ratio`` must be > 0."""
        media_tokens, media_key, media_base = (
            self.media_budget(f) if f.n_images or f.n_audio else (0, "", 0.0)
        )
        return self.budget_for(
            f,
            media_tokens=media_tokens,
            media_key=media_key,
            media_base_tokens=media_base,
            key=key,
            routing_ratio=ratio,
            fixed_prompt_tokens=fixed,
            prompt_tokens=math.ceil(units / ratio) + fixed,
            warm=warm,
            modelled_units=modelled_units,
            central_prompt_tokens=math.ceil(units / central_ratio) + fixed,
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
        total = held + f.n_sequences * reserve
        central = int(fields.get("central_prompt_tokens") or prompt)
        if source in ("learned", "risk"):  # a quantile, not a promise: one margin per failure
            total = learned_total_tokens(
                held,
                min(central, cap) if cap else central,
                reserve,
                f.n_sequences,
                min_reserve_tokens=self.cfg.output_reserve.min_reserve_tokens,
            )
        return TokenBudget(
            model=f.model if len(f.model) <= 128 else "",
            text_bytes=f.text_bytes,
            output_reserve_tokens=reserve,
            n_sequences=f.n_sequences,
            total_tokens=total,
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
        return self._estimate_runs(f, prompt_counts)

    def observe(self, budget: TokenBudget, prompt_tokens: int) -> Observation | None:
        """Learn from the served ``usage.prompt_tokens`` of a request estimated as ``budget``.

        Returns None (and learns nothing) when the observation carries no usable text signal:
        no modelled text, non-positive usage, unexplained fields, or a prompt vLLM cut to
        ``truncate_prompt_tokens`` (:meth:`_observe_runs`); with media, the media's cost is learned
        instead of the text's.
        """
        if budget.key[0] == OTHER and budget.model and prompt_tokens > 0:
            # a 2xx with usage: the pools serve this name, which may now take a key slot; the
            # observation is then its own (the estimate used _other's values, as text is text)
            key = self.admit(budget.model)
            if key != OTHER:
                budget = dataclasses.replace(budget, key=(key, budget.key[1]))
        if budget.prompt_cap_tokens and prompt_tokens >= budget.prompt_cap_tokens:
            return None  # vLLM cut the prompt to truncate_prompt_tokens: the count is the cap's
        if budget.n_media:
            # the tokens the text estimate does not explain are the media's: learned per media kind
            # and size class, up or down; the text key learns nothing
            self._learn_media(budget, prompt_tokens, recovery=False)
            return None
        if budget.model_tokens <= 0.0:
            return None  # no modelled text (token ids only, or a budget that counted nothing)
        return self._observe_runs(budget, prompt_tokens)

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
        if budget.unexplained or prompt_tokens <= 0 or text_tokens <= 0:
            return None
        c_obs = budget.model_tokens / text_tokens
        state = self.store.get(budget.key)
        current = state.mean_ratio if state is not None and state.samples else 1.0
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
        self._keys_learned.add(budget.key[0])
        held = self._recovered.get(budget.key)
        if held is not None:
            if held[1] <= 1 or new.low_ratio <= held[0]:
                del self._recovered[budget.key]
            else:
                self._recovered[budget.key] = (held[0], held[1] - 1)
        rel = (budget.prompt_tokens - prompt_tokens) / prompt_tokens
        central = (budget.central_prompt_tokens - prompt_tokens) / prompt_tokens
        return Observation(
            key=budget.key, observed_ratio=c_obs, rel_error=rel, state=new, central_rel_error=central
        )

    def _learn_media(
        self, budget: TokenBudget, prompt_tokens: int, *, recovery: bool, recovery_step: float = 1.0
    ) -> float | None:
        """Learn the factor of the media key of ``budget`` from a served ``prompt_tokens``.

        The media's tokens are the served prompt minus the central text estimate and the other
        fixed tokens, all as they were when ``budget`` was made (the state before this
        observation: a cost raised since is not counted twice). ``factor_obs = media tokens /
        rule tokens``, clamped to [1/16, 16] and to ``max_media_tokens`` per part. An observation
        moves the factor toward it by at most ×/÷ (1 + ``max_step``): down as well as up.
        Misroute ``recovery`` (the prompt overflowed the pool) raises it toward ``factor_obs`` at
        once, by at most × (1 + ``recovery_step``), and never lowers it. Returns the new factor, or
        None when nothing changed (several media kinds or classes in one request cannot be told
        apart).
        """
        if not budget.media_key or budget.media_base_tokens <= 0.0 or prompt_tokens <= 0:
            return None
        text = budget.central_prompt_tokens - budget.fixed_prompt_tokens
        others = budget.fixed_prompt_tokens - budget.media_tokens
        media = prompt_tokens - text - others
        cap = self.cfg.max_media_tokens * budget.n_media / budget.media_base_tokens
        observed = min(
            max(media / budget.media_base_tokens, MIN_MEDIA_FACTOR),
            MAX_MEDIA_FACTOR,
            max(cap, MIN_MEDIA_FACTOR),
        )
        kind, cls = budget.media_key.split(":", 1)
        key = (budget.key[0], kind, cls)
        current = self._media.get(key, 1.0)
        if recovery:
            if observed <= current:
                return None
            # bounded from the factor the request was budgeted with (before its own observation)
            used = budget.media_tokens / budget.media_base_tokens
            new = max(current, min(observed, used * (1.0 + recovery_step)))
            if new <= current:
                return None
        else:
            step = 1.0 + self.cfg.max_step
            new = min(max(observed, current / step), current * step)
        self._media[key] = new
        self._keys_learned.add(budget.key[0])
        return new

    def recover(
        self, budget: TokenBudget, prompt_tokens: int, *, max_step: float = 0.1, max_media_step: float = 1.0
    ) -> float | None:
        """A confirmed misroute of ``budget`` whose served prompt was ``prompt_tokens``.

        ``runs`` model: with media, the unexplained tokens raise the factor of the media's kind and
        size class, by at most × (1 + ``max_media_step``); otherwise the key's routing value is
        lowered toward the observed ``c_obs = modelled/true``, by at most ÷ (1 + ``max_step``) from
        the value the request was routed with and never below ``min_model_ratio``, for the next
        ``recovery_observations`` observations of the key (``recovery.max_step``,
        ``recovery.max_media_step``). A ``c_obs`` more than ``reject_factor`` below that value moves
        nothing: the request is not like its key, as ordinary learning judges it too (issue 34: one
        request of random letters or random punctuation moved its key to the floor 0.5). The key's
        warm-up is not touched and the store is not written (same with Redis). Returns the new
        value (the media factor for media), or None when nothing changed.
        """
        cfg = self.cfg
        if budget.prompt_cap_tokens and prompt_tokens >= budget.prompt_cap_tokens:
            return None  # a prompt vLLM cut to truncate_prompt_tokens says nothing of the ratio
        if budget.n_media:
            return self._learn_media(budget, prompt_tokens, recovery=True, recovery_step=max_media_step)
        text_tokens = prompt_tokens - budget.fixed_prompt_tokens
        if budget.model_tokens <= 0.0 or text_tokens <= 0:
            return None
        c_obs = budget.model_tokens / text_tokens
        if c_obs * cfg.reject_factor < budget.routing_ratio:
            return (
                None  # the request is not like its key (random punctuation): ordinary learning rejects it too
            )
        value = max(c_obs, budget.routing_ratio / (1.0 + max_step), cfg.min_model_ratio)
        if value >= budget.routing_ratio:
            return None
        self._recovered[budget.key] = (value, cfg.recovery_observations)
        return value
