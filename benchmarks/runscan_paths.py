"""What each part of the C run counter buys per request, on the benchmark bodies (issue 31, item 5).

Run: ``python -m benchmarks.runscan_paths [--quick]``; ``make bench`` runs it through
``benchmarks/external.py``. For the 1 KB, 32 KB and 512 KB bodies of ``benchmarks/bodies.py`` (real
ShareGPT prompts) it times, side by side in one process and in a seeded interleaved order, each part
of ``extproc/core/text/_runscan.c`` against what would run without it:

* the SSE2 pass's POPCNT build: the installed extension vs the file built with
  ``-DRUNSCAN_NO_POPCNT``;
* the SSE2 64-character pass: ``-DRUNSCAN_NO_POPCNT`` vs the file built with ``-U__SSE2__`` (the
  scalar pass, what aarch64 runs);
* the C count itself: the scalar pass vs :func:`extproc.core.text.runs.count_runs_numpy`;
* the word counts of the language tests: ``_runscan.window_words`` vs their Python reference.

Run counts are of the body's prompt text (``RequestFeatures.runs``: the count, the blob test, the
language tests and the gaps), checked equal across builds before timing. Each saving is divided by
the router's CPU per request for the same body (``route_1msg`` at saturation, read from
BENCHMARKS.md, the last ``make bench``) to judge it against the 5 % rule (docs/performance.md §Run
counter). Variants are compiled with the C compiler found on PATH into a temporary directory;
without one (or without the extension) the section says so.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.util
import random
import re
import shutil
import statistics
import subprocess
import sysconfig
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

from benchmarks.bodies import build_bodies
from extproc.core.request.request_body import parse_request_body
from extproc.core.text import run_languages, runs

__all__ = ["PARTS", "bench_section", "build_variant", "main", "measure", "router_cpu_ms"]

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "extproc" / "core" / "text" / "_runscan.c"
SIZES = {"1KB": 1024, "32KB": 32 * 1024, "512KB": 512 * 1024 - 1}


def build_variant(source: Path, cflags: list[str], work: Path, name: str) -> ModuleType | None:
    """The extension compiled from ``source`` with ``cflags`` (plus setup.py's flags), configured
    as :mod:`extproc.core.text.runs` configures the installed one; None without a C compiler."""
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        return None
    so = work / f"{name.replace(' ', '_')}.so"
    inc = sysconfig.get_paths()["include"]
    setup_flags = ["-O3", "-DNDEBUG", "-std=c11"]  # as setup.py builds it (Python's CFLAGS hold -DNDEBUG)
    subprocess.run(
        [cc, *setup_flags, "-fPIC", "-shared", *cflags, f"-I{inc}", str(source), "-o", str(so)],
        check=True,
        capture_output=True,
    )
    loader = importlib.machinery.ExtensionFileLoader("extproc.core.text._runscan", str(so))
    spec = importlib.util.spec_from_loader("extproc.core.text._runscan", loader)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    mod.configure(*vars(runs)["_CONFIGURE_ARGS"])
    for set_id, words in enumerate(run_languages.WORD_SETS):
        mod.configure_words(set_id, words)
    return mod


def router_cpu_ms(benchmarks_md: Path = ROOT / "BENCHMARKS.md") -> dict[str, float]:
    """Router CPU ms per request at saturation of the ``route_1msg`` variant per body label, from
    the side-by-side tables of BENCHMARKS.md (empty when absent)."""
    if not benchmarks_md.exists():
        return {}
    out: dict[str, float] = {}
    label = None
    for line in benchmarks_md.read_text(encoding="utf-8").splitlines():
        m = re.match(r"### Body (\S+) ", line)
        if m:
            label = m.group(1)
        m = re.match(r"\| `route_1msg(?:_\w+)?` .*?\| [\d.]+ \| \d+ \| [\d.]+ \| ([\d.]+) / ", line)
        if m and label:
            out[label] = float(m.group(1))
    return out


def _count_with(mod: ModuleType | None, text: str) -> Callable[[], object]:
    def run() -> object:
        state = vars(runs)  # the module's extension (a private global) swapped for the call
        saved, state["_runscan"] = state["_runscan"], mod
        try:
            return runs.count_runs(text) if mod is not None else runs.count_runs_numpy(text)
        finally:
            state["_runscan"] = saved

    return run


def _python_words(text: str) -> Callable[[], object]:
    def run() -> object:
        state = vars(run_languages)
        saved, state["_c"] = state["_c"], None
        try:
            return run_languages.window_words(text)
        finally:
            state["_c"] = saved

    return run


def _time_us(fns: dict[str, Callable[[], object]], rounds: int, seed: int = 31) -> dict[str, float]:
    """Median µs per call of each function, called in a seeded shuffled order every round."""
    samples: dict[str, list[float]] = {k: [] for k in fns}
    rng = random.Random(seed)
    names = list(fns)
    for _ in range(rounds):
        rng.shuffle(names)
        for name in names:
            t0 = time.perf_counter_ns()
            fns[name]()
            samples[name].append((time.perf_counter_ns() - t0) / 1000)
    return {k: statistics.median(v) for k, v in samples.items()}


PARTS: tuple[tuple[str, str, str], ...] = (
    ("POPCNT build of the SSE2 pass", "count, sse2 without popcnt", "count, installed"),
    ("SSE2 64-character pass", "count, scalar", "count, sse2 without popcnt"),
    ("C count (scalar) vs numpy", "count, numpy", "count, scalar"),
    ("C word counts vs Python", "words, python", "words, c"),
)
"""``(part, timing without it, timing with it)``."""


def measure(quick: bool) -> tuple[list[dict[str, object]], str]:
    """One row per body: its prompt's characters and storage width, and µs per call of each timing."""
    installed: ModuleType | None = vars(runs)["_runscan"]
    if installed is None:
        return [], "The C extension is not built here: nothing to compare."
    bodies = build_bodies(SIZES)
    rows: list[dict[str, object]] = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            no_popcnt = build_variant(SOURCE, ["-DRUNSCAN_NO_POPCNT"], Path(tmp), "no_popcnt")
            scalar = build_variant(SOURCE, ["-U__SSE2__"], Path(tmp), "scalar")
        except subprocess.CalledProcessError as exc:
            return [], f"A variant did not build: {exc.stderr[-300:]!r}."
        if no_popcnt is None or scalar is None:
            return [], "No C compiler on PATH: the variants cannot be built."
        for body in bodies:
            text = parse_request_body(body.body, "chat").prompt_text
            fns = {
                "count, installed": _count_with(installed, text),
                "count, sse2 without popcnt": _count_with(no_popcnt, text),
                "count, scalar": _count_with(scalar, text),
                "count, numpy": _count_with(None, text),
                "words, c": partial(run_languages.window_words, text),
                "words, python": _python_words(text),
            }
            for prefix in ("count", "words"):  # every build gives the same (else timing means nothing)
                got = [repr(getattr(fn(), "as_dict", fn)()) for k, fn in fns.items() if k.startswith(prefix)]
                assert len(set(got)) == 1, (prefix, body.label)
            rounds = 15 if quick else 61
            if len(text) < 64 * 1024:
                rounds *= 8
            per = _time_us(fns, rounds)
            top = max(map(ord, text)) if text else 0
            width = 1 if top < 256 else 2 if top < 65536 else 4
            rows.append({"label": body.label, "chars": len(text), "width": width, **per})
    return rows, f"Installed pass: `{runs.RUNSCAN_PASS}`."


def _section(rows: list[dict[str, object]], note: str) -> str:
    cpu = router_cpu_ms()
    lines = [
        "## Run counter: what each part of the C extension buys per request (benchmarks/runscan_paths.py)",
        "",
        "Median µs per call on the body's prompt text, every timing interleaved in one process; saving = "
        "without − with, and that saving ÷ the router's CPU per request for the body (`route_1msg` at "
        "saturation, from the BENCHMARKS.md of the run before). A part is kept when it saves about 5 % "
        f"of the router's CPU on a benchmark body (issue 31; docs/performance.md §Run counter). {note}",
        "",
    ]
    if not rows:
        return "\n".join(lines) + "\n"
    lines += [
        "|part|"
        + "|".join(
            f"{r['label']} ({r['chars']:,} chars, {r['width']} B/char): without / with µs, saving"
            for r in rows
        )
        + "|",
        "|---|" + "---|" * len(rows),
    ]
    for part, without, with_ in PARTS:
        cells = [part]
        for r in rows:
            a, b = float(r[without]), float(r[with_])  # type: ignore[arg-type]
            router = cpu.get(str(r["label"]))
            share = f"{100 * (a - b) / (router * 1000):.1f} %" if router else "–"
            cells.append(f"{a:.1f} / {b:.1f}, {a - b:.1f} µs = {share}")
        lines.append("|" + "|".join(cells) + "|")
    routers = ", ".join(
        f"{r['label']} {cpu[str(r['label'])] * 1000:.0f} µs" for r in rows if str(r["label"]) in cpu
    )
    lines += ["", f"Router CPU per request used: {routers or 'none found (no BENCHMARKS.md)'}."]
    return "\n".join(lines) + "\n"


def bench_section(quick: bool) -> str:
    """The Markdown section (see the module docstring)."""
    rows, note = measure(quick)
    return _section(rows, note)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true")
    print(bench_section(ap.parse_args().quick))


if __name__ == "__main__":
    main()
