"""Generated sections inside a hand-kept or generated Markdown file.

A section is the text between ``<!-- tbr:NAME:begin -->`` and ``<!-- tbr:NAME:end -->``. ``tbr
autoscale --update-doc`` writes its section into docs/results.md; ``tbr results`` regenerates the
rest of that file and carries every such section over (:func:`carry_sections`).
"""

from __future__ import annotations

import re

__all__ = ["carry_sections", "replace_section"]

_SECTION = re.compile(r"<!-- tbr:([a-z0-9-]+):begin -->\n.*?<!-- tbr:\1:end -->\n", re.S)


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with section ``name`` set to ``body`` (appended at the end when absent)."""
    block = f"<!-- tbr:{name}:begin -->\n{body.rstrip()}\n<!-- tbr:{name}:end -->\n"
    pattern = re.compile(
        rf"<!-- tbr:{re.escape(name)}:begin -->\n.*?<!-- tbr:{re.escape(name)}:end -->\n", re.S
    )
    if pattern.search(text):
        return pattern.sub(lambda _m: block, text, count=1)
    return text.rstrip("\n") + "\n\n" + block


def carry_sections(old: str, new: str) -> str:
    """``new`` with every section of ``old`` that ``new`` lacks appended (generated files keep them)."""
    out = new
    for m in _SECTION.finditer(old):
        if f"<!-- tbr:{m.group(1)}:begin -->" not in out:
            out = out.rstrip("\n") + "\n\n" + m.group(0)
    return out
