"""Calibration sampling decided at request_headers: unsampled requests get the response phases
turned off via mode_override (2 ext_proc messages instead of 4) and are still routed; sampled
ones keep reading usage; calibration still converges on real prompts (real gRPC stream)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.config import parse_config
from extproc.service.app import RouterApp
from tests.adapter.sampling_replay import first_turn_prompts, replay
from tests.pb import headers, passed_through, routed_pool, run_stream
from tests.shared_data import SHARED_DATA

DATA_DIR = SHARED_DATA


def _cfg(rate: float, skip: bool = True) -> dict[str, object]:
    return {
        "pools": [
            {"name": "short", "max_model_len": 8192, "header_value": "short"},
            {"name": "long", "max_model_len": 65536, "header_value": "long"},
        ],
        "calibration": {"sample_rate": rate, "warmup_samples": 2, "skip_unsampled_responses": skip},
        "admin": {"enabled": False},
    }


REQ = headers({":method": "POST", ":path": "/v1/chat/completions"})
BODY = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hello " * 50}]}).encode()


@pytest.fixture
async def apps() -> AsyncIterator[dict[str, RouterApp]]:
    async with (
        RouterApp(parse_config(_cfg(0.0)), grpc_port=0) as never,
        RouterApp(parse_config(_cfg(0.0, skip=False)), grpc_port=0) as never_keep,
        RouterApp(parse_config(_cfg(1.0)), grpc_port=0) as always,
    ):
        yield {"never": never, "never_keep": never_keep, "always": always}


async def test_unsampled_request_turns_response_phases_off_and_is_routed(
    apps: dict[str, RouterApp],
) -> None:
    hdr, body = await run_stream(
        apps["never"].grpc_port,
        [
            pb.ProcessingRequest(request_headers=REQ),
            pb.ProcessingRequest(request_body=pb.HttpBody(body=BODY, end_of_stream=True)),
        ],
    )
    assert hdr.HasField("request_headers") and not hdr.request_headers.HasField("response")
    mo = hdr.mode_override
    assert mo.response_header_mode == pm.ProcessingMode.SKIP
    assert mo.response_body_mode == pm.ProcessingMode.NONE
    # body modes have no DEFAULT: the override must keep the request body BUFFERED
    assert mo.request_body_mode == pm.ProcessingMode.BUFFERED
    assert mo.request_header_mode == pm.ProcessingMode.DEFAULT
    assert routed_pool(body) == "short"


async def test_sampled_request_keeps_response_phases_and_calibrates(apps: dict[str, RouterApp]) -> None:
    app = apps["always"]
    out = await run_stream(
        app.grpc_port,
        [
            pb.ProcessingRequest(request_headers=REQ),
            pb.ProcessingRequest(request_body=pb.HttpBody(body=BODY, end_of_stream=True)),
            pb.ProcessingRequest(
                response_headers=headers({":status": "200", "content-type": "application/json"})
            ),
            pb.ProcessingRequest(
                response_body=pb.HttpBody(body=b'{"usage": {"prompt_tokens": 110}}', end_of_stream=True)
            ),
        ],
    )
    assert not out[0].HasField("mode_override")
    assert routed_pool(out[1]) == "short"
    assert out[2].mode_override.response_body_mode == pm.ProcessingMode.STREAMED
    ((_, state),) = app.store.items()
    assert state.samples == 1


async def test_unsampled_request_ignores_response_headers_if_envoy_sends_them(
    apps: dict[str, RouterApp],
) -> None:
    """With allow_mode_override off Envoy would still send response headers; the router ends the
    call after the body answer instead, so Envoy skips them (they pass unchanged)."""
    app = apps["never"]
    out = await run_stream(
        app.grpc_port,
        [
            pb.ProcessingRequest(request_headers=REQ),
            pb.ProcessingRequest(request_body=pb.HttpBody(body=BODY, end_of_stream=True)),
            pb.ProcessingRequest(
                response_headers=headers({":status": "200", "content-type": "application/json"})
            ),
        ],
    )
    # The router ended the call after the body answer (it needs no response phase), so Envoy
    # processes none: the response headers pass unanswered and unchanged.
    assert len(out) == 2 and passed_through(out, 2)
    assert not list(app.store.items())


@pytest.mark.data
async def test_calibration_converges_when_sampling_responses() -> None:
    if not (DATA_DIR / "text" / "sharegpt").is_dir():
        pytest.skip(f"real prompts not available ({DATA_DIR} absent)")
    prompts = first_turn_prompts(DATA_DIR, limit=300)
    full = await replay(prompts, 1.0, seed=3)
    sampled = await replay(prompts, 0.2, seed=3)
    assert full.routed == sampled.routed == 300
    assert full.sampled == 300 and 35 <= sampled.sampled <= 90
    # 2 messages for each unsampled request, 4 for each sampled one
    assert sampled.messages == 2 * 300 + 2 * sampled.sampled
    assert sampled.learned_samples > 20
    # learning converges with sampling: the learned ratio of the dominant category ends as close
    # to the truth as with every response read. The EMA (effective memory ~2/(1-β) samples) of
    # per-request ratios with a ~30 % spread keeps ~7 % (1σ) of noise, hence the 15 % bounds.
    true = sampled.true_ratio["latin"]
    assert abs(sampled.learned_ratio["latin"] - true) / true < 0.15
    assert abs(full.learned_ratio["latin"] - true) / true < 0.15
    # Two independent EMAs with ~7 % (1σ) noise each differ by ~10 % (1σ): 20 % is the 2σ bound.
    assert (
        abs(sampled.learned_ratio["latin"] - full.learned_ratio["latin"]) / full.learned_ratio["latin"] < 0.20
    )


def _decision_categories(app: RouterApp) -> set[str]:
    return {
        s.labels["category"]
        for m in app.metrics.decisions.collect()
        for s in m.samples
        if s.name.endswith("_total") and s.value > 0
    }


async def test_byte_bound_routes_unread_requests_and_sampled_ones_get_the_exact_estimate(
    apps: dict[str, RouterApp],
) -> None:
    """A short prompt whose estimate nobody reads is routed by the byte bound (extproc.core.estimate.screen:
    category ``bounded``, no run counts); a sampled one is estimated exactly (its estimate is learned)."""
    msgs = [
        pb.ProcessingRequest(request_headers=REQ),
        pb.ProcessingRequest(request_body=pb.HttpBody(body=BODY, end_of_stream=True)),
    ]
    out = await run_stream(apps["never"].grpc_port, msgs)
    assert routed_pool(out[1]) == "short"
    assert _decision_categories(apps["never"]) == {"bounded"}
    out = await run_stream(apps["always"].grpc_port, msgs)
    assert routed_pool(out[1]) == "short"
    assert _decision_categories(apps["always"]) == {
        "latin_other"
    }  # "hello hello …": no English function words
