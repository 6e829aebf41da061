"""Sections of BENCHMARKS.md produced by other branches' benchmark modules, when present.

Contract for such a module ``benchmarks/<name>.py``: expose ``bench_section(quick: bool) -> str``
returning a Markdown section (starting with a ``##`` heading) and stay within a few minutes
(``quick``: well under one). A module without that function is run as
``python -m benchmarks.<name> [--quick]`` and its standard output is taken as the section.
A missing module is reported as skipped, so one ``make bench`` produces every section that
exists on the branch it runs on.
"""

from __future__ import annotations

import importlib
import importlib.util
import subprocess
import sys
import time
from typing import Any

__all__ = ["EXTERNAL", "run_external"]

EXTERNAL: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Estimator alone vs the real tokenizer", "branch estimator", ("bench_estimator",)),
    ("Run counter: what each part of the C extension buys", "issue 31", ("runscan_paths",)),
    (
        "Planner simulator vs vllm-sr-sim",
        "branch planner",
        ("planner_des", "bench_planner", "bench_simulator", "planner_sim"),
    ),
    ("Soak", "branch hardening", ("soak",)),
)


def _find(names: tuple[str, ...]) -> str | None:
    for name in names:
        if importlib.util.find_spec(f"benchmarks.{name}") is not None:
            return name
    return None


def run_external(quick: bool, log: Any = print) -> list[tuple[str, str]]:
    """Run every present module; returns (title, markdown) per entry (a note when skipped/failed)."""
    out = []
    for title, origin, names in EXTERNAL:
        name = _find(names)
        if name is None:
            note = (
                f"## {title}\n\n_Skipped: no `benchmarks/{names[0]}.py` on this branch (it comes from"
                f" {origin}); rerun `make bench` after merging it._\n"
            )
            out.append((title, note))
            log(f"external: {title}: skipped (module absent)")
            continue
        t0 = time.monotonic()
        try:
            mod = importlib.import_module(f"benchmarks.{name}")
            fn = getattr(mod, "bench_section", None)
            if callable(fn):
                text = str(fn(quick))
            else:
                argv = [sys.executable, "-m", f"benchmarks.{name}"] + (["--quick"] if quick else [])
                proc = subprocess.run(argv, capture_output=True, text=True, timeout=900)
                if proc.returncode != 0:
                    raise RuntimeError(proc.stderr[-800:])
                text = proc.stdout
        except Exception as exc:
            text = (
                f"## {title}\n\n_Failed: `benchmarks.{name}` raised {type(exc).__name__}: {str(exc)[:400]}_\n"
            )
        log(f"external: {title}: {time.monotonic() - t0:.0f}s")
        out.append((title, text))
    return out
