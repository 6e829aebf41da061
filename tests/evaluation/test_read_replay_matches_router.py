"""The calibration-convergence replay decides what to read as the router does (issue 31 item 1,
issue 35 item 2): the same real requests through the gRPC router (one message per request, as
envoy/envoy.yaml) and through :func:`evaluation.read_replay.replay_reads` give the same read
decision, with the same reason, request by request, when each read answer teaches both the same
usage (the true prompt count and the true answer length, cut where vLLM would cut it).

The read budget does not refill (``reads_per_key_per_s: 0``) and the floor rate is off, so neither
the wall clock nor a random draw enters the router's decisions; a small burst and small cold
thresholds make every reason but ``floor`` and ``required`` occur within a few dozen requests."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from tokenizers import Tokenizer

from evaluation.corpus import load_derived_counts, load_requests
from evaluation.groundtruth import SERVED_MODELS
from evaluation.output_pairs import load_output_pairs
from evaluation.read_replay import replay_reads, served_usage
from evaluation.replay import build_items
from extproc.config import RouterConfig, parse_config
from extproc.service.app import RouterApp
from tests.pb import body_first, forwarded, resp_body, resp_headers, run_stream, silent_stream

SOURCES = ("mt_bench_en", "mt_bench_ja", "humaneval", "mgsm_en")
"""Sources with answers (MT-Bench, HumanEval) and one without (MGSM: answered by the default)."""


def _config() -> RouterConfig:
    return parse_config(
        {
            "pools": [
                {"name": "short", "max_model_len": 8192, "header_value": "short"},
                {"name": "long", "max_model_len": 65536, "header_value": "long"},
            ],
            "estimator": {"default_output_reserve_tokens": 1024},
            "calibration": {
                "response_reads": {
                    "mode": "adaptive",
                    "cold_samples": 5,
                    "output_cold_samples": 8,
                    "drift_rel_error": 0.02,
                    "drift_reads": 3,
                    "floor_rate": 0.0,
                    "reads_per_key_per_s": 0.0,
                    "burst_reads": 12,
                }
            },
            "admin": {"enabled": False},
        }
    )


async def test_the_replay_reads_what_the_grpc_router_reads(data_dir: Path) -> None:
    requests = load_requests(data_dir, SOURCES)
    derived = load_derived_counts(data_dir)
    truth = [int(derived[(r.source, r.req_id)]["llama3_prompt_tokens"]) for r in requests]
    items = build_items(requests, truth, model=SERVED_MODELS["llama3"], seed=3, limit=60)
    tok = Tokenizer.from_file(str(data_dir / "tokenizers" / "llama3" / "tokenizer.json"))
    pairs = load_output_pairs(data_dir, tok, sources=("mt_bench_en", "mt_bench_ja", "humaneval"))
    answers = {(p.source, p.req_id): p.output_tokens for p in pairs}
    assert 0 < sum((i.source, i.req_id) in answers for i in items) < len(items)
    cfg = _config()

    replayed = replay_reads(items, answers, adaptive=True, config=cfg)

    routed: list[bool] = []
    async with RouterApp(cfg, grpc_port=0) as app:
        for n, item in enumerate(items):
            (routing,) = await run_stream(app.grpc_port, [body_first(item.body, f"r{n}")])
            tbr = routing.dynamic_metadata.fields["tbr"].struct_value.fields
            routed.append("calib" in tbr)
            if "calib" not in tbr:
                continue
            pool = tbr["pool"].string_value
            assert item.prompt_tokens < cfg.pools[0].max_model_len or pool == "long"
            answer = answers.get((item.source, item.req_id))
            usage = served_usage(
                item.prompt_tokens,
                answer if answer is not None else item.max_tokens or 1024,
                client_max_output_tokens=item.max_tokens,
                pool_max_model_len=next(p.max_model_len for p in cfg.pools if p.name == pool),
            )
            body = {
                "choices": [{"index": 0, "finish_reason": usage.finish_reasons[0]}],
                "usage": {"prompt_tokens": usage.prompt_tokens, "completion_tokens": usage.completion_tokens},
            }
            msgs = [
                forwarded(routing),
                resp_headers({":status": "200", "content-type": "application/json"}),
                resp_body(json.dumps(body).encode(), eos=True),
            ]
            assert await silent_stream(app.grpc_port, msgs) == []
        counted = Counter[str]()
        for metric in app.metrics.registry.collect():
            for s in metric.samples:
                if s.name == "tbr_response_reads_total" and s.value:
                    counted[s.labels["reason"]] += int(s.value)

    assert routed == replayed.read.tolist()
    assert counted == Counter(replayed.reasons)
    # the decision exercised its reasons: cold keys, cold output classes, drift, the spent budget
    assert {"cold", "output_cold", "drift", "over_budget"} <= set(counted), counted
