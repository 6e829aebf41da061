"""Cold-start bytes/token priors per (tokenizer family, content category) of the ``bytes`` baseline
(:mod:`evaluation.baselines.bytes_model`; the router's cost model before the run counts).

A key uses its prior until it has ``calibration.warmup_samples`` observations. Each family value
is the 1st percentile of the per-request observed ratio ``c_obs`` of that category (after
framing, digits, punctuation and newlines are taken out) in the replay of docs/data.md §2.2
with that family's tokenizer, rounded down to 0.1, as printed by ``tbr eval-estimator``
(``priors_from_replay``): conservative, so a cold key errs
towards the long pool. :data:`CATEGORY_PRIORS_BPT` (models of unknown family) takes the minimum
over the three families. Categories without data (Arabic, Greek, Hebrew, other Indic, no
letters) keep low hand-set values.
"""

from __future__ import annotations

__all__ = ["CATEGORY_PRIORS_BPT", "FAMILY_PRIORS_BPT"]

FAMILY_PRIORS_BPT: dict[str, dict[str, float]] = {
    "llama3": {
        "latin": 3.8,
        "latin_other": 2.4,
        "code": 3.1,
        "tools": 4.0,
        "cyrillic": 4.2,
        "cjk_zh": 2.4,
        "cjk_ja": 3.1,
        "cjk_ko": 3.3,
        "thai": 4.9,
        "indic_bn": 2.0,
        "indic_te": 1.5,
    },
    "qwen": {
        "latin": 3.8,
        "latin_other": 2.4,
        "code": 3.4,
        "tools": 3.4,
        "cyrillic": 4.0,
        "cjk_zh": 2.8,
        "cjk_ja": 3.5,
        "cjk_ko": 2.9,
        "thai": 4.0,
        "indic_bn": 2.2,
        "indic_te": 1.7,
    },
    "cl100k": {
        "latin": 3.6,
        "latin_other": 2.4,
        "code": 3.0,
        "tools": 4.0,
        "cyrillic": 3.2,
        "cjk_zh": 1.8,
        "cjk_ja": 2.3,
        "cjk_ko": 2.0,
        "thai": 2.8,
        "indic_bn": 2.0,
        "indic_te": 1.5,
    },
}
"""Per tokenizer family priors (keys: ``ModelProfile.family``)."""

CATEGORY_PRIORS_BPT: dict[str, float] = {
    "latin": 3.6,
    "latin_other": 2.4,
    "code": 3.0,
    "tools": 3.4,
    "cyrillic": 3.2,
    "cjk_zh": 1.8,
    "cjk_ja": 2.3,
    "cjk_ko": 2.0,
    "thai": 2.8,
    "indic_bn": 2.0,
    "indic_te": 1.5,
    "json": 2.5,
    "indic": 1.5,
    "arabic": 2.0,
    "greek": 2.0,
    "hebrew": 2.0,
    "no_letters": 1.5,
    "all": 1.5,
}
"""Global conservative priors for models of unknown tokenizer family (minimum over families)."""
