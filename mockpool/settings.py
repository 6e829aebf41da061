"""Configuration of one stand-in vLLM pool (:class:`PoolSettings`), frozen so an app never changes under a test."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from mockpool.natural import parse_natural_spec

TokenizerFamily = Literal["qwen3", "llama3"]
ImageRuleName = Literal["flat", "qwen2.5-vl"]

#: Model names served by default for each tokenizer family (what ``GET /v1/models`` lists).
DEFAULT_MODEL_NAMES: dict[str, tuple[str, ...]] = {
    "qwen3": ("Qwen/Qwen3-8B",),
    "llama3": ("meta-llama/Llama-3.1-8B-Instruct",),
}

#: Deterministic output: each piece is exactly one token in both the Qwen3 and the Llama-3 vocabulary
#: (checked by ``tests/mockpool/test_tokencount.py``), so ``completion_tokens`` is the number of pieces.
OUTPUT_PIECES: tuple[str, ...] = (" quick", " brown", " fox", " jumps", " over", " the", " lazy", " dog")


@dataclass(frozen=True)
class PoolSettings:
    """Everything that defines one stand-in pool.

    Attributes:
        name: pool identity, sent back in the ``x-served-by-pool`` header of every response.
        max_model_len: vLLM ``max_model_len`` in tokens (prompt + output must fit, else HTTP 400).
        tokenizer: ``"qwen3"`` (Qwen3 tokenizer + official Jinja chat template) or ``"llama3"``
            (Llama-3 tokenizer + Meta's canonical chat format).
        served_model_names: names listed by ``/v1/models``; empty → :data:`DEFAULT_MODEL_NAMES`.
        strict_model: if true (default, as vLLM), a request for a model not in ``served_model_names``
            gets vLLM's 404; if false (``--any-model``) any model name is accepted and echoed back.
        output_tokens: tokens generated per choice = ``min(max_tokens, output_tokens)`` (the natural
            answer length when ``natural_output_tokens`` is empty).
        natural_output_tokens: the model's natural answer length per request, ``fixed:N`` or
            ``lognormal:MEDIAN:SIGMA`` (tokens; one seeded draw per request,
            :class:`mockpool.natural.NaturalLengths`); each choice gets ``min(max_tokens,
            natural)`` tokens, with vLLM's default ``max_tokens = max_model_len − prompt`` and
            ``finish_reason: "length"`` when that cut it. ``""``: ``output_tokens``.
        natural_output_seed: seed of those draws.
        max_num_seqs: vLLM ``max_num_seqs``: requests running at once; later ones wait in a FIFO queue.
        kv_cache_capacity_tokens: KV-cache size in tokens used for ``vllm:kv_cache_usage_perc``
            (Σ (prompt + generated) tokens of running requests / capacity); 0 → ``max_model_len × max_num_seqs``.
        time_to_first_token_s: fixed delay before the first output token (after admission).
        prefill_s_per_token: extra delay before the first token per prompt token.
        inter_token_latency_s: delay between output tokens.
        sse_split_bytes: if > 0, every SSE event is cut into pieces of this many bytes, each sent as its own
            write (exercises reassembly in proxies and clients); 0 → one write per event.
        gzip: compress JSON responses when the client sends ``accept-encoding: gzip`` (SSE is never
            compressed, as in Starlette's ``GZipMiddleware``).
        image_tokens: prompt tokens counted per image content part with ``image_rule="flat"``.
        image_rule: ``"flat"`` (``image_tokens`` per part) or ``"qwen2.5-vl"``: each inline image is
            decoded and counted as Qwen2.5-VL's processor does (:mod:`mockpool.vision`).
        audio_tokens_per_second: 0 → an audio part counts as a media part (``image_tokens``); > 0 →
            ``ceil(duration × rate) + 2`` with the duration read from the clip's header
            (:mod:`mockpool.audio`), as an audio encoder pools its frames.
        hold: start with admitted requests held until ``POST /admin/release``.
        context_error_in_stream: a ``stream: true`` request that does not fit ``max_model_len`` gets
            ``200 text/event-stream`` with one ``data: {"error": {…, "code": 400}}`` event and
            ``data: [DONE]`` (as SGLang and some simulators answer) instead of vLLM's HTTP 400.
    """

    name: str = "pool"
    max_model_len: int = 8192
    tokenizer: TokenizerFamily = "qwen3"
    served_model_names: tuple[str, ...] = ()
    strict_model: bool = True
    output_tokens: int = 16
    natural_output_tokens: str = ""
    natural_output_seed: int = 0
    max_num_seqs: int = 256
    kv_cache_capacity_tokens: int = 0
    time_to_first_token_s: float = 0.0
    prefill_s_per_token: float = 0.0
    inter_token_latency_s: float = 0.0
    sse_split_bytes: int = 0
    gzip: bool = False
    image_tokens: int = 256
    image_rule: ImageRuleName = "flat"
    audio_tokens_per_second: float = 0.0
    hold: bool = False
    context_error_in_stream: bool = False

    def __post_init__(self) -> None:
        """Reject settings no vLLM server could have (raises ``ValueError``)."""
        if self.tokenizer not in ("qwen3", "llama3"):
            raise ValueError(f"tokenizer must be 'qwen3' or 'llama3', got {self.tokenizer!r}")
        if not self.name:
            raise ValueError("pool name must not be empty")
        if self.natural_output_tokens:
            parse_natural_spec(self.natural_output_tokens)
        for attr in ("max_model_len", "max_num_seqs"):
            if getattr(self, attr) < 1:
                raise ValueError(f"{attr} must be >= 1, got {getattr(self, attr)}")
        for attr in (
            "output_tokens",
            "kv_cache_capacity_tokens",
            "time_to_first_token_s",
            "prefill_s_per_token",
            "inter_token_latency_s",
            "sse_split_bytes",
            "image_tokens",
            "audio_tokens_per_second",
        ):
            if getattr(self, attr) < 0:
                raise ValueError(f"{attr} must be >= 0, got {getattr(self, attr)}")

    @property
    def model_names(self) -> tuple[str, ...]:
        """Served model names (configured, or the family default); the first is the primary name."""
        return self.served_model_names or DEFAULT_MODEL_NAMES[self.tokenizer]

    @property
    def kv_capacity_tokens(self) -> int:
        """KV-cache capacity in tokens used for ``vllm:kv_cache_usage_perc``."""
        return self.kv_cache_capacity_tokens or self.max_model_len * self.max_num_seqs
