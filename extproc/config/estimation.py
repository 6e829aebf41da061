"""Estimator and calibration settings: model profiles (template framing), image rules, learner constants (docs/estimator.md)."""

from __future__ import annotations

import itertools
import logging
import os
import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator, model_validator

from extproc.config.base import Strict

log = logging.getLogger(__name__)

REMOVED_ESTIMATOR_SETTINGS: tuple[str, ...] = (
    "cost_model",
    "prior_bytes_per_token",
    "family_priors",
    "count_digits",
    "count_punctuation",
    "code_structure_scale",
    "digit_tokens_per_digit",
    "punct_tokens_per_char",
    "newline_tokens_per_char",
    "min_bytes_per_token",
    "sample_bytes",
)
"""``estimator`` settings of the retired ``bytes`` cost model (one bytes/token ratio per content
category). They had no effect under ``cost_model: runs`` (the default since the run counts), so a
file that still sets them routes as before: they are ignored with a warning for one release, then
rejected as unknown keys. The model lives on as an evaluation baseline
(``evaluation/baselines/bytes_model.py``)."""

REMOVED_PROFILE_SETTINGS: tuple[str, ...] = (
    "digit_tokens_per_digit",
    "punct_tokens_per_char",
    "newline_tokens_per_char",
)
"""``estimator.model_profiles[]`` settings of the retired ``bytes`` cost model (ignored with a warning)."""


def drop_removed_settings(data: Any, removed: tuple[str, ...], where: str) -> Any:
    """``data`` (a mapping about to be validated) without the ``removed`` settings, each logged
    as a warning naming it; anything else is returned unchanged.

    Raises:
        ValueError: ``cost_model`` is set to anything but ``runs``: the ``bytes`` cost model was
            removed, and ignoring the setting would change how the router budgets.
    """
    if not isinstance(data, dict) or not any(k in data for k in removed):
        return data
    model = data.get("cost_model", "runs")
    if "cost_model" in removed and model != "runs":
        raise ValueError(
            f"{where}.cost_model: {model!r} was removed: the router has one cost model, the run counts "
            "(docs/estimator.md); the bytes/token model is an evaluation baseline now "
            "(evaluation/baselines/bytes_model.py). Delete the setting."
        )
    for name in removed:
        if name in data:
            log.warning(
                "%s.%s was removed (a setting of the retired bytes cost model, without effect on the "
                "run counts); it is ignored now and will be an error in the next release: delete it",
                where,
                name,
            )
    return {k: v for k, v in data.items() if k not in removed}


def _compiled_pattern(v: str) -> str:
    """``v`` unchanged when it compiles as a Python regular expression; ValueError otherwise."""
    try:
        re.compile(v)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression: {exc}") from exc
    return v


ModelPattern = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_compiled_pattern)]
"""A Python regular expression searched (``re.search``, case-insensitive) in a request's ``model``."""


class ModelProfile(Strict):
    """Chat-template framing and tokenizer family of the models whose name matches ``pattern``.

    Framing is counted in tokens and added to the text estimate (it is not folded into the
    model-to-true ratio). ``family`` selects the run costs and cold corrections
    (``extproc/core/text/run_costs.json``); an unknown family uses the conservative ``unknown`` costs.
    Values measured per template in docs/estimator.md §Framing.
    """

    pattern: ModelPattern
    """Python regular expression searched (``re.search``, case-insensitive) in the ``model`` field."""

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        return drop_removed_settings(data, REMOVED_PROFILE_SETTINGS, "estimator.model_profiles[]")

    family: Annotated[str, Field(min_length=1, max_length=32)]
    message_framing_tokens: Annotated[int, Field(ge=0, le=64)]
    request_framing_tokens: Annotated[int, Field(ge=0, le=4096)]
    tool_framing_tokens: Annotated[int, Field(ge=0, le=4096)] = 0
    """Template boilerplate added once when ``tools`` are present."""
    per_tool_tokens: Annotated[int, Field(ge=0, le=256)] = 0
    """Template tokens added per tool definition (separators), beyond the schema text."""
    renders_reasoning: bool = True
    tools_json_spaced: bool = True
    """The template prints tool schemas as JSON with ``", "``/``": "`` separators (Qwen3 ``tojson``);
    False: compact JSON (the Llama-3 stand-in and OpenAI count append the compact schema)."""
    """The chat template renders assistant ``reasoning``/``reasoning_content`` (Qwen3 does for the
    turns after the last user message; Meta's Llama-3 templates never do)."""


DEFAULT_MODEL_PROFILES: tuple[ModelProfile, ...] = (
    # Meta's canonical Llama-3 format: <|start_header_id|>role<|end_header_id|>\n\n…<|eot_id|> = 5 per
    # message; <|begin_of_text|> + the assistant header = 5. Tools are sent as JSON text (no boilerplate).
    ModelProfile(
        pattern=r"llama[-_ .]?3",
        family="llama3",
        message_framing_tokens=5,
        request_framing_tokens=5,
        renders_reasoning=False,
        tools_json_spaced=False,
    ),
    # Qwen2/2.5/3 ChatML: <|im_start|>role\n…<|im_end|>\n = 5 per message; <|im_start|>assistant\n = 3;
    # with tools a system block of fixed instructions plus one newline per tool.
    ModelProfile(
        pattern=r"qwen",
        family="qwen",
        message_framing_tokens=5,
        request_framing_tokens=3,
        tool_framing_tokens=96,
        per_tool_tokens=1,
    ),
    # OpenAI cookbook count for cl100k chat models: 3 per message + 1 for the role, 3 per request.
    ModelProfile(
        pattern=r"^(openai/)?(gpt-4(?!o|\.1|\.5)|gpt-3\.5)",
        family="cl100k",
        message_framing_tokens=4,
        request_framing_tokens=3,
        tools_json_spaced=False,
    ),
    # The same count with o200k_base (tiktoken ``MODEL_PREFIX_TO_ENCODING``: gpt-4o, gpt-4.1, gpt-4.5,
    # gpt-5, o1, o3, o4, gpt-oss).
    ModelProfile(
        pattern=r"^(openai/)?(gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5|gpt-oss|o[134](-|$))",
        family="o200k",
        message_framing_tokens=4,
        request_framing_tokens=3,
        tools_json_spaced=False,
    ),
    # Mistral models with the Tekken tokenizer (mistral-common ``tekken_240911.json``: NeMo, Pixtral,
    # Ministral, Small 3, Devstral, Magistral): <s>, then [INST]…[/INST] per user turn and </s> per
    # assistant turn. Older Mistral/Mixtral models (SentencePiece vocabularies) match no profile.
    ModelProfile(
        pattern=r"mistral-nemo|pixtral|ministral|mistral-small-(24b|3)|devstral|magistral",
        family="mistral",
        message_framing_tokens=2,
        request_framing_tokens=1,
    ),
)
"""Built-in profiles (first match wins); configure ``estimator.model_profiles`` to extend them."""


class ImageRule(Strict):
    """How many prompt tokens one image costs for the models whose name matches ``pattern``
    (method and sources: :mod:`extproc.core.request.images`).

    ``kind: patch``: one token per ``patch_px × patch_px`` cell after resizing into
    ``[min_pixels, max_pixels]`` (Qwen2-VL ``smart_resize``); ``kind: fixed``: ``tokens_per_image``
    whatever the size. ``extra_tokens`` are added per image (vision start/end tokens). An image
    whose size is unknown (remote URL) is budgeted at the rule's maximum.
    """

    pattern: ModelPattern
    """Python regular expression searched (``re.search``, case-insensitive) in the ``model`` field."""
    kind: Literal["patch", "fixed"] = "patch"
    patch_px: Annotated[int, Field(ge=1, le=4096)] = 28
    min_pixels: Annotated[int, Field(ge=1)] = 3136
    max_pixels: Annotated[int, Field(ge=1)] = 12_845_056
    tokens_per_image: Annotated[int, Field(ge=0)] = 0
    """``kind: fixed`` only."""
    extra_tokens: Annotated[int, Field(ge=0, le=4096)] = 0

    @model_validator(mode="after")
    def _bounds(self) -> ImageRule:
        if self.min_pixels > self.max_pixels:
            raise ValueError("min_pixels must not exceed max_pixels")
        if self.kind == "fixed" and self.tokens_per_image <= 0:
            raise ValueError("kind fixed needs tokens_per_image > 0")
        return self

    @property
    def max_tokens(self) -> int:
        """Tokens of the largest image the rule allows (what an image of unknown size is budgeted)."""
        if self.kind == "fixed":
            return self.tokens_per_image + self.extra_tokens
        return self.max_pixels // (self.patch_px * self.patch_px) + self.extra_tokens


DEFAULT_IMAGE_RULES: tuple[ImageRule, ...] = (
    # Qwen2-VL / Qwen2.5-VL preprocessor_config.json: patch_size 14, merge_size 2 (28-pixel cells),
    # min_pixels 3136, max_pixels 12845056; <|vision_start|> and <|vision_end|> around the pads.
    ImageRule(
        pattern=r"qwen", kind="patch", patch_px=28, min_pixels=3136, max_pixels=12_845_056, extra_tokens=2
    ),
)
"""Built-in image rules (first match wins); models matching none use ``estimator.image_tokens``."""


DEFAULT_REASONING_MODEL_PATTERNS: tuple[str, ...] = (
    r"qwen3(?!.*instruct)(?!.*-vl-)",
    r"qwq",
    r"deepseek[-_ .]?r1",
    r"(^|/)(o1|o3|o4)(-|$)",
    r"gpt-oss",
    r"magistral",
    r"thinking",
    r"reason",
)
"""Models that think by default (no ``enable_thinking`` / ``reasoning_effort`` in the request):
Qwen3 hybrid models (``enable_thinking`` defaults to true in their template; the 2507 ``-Instruct``
releases and VL instruct models do not think), QwQ, DeepSeek-R1 and its distills, OpenAI o-series and
gpt-oss, Magistral, and any name saying ``thinking`` or ``reason``. Searched case-insensitively."""


class OutputReserveConfig(Strict):
    """How the output half of the budget is reserved (docs/estimator.md §Output half).

    ``L_total = prompt_tokens_est + n · output_reserve``. Without a client maximum
    (``max_completion_tokens`` / ``max_tokens`` / ``max_output_tokens``) the reserve is the learned
    high quantile of the request's output class (:mod:`extproc.core.estimate.output_reserve`) when
    ``learned``, else ``estimator.default_output_reserve_tokens``. With a client maximum,
    ``strict`` reserves the maximum (nothing the pool serves can be cut short by the router);
    ``risk`` reserves ``min(maximum, learned quantile)``: more requests fit the short pool, and an
    answer longer than the quantile may be cut by the short pool's ``max_model_len`` (counted as a
    truncation), within the same truncation budget.
    """

    policy: Literal["strict", "risk"] = "strict"
    """``strict``: a client maximum is the reserve; ``risk``: ``min(maximum, learned quantile)``."""
    learned: bool = True
    """Reserve the learned quantile of the class for requests without a maximum (from the class's
    cold prior until it has learned); False = ``estimator.default_output_reserve_tokens`` (the fixed
    reserve of earlier releases: 52 % of reasoning answers cut at B = 2048, α 0.60 of the ideal on the
    Azure conv trace; docs/estimator.md §Output half)."""
    truncation_budget: Annotated[float, Field(gt=0.0, lt=0.5)] = 0.001
    """Target share of requests whose answer the router lets a pool cut short (fleet-wide). The
    learner's tail share is steered so that the observed truncation rate stays under it."""
    tail_share: Annotated[float, Field(gt=0.0, lt=0.5)] = 0.04
    """Starting share of a class's answers allowed above its reserve (the reserve is the
    ``1 − tail_share`` quantile; cold, the prior's 97th percentile). A truncation needs an answer
    above the reserve *and* beyond the pool's free room, so the fleet's truncation rate is far below
    this; the controller then moves it (defaults chosen by the sweep in docs/estimator.md §Output half)."""
    min_tail_share: Annotated[float, Field(gt=0.0, lt=0.5)] = 0.0005
    """Lowest tail share the truncation controller may steer to."""
    max_tail_share: Annotated[float, Field(gt=0.0, lt=0.5)] = 0.3
    """Highest tail share the truncation controller may steer to."""
    controller_step: Annotated[float, Field(ge=0.0, le=2.0)] = 0.4
    """Decrease of the log tail share on one observed truncation (the increase per untruncated answer
    is ``controller_step · t / (1 − t)``, ``t = controller_margin · truncation_budget``, so the two
    balance when a share ``t`` of answers is truncated); 0 = the tail share stays ``tail_share``."""
    controller_scope: Literal["fleet", "class"] = "fleet"
    """``fleet``: one tail share for every class, steered by all truncations (the best split of a
    fleet-wide budget); ``class``: one per class, steered by the class's own truncations."""
    controller_margin: Annotated[float, Field(gt=0.0, le=1.0)] = 0.6
    """The controller aims at this share of ``truncation_budget`` (its noise stays under the budget)."""
    horizon_observations: Annotated[int, Field(ge=10, le=10_000_000)] = 5000
    """Observations of a class after which an old observation's weight has fallen to 1/e (the
    histogram's exponential forgetting)."""
    prior_weight: Annotated[float, Field(ge=0.0, le=100_000.0)] = 50.0
    """Answers (decayed weight) over which a class's reserve moves from its cold prior's quantile to
    its own, geometrically: ``q_prior^(1−w) · q_learned^w``, ``w = min(1, weight / this)``; 0 = its
    own from the first answer."""
    max_step: Annotated[float, Field(gt=0.0, le=4.0)] = 0.25
    """Largest relative move of a class's reserve one observation can cause (×/÷ (1 + this))."""
    min_reserve_tokens: Annotated[int, Field(ge=1)] = 16
    """No learned reserve is below this."""
    max_reserve_tokens: Annotated[int, Field(ge=1)] | None = None
    """No learned reserve is above this; None = only the largest pool's ``max_model_len`` bounds it."""
    prompt_band_edges_tokens: tuple[int, ...] = (1024, 4096, 16384)
    """Edges of the prompt-length bands of the output classes (estimated prompt tokens): answers to
    long documents and to short questions differ (measured in docs/estimator.md §Output half)."""
    reasoning_model_patterns: tuple[ModelPattern, ...] = DEFAULT_REASONING_MODEL_PATTERNS
    """Models that reason unless the request turns it off (regular expressions, first match)."""

    @field_validator("prompt_band_edges_tokens")
    @classmethod
    def _increasing(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        if len(v) > 16 or any(b <= a for a, b in itertools.pairwise(v)) or any(e <= 0 for e in v):
            raise ValueError("prompt_band_edges_tokens must be at most 16 increasing positive integers")
        return v

    @model_validator(mode="after")
    def _tail_bounds(self) -> OutputReserveConfig:
        if not self.min_tail_share <= self.tail_share <= self.max_tail_share:
            raise ValueError("need min_tail_share <= tail_share <= max_tail_share")
        return self


class AudioRule(Strict):
    """How many prompt tokens one second of audio costs for the models whose name matches
    ``pattern`` (method and sources: :mod:`extproc.core.request.audio`): ``ceil(seconds ×
    tokens_per_second) + extra_tokens`` per clip."""

    pattern: ModelPattern
    """Python regular expression searched (``re.search``, case-insensitive) in the ``model`` field."""
    tokens_per_second: Annotated[float, Field(gt=0.0, le=1000.0)]
    extra_tokens: Annotated[int, Field(ge=0, le=4096)] = 0
    """Tokens per clip beyond the frames (begin/end-of-audio markers)."""


DEFAULT_AUDIO_RULES: tuple[AudioRule, ...] = (
    # Voxtral: Whisper encoder (50 Hz) downsampled 4x -> 12.5 Hz (arXiv 2507.13264, section 2.1)
    AudioRule(pattern=r"voxtral", tokens_per_second=12.5, extra_tokens=2),
    # Qwen2-Audio / Qwen2.5-Omni: one encoder frame per 40 ms after pooling (arXiv 2407.10759)
    AudioRule(pattern=r"qwen2(\.5)?-(audio|omni)", tokens_per_second=25.0, extra_tokens=2),
)
"""Built-in audio rules (first match wins); models matching none use
``estimator.audio_tokens_per_second``."""


class EstimatorConfig(Strict):
    """Token-budget estimator parameters (method: arXiv 2604.09613, docs/method.md §3; docs/estimator.md).

    The learned value of a key is its model-to-true ratio: modelled tokens of the text's run counts ÷
    the true prompt tokens. Settings of the retired ``bytes`` cost model (:data:`REMOVED_ESTIMATOR_SETTINGS`)
    are ignored with a warning, and ``cost_model: bytes`` is an error (:func:`drop_removed_settings`).
    """

    @model_validator(mode="before")
    @classmethod
    def _removed(cls, data: Any) -> Any:
        return drop_removed_settings(data, REMOVED_ESTIMATOR_SETTINGS, "estimator")

    per_category: bool = True
    """Learn one value per (model, content kind); False = one value per model for all traffic."""
    model_profiles: tuple[ModelProfile, ...] = DEFAULT_MODEL_PROFILES
    """Per-model framing and tokenizer family, first match wins; unmatched models use the
    ``*_framing_tokens`` fields below and the ``unknown`` run costs."""
    default_output_reserve_tokens: Annotated[int, Field(ge=0)] = 1024
    """Output reserve when the request has no maximum and ``output_reserve.learned`` is off (and the
    fallback of tools that cannot learn)."""
    output_reserve: OutputReserveConfig = OutputReserveConfig()
    """The output half of the budget: learned per output class, strict or risk with a client
    maximum (:class:`OutputReserveConfig`)."""
    message_framing_tokens: Annotated[int, Field(ge=0, le=64)] = 5
    """Chat-template tokens added per message (role header, end-of-turn), unmatched models."""
    request_framing_tokens: Annotated[int, Field(ge=0, le=4096)] = 5
    """Chat-template tokens added once per request (begin-of-text, generation prompt), unmatched models."""
    tool_framing_tokens: Annotated[int, Field(ge=0, le=4096)] = 128
    """Template boilerplate added once when ``tools`` are present, unmatched models."""
    image_tokens: Annotated[int, Field(ge=0)] = 4096
    """Budget per image part for models that match no ``image_rules`` entry."""
    image_rules: tuple[ImageRule, ...] = DEFAULT_IMAGE_RULES
    """Per-model-family image cost from pixel size (first match wins); see :class:`ImageRule`."""
    audio_tokens: Annotated[int, Field(ge=0)] = 4096
    """Budget per audio part whose duration cannot be read from its header (a remote URL, an
    unknown format)."""
    audio_rules: tuple[AudioRule, ...] = DEFAULT_AUDIO_RULES
    """Per-model-family audio cost from duration (first match wins); see :class:`AudioRule`."""
    audio_tokens_per_second: Annotated[float, Field(gt=0.0, le=1000.0)] = 12.5
    """Audio tokens per second of models matching no ``audio_rules`` entry: a Whisper-style encoder
    (50 frames/s) pooled 4x, as Voxtral (arXiv 2507.13264)."""
    max_models: Annotated[int, Field(ge=1, le=1024)] = 32
    """Model-key slots (bounded cardinality); a name without one shares the ``_other`` key. Names in
    ``models:`` (exact or by pattern) and names matching a model profile take a slot at once; any
    other name after its first 2xx answer with usage; a slot that never learned anything is
    reclaimed when the table is full (``extproc.core.estimate.estimator.Estimator.model_key``)."""
    screen: bool = True
    """Route requests whose estimate nobody reads (not sampled for calibration, no decision log,
    no OpenTelemetry records) with bounded work when the exact estimate cannot change the pool: the
    byte bound for short prompts, and for long ones the run counts of a prefix once they put the
    budget over every pool (``extproc.core.estimate.screen``). Their metrics then carry category
    ``bounded``."""
    min_model_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    """Plausibility floor of a key's value (modelled/true tokens): no learning step and no misroute
    recovery budgets text above 1/this times its modelled tokens."""
    max_step: Annotated[float, Field(gt=0.0, le=1.0)] = 0.25
    """Largest relative move of a key's value a single observation can cause before the EMA: the
    observation is clipped to within ×/÷ (1 + this) of the current value."""
    first_observation_weight: Annotated[float, Field(gt=0.0, le=1.0)] = 0.25
    """A key's first observation is blended at this weight (geometric mean) with the neutral value
    1.0 the key's mean starts from, so it never replaces it."""
    reject_factor: Annotated[float, Field(gt=1.0)] = 3.0
    """Observations whose modelled/true differs from the key's value by more than this factor are
    not learned (counted as unexplained): one odd request cannot move a key."""
    prior_ramp_samples: Annotated[int, Field(ge=1)] = 50
    """After warm-up the routing value moves from the cold prior to the learned one
    geometrically over this many observations (a key's first observations cannot undo its prior)."""
    recovery_observations: Annotated[int, Field(ge=1)] = 200
    """After a confirmed misroute, the lowered value of the key holds for this many observations of
    the key (then ordinary learning owns it again)."""
    max_media_tokens: Annotated[int, Field(ge=1)] = 65536
    """Largest per-item media budget learned from observations or misroute recovery."""


class ResponseReadsConfig(Strict):
    """Which responses are read (``calibration.response_reads``; :mod:`extproc.core.learn.read_decision`).

    ``mode: sample`` reads a ``calibration.sample_rate`` share of responses drawn at random;
    ``mode: adaptive`` decides per request, after routing, whether the response's information pays
    (a cold or drifting key, a possible truncation, an output class with few answers, a floor rate),
    within a budget of reads per key per second. Adaptive decisions go out with the body answer:
    they skip reading where responses are read off the request path (the one-message design of
    envoy/envoy.yaml, or ``off_path``); in the two-message design with the response phases on the
    routing stream, the response headers still come (misroutes stay visible) and only the body of a
    response not chosen is skipped."""

    mode: Literal["sample", "adaptive"] = "sample"
    """``sample`` (``sample_rate``) or ``adaptive`` (the per-request decision)."""
    cold_samples: Annotated[int, Field(ge=0)] = 32
    """A prompt key (model, category) with fewer observations is read (reason ``cold``)."""
    output_cold_samples: Annotated[int, Field(ge=0)] = 32
    """An output class with fewer answers is read (reason ``output_cold``)."""
    drift_rel_error: Annotated[float, Field(gt=0.0)] = 0.25
    """A read whose central prompt estimate (the key's learned mean ratio, not the conservative
    routing estimate) missed by more than this share of the true count marks its key drifting
    (reason ``drift``) for the next ``drift_reads`` reads."""
    drift_reads: Annotated[int, Field(ge=0)] = 16
    """Responses of a drifting key read after a miss."""
    floor_rate: Annotated[float, Field(ge=0.0, le=1.0)] = 0.01
    """Share of the remaining responses read (reason ``floor``), so that drift stays visible."""
    reads_per_key_per_s: Annotated[float, Field(ge=0.0)] = 2.0
    """Refill rate of each prompt key's read budget (every reason but ``required`` spends from it)."""
    burst_reads: Annotated[float, Field(ge=1.0)] = 32.0
    """Capacity of each key's read budget: a cold key's first responses are read at once."""
    truncation_reserve_factor: Annotated[float, Field(gt=0.0)] = 2.0
    """A request whose pool leaves less room for its answer than this many output reserves (and
    less than the client's maximum) may be truncated there: read (reason ``truncation_possible``)."""


class CalibrationConfig(Strict):
    """Online calibration (EMA of the observed model-to-true ratio, modelled ÷ true prompt tokens;
    :mod:`extproc.core.estimate.calibration`), arXiv 2604.09613, docs/method.md §3.3; defaults chosen by the
    sweep of ``tbr eval-estimator`` (docs/estimator.md)."""

    learner: Literal["quantile", "ema_dev"] = "quantile"
    """Routing ratio: ``quantile`` = tracked weighted lower quantile ``ĉ·exp(q)``;
    ``ema_dev`` = the paper's ``ĉ − γσ̂``."""
    ema_beta: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.99
    """β in ĉ ← βĉ + (1−β)c_obs."""
    gamma: Annotated[float, Field(ge=0.0, le=10.0)] = 2.0
    """γ in c* = ĉ − γσ̂ (σ̂ = EMA of |c_obs − ĉ|), ``ema_dev`` learner only."""
    quantile: Annotated[float, Field(gt=0.0, le=0.5)] = 0.05
    """α: the lower quantile of c_obs/ĉ tracked by the ``quantile`` learner."""
    quantile_step: Annotated[float, Field(gt=0.0, le=1.0)] = 0.02
    """η: SGD step of the log-residual quantile per unit weight."""
    initial_margin: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.15
    """1 − c_low/ĉ after a key's first observation."""
    weight_ref_tokens: Annotated[int, Field(ge=0)] = 1024
    """Observation weight = min(1, ratio tokens / this); 0 = every observation weighs 1."""
    warmup_samples: Annotated[int, Field(ge=0)] = 10
    """Observations needed before the learned ratio replaces the category prior."""
    snapshot_path: str | None = None
    """File the learned ratios are written to (atomically) every ``snapshot_interval_s`` and at
    shutdown, and restored from at start (when Redis is off); None = learned ratios live in memory
    only. A leading ``~`` is the user's home directory (the shipped config keeps it outside the
    checkout, ``~/.local/state/tbr/ratios.json``); a relative path is relative to the working
    directory. A corrupt or foreign file is reported (``tbr_ratio_snapshots_total{operation="load",
    outcome="invalid"}``), moved aside to ``<path>.invalid`` and ignored; a path that cannot be
    written is reported at start."""
    snapshot_interval_s: Annotated[float, Field(gt=0.0, le=86_400.0)] = 30.0
    """Seconds between periodic snapshots: the most learning a crash (SIGKILL) can lose."""

    @field_validator("snapshot_path")
    @classmethod
    def _expand_home(cls, v: str | None) -> str | None:
        if v is None:
            return None
        if not v.strip():
            raise ValueError("must be a file path (omit the setting to keep ratios in memory only)")
        return os.path.expanduser(v)

    redis_url: str | None = None
    """Shared ratio store across replicas (e.g. ``redis://127.0.0.1:6379/0``); None = in-memory.
    See docs/operations.md for the consistency model."""
    redis_key_prefix: Annotated[str, Field(min_length=1, max_length=64)] = "tbr:"
    """Prefix of the Redis keys (``{prefix}ratios`` hash, ``{prefix}ratios-version``, batch markers);
    replicas sharing ratios use the same prefix, separate deployments different ones."""
    redis_sync_interval_s: Annotated[float, Field(gt=0.0, le=3600.0)] = 1.0
    """How often queued observations are pushed and all shared ratios pulled into the local cache."""
    redis_timeout_s: Annotated[float, Field(gt=0.0, le=60.0)] = 1.0
    """Connect and per-command timeout of Redis operations (they never run on the request path)."""
    redis_queue_max: Annotated[int, Field(ge=1, le=10_000_000)] = 10_000
    """Observations buffered while Redis is unreachable; beyond this the oldest are dropped (counted)."""
    sample_rate: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """Fraction of requests whose responses are read for calibration (drawn at request_headers);
    ``response_reads.mode: sample`` only."""
    response_reads: ResponseReadsConfig = Field(default_factory=ResponseReadsConfig)
    """Which responses are read: a random ``sample_rate`` share, or the adaptive per-request decision."""
    skip_unsampled_responses: bool = False
    """Turn the response phases off (``mode_override``) for requests not sampled: 2 ext_proc
    messages per request instead of 3. Those requests then give up misroute detection
    (``x-envoy-attempt-count``, docs/design/003-misroute-recovery.md) and the response status in
    the decision log. Needs ``allow_mode_override: true`` on the filter (docs/performance.md)."""
    off_path: bool = False
    """Read sampled responses off the request path in the two-message design: the routing filter's
    response phases stay off for every request, and a sampled request's body answer sets the
    ``x-tbr-calib`` header that makes the second ext_proc filter (``observability_mode``) send its
    response to the router without waiting for answers (docs/design/005-off-path-calibration.md).
    The one-message design (envoy/envoy.yaml, docs/design/004-one-message.md) always calibrates this
    way, through dynamic metadata, whatever this says. Off the path, a misroute is seen (and learned)
    for sampled requests only: unsampled responses reach no stream of the router."""
