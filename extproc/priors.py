"""Cold-start bytes/token priors per (tokenizer family, content category).

A key uses its prior until it has ``calibration.warmup_samples`` observations. Each family value
is the 1st percentile of the per-request observed ratio ``c_obs`` of that category (after
framing and digits are taken out) in the replay of data-stats.md §2.2 with that family's
tokenizer, rounded down to 0.1 (docs/estimator.md §Priors): conservative, so a cold key errs
towards the long pool. :data:`CATEGORY_PRIORS_BPT` (models of unknown family) takes the minimum
over the three families. Categories without data (Arabic, Greek, Hebrew, other Indic, no
letters) keep low hand-set values.
"""

from __future__ import annotations

__all__ = ["CATEGORY_PRIORS_BPT", "FAMILY_PRIORS_BPT"]

FAMILY_PRIORS_BPT: dict[str, dict[str, float]] = {
    "llama3": {
        "latin": 2.9,
        "latin_other": 2.3,
        "code": 2.8,
        "tools": 4.0,
        "cyrillic": 3.5,
        "cjk_zh": 2.1,
        "cjk_ja": 2.7,
        "cjk_ko": 2.2,
        "thai": 4.8,
        "indic_bn": 2.0,
        "indic_te": 1.5,
    },
    "qwen": {
        "latin": 3.0,
        "latin_other": 2.3,
        "code": 2.8,
        "tools": 3.3,
        "cyrillic": 3.4,
        "cjk_zh": 2.3,
        "cjk_ja": 2.9,
        "cjk_ko": 2.1,
        "thai": 4.0,
        "indic_bn": 2.2,
        "indic_te": 1.7,
    },
    "cl100k": {
        "latin": 2.9,
        "latin_other": 2.3,
        "code": 2.8,
        "tools": 3.9,
        "cyrillic": 2.8,
        "cjk_zh": 1.7,
        "cjk_ja": 2.3,
        "cjk_ko": 2.0,
        "thai": 2.7,
        "indic_bn": 2.0,
        "indic_te": 1.5,
    },
}
"""Per tokenizer family priors (keys: ``ModelProfile.family``)."""

CATEGORY_PRIORS_BPT: dict[str, float] = {
    "latin": 2.9,
    "latin_other": 2.3,
    "code": 2.8,
    "tools": 3.3,
    "json": 2.5,
    "cjk_zh": 1.7,
    "cjk_ja": 2.3,
    "cjk_ko": 2.0,
    "cyrillic": 2.8,
    "thai": 2.7,
    "indic_bn": 2.0,
    "indic_te": 1.5,
    "indic": 1.5,
    "arabic": 2.0,
    "greek": 2.0,
    "hebrew": 2.0,
    "no_letters": 1.5,
    "all": 1.5,
}
"""Global conservative priors for models of unknown tokenizer family (minimum over families)."""
