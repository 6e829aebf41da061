"""Golden ext_proc streams: the exact bytes of every ``ProcessingResponse`` the router sends for
representative exchanges, and the decision record each one leaves, pinned in
``golden_streams.json``.

A refactor of the router must leave these bytes unchanged. A deliberate behaviour change
regenerates the file (``TBR_UPDATE_GOLDEN=1 pytest tests/...::test_golden_stream``) and the diff
of ``golden_streams.json`` shows exactly which answers changed. Responses are serialized with
``deterministic=True`` so map ordering cannot make the bytes differ.
"""

from __future__ import annotations

import gzip
import json
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.config import parse_config
from extproc.core.text import run_languages, runs
from extproc.service.app import RouterApp
from tests import pb as tpb
from tests.pb import chat_body, req_body, run_stream
from tests.waiting import until_async

GOLDEN = Path(__file__).with_name("golden_streams.json")
UPDATE = os.environ.get("TBR_UPDATE_GOLDEN") == "1"

CONFIG: dict[str, Any] = {
    "pools": [
        {"name": "short", "max_model_len": 8192, "header_value": "short"},
        {"name": "long", "max_model_len": 65536, "header_value": "long"},
    ],
    "calibration": {"warmup_samples": 2, "sample_rate": 1.0},
}


def req_headers(
    path: str = "/v1/chat/completions", method: str = "POST", **extra: str
) -> pb.ProcessingRequest:
    h = {":method": method, ":path": path, "x-request-id": "golden-1", **extra}
    return tpb.req_headers(h, eos=method == "GET")


def resp_headers(status: str, content_type: str, **extra: str) -> pb.ProcessingRequest:
    h = {":status": status, "content-type": content_type, **extra}
    return tpb.resp_headers(h)


def resp_body(body: bytes, *, eos: bool = True) -> pb.ProcessingRequest:
    return tpb.resp_body(body, eos=eos)


def _sse(*events: object) -> bytes:
    return b"".join(f"data: {e if isinstance(e, str) else json.dumps(e)}\n\n".encode() for e in events)


PROSE = "The committee reviewed the quarterly figures and agreed to revisit the budget next week. "
USAGE_JSON = json.dumps(
    {"choices": [{"message": {"content": "ok"}}], "usage": {"prompt_tokens": 300, "completion_tokens": 2}}
).encode()
SSE_BODY = _sse(
    {"choices": [{"delta": {"content": "hi"}}], "usage": None},
    {"choices": [], "usage": {"prompt_tokens": 300, "completion_tokens": 2}},
    "[DONE]",
)

# name -> the messages Envoy sends, in lock-step order.
CASES: dict[str, list[pb.ProcessingRequest]] = {
    "chat_short_json_usage": [
        req_headers(),
        req_body(chat_body(PROSE * 15, max_tokens=128)),
        resp_headers("200", "application/json"),
        resp_body(USAGE_JSON),
    ],
    "chat_long_document": [
        req_headers(),
        req_body(chat_body(PROSE * 4000, max_tokens=512)),
        resp_headers("200", "application/json"),
        resp_body(USAGE_JSON),
    ],
    "chat_sse_gzip_usage": [
        req_headers(),
        req_body(chat_body(PROSE * 15, stream=True, stream_options={"include_usage": True})),
        resp_headers("200", "text/event-stream", **{"content-encoding": "gzip"}),
        resp_body(gzip.compress(SSE_BODY, mtime=0)[:20], eos=False),
        resp_body(gzip.compress(SSE_BODY, mtime=0)[20:]),
    ],
    "completions_prompt": [
        req_headers("/v1/completions"),
        req_body(json.dumps({"model": "m", "prompt": PROSE * 10, "max_tokens": 64}).encode()),
        resp_headers("200", "application/json"),
        resp_body(USAGE_JSON),
    ],
    "unsupported_path_get": [req_headers("/v1/models", method="GET")],
    "unreadable_body": [req_headers(), req_body(b"{not json")],
    "client_routing_header_ignored": [
        req_headers(**{"x-tbr-pool": "short"}),
        req_body(chat_body(PROSE * 4000)),
    ],
    "non_2xx_response": [
        req_headers(),
        req_body(chat_body(PROSE * 15)),
        resp_headers("400", "application/json"),
    ],
    "misroute_recovered_on_long": [
        req_headers(),
        req_body(chat_body(PROSE * 15, max_tokens=128)),
        resp_headers("200", "application/json", **{"x-envoy-attempt-count": "2"}),
        resp_body(USAGE_JSON),
    ],
    "unsupported_content_type": [
        req_headers(),
        req_body(chat_body(PROSE * 15)),
        resp_headers("200", "text/plain"),
    ],
}


@pytest.fixture
async def app(tmp_path: Path) -> AsyncIterator[RouterApp]:
    cfg = dict(CONFIG, decision_log_path=str(tmp_path / "decisions.jsonl"))
    async with RouterApp(parse_config(cfg), grpc_port=0, admin_port=0) as running:
        yield running


def _decision_fields(path: Path) -> list[dict[str, Any]]:
    """The decision log lines without the wall-clock timestamp."""
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    for row in rows:
        row.pop("ts_s", None)
    return rows


@pytest.mark.parametrize("counter", ["installed", "numpy"])
@pytest.mark.parametrize("name", sorted(CASES))
async def test_golden_stream(
    app: RouterApp, name: str, counter: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same bytes and records whichever run counter runs: the installed one (the C extension
    where it was built) and the numpy path (a build without a C compiler)."""
    if counter == "numpy":
        monkeypatch.setattr(runs, "_runscan", None)
        monkeypatch.setattr(run_languages, "_c", None)
    out = await run_stream(app.grpc_port, CASES[name])
    got = [r.SerializeToString(deterministic=True).hex() for r in out]
    if len(out) < len(CASES[name]):
        # The router ended the call instead of answering the last message (it would have passed
        # it through unchanged; extproc/adapter/server.py): Envoy continues it as it came.
        got.append("end of call")
    log_path = tmp_path / "decisions.jsonl"
    await until_async(  # the record is written when the server ends the stream, just after
        lambda: log_path.exists() and log_path.read_bytes().endswith(b"\n"), what="the decision record"
    )
    decisions = _decision_fields(log_path)
    golden: dict[str, Any] = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    if UPDATE:
        if counter == "installed":
            golden[name] = {"responses": got, "decisions": decisions}
            GOLDEN.write_text(json.dumps(golden, indent=1, sort_keys=True) + "\n")
        return
    assert name in golden, f"no golden entry for {name}: regenerate with TBR_UPDATE_GOLDEN=1"
    assert got == golden[name]["responses"], f"{name}: ProcessingResponse bytes changed"
    assert decisions == golden[name]["decisions"], f"{name}: decision record changed"
