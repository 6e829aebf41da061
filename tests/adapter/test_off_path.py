"""Off-path calibration on real gRPC streams (extproc.adapter.off_path): the routing stream of a
sampled request carries the payload and no response phases; the observability stream is read
silently and calibrates; a damaged payload is counted and learned from never."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.adapter.off_path import CALIB_HEADER, CalibPayload, decode_payload, encode_payload
from extproc.config import parse_config
from extproc.core.estimate.budget import TokenBudget
from extproc.service.app import RouterApp
from tests.pb import (
    body_first,
    chat_body,
    forwarded,
    headers,
    req_body,
    resp_body,
    resp_headers,
    run_stream,
    silent_stream,
    usage_body,
)

REQ = headers({":method": "POST", ":path": "/v1/chat/completions", "x-request-id": "r1"})
TEXT = "Explain in two sentences why the sky is blue during the day and red at sunset. " * 3


def _cfg(rate: float) -> dict[str, object]:
    return {
        "pools": [
            {"name": "short", "max_model_len": 8192, "header_value": "short"},
            {"name": "long", "max_model_len": 65536, "header_value": "long"},
        ],
        "calibration": {"sample_rate": rate, "off_path": True},
        "admin": {"enabled": False},
    }


@pytest.fixture
async def app() -> AsyncIterator[RouterApp]:
    async with RouterApp(parse_config(_cfg(1.0)), grpc_port=0) as a:
        yield a


def _calib_header(resp: pb.ProcessingResponse) -> str | None:
    for h in resp.request_body.response.header_mutation.set_headers:
        if h.header.key == CALIB_HEADER:
            return h.header.raw_value.decode()
    return None


def test_payload_round_trip_and_rejections() -> None:
    budget = TokenBudget(("modèle", "latin"), 0.9, 120, 12, 150, 256, 1, 406, True, 120, 140, 130.5, 0, False)
    p = CalibPayload(budget, "short", "chat", True, "r1")
    value = encode_payload(p)
    assert value.isascii() and decode_payload(value) == p
    assert decode_payload(value.replace('"v":2', '"v":3')) is None
    assert decode_payload(value.replace('"prompt_tokens":150', '"prompt_tokens":"150"')) is None
    assert decode_payload(value.replace('"warm":true', '"warm":1')) is None
    assert decode_payload("{" + value) is None
    assert decode_payload(value[:-40] + "}") is None
    doc = dataclasses.replace(p, budget=dataclasses.replace(budget, model_tokens=131.0))
    assert decode_payload(encode_payload(doc)) == doc


async def test_sampled_request_routes_with_the_payload_and_its_response_is_read_silently(
    app: RouterApp,
) -> None:
    hdr, body = await run_stream(
        app.grpc_port, [pb.ProcessingRequest(request_headers=REQ), req_body(chat_body(TEXT))]
    )
    # the routing stream never asks for the response phases, sampled or not
    assert hdr.mode_override.response_header_mode == pm.ProcessingMode.SKIP
    sets = {h.header.key: h.header.raw_value for h in body.request_body.response.header_mutation.set_headers}
    assert sets["x-tbr-pool"] == b"short" and body.request_body.response.clear_route_cache
    value = _calib_header(body)
    assert value is not None
    payload = decode_payload(value)
    assert payload is not None and payload.pool == "short" and payload.budget.screened == ""
    obs_headers = headers({":method": "POST", ":path": "/v1/chat/completions", CALIB_HEADER: value})
    out = await silent_stream(
        app.grpc_port,
        [
            pb.ProcessingRequest(request_headers=obs_headers),
            resp_headers({":status": "200", "content-type": "application/json"}),
            resp_body(usage_body(payload.budget.prompt_tokens - 5), eos=True),
        ],
    )
    assert out == []
    ((_, state),) = app.store.items()
    assert state.samples == 1


async def test_a_damaged_payload_is_counted_and_not_learned(app: RouterApp) -> None:
    bad = headers({":method": "POST", ":path": "/v1/chat/completions", CALIB_HEADER: '{"v":1}'})
    # The router ends the call at once on a bad payload (status OK), so only the headers are sent:
    # a later write would race that end and fail on the client's side.
    out = await silent_stream(app.grpc_port, [pb.ProcessingRequest(request_headers=bad)])
    assert out == []
    assert not list(app.store.items())
    value = app.metrics.registry.get_sample_value("tbr_calibration_events_total", {"outcome": "bad_payload"})
    assert value == 1


def test_one_message_payload_travels_in_dynamic_metadata() -> None:
    """A metadata routing answer (one message) gets the payload beside the pool, not as a header;
    :func:`payload_from_metadata` reads it back from ``metadata_context`` and ignores what is not
    a string under ``tbr.calib``."""
    from google.protobuf import struct_pb2

    from extproc.adapter.off_path import payload_from_metadata, route_and_sample
    from extproc.adapter.responses import route_by_metadata

    budget = TokenBudget(("m", "latin"), 0.9, 120, 12, 150, 256, 1, 406, True, 120, 140, 130.5, 0, False)
    p = CalibPayload(budget, "short", "chat", True, "r1")
    resp = route_and_sample(route_by_metadata("x-tbr-pool", "short"), p)
    tbr = resp.dynamic_metadata.fields["tbr"].struct_value.fields
    assert tbr["pool"].string_value == "short"
    assert decode_payload(tbr["calib"].string_value) == p
    assert all(h.header.key != CALIB_HEADER for h in resp.request_body.response.header_mutation.set_headers)

    req = pb.ProcessingRequest()
    assert payload_from_metadata(req) is None
    req.metadata_context.filter_metadata["tbr"].CopyFrom(resp.dynamic_metadata.fields["tbr"].struct_value)
    assert payload_from_metadata(req) == tbr["calib"].string_value
    bad = struct_pb2.Struct()
    bad["calib"] = 3.0
    req.metadata_context.filter_metadata["tbr"].CopyFrom(bad)
    assert payload_from_metadata(req) is None


def _one_message_logging(tmp_path: Path) -> tuple[dict[str, object], Path]:
    """Every response sampled, ``off_path`` unset (one message needs none), a decision log."""
    cfg = _cfg(1.0)
    cfg["calibration"] = {"sample_rate": 1.0}
    log_path = tmp_path / "decisions.jsonl"
    cfg["decision_log_path"] = str(log_path)
    return cfg, log_path


def _rows(log_path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log_path.read_text().splitlines()]


async def test_one_message_sample_is_learned_off_path_without_the_flag_and_logged_once(
    tmp_path: Path,
) -> None:
    """One message, ``off_path`` unset: the sampled answer carries the payload in metadata, the
    observability stream learns, and the decision log holds one record per request with the
    served usage and status (the routing stream's record completed by the observability stream,
    extproc.adapter.held_records); a sampled request whose observability stream never comes is
    still logged, without usage."""
    cfg, log_path = _one_message_logging(tmp_path)
    async with RouterApp(parse_config(cfg), grpc_port=0) as app:
        (answer,) = await run_stream(app.grpc_port, [body_first(chat_body(TEXT), "one-a")])
        assert answer.dynamic_metadata.fields["tbr"].struct_value.fields["pool"].string_value == "short"
        assert not _calib_header(answer)
        out = await silent_stream(
            app.grpc_port,
            [
                forwarded(answer),
                resp_headers({":status": "200", "content-type": "application/json"}),
                resp_body(usage_body(123, 7), eos=True),
            ],
        )
        assert out == []
        ((_, state),) = app.store.items()
        assert state.samples == 1
        # the second request's observability stream never comes (no calibration filter)
        await run_stream(app.grpc_port, [body_first(chat_body(TEXT), "one-b")])
    rows = _rows(log_path)
    by_id = {r["request_id"]: r for r in rows}
    assert len(rows) == len(by_id) == 2
    a, b = by_id["one-a"], by_id["one-b"]
    assert (a["pool"], a["status"], a["prompt_tokens"], a["completion_tokens"]) == ("short", 200, 123, 7)
    assert a["estimated_prompt_tokens"] is not None and a["budget_tokens"] is not None
    assert (b["pool"], b["status"], b["prompt_tokens"]) == ("short", None, None)


async def test_a_misroute_seen_off_path_is_counted_and_ratchets(tmp_path: Path) -> None:
    """The observability stream sees ``x-envoy-attempt-count: 2`` on a sampled request the short
    pool refused: it counts the misroute (recovered on long) and, since the served usage proves the
    request overflowed the short pool, the recovery correction runs (docs/design/003)."""
    async with RouterApp(parse_config(_cfg(1.0) | {"calibration": {"sample_rate": 1.0}}), grpc_port=0) as app:
        (answer,) = await run_stream(app.grpc_port, [body_first(chat_body(TEXT), "mis-1")])
        await silent_stream(
            app.grpc_port,
            [
                forwarded(answer),
                resp_headers(
                    {":status": "200", "content-type": "application/json", "x-envoy-attempt-count": "2"}
                ),
                resp_body(usage_body(9000), eos=True),  # over the short pool's 8,192
            ],
        )
        reg = app.metrics.registry
        got = reg.get_sample_value(
            "tbr_misroutes_total",
            {"from_pool": "short", "to_pool": "long", "outcome": "recovered", "cause": "estimate_too_low"},
        )
        assert got == 1
        confirmed = reg.get_sample_value(
            "tbr_misroute_calibration_total", {"pool": "short", "outcome": "confirmed"}
        )
        assert confirmed == 1
        assert app.load.inflight("short") == app.load.inflight("long") == 0


async def test_a_reused_request_id_never_mixes_two_requests_records(tmp_path: Path) -> None:
    """Two sampled requests with the same client ``x-request-id`` (Envoy preserves it): each
    decision record is completed with its own response, whatever order the streams end in; the
    pairing key is the router's own (``record_key`` in the payload)."""
    cfg, log_path = _one_message_logging(tmp_path)
    async with RouterApp(parse_config(cfg), grpc_port=0) as app:
        (small,) = await run_stream(app.grpc_port, [body_first(chat_body(TEXT), "dup")])
        (large,) = await run_stream(app.grpc_port, [body_first(chat_body(TEXT * 4), "dup")])
        for answer, prompt_tokens in ((large, 400), (small, 100)):  # the later request ends first
            await silent_stream(
                app.grpc_port,
                [
                    forwarded(answer),
                    resp_headers({":status": "200", "content-type": "application/json"}),
                    resp_body(usage_body(prompt_tokens), eos=True),
                ],
            )
    rows = sorted(_rows(log_path), key=lambda r: r["estimated_prompt_tokens"])
    assert [r["request_id"] for r in rows] == ["dup", "dup"]
    assert [r["prompt_tokens"] for r in rows] == [100, 400]
