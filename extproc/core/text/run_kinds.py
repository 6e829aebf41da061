"""The run kinds of :mod:`extproc.core.text.runs` (one vocabulary for the estimator, the evaluation and the
demo) and their indices; a module of its own so that :mod:`extproc.core.text.run_languages` can use them."""

from __future__ import annotations

__all__ = ["N_KINDS", "RUN_KINDS", "kind_index"]

RUN_KINDS: tuple[str, ...] = (
    "letter", "digit", "punct", "blob", "letter_other", "letter_euro", "latin_ext", "greek", "cyrillic", "hebrew", "arabic", "persian", "urdu", "devanagari", "bengali", "gurmukhi",
    "gujarati", "oriya", "tamil", "telugu", "kannada", "malayalam", "sinhala", "thai", "lao",
    "myanmar", "other_script", "hangul", "kana", "han", "symbol", "emoji", "other", "space", "newline",
)  # fmt: skip
"""Every run kind (bounded set: safe as a metric label)."""

kind_index = {k: i for i, k in enumerate(RUN_KINDS)}
"""Position of each run kind in :data:`RUN_KINDS` (the arrays of :class:`extproc.core.text.runs.RunCounts`)."""
N_KINDS = len(RUN_KINDS)
