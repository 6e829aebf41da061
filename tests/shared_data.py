"""Where the tests read the project's shared data in place (never copied into the repository).

``../shared/data`` beside the checkout holds the real prompts, traces and tokenizers
(docs/data.md) and the broad estimator corpus ``broad/broad.jsonl`` (built by
``python -m evaluation.broad_corpus``). Tests that need a file skip with its path when it is absent.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["AZURE_CONV", "BROAD_CORPUS", "SHARED_DATA"]

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
"""``../shared/data`` of this checkout."""

BROAD_CORPUS = Path(os.environ.get("TBR_BROAD_CORPUS", SHARED_DATA / "broad" / "broad.jsonl"))
"""The broad estimator corpus: ``$TBR_BROAD_CORPUS``, else ``../shared/data/broad/broad.jsonl``."""

AZURE_CONV = SHARED_DATA / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_conv.csv"
"""The Azure LLM inference trace 2023, conversation service (the planner's real trace)."""
