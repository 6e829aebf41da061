"""Router configuration: one YAML schema, validated once at start.

The declarative :class:`RouterConfig` (pydantic) is what operators write; everything the request
path needs is derived from it once (sorted pools, header names). The module imports neither gRPC
nor Envoy types, so ``tbr config check`` and the planner can use it anywhere.

Errors: :func:`load_config` raises :class:`ConfigError` with one line per problem, naming the
YAML path of the offending field.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

__all__ = [
    "AdminConfig",
    "CalibrationConfig",
    "ConfigError",
    "EstimatorConfig",
    "ImageRule",
    "ModelProfile",
    "ModelSet",
    "PoolConfig",
    "RecoveryConfig",
    "RouterConfig",
    "ServerConfig",
    "SpilloverConfig",
    "load_config",
    "parse_config",
]

_HEADER_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
_HEADER_VALUE = re.compile(r"^[\x21-\x7e]+$")  # visible ASCII, no spaces, no CR/LF


class ConfigError(ValueError):
    """The configuration file is missing, unreadable or fails validation."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PoolConfig(_Strict):
    """One vLLM pool Envoy can route to.

    ``max_model_len`` is the pool's context limit in tokens (prompt + generated, per sequence),
    as set by vLLM's ``--max-model-len``; ``header_value`` is what the router writes into the
    routing header so that Envoy's route table picks this pool's cluster.
    """

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    max_model_len: Annotated[int, Field(gt=0, le=16_777_216)]
    header_value: Annotated[str, Field(min_length=1, max_length=64)]
    metrics_url: str | None = None
    """Optional vLLM ``/metrics`` URL scraped for load-aware routing (``spillover``)."""
    max_inflight: Annotated[int, Field(ge=1)] | None = None
    """This pool's limit on the router's own in-flight count (requests routed here whose
    ext_proc stream has not ended); overrides ``spillover.max_inflight_per_pool``."""
    max_waiting: Annotated[float, Field(ge=0.0)] | None = None
    """Overrides ``spillover.max_waiting`` for this pool (``vllm:num_requests_waiting``)."""
    max_kv_cache_usage: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Overrides ``spillover.max_kv_cache_usage`` for this pool (``vllm:kv_cache_usage_perc``)."""

    @field_validator("metrics_url")
    @classmethod
    def _http_url(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^https?://[^\s/]+(/\S*)?$", v):
            raise ValueError("must be an http:// or https:// URL")
        return v

    @field_validator("header_value")
    @classmethod
    def _visible_ascii(cls, v: str) -> str:
        if not _HEADER_VALUE.match(v):
            raise ValueError("must be visible ASCII without spaces (it is sent as an HTTP header value)")
        return v


class ModelProfile(_Strict):
    """Chat-template framing and tokenizer family of the models whose name matches ``pattern``.

    Framing is counted in tokens and added to the text estimate (it is not folded into the
    bytes/token ratio). ``family`` selects the cold-start priors (``extproc.core.estimator.FAMILY_PRIORS_BPT``);
    an unknown family uses the conservative global priors. Values measured per template in
    docs/estimator.md §Framing.
    """

    pattern: Annotated[str, Field(min_length=1, max_length=256)]
    """Python regular expression searched (``re.search``, case-insensitive) in the ``model`` field."""
    family: Annotated[str, Field(min_length=1, max_length=32)]
    message_framing_tokens: Annotated[int, Field(ge=0, le=64)]
    request_framing_tokens: Annotated[int, Field(ge=0, le=4096)]
    tool_framing_tokens: Annotated[int, Field(ge=0, le=4096)] = 0
    """Template boilerplate added once when ``tools`` are present."""
    per_tool_tokens: Annotated[int, Field(ge=0, le=256)] = 0
    """Template tokens added per tool definition (separators), beyond the schema text."""
    digit_tokens_per_digit: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """Tokens per ASCII digit: 1.0 for tokenizers that split digits singly (Qwen), ≈0.6 for
    ``\\p{N}{1,3}`` pre-tokenisers (Llama-3, cl100k: measured mean over the corpus 0.587)."""
    punct_tokens_per_char: Annotated[float, Field(ge=0.0, le=1.0)] = 0.75
    """Tokens per ASCII punctuation character (budgeted outside the ratio, docs/estimator.md)."""
    newline_tokens_per_char: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """Tokens per newline (budgeted outside the ratio)."""
    renders_reasoning: bool = True
    tools_json_spaced: bool = True
    """The template prints tool schemas as JSON with ``", "``/``": "`` separators (Qwen3 ``tojson``);
    False: compact JSON (the Llama-3 stand-in and OpenAI count append the compact schema)."""
    """The chat template renders assistant ``reasoning``/``reasoning_content`` (Qwen3 does for the
    turns after the last user message; Meta's Llama-3 templates never do)."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return v


DEFAULT_MODEL_PROFILES: tuple[ModelProfile, ...] = (
    # Meta's canonical Llama-3 format: <|start_header_id|>role<|end_header_id|>\n\n…<|eot_id|> = 5 per
    # message; <|begin_of_text|> + the assistant header = 5. Tools are sent as JSON text (no boilerplate).
    ModelProfile(
        pattern=r"llama[-_ .]?3",
        family="llama3",
        message_framing_tokens=5,
        request_framing_tokens=5,
        digit_tokens_per_digit=0.6,
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
        digit_tokens_per_digit=0.6,
        tools_json_spaced=False,
    ),
)
"""Built-in profiles (first match wins); configure ``estimator.model_profiles`` to extend them."""


class ImageRule(_Strict):
    """How many prompt tokens one image costs for the models whose name matches ``pattern``
    (method and sources: :mod:`extproc.core.images`).

    ``kind: patch``: one token per ``patch_px × patch_px`` cell after resizing into
    ``[min_pixels, max_pixels]`` (Qwen2-VL ``smart_resize``); ``kind: fixed``: ``tokens_per_image``
    whatever the size. ``extra_tokens`` are added per image (vision start/end tokens). An image
    whose size is unknown (remote URL) is budgeted at the rule's maximum.
    """

    pattern: Annotated[str, Field(min_length=1, max_length=256)]
    """Python regular expression searched (``re.search``, case-insensitive) in the ``model`` field."""
    kind: Literal["patch", "fixed"] = "patch"
    patch_px: Annotated[int, Field(ge=1, le=4096)] = 28
    min_pixels: Annotated[int, Field(ge=1)] = 3136
    max_pixels: Annotated[int, Field(ge=1)] = 12_845_056
    tokens_per_image: Annotated[int, Field(ge=0)] = 0
    """``kind: fixed`` only."""
    extra_tokens: Annotated[int, Field(ge=0, le=4096)] = 0

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str) -> str:
        try:
            re.compile(v)
        except re.error as exc:
            raise ValueError(f"not a valid regular expression: {exc}") from exc
        return v

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


class EstimatorConfig(_Strict):
    """Token-budget estimator parameters (method: arXiv 2604.09613, docs/method.md §3; docs/estimator.md).

    Ratios are bytes of UTF-8 text per token.
    """

    prior_bytes_per_token: Annotated[float, Field(gt=0.5, le=16.0)] = 4.0
    """Cold-start ratio when ``family_priors`` is off or a category has no prior."""
    family_priors: bool = True
    """Use the per-(tokenizer family, category) conservative priors; False = ``prior_bytes_per_token``
    for everything (the paper's cold start)."""
    per_category: bool = True
    """Learn one ratio per (model, content category); False = one ratio per model for all traffic."""
    count_digits: bool = True
    """Budget ASCII digits at the model's ``digit_tokens_per_digit`` instead of the text ratio."""
    count_punctuation: bool = True
    """Budget ASCII punctuation and newlines at the model's ``punct_tokens_per_char`` /
    ``newline_tokens_per_char`` instead of the text ratio."""
    code_structure_scale: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    """Factor on the punctuation/newline tokens of ``code`` text (operators and indentation merge
    into multi-character tokens; measured in docs/estimator.md §Structure)."""
    model_profiles: tuple[ModelProfile, ...] = DEFAULT_MODEL_PROFILES
    """Per-model framing and tokenizer family, first match wins; unmatched models use the
    ``*_framing_tokens`` fields below and the global priors."""
    default_output_reserve_tokens: Annotated[int, Field(ge=0)] = 1024
    """Output reserve when the request has neither ``max_completion_tokens`` nor ``max_tokens``."""
    message_framing_tokens: Annotated[int, Field(ge=0, le=64)] = 5
    """Chat-template tokens added per message (role header, end-of-turn), unmatched models."""
    request_framing_tokens: Annotated[int, Field(ge=0, le=4096)] = 5
    """Chat-template tokens added once per request (begin-of-text, generation prompt), unmatched models."""
    tool_framing_tokens: Annotated[int, Field(ge=0, le=4096)] = 128
    """Template boilerplate added once when ``tools`` are present, unmatched models."""
    digit_tokens_per_digit: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """Tokens per ASCII digit for unmatched models (1.0: the conservative single-digit split)."""
    punct_tokens_per_char: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """Tokens per ASCII punctuation character for unmatched models (1.0: conservative)."""
    newline_tokens_per_char: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    """Tokens per newline for unmatched models (1.0: conservative)."""
    image_tokens: Annotated[int, Field(ge=0)] = 4096
    """Budget per image part for models that match no ``image_rules`` entry."""
    image_rules: tuple[ImageRule, ...] = DEFAULT_IMAGE_RULES
    """Per-model-family image cost from pixel size (first match wins); see :class:`ImageRule`."""
    audio_tokens: Annotated[int, Field(ge=0)] = 4096
    """Budget per audio part (input_audio)."""
    min_bytes_per_token: Annotated[float, Field(gt=0.1)] = 1.0
    """Floor for any routing ratio; no tokenizer in use produces fewer bytes per token on text."""
    max_models: Annotated[int, Field(ge=1, le=1024)] = 32
    """Distinct model names tracked; further models share the ``_other`` key (bounded cardinality)."""
    sample_bytes: Annotated[int, Field(ge=256, le=1_048_576)] = 16384
    """Bytes of text examined by the content classifier (``bytes`` cost model)."""
    cost_model: Literal["runs", "bytes"] = "runs"
    """``runs``: modelled tokens from the run counts of all template text (docs/estimator.md), the
    learned value of a key is modelled/true tokens; ``bytes``: the paper's bytes/token ratio per
    category (kept for the baselines of the evaluation)."""
    min_model_ratio: Annotated[float, Field(gt=0.0, le=1.0)] = 0.5
    """Plausibility floor of a ``runs`` key (modelled/true tokens): no learning step and no misroute
    recovery budgets text above 1/this times its modelled tokens."""
    max_step: Annotated[float, Field(gt=0.0, le=1.0)] = 0.25
    """Largest relative move of a key's value a single observation can cause before the EMA: the
    observation is clipped to within ×/÷ (1 + this) of the current value (``runs`` model)."""
    first_observation_weight: Annotated[float, Field(gt=0.0, le=1.0)] = 0.25
    """A key's first observation is blended at this weight (geometric mean) with the neutral value
    1.0 the key's mean starts from, so it never replaces it (``runs`` model)."""
    reject_factor: Annotated[float, Field(gt=1.0)] = 3.0
    """Observations whose modelled/true differs from the key's value by more than this factor are
    not learned (counted as unexplained): one odd request cannot move a key (``runs`` model)."""
    prior_ramp_samples: Annotated[int, Field(ge=1)] = 50
    """``runs`` model: after warm-up the routing value moves from the cold prior to the learned one
    geometrically over this many observations (a key's first observations cannot undo its prior)."""
    recovery_observations: Annotated[int, Field(ge=1)] = 200
    """After a confirmed misroute, the lowered value of the key holds for this many observations of
    the key (then ordinary learning owns it again)."""
    max_media_tokens: Annotated[int, Field(ge=1)] = 65536
    """Largest per-item media budget learned from observations or misroute recovery."""


class CalibrationConfig(_Strict):
    """Online calibration (EMA of observed bytes/token), arXiv 2604.09613, docs/method.md §3.3; defaults chosen by
    the sweep of ``tbr eval-estimator`` (docs/estimator.md)."""

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
    only. A corrupt or foreign file is reported (``tbr_ratio_snapshots_total{operation="load",
    outcome="invalid"}``), moved aside to ``<path>.invalid`` and ignored."""
    snapshot_interval_s: Annotated[float, Field(gt=0.0, le=86_400.0)] = 30.0
    """Seconds between periodic snapshots: the most learning a crash (SIGKILL) can lose."""
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
    """Fraction of requests whose responses are read for calibration (drawn at request_headers)."""
    skip_unsampled_responses: bool = False
    """Turn the response phases off (``mode_override``) for requests not sampled: 2 ext_proc
    messages per request instead of 3. Those requests then give up misroute detection
    (``x-envoy-attempt-count``, docs/design/003-misroute-recovery.md) and the response status in
    the decision log. Needs ``allow_mode_override: true`` on the filter (docs/performance.md)."""


class SpilloverConfig(_Strict):
    """Load-aware spillover (arXiv 2604.08075 "load-aware spillover + safety check"; design:
    docs/design/002-spillover.md).

    A request goes to the smallest pool whose ``max_model_len`` fits its budget (the preferred
    pool). When spillover is enabled and that pool is *saturated*, it goes to the next larger
    pool that is not saturated; never to a smaller one. When every larger pool is saturated too,
    it stays on the preferred pool. A pool is saturated when any configured signal reaches its
    threshold (``>=``):

    * ``inflight``: the router's own count of requests routed to the pool whose ext_proc stream
      has not ended, against ``pools[].max_inflight`` or ``max_inflight_per_pool``;
    * ``waiting``: scraped ``vllm:num_requests_waiting`` (summed over the endpoint's engines);
    * ``kv_cache``: scraped ``vllm:kv_cache_usage_perc`` (0..1; mean over engines; the older
      ``vllm:gpu_cache_usage_perc`` is read when the new name is absent).

    Scraped signals older than ``max_staleness_s`` (scrapes failing) are ignored and counted.
    A threshold left at None disables that signal.
    """

    enabled: bool = False
    max_inflight_per_pool: Annotated[int, Field(ge=1)] | None = None
    """Default in-flight limit per pool (requests); None = no in-flight signal."""
    max_waiting: Annotated[float, Field(ge=0.0)] | None = None
    """Default threshold on ``vllm:num_requests_waiting`` (requests); None = not used."""
    max_kv_cache_usage: Annotated[float, Field(gt=0.0, le=1.0)] | None = None
    """Default threshold on ``vllm:kv_cache_usage_perc`` (fraction 0..1); None = not used."""
    scrape_interval_s: Annotated[float, Field(gt=0.0, le=3600.0)] = 1.0
    """Period of the ``/metrics`` scrape of every pool with a ``metrics_url``."""
    scrape_timeout_s: Annotated[float, Field(gt=0.0, le=60.0)] = 0.5
    """Timeout of one scrape request."""
    max_staleness_s: Annotated[float, Field(gt=0.0, le=3600.0)] = 5.0
    """Scraped values older than this are ignored (the pool is judged on its other signals)."""


class RecoveryConfig(_Strict):
    """Misroute recovery (docs/design/003-misroute-recovery.md).

    Envoy retries a request that a smaller pool rejected with HTTP 400 once on the next larger
    pool (route ``retry_policy`` + priority-group cluster specifier in envoy/envoy-3pools.yaml).
    The router sees the retry (``x-envoy-attempt-count`` > 1 on the response) and, when the
    served ``usage.prompt_tokens`` proves the request did not fit the first pool, corrects the
    key's ratio strongly (``calibrate``).
    """

    calibrate: bool = True
    """Apply the strong ratio correction on a confirmed misroute."""
    attempt_count_header: str = "x-envoy-attempt-count"
    """Response header carrying Envoy's attempt count (virtual host
    ``include_attempt_count_in_response: true``)."""


class ServerConfig(_Strict):
    """gRPC listener of the ext_proc service."""

    grpc_host: str = "127.0.0.1"
    grpc_port: Annotated[int, Field(ge=0, le=65535)] = 50051
    max_message_bytes: Annotated[int, Field(ge=65_536, le=1_073_741_824)] = 8_388_608
    """gRPC max receive/send message size; must be ≥ Envoy's per_connection_buffer_limit_bytes
    (the request body arrives in one BUFFERED message). Default matches envoy/envoy.yaml (8 MiB)."""
    grace_period_s: Annotated[float, Field(ge=0.0, le=3600.0)] = 10.0
    """How long in-flight streams may run on after SIGTERM."""
    shutdown_delay_s: Annotated[float, Field(ge=0.0, le=600.0)] = 0.0
    """After SIGTERM, time spent reporting not-ready (gRPC health, /readyz) while still accepting
    new streams, so load balancers stop sending before the listener closes (like a preStop sleep)."""
    tls_cert_path: str | None = None
    tls_key_path: str | None = None
    tls_client_ca_path: str | None = None
    """When set (with cert and key), clients must present a certificate signed by this CA (mTLS)."""

    @model_validator(mode="after")
    def _tls_pair(self) -> ServerConfig:
        if (self.tls_cert_path is None) != (self.tls_key_path is None):
            raise ValueError("tls_cert_path and tls_key_path must be set together")
        if self.tls_client_ca_path is not None and self.tls_cert_path is None:
            raise ValueError("tls_client_ca_path needs tls_cert_path and tls_key_path")
        return self


class AdminConfig(_Strict):
    """Admin HTTP listener (metrics, health, learned ratios). Loopback by default."""

    host: str = "127.0.0.1"
    port: Annotated[int, Field(ge=0, le=65535)] = 9190
    enabled: bool = True


class ModelSet(_Strict):
    """The pools that serve one model (or one family of model names).

    A request's ``model`` selects the set: first a set listing it in ``models`` (exact), else the
    first set whose ``pattern`` matches (``re.search``, case-insensitive), else
    ``RouterConfig.default_model_set``. The router then picks the pool of the set by budget.
    """

    name: Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.-]+$")]
    models: tuple[Annotated[str, Field(min_length=1, max_length=256)], ...] = ()
    """Exact model names (the ``model`` field as clients send it)."""
    pattern: Annotated[str, Field(min_length=1, max_length=256)] | None = None
    pools: Annotated[list[str], Field(min_length=1, max_length=16)]
    """Names of entries of the top-level ``pools``; each pool belongs to exactly one set."""

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                re.compile(v)
            except re.error as exc:
                raise ValueError(f"not a valid regular expression: {exc}") from exc
        return v


class RouterConfig(_Strict):
    """Top-level router configuration (the YAML file's schema)."""

    pools: Annotated[list[PoolConfig], Field(min_length=1, max_length=64)]
    models: Annotated[list[ModelSet], Field(max_length=32)] = []
    """Pool sets per model (see :class:`ModelSet`); empty = one set of all ``pools`` for every model."""
    default_model_set: str | None = None
    """Set that serves a model no set names or matches (decision reason ``unknown_model``);
    None = such requests go to the largest pool of all, reason ``unknown_model``."""
    routing_header: str = "x-tbr-pool"
    """Header the router sets and Envoy routes on. Envoy strips any client copy before routing."""
    estimator: EstimatorConfig = EstimatorConfig()
    calibration: CalibrationConfig = CalibrationConfig()
    server: ServerConfig = ServerConfig()
    admin: AdminConfig = AdminConfig()
    spillover: SpilloverConfig = SpilloverConfig()
    recovery: RecoveryConfig = RecoveryConfig()
    decision_log_path: str | None = None
    """Optional JSON Lines log of routing decisions (no prompt text), readable by ``tbr plan``.
    Written off the request path (extproc/service/decision_log.py)."""
    decision_log_flush_interval_s: Annotated[float, Field(gt=0.0, le=60.0)] = 1.0
    """Seconds between background writes of the decision log (and at shutdown)."""
    decision_log_queue_max: Annotated[int, Field(ge=1, le=10_000_000)] = 100_000
    """Records held between flushes at most; more are dropped (``tbr_decision_log_dropped_records_total``)."""

    @field_validator("routing_header")
    @classmethod
    def _lower_header(cls, v: str) -> str:
        if not _HEADER_NAME.match(v):
            raise ValueError("must be a lower-case HTTP header name (letters, digits, '-')")
        return v

    @model_validator(mode="after")
    def _unique_pools(self) -> RouterConfig:
        for attr in ("name", "header_value"):
            seen: set[str] = set()
            for pool in self.pools:
                value = getattr(pool, attr)
                if value in seen:
                    raise ValueError(f"pools: duplicate {attr} {value!r}")
                seen.add(value)
        by_name = {p.name: p for p in self.pools}
        for group, names in self.pool_groups.items():
            lens = [by_name[n].max_model_len for n in names if n in by_name]
            if len(set(lens)) != len(lens):
                where = "pools" if not self.models else f"models[{group}]"
                raise ValueError(
                    f"{where}: two pools have the same max_model_len; each pool needs its own limit"
                )
        return self

    @model_validator(mode="after")
    def _model_sets(self) -> RouterConfig:
        if not self.models:
            if self.default_model_set is not None:
                raise ValueError("default_model_set needs models")
            return self
        names = {p.name for p in self.pools}
        owner: dict[str, str] = {}
        set_names: set[str] = set()
        for ms in self.models:
            if ms.name in set_names:
                raise ValueError(f"models: duplicate set name {ms.name!r}")
            set_names.add(ms.name)
            for pool in ms.pools:
                if pool not in names:
                    raise ValueError(f"models[{ms.name}]: unknown pool {pool!r}")
                if pool in owner:
                    raise ValueError(f"pool {pool!r} is in two model sets ({owner[pool]}, {ms.name})")
                owner[pool] = ms.name
        unused = sorted(names - set(owner))
        if unused:
            raise ValueError(f"pools in no model set (unreachable): {', '.join(unused)}")
        if self.default_model_set is not None and self.default_model_set not in set_names:
            raise ValueError(f"default_model_set {self.default_model_set!r} is not a set name")
        return self

    @property
    def pool_groups(self) -> dict[str, list[str]]:
        """Set name → its pool names as configured (one set ``default`` of all pools without ``models``)."""
        if not self.models:
            return {"default": [p.name for p in self.pools]}
        return {ms.name: list(ms.pools) for ms in self.models}

    @model_validator(mode="after")
    def _spillover_signals(self) -> RouterConfig:
        sp = self.spillover
        if not sp.enabled:
            return self
        inflight = sp.max_inflight_per_pool is not None or any(p.max_inflight for p in self.pools)
        scraped = (
            sp.max_waiting is not None
            or sp.max_kv_cache_usage is not None
            or any(p.max_waiting is not None or p.max_kv_cache_usage is not None for p in self.pools)
        )
        if not (inflight or scraped):
            raise ValueError(
                "spillover.enabled needs a threshold: max_inflight_per_pool, max_waiting or "
                "max_kv_cache_usage (or the per-pool overrides)"
            )
        if scraped and not inflight and not any(p.metrics_url for p in self.pools):
            raise ValueError("spillover: max_waiting/max_kv_cache_usage need pools[].metrics_url")
        return self

    @property
    def pools_by_size(self) -> tuple[PoolConfig, ...]:
        """Pools sorted by ``max_model_len`` ascending; the last is the fallback (long) pool."""
        return tuple(sorted(self.pools, key=lambda p: p.max_model_len))

    @property
    def fallback_pool(self) -> PoolConfig:
        """The largest pool: where unreadable requests go (with model sets: the largest of the
        default set, else of all pools)."""
        if self.models and self.default_model_set is not None:
            members = set(self.pool_groups[self.default_model_set])
            return max((p for p in self.pools if p.name in members), key=lambda p: p.max_model_len)
        return self.pools_by_size[-1]


def _format_errors(exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "<root>"
        lines.append(f"  {loc}: {err['msg']}")
    return "invalid configuration:\n" + "\n".join(lines)


def parse_config(data: Any) -> RouterConfig:
    """Validate an already-parsed YAML/JSON mapping.

    Raises:
        ConfigError: the mapping does not match the schema (message lists every problem).
    """
    if not isinstance(data, dict):
        raise ConfigError("invalid configuration: the top level must be a mapping")
    try:
        return RouterConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_errors(exc)) from exc


def read_config_data(path: str | Path) -> Any:
    """Read a YAML configuration file into plain data (not validated).

    Raises:
        ConfigError: the file cannot be read or is not YAML.
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read configuration {p}: {exc.strerror or exc}") from exc
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"configuration {p} is not valid YAML: {exc}") from exc


def load_config(path: str | Path) -> RouterConfig:
    """Read and validate a YAML configuration file.

    Raises:
        ConfigError: the file cannot be read, is not YAML, or fails validation.
    """
    return parse_config(read_config_data(path))
