"""Cost of budgeting a ~100 KB real request body: parse + classify + estimate vs the real tokenizer.

Run: ``python -m benchmarks.bench_estimator [--data ../shared/data] [--quick]``; the perf harness
(``benchmarks/run.py`` → ``benchmarks/external.py``) calls :func:`bench_section`. Prints a
markdown section. The bodies are real conversations (ShareGPT multi-turn in English, WildChat-ru
in Cyrillic, compact UTF-8 and Python's ASCII-escaped serialisation) of about 100 KB. Tokenizer
timings include the chat template (what the router would have to run to count exactly).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from evaluation.corpus import ReplayRequest, load_requests, request_body
from evaluation.groundtruth import load_counter
from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.request.request_body import parse_request_body
from extproc.core.text.runs import RUNSCAN, RUNSCAN_PASS, count_runs, count_runs_numpy

__all__ = ["bench_section", "main"]

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "broad" / "broad.jsonl"
BROAD_KINDS = ("devanagari", "han", "arabic", "hangul", "code", "base64", "csv", "uuid", "hex", "emoji")
"""Content kinds of the broad corpus (evaluation/broad_corpus.py) benchmarked at ~100 KB each."""


def _broad_bodies(path: Path, target_bytes: int) -> list[tuple[str, ReplayRequest]]:
    """One ~``target_bytes`` user message per kind of :data:`BROAD_KINDS`: that kind's corpus texts
    joined in file order (empty when the corpus is absent)."""
    if not path.exists():
        return []
    import json

    texts: dict[str, list[str]] = {k: [] for k in BROAD_KINDS}
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            b = json.loads(line)
            kind = b["metadata"]["kind"]
            if kind in texts:
                texts[kind] += [m["content"] for m in b["messages"] if isinstance(m.get("content"), str)]
    out = []
    for kind, parts in texts.items():
        text = ""
        for t in parts * (1 + target_bytes // max(1, sum(len(x.encode()) for x in parts))):
            if len(text.encode()) >= target_bytes:
                break
            text += t + "\n\n"
        if text:
            out.append((kind, ReplayRequest(kind, "bench", ({"role": "user", "content": text},))))
    return out


def _time_us(fn: Callable[[], object], repeat: int) -> tuple[float, float, float]:
    """(min, median, p90) wall time of ``fn`` in µs over ``repeat`` calls after one warm-up call."""
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return samples[0], statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


def _body_of_about(reqs: list[ReplayRequest], source: str, target_bytes: int) -> ReplayRequest:
    """A real conversation of ``source``: consecutive real messages up to ~``target_bytes`` of text."""
    msgs: list[dict[str, str]] = []
    size = 0
    seen: set[str] = set()
    for r in reqs:
        if r.source != source or r.req_id.split("@")[0] in seen:
            continue
        seen.add(r.req_id.split("@")[0])
        for m in r.messages:
            msgs.append(m)
            size += len(m["content"].encode())
            if size >= target_bytes and msgs[-1]["role"] == "user":
                return ReplayRequest(source, "bench", tuple(msgs))
    return ReplayRequest(source, "bench", tuple(msgs))


def bench_section(
    quick: bool = False, data: str | Path | None = None, corpus: str | Path | None = None
) -> str:
    """The markdown section (``## Estimator cost``); a skip note when the shared data is absent.

    Args:
        quick: fewer repetitions (≈10 s instead of ≈1 min).
        data: the shared data directory (default ``../shared/data`` next to the repository).
    """
    root = Path(data) if data is not None else DEFAULT_DATA
    title = "## Estimator cost: parse + classify + estimate vs the real tokenizer (benchmarks/bench_estimator.py)\n"
    if not (root / "text").is_dir() or not (root / "tokenizers").is_dir():
        return (
            f"{title}\n_Skipped: shared data not found at {root} (real bodies and tokenizers are needed)._\n"
        )
    repeat = 100 if quick else 500
    reqs = load_requests(root, ("sharegpt_multiturn", "wildchat_ru"))
    cal = CalibrationConfig()
    ecfg = EstimatorConfig()
    est = Estimator(estimator=ecfg, calibration=cal, store=InMemoryRatioStore.from_config(cal))
    llama = load_counter("llama3", root)
    qwen = load_counter("qwen3", root)
    load1 = os.getloadavg()[0]
    lines = [
        title,
        f"Best / median / p90 over {repeat} runs (tokenizers: {max(10, repeat // 20)} runs), µs, one Python "
        f"thread; 1-min load average at start {load1:.1f} on {os.cpu_count()} CPUs (a shared box inflates the "
        "median and p90 with preemption; best-of approximates the uncontended cost, and the tokenizer ratio "
        "uses it). `total` = `Estimator.estimate(parse_request_body(body))`, what the ext_proc "
        "request_body phase runs for a body this long (the byte bound of `extproc/core/estimate/screen.py` decides "
        "only short prompts); `parse` = orjson, the fields and text byte counts; `classify` = the run counts "
        f"of all the text (`extproc/core/text/runs.py`, counted by the estimate on first use; run counter: `{RUNSCAN}`, pass `{RUNSCAN_PASS}`); "
        "`classify (numpy)` = the same counts by the numpy reference (`count_runs_numpy`, what runs where the C "
        "extension was not built), side by side; `orjson.loads` = "
        "the JSON decoding alone, a floor no estimator reading the body can go below (`llama3 ÷ loads`: the "
        "largest ratio to the tokenizer any such estimator could reach). Rows marked broad: one ~100 KB "
        "message of that content kind from the broad corpus (evaluation/broad_corpus.py).",
        "",
        "|body|bytes|orjson.loads|parse|classify|classify (numpy)|total|llama3 tokenizer + template|"
        "qwen3 tokenizer + template|llama3 ÷ total|llama3 ÷ loads|",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    cases = [
        ("ShareGPT multi-turn (English)", "sharegpt_multiturn", 100_000, False),
        ("WildChat-ru (Cyrillic, compact UTF-8)", "wildchat_ru", 100_000, False),
        ("WildChat-ru (Cyrillic, ASCII-escaped)", "wildchat_ru", 50_000, True),
    ]
    broad = _broad_bodies(Path(corpus) if corpus is not None else DEFAULT_CORPUS, 100_000)
    runs: list[tuple[str, ReplayRequest, bool]] = [
        (label, _body_of_about(reqs, source, size), escaped) for label, source, size, escaped in cases
    ]
    runs += [(f"broad: {kind}", req, False) for kind, req in broad]
    for label, req, escaped in runs:
        body = request_body(req, model="Qwen/Qwen3-8B", max_tokens=512, ascii_escaped=escaped)
        parse_request_body(body, "chat")
        loads_us = _time_us(lambda body=body: orjson.loads(body), repeat)
        parse_us = _time_us(lambda body=body: parse_request_body(body, "chat"), repeat)
        text = "\n".join(m["content"] for m in req.messages)
        classify_us = _time_us(lambda text=text: count_runs(text), repeat)
        numpy_us = _time_us(lambda text=text: count_runs_numpy(text), repeat)
        total_us = _time_us(lambda body=body: est.estimate(parse_request_body(body, "chat")), repeat)
        n_tok = max(10, repeat // 20)
        llama_us = _time_us(lambda req=req: llama.prompt_tokens(req), n_tok)
        qwen_us = _time_us(lambda req=req: qwen.prompt_tokens(req), n_tok)

        def cell(t: tuple[float, float, float]) -> str:
            return f"{t[0]:.0f} / {t[1]:.0f} / {t[2]:.0f}"

        lines.append(
            f"|{label}|{len(body)}|{cell(loads_us)}|{cell(parse_us)}|{cell(classify_us)}|{cell(numpy_us)}|"
            f"**{cell(total_us)}**|"
            f"{cell(llama_us)}|{cell(qwen_us)}|{llama_us[0] / total_us[0]:.0f}×|{llama_us[0] / loads_us[0]:.0f}×|"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Print the benchmark section."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=None, help="shared data directory (default ../shared/data)")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions")
    ap.add_argument(
        "--corpus", default=None, help="broad corpus JSONL (default ../shared/data/broad/broad.jsonl)"
    )
    args = ap.parse_args()
    print(bench_section(args.quick, args.data, args.corpus))


if __name__ == "__main__":
    main()
