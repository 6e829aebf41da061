"""Cost of budgeting a ~100 KB real request body: parse + classify + estimate vs the real tokenizer.

Run: ``python -m benchmarks.bench_estimator [--data ../shared/data]``. Prints a markdown section.
The body is a real ShareGPT multi-turn conversation (the longest prefix under 100 KB, compact
UTF-8), a real WildChat-ru / AlignBench mix is also timed because non-ASCII text costs more to
decode. Tokenizer timings include the chat template (what the server would need to do).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from extproc.calibration import InMemoryRatioStore
from extproc.config import CalibrationConfig, EstimatorConfig
from extproc.estimator import Estimator
from extproc.evaluation.corpus import ReplayRequest, load_requests, request_body
from extproc.evaluation.groundtruth import load_counter
from extproc.request_body import parse_request_body


def _time_us(fn: Callable[[], object], repeat: int) -> tuple[float, float]:
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t0) * 1e6)
    samples.sort()
    return statistics.median(samples), samples[int(0.9 * (len(samples) - 1))]


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


def main() -> None:
    """Print the benchmark section."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default="../shared/data")
    ap.add_argument("--repeat", type=int, default=200)
    args = ap.parse_args()
    data = Path(args.data)
    reqs = load_requests(data, ("sharegpt_multiturn", "wildchat_ru", "alignbench_zh"))
    cal = CalibrationConfig()
    est = Estimator(estimator=EstimatorConfig(), calibration=cal, store=InMemoryRatioStore.from_config(cal))
    print("## Estimator cost (benchmarks/bench_estimator.py)\n")
    print(f"median / p90 over {args.repeat} runs, µs; one core; tokenizers include the chat template.\n")
    print("|body|bytes|parse+classify+estimate|llama3 tokenizer|qwen3 tokenizer|speed-up vs llama3|")
    print("|---|---:|---:|---:|---:|---:|")
    llama = load_counter("llama3", data)
    qwen = load_counter("qwen3", data)
    model = "Qwen/Qwen3-8B"
    cases = [
        ("ShareGPT multi-turn (English)", _body_of_about(reqs, "sharegpt_multiturn", 100_000)),
        ("WildChat-ru (Cyrillic, compact UTF-8)", _body_of_about(reqs, "wildchat_ru", 100_000)),
        ("WildChat-ru (Cyrillic, ASCII-escaped)", _body_of_about(reqs, "wildchat_ru", 50_000)),
    ]
    for label, req in cases:
        escaped = "escaped" in label
        body = request_body(req, model=model, max_tokens=512, ascii_escaped=escaped)

        def route(body: bytes = body) -> object:
            return est.estimate(parse_request_body(body, "chat"))

        ours_us = _time_us(route, args.repeat)
        llama_us = _time_us(lambda req=req: llama.prompt_tokens(req), max(10, args.repeat // 10))
        qwen_us = _time_us(lambda req=req: qwen.prompt_tokens(req), max(10, args.repeat // 10))
        print(
            f"|{label}|{len(body)}|{ours_us[0]:.0f} / {ours_us[1]:.0f}|{llama_us[0]:.0f} / {llama_us[1]:.0f}|"
            f"{qwen_us[0]:.0f} / {qwen_us[1]:.0f}|{llama_us[0] / ours_us[0]:.0f}×|"
        )


if __name__ == "__main__":
    main()
