"""Adaptive response reads on real gRPC streams (``calibration.response_reads.mode: adaptive``, one
message per request as envoy/envoy.yaml): the body answer carries the observability payload only for
the requests whose response the decision reads, each decision is counted with its reason, and what
a read teaches feeds the next decisions (extproc/core/learn/read_decision.py)."""

from __future__ import annotations

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.adapter.off_path import decode_payload
from extproc.config import parse_config
from extproc.core.estimate.output_reserve import ALL_BANDS
from extproc.core.request.request_body import parse_request_body
from extproc.service.app import RouterApp
from tests.pb import (
    body_first,
    chat_body,
    forwarded,
    resp_body,
    resp_headers,
    run_stream,
    silent_stream,
    usage_body,
)

TEXT = "Explain in two sentences why the sky is blue during the day and red at sunset. "


def _cfg(**reads: object) -> dict[str, object]:
    return {
        "pools": [
            {"name": "short", "max_model_len": 8192, "header_value": "short"},
            {"name": "long", "max_model_len": 65536, "header_value": "long"},
        ],
        "calibration": {"response_reads": {"mode": "adaptive", **reads}},
        "admin": {"enabled": False},
    }


def _payload(answer: pb.ProcessingResponse) -> str | None:
    tbr = answer.dynamic_metadata.fields["tbr"].struct_value.fields
    return tbr["calib"].string_value if "calib" in tbr else None


async def _read(port: int, answer: pb.ProcessingResponse, prompt_tokens: int) -> None:
    """The observability stream Envoy opens for a read request (metadata forwarded, no answers)."""
    msgs = [
        forwarded(answer),
        resp_headers({":status": "200", "content-type": "application/json"}),
        resp_body(usage_body(prompt_tokens), eos=True),
    ]
    assert await silent_stream(port, msgs) == []


def _count(app: RouterApp, decision: str, reason: str) -> float:
    value = app.metrics.registry.get_sample_value(
        "tbr_response_reads_total", {"decision": decision, "reason": reason}
    )
    return value or 0.0


async def test_a_cold_key_is_read_until_learned_then_skipped() -> None:
    cfg = parse_config(_cfg(cold_samples=3, output_cold_samples=0, floor_rate=0.0))
    async with RouterApp(cfg, grpc_port=0) as app:
        for i in range(3):
            (answer,) = await run_stream(app.grpc_port, [body_first(chat_body(TEXT * 3), f"c{i}")])
            value = _payload(answer)
            assert value is not None, i
            payload = decode_payload(value)
            assert payload is not None and not payload.budget.screened  # learned against the exact estimate
            await _read(app.grpc_port, answer, payload.budget.prompt_tokens)  # the estimate was right
        assert _count(app, "read", "cold") == 3
        ((_, state),) = app.store.items()
        assert state.samples == 3
        (answer,) = await run_stream(app.grpc_port, [body_first(chat_body(TEXT * 3), "w")])
        assert _payload(answer) is None
        assert answer.dynamic_metadata.fields["tbr"].struct_value.fields["pool"].string_value == "short"
        assert _count(app, "skip", "learned") == 1


async def test_the_budget_caps_a_cold_keys_reads() -> None:
    cfg = parse_config(_cfg(burst_reads=2, reads_per_key_per_s=0.0, floor_rate=0.0))
    async with RouterApp(cfg, grpc_port=0) as app:
        got = []
        for i in range(4):
            (answer,) = await run_stream(app.grpc_port, [body_first(chat_body(TEXT), f"b{i}")])
            got.append(_payload(answer) is not None)
        assert got == [True, True, False, False]
        assert _count(app, "skip", "over_budget") == 2


async def test_a_request_its_pool_may_truncate_is_read() -> None:
    """No client maximum and a prompt that leaves the short pool less than two output reserves of
    room: the answer may be cut there (a truncation misroute), so it is read even when learned."""
    cfg = parse_config(_cfg(cold_samples=0, output_cold_samples=0, floor_rate=0.0))
    async with RouterApp(cfg, grpc_port=0) as app:
        router = app.current_router()
        reps = 1
        while True:  # the smallest prompt whose budget still fits the short pool but leaves < 2 reserves
            body = chat_body(TEXT * reps)
            budget = router.estimator.estimate(parse_request_body(body, "chat"))
            if 8192 - budget.prompt_tokens < 2 * budget.output_reserve_tokens:
                break
            reps += 1
        assert budget.total_tokens <= 8192
        (answer,) = await run_stream(app.grpc_port, [body_first(body, "t")])
        assert answer.dynamic_metadata.fields["tbr"].struct_value.fields["pool"].string_value == "short"
        assert _payload(answer) is not None
        assert _count(app, "read", "truncation_possible") == 1
        (answer,) = await run_stream(app.grpc_port, [body_first(chat_body(TEXT), "far")])
        assert _payload(answer) is None  # far from the boundary, learned (cold_samples 0): skipped


async def test_a_bounded_requests_output_is_cold_until_its_all_bands_class_has_learned() -> None:
    """A request routed by the byte bound has the bound's prompt band, never the one its reads teach:
    whether its output is cold is asked of the class over all bands (what every read teaches)."""
    cfg = parse_config(
        _cfg(cold_samples=0, output_cold_samples=3, floor_rate=0.0)
        | {"estimator": {"output_reserve": {"learned": True}}}
    )
    async with RouterApp(cfg, grpc_port=0) as app:
        (answer,) = await run_stream(app.grpc_port, [body_first(chat_body(TEXT), "o1")])
        value = _payload(answer)
        assert value is not None and _count(app, "read", "output_cold") == 1
        payload = decode_payload(value)
        assert payload is not None and payload.budget.output_class is not None
        router = app.current_router()
        parent = payload.budget.output_class._replace(prompt_band=ALL_BANDS)
        for _ in range(3):
            router.observe_output(parent, 40, truncated=False, capped=False)
        (answer,) = await run_stream(app.grpc_port, [body_first(chat_body(TEXT), "o2")])
        assert _payload(answer) is None and _count(app, "skip", "learned") == 1
