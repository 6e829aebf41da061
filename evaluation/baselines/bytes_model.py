"""The ``bytes`` cost model as an evaluation baseline: one bytes/token ratio per content category.

This is the paper's estimator (arXiv 2604.09613 §3; docs/method.md §3) as the router ran it before it
counted runs (docs/estimator.md): ``prompt_tokens_est = ceil(modelled_units / c*_k) + fixed`` where

* ``modelled_units`` (the budget's field; this baseline's modelled units are bytes) = UTF-8 bytes of the prompt text plus the compact JSON of the tool schemas, minus
  the ASCII digits (and, with ``count_punctuation``, punctuation and newlines) of the text;
* those structure characters cost the tokenizer family's tokens per character instead
  (:data:`STRUCTURE_TOKENS_PER_CHAR`, scaled from a classifier sample of the first ``sample_bytes``
  of text to the whole text; ``code_structure_scale`` on punctuation and newlines of code);
* ``k`` = (model key, content category): ``tools`` when the request defines tools, else the
  category of :func:`evaluation.baselines.categories.profile_text` on the sample (one key per model
  without ``per_category``);
* ``c*_k`` = the key's conservative learned ratio after ``calibration.warmup_samples`` observations
  (the router's own learners, :mod:`extproc.core.estimate.calibration`), before that the prior of the model's
  tokenizer family (:mod:`evaluation.baselines.priors`, or ``prior_bytes_per_token`` without
  ``family_priors``); never below ``min_bytes_per_token``;
* ``fixed`` = chat-template framing, media by rule, token-id prompts and structure tokens.

Everything but the ratio comes from the router's :class:`~extproc.core.estimate.estimator.Estimator`: model
keys, framing, media budgets and the output reserve (:meth:`Estimator.budget_for`), so the baseline
differs from the shipped estimator only in how prompt text is costed. Learning: ``c_obs = modelled_units
/ (prompt_tokens − fixed)`` when text is at least half of the prompt, weighted ``min(1, text tokens /
weight_ref_tokens)``. The baseline learns nothing from requests with media or truncated prompts and
has no misroute recovery.

The classifier sample is read from the request body by :func:`classifier_sample` (the router's parser
keeps no sample): the first ``sample_bytes`` of the chat contents, text parts, tool calls and other
message fields, or of the completions prompt, each part cut to the room left and joined by spaces.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import orjson

from evaluation.baselines.categories import TextProfile, profile_text
from evaluation.baselines.priors import CATEGORY_PRIORS_BPT, FAMILY_PRIORS_BPT
from extproc.core.estimate.budget import Observation, TokenBudget
from extproc.core.estimate.calibration import RatioKey, RatioStore
from extproc.core.estimate.estimator import ALL_CATEGORY, OTHER, Estimator
from extproc.core.request.request_body import RequestFeatures

__all__ = [
    "PAPER",
    "STRUCTURE_TOKENS_PER_CHAR",
    "BytesModel",
    "BytesModelConfig",
    "classifier_sample",
]

STRUCTURE_TOKENS_PER_CHAR: dict[str, tuple[float, float, float]] = {
    "llama3": (0.6, 0.75, 1.0),
    "qwen": (1.0, 0.75, 1.0),
    "cl100k": (0.6, 0.75, 1.0),
    "o200k": (0.6, 0.75, 1.0),
    "mistral": (1.0, 0.75, 1.0),
}
"""``(tokens per ASCII digit, per ASCII punctuation character, per newline)`` per tokenizer family
(the router's model profiles before the run counts; measured per template). A model of no known
family costs 1.0 each (conservative)."""

TOOLS_CATEGORY = "tools"
"""The category of every request that defines tools (its ratio is learned per model: the Qwen3
template re-serialises schemas with spaces, Llama-3 does not)."""
_UNKNOWN_STRUCTURE = (1.0, 1.0, 1.0)
_MIN_TEXT_SHARE = 0.5
"""Learn only when text is at least this share of the prompt tokens."""


@dataclass(frozen=True, slots=True)
class BytesModelConfig:
    """Knobs of the ``bytes`` baseline (module docstring); the defaults are the router's last
    shipped ``bytes`` configuration.

    Attributes:
        prior_bytes_per_token: cold-start ratio without ``family_priors`` or for a category without a
            prior (bytes/token).
        family_priors: the per-(tokenizer family, category) priors of :mod:`evaluation.baselines.priors`.
        per_category: one ratio per (model, category); False = one per model.
        count_digits: cost ASCII digits per character, outside the ratio.
        count_punctuation: cost ASCII punctuation and newlines per character, outside the ratio.
        code_structure_scale: factor on the punctuation/newline tokens of ``code`` text.
        min_bytes_per_token: floor of any routing ratio (bytes/token).
        sample_bytes: bytes of text the classifier reads.
    """

    prior_bytes_per_token: float = 4.0
    family_priors: bool = True
    per_category: bool = True
    count_digits: bool = True
    count_punctuation: bool = True
    code_structure_scale: float = 0.5
    min_bytes_per_token: float = 1.0
    sample_bytes: int = 16384


PAPER = BytesModelConfig(family_priors=False, count_digits=False, count_punctuation=False)
"""The paper's estimator: a flat 4.0 bytes/token prior, every byte of text in the ratio."""


def _json_text(value: Any) -> str:
    """A structured value as a chat template prints it (``", "`` / ``": "`` separators)."""
    if isinstance(value, str):
        return value
    try:
        return orjson.dumps(value).decode().replace('","', '", "').replace('":', '": ')
    except TypeError:
        return str(value)


def _content_texts(value: Any) -> list[str]:
    """The texts of a message ``content``: a string, or its string and text parts."""
    if isinstance(value, str):
        return [value]
    out: list[str] = []
    for part in value if isinstance(value, list) else ():
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, dict) and part.get("type") in ("text", "input_text", "output_text"):
            out.append(part.get("text") or "")
        elif isinstance(part, dict) and part.get("type") == "refusal":
            out.append(part.get("refusal") or "")
    return out


def _tool_call_texts(calls: Any) -> list[str]:
    """Name and arguments of each tool call, as the template prints them."""
    out: list[str] = []
    for call in calls or ():
        fn = call.get("function") if isinstance(call, dict) else None
        if not isinstance(fn, dict):
            out.append(_json_text(call))
            continue
        args = fn.get("arguments")
        if isinstance(args, str):
            with contextlib.suppress(orjson.JSONDecodeError):
                args = _json_text(orjson.loads(args))
        out += [str(fn.get("name") or ""), "" if args is None else _json_text(args)]
    return out


def _message_texts(msg: Any) -> list[str]:
    """The texts of one chat message in the order the router's parser reads them."""
    if not isinstance(msg, dict):
        return []
    out: list[str] = []
    for field, value in msg.items():
        if field == "content":
            out += _content_texts(value)
        elif field == "tool_calls":
            out += _tool_call_texts(value)
        elif field not in ("role", "reasoning", "reasoning_content") and value is not None:
            out.append(_json_text(value))
    return out


def classifier_sample(body: bytes, limit: int) -> bytes:
    """The first ``limit`` UTF-8 bytes of a chat or completions body's text parts, each cut to the
    room left, joined by spaces (newlines would be counted as structure); b'' for a body that is not
    a JSON object or has no text."""
    try:
        parsed = orjson.loads(body)
    except orjson.JSONDecodeError:
        return b""
    if not isinstance(parsed, dict):
        return b""
    texts: list[str] = []
    messages = parsed.get("messages")
    if isinstance(messages, list):
        for msg in messages:
            texts += _message_texts(msg)
    else:
        prompt = parsed.get("prompt")
        if isinstance(prompt, str):
            texts.append(prompt)
        elif isinstance(prompt, list):
            texts += [p for p in prompt if isinstance(p, str)]
        if isinstance(parsed.get("suffix"), str):
            texts.append(parsed["suffix"])
    parts: list[bytes] = []
    used = 0
    for s in texts:
        room = limit - used
        if room <= 0:
            break
        if not s:
            continue
        piece = s[:room].encode("utf-8", "replace")[:room]
        parts.append(piece)
        used += len(piece) + 1
    return b" ".join(parts)


class BytesModel:
    """The ``bytes`` baseline (module docstring): estimates and learns like the router's
    :class:`~extproc.core.estimate.estimator.Estimator`, with bytes/token ratios.

    Args:
        config: the baseline's knobs.
        router: the router's estimator whose model keys, framing, media budgets and output reserve
            the baseline uses (its ratio store is the one the baseline learns into).
    """

    def __init__(self, config: BytesModelConfig, router: Estimator) -> None:
        self.cfg = config
        self.router = router
        self.store: RatioStore = router.store

    def prior(self, key: RatioKey) -> float:
        """Cold-start bytes/token of a key: its family's prior, else the global conservative one."""
        if not self.cfg.family_priors:
            return self.cfg.prior_bytes_per_token
        table = FAMILY_PRIORS_BPT.get(self.router.framing(key[0]).family, CATEGORY_PRIORS_BPT)
        value = table.get(key[1])
        if value is None:
            value = CATEGORY_PRIORS_BPT.get(key[1], self.cfg.prior_bytes_per_token)
        return value

    def ratio(self, key: RatioKey) -> tuple[float, float, bool]:
        """``(conservative ratio, central ratio, warm)`` of a key in bytes/token, floored at
        ``min_bytes_per_token``: the prior until ``warmup_samples`` observations, then the learner's
        low quantile (``quantile``) or ``ĉ − γσ̂`` (``ema_dev``)."""
        floor = self.cfg.min_bytes_per_token
        cal = self.router.cal
        state = self.store.get(key)
        if state is None or state.samples < max(1, cal.warmup_samples):
            prior = max(self.prior(key), floor)
            central = state.mean_ratio if state is not None else prior
            return prior, max(central, floor), False
        if cal.learner == "quantile" and state.low_ratio > 0.0:
            ratio = state.low_ratio
        else:
            ratio = state.mean_ratio - cal.gamma * state.dev_ratio
        return max(ratio, floor), max(state.mean_ratio, floor), True

    def _structure(self, f: RequestFeatures, prof: TextProfile | None, sample_len: int) -> tuple[int, int]:
        """``(bytes, tokens)`` of the digits (and punctuation, newlines) budgeted outside the ratio:
        the sample's counts scaled to the whole text, at the family's tokens per character."""
        if prof is None or not f.text_bytes:
            return 0, 0
        family = self.router.framing_of(f.model).family
        digit, punct_rate, newline_rate = STRUCTURE_TOKENS_PER_CHAR.get(family, _UNKNOWN_STRUCTURE)
        digits = prof.digits if self.cfg.count_digits else 0
        punct, newlines = (prof.punctuation, prof.newlines) if self.cfg.count_punctuation else (0, 0)
        in_sample = digits + punct + newlines
        if not in_sample:
            return 0, 0
        scale = min(max(1.0, f.text_bytes / sample_len), f.text_bytes / in_sample)
        code = self.cfg.code_structure_scale if prof.category == "code" else 1.0
        tokens = digits * digit + (punct * punct_rate + newlines * newline_rate) * code
        return round(in_sample * scale), math.ceil(tokens * scale)

    def estimate(self, f: RequestFeatures, sample: bytes) -> TokenBudget:
        """The :class:`TokenBudget` of a parsed request whose classifier sample is ``sample``
        (:func:`classifier_sample`); ``model_tokens`` is 0 (the router's own budgets carry their
        modelled tokens there)."""
        prof = profile_text(sample) if sample else None
        if not self.cfg.per_category:
            category = ALL_CATEGORY
        elif f.n_tools:
            category = TOOLS_CATEGORY
        else:
            category = prof.category if prof is not None else "no_letters"
        key = (self.router.model_key(f.model), category)
        structure_bytes, structure_tokens = self._structure(f, prof, len(sample))
        modelled_units = f.text_bytes + f.tool_schema_bytes - structure_bytes
        fixed = self.router.fixed_tokens(f) + structure_tokens
        ratio, central, warm = self.ratio(key)
        return self.router.ratio_budget(
            f,
            key,
            modelled_units,
            fixed,
            ratio=ratio,
            central_ratio=central,
            warm=warm,
            modelled_units=modelled_units,
        )

    def observe(self, budget: TokenBudget, prompt_tokens: int) -> Observation | None:
        """Learn ``c_obs = modelled_units / (prompt_tokens − fixed)`` from a served
        ``usage.prompt_tokens``; None (nothing learned) without a text signal: no text, media in the
        request, a prompt cut to ``truncate_prompt_tokens``, or text under half of the prompt."""
        if budget.key[0] == OTHER and budget.model and prompt_tokens > 0:
            key = self.router.admit(budget.model)  # the pools serve this name (as the router does)
            if key != OTHER:
                budget = dataclasses.replace(budget, key=(key, budget.key[1]))
        if budget.prompt_cap_tokens and prompt_tokens >= budget.prompt_cap_tokens:
            return None
        if budget.n_media:
            return None
        nbytes = budget.modelled_units or budget.text_bytes
        if prompt_tokens <= 0 or nbytes <= 0:
            return None
        ratio_tokens = prompt_tokens - budget.fixed_prompt_tokens
        if ratio_tokens <= 0 or ratio_tokens < _MIN_TEXT_SHARE * prompt_tokens:
            return None
        c_obs = nbytes / ratio_tokens
        ref = self.router.cal.weight_ref_tokens
        weight = min(1.0, ratio_tokens / ref) if ref > 0 else 1.0
        state = self.store.observe(budget.key, c_obs, weight)
        self.router.admit(budget.key[0], learned=True)
        rel = (budget.prompt_tokens - prompt_tokens) / prompt_tokens
        central = (budget.central_prompt_tokens - prompt_tokens) / prompt_tokens
        return Observation(
            key=budget.key, observed_ratio=c_obs, rel_error=rel, state=state, central_rel_error=central
        )
