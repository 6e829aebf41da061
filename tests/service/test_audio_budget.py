"""Issue 34, item 3: audio budgeted from its header, learned media costs per kind and size class.

The router (``RouterApp``, real gRPC streams in the two-message design: routed at the body,
the response read on the same stream) with the shipped estimator and two pools (8192 / 65536).
Clips are built in memory (``tests/core/audio_samples.py``): WAV, FLAC, Ogg Opus and MP3 headers
whose durations ``mutagen`` reads without decoding any audio. Budgets are read back from the
decision log (``budget_tokens``).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from extproc.config import parse_config
from extproc.core.request.audio import duration_s
from extproc.service.app import RouterApp
from tests import pb as tpb
from tests.core.audio_samples import flac, mp3, ogg_opus, wav
from tests.service.streams import POOLS

VOXTRAL = "mistralai/Voxtral-Mini-3B-2507"  # rule: 12.5 tokens/s + 2 (arXiv 2507.13264)
ACME = "acme-speech"  # no rule: estimator.audio_tokens_per_second (12.5)


def audio_part(clip: bytes, fmt: str) -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(clip).decode(), "format": fmt}}


def audio_body(model: str, *parts: dict[str, Any]) -> bytes:
    content = [{"type": "text", "text": "Transcribe this."}, *parts]
    return json.dumps(
        {"model": model, "messages": [{"role": "user", "content": content}], "max_tokens": 1024}
    ).encode()


async def exchange(
    app: RouterApp, body: bytes, request_id: str, prompt_tokens: int | None, attempts: int = 1
) -> str | None:
    """One request through the router; the pool's JSON answer reports ``prompt_tokens`` (after
    ``attempts`` - 1 retries by Envoy on the next larger pool)."""
    msgs = [tpb.req_headers({**tpb.CHAT_HEADERS, "x-request-id": request_id}), tpb.req_body(body)]
    if prompt_tokens is not None:
        extra = {"x-envoy-attempt-count": str(attempts)} if attempts > 1 else {}
        msgs += [
            tpb.resp_headers({":status": "200", "content-type": "application/json", **extra}),
            tpb.resp_body(tpb.usage_body(prompt_tokens), eos=True),
        ]
    out = await tpb.run_stream(app.grpc_port, msgs)
    return tpb.routed_pool(out[1])


def budgets(log: Path) -> dict[str, int]:
    return {r["request_id"]: r["budget_tokens"] for r in map(json.loads, log.read_text().splitlines())}


@pytest.mark.parametrize(
    ("make", "fmt"),
    [(wav, "wav"), (flac, "flac"), (ogg_opus, "ogg"), (mp3, "mp3")],
    ids=["wav", "flac", "ogg_opus", "mp3"],
)
async def test_audio_is_budgeted_from_the_duration_in_its_header(
    tmp_path: Path, make: Callable[[float], bytes], fmt: str
) -> None:
    log = tmp_path / "decisions.jsonl"
    cfg = parse_config({"pools": POOLS, "decision_log_path": str(log)})
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        assert await exchange(app, audio_body(VOXTRAL, audio_part(make(5.0), fmt)), "note", None) == "short"
        big = make(600.0) if make in (flac, ogg_opus) else None  # 10 min of WAV or MP3: over the body limit
        if big is not None:
            assert await exchange(app, audio_body(VOXTRAL, audio_part(big, fmt)), "talk", None) == "long"
        bare = audio_body(
            VOXTRAL, {"type": "input_audio", "input_audio": {"data": "bm90IGF1ZGlv", "format": fmt}}
        )
        assert await exchange(app, bare, "unreadable", None) == "short"  # unknown: audio_tokens (4096)
    got = budgets(log)
    note = got["note"] - 1024  # the output reserve
    assert 62 + 2 <= note < 62 + 2 + 40  # 5 s x 12.5 tokens/s + 2, plus the text and framing
    if big is not None:
        assert 7_500 <= got["talk"] - 1024 < 7_500 + 60
    assert got["unreadable"] - 1024 >= 4096


async def test_learned_audio_costs_are_per_size_class_move_both_ways_and_recovery_counts_once(
    tmp_path: Path,
) -> None:
    """The issue's run: 5 s notes, then one long recording recovered on long after the short
    pool refused it, then 5 s notes again. Here the model has no audio rule (12.5 tokens/s) but
    really costs 25: the recording's estimate (300 s: 3,750) fits short, its truth (7,502) does not."""
    log = tmp_path / "decisions.jsonl"
    cfg = parse_config({"pools": POOLS, "decision_log_path": str(log), "decision_log_flush_interval_s": 0.05})
    note, talk = audio_part(wav(5.0), "wav"), audio_part(flac(300.0), "flac")
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        est = app.current_router().estimator
        for i in range(6):  # true cost of a note: 5 s x 25 = 125 (+ text): learned, per size class
            assert await exchange(app, audio_body(ACME, note), f"note-{i}", 150) == "short"
        factor_s = est.media_factor(ACME, "audio", "s")
        assert factor_s > 1.5  # up, in bounded steps
        # the long recording: routed short on 3,750, refused there, served by long with 7,520
        assert await exchange(app, audio_body(ACME, talk), "talk-1", 7_520, attempts=2) == "short"
        factor_l = est.media_factor(ACME, "audio", "l")
        assert 1.9 < factor_l < 2.1  # 7,520 - text over 3,750: once, not 2 + (2 - 1)
        assert est.media_factor(ACME, "audio", "s") == factor_s  # the notes' cost is not moved
        assert await exchange(app, audio_body(ACME, talk), "talk-2", None) == "long"
        assert await exchange(app, audio_body(ACME, note), "note-after", None) == "short"
        # down again: notes that cost 5 s x 12.5 lower the small class's factor
        for i in range(12):
            await exchange(app, audio_body(ACME, note), f"cheap-{i}", 62 + 25)
        assert est.media_factor(ACME, "audio", "s") < 1.2
    got = budgets(log)
    assert 7_500 <= got["talk-2"] - 1024 < 7_600  # the truth, not 7,500 + 3,750
    assert got["note-after"] - 1024 < 300  # a 5 s note is not budgeted like the recording


def test_hostile_or_truncated_headers_have_no_duration() -> None:
    clip = flac(5.0)
    for bad in (b"", b"RIFF" + b"\xff" * 64, clip[:20], b"OggS" * 50, b"\xff\xfb\x90\x64" * 3):
        assert duration_s(bad) is None
    assert duration_s(flac(48 * 3600.0)) is None  # over a day: a forged header, not a clip
