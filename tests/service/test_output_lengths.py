"""The output learner in the router process (issue 30 item 2): answers shared through Redis between
replicas, kept in the snapshot, shown on ``GET /output-lengths`` and in ``tbr_output_*`` metrics."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from devstack.redis import RedisServer
from extproc.config import parse_config
from extproc.config.estimation import OutputReserveConfig
from extproc.core.estimate.output_reserve import (
    ALL_BANDS,
    OutputClassKey,
    OutputLengthLearner,
    encode_class_key,
)
from extproc.service.app import RouterApp
from extproc.service.output_sync import OutputLengthSync
from extproc.service.snapshot import encode_output_states, load_output_states, write_snapshot
from tests.service.streams import POOLS, admin_get

KEY = OutputClassKey("m", "chat", "off", False, 1)
OTHER = OutputClassKey("m", "chat", "on", True, 2)


def _learner() -> OutputLengthLearner:
    return OutputLengthLearner(OutputReserveConfig(learned=True))


def _sync(
    learner: OutputLengthLearner, server: RedisServer, rows: list[str] | None = None
) -> OutputLengthSync:
    return OutputLengthSync(
        learner,
        url=server.url,
        key_prefix="t:",
        interval_s=3600.0,
        timeout_s=1.0,
        on_row=rows.append if rows is not None else None,
    )


async def test_answers_learned_on_one_replica_teach_the_other(redis_server: RedisServer) -> None:
    a, b = _learner(), _learner()
    sa, sb = _sync(a, redis_server), _sync(b, redis_server)
    try:
        assert await sa.sync_once() and await sb.sync_once()  # both read from the stream's end
        for tokens, truncated, capped in ((4295, True, False), (700, False, False), (300, False, True)):
            a.observe(KEY, tokens, truncated=truncated, capped=capped)
            sa.add(KEY, tokens, truncated=truncated, capped=capped)
        assert sa.queue_length == 3
        assert await sa.sync_once() and sa.queue_length == 0
        assert await sb.sync_once()
        state_a, state_b = a.get(KEY), b.get(KEY)
        assert state_a is not None and state_b is not None
        assert (state_b.samples, state_b.censored, state_b.truncated) == (3, 2, 1)
        assert state_b.to_dict() == state_a.to_dict()  # the same answers in the same order
        assert b.truncations == 1  # the fleet's truncation is steered on by every replica
        assert await sa.sync_once() and a.get(KEY) is state_a and state_a.samples == 3  # own rows skipped
    finally:
        await sa.close()
        await sb.close()


async def test_a_replica_starting_with_nothing_restores_the_shared_states(redis_server: RedisServer) -> None:
    a = _learner()
    sa = _sync(a, redis_server)
    try:
        assert await sa.sync_once()
        for _ in range(5):
            a.observe(OTHER, 9000, truncated=True)
            sa.add(OTHER, 9000, truncated=True, capped=False)
        assert await sa.sync_once()
    finally:
        await sa.close()
    late = _learner()
    rows: list[str] = []
    s_late = _sync(late, redis_server, rows)
    try:
        assert await s_late.sync_once()
        restored = late.get(OTHER)
        state = a.get(OTHER)
        assert restored is not None and state is not None
        assert restored.to_dict() == state.to_dict()
        assert rows == []  # nothing replayed: it starts at the stream's end
    finally:
        await s_late.close()


async def test_the_fleet_tail_share_and_truncation_counts_are_shared(redis_server: RedisServer) -> None:
    """Issue 30: the truncation controller's λ and the fleet's counts live in Redis, so a replica that
    starts late joins at the fleet's λ, not at ``tail_share``, and every replica reads the fleet's
    answer and truncation counts."""
    a, b = _learner(), _learner()
    sa, sb = _sync(a, redis_server), _sync(b, redis_server)
    late = _learner()
    s_late = _sync(late, redis_server)
    try:
        assert await sa.sync_once() and await sb.sync_once()
        for tokens, truncated in ((4295, True), (700, False), (3900, True)):
            a.observe(KEY, tokens, truncated=truncated)
            sa.add(KEY, tokens, truncated=truncated, capped=False)
        b.observe(OTHER, 120, truncated=False)
        sb.add(OTHER, 120, truncated=False, capped=False)
        start = a.cfg.tail_share
        assert a.fleet_tail_share < start  # two truncations lowered it
        assert await sa.sync_once() and await sb.sync_once() and await sa.sync_once()
        # replicas that saw the same answers hold the same λ (its steps multiply)
        assert a.fleet_tail_share == pytest.approx(b.fleet_tail_share)
        assert (sa.fleet_observations, sa.fleet_truncations) == (4, 2)
        assert (sb.fleet_observations, sb.fleet_truncations) == (4, 2)
        assert await s_late.sync_once()
        assert late.fleet_tail_share == pytest.approx(a.fleet_tail_share) and late.fleet_tail_share < start
        assert (s_late.fleet_observations, s_late.fleet_truncations) == (4, 2)
        # a damaged fleet value is ignored by a new replica (it starts at tail_share)
        await sa._client.hset(sa.fleet_key, "tail_share", "nan")
        fresh = _learner()
        s_fresh = _sync(fresh, redis_server)
        try:
            assert await s_fresh.sync_once() and fresh.fleet_tail_share == start
        finally:
            await s_fresh.close()
    finally:
        await sa.close()
        await sb.close()
        await s_late.close()


async def test_bad_rows_are_counted_and_skipped(redis_server: RedisServer) -> None:
    b = _learner()
    rows: list[str] = []
    sb = _sync(b, redis_server, rows)
    try:
        assert await sb.sync_once()
        client = sb._client
        good: dict[Any, Any] = {"r": "x", "k": encode_class_key(KEY), "t": 12, "c": 0}
        bads: list[dict[Any, Any]] = [
            {"r": "x", "k": "nope", "t": 1, "c": 0},
            {**good, "c": 7},
            {**good, "t": "a"},
            {"r": "x"},
        ]
        for bad in bads:
            await client.xadd(sb.stream_key, bad)
        await client.xadd(sb.stream_key, good)
        assert await sb.sync_once()
        assert rows == ["bad_row"] * 4 + ["applied"]
        state = b.get(KEY)
        assert state is not None and state.samples == 1
    finally:
        await sb.close()


async def test_redis_down_keeps_answers_queued(tmp_path: Path) -> None:
    learner = _learner()
    sync = OutputLengthSync(
        learner, url="redis://127.0.0.1:1/0", key_prefix="t:", interval_s=3600.0, timeout_s=0.2
    )
    try:
        sync.add(KEY, 10, truncated=False, capped=False)
        assert await sync.sync_once() is False and sync.up is False
        assert sync.queue_length == 1
    finally:
        await sync.close()


def test_snapshot_keeps_the_learned_lengths(tmp_path: Path) -> None:
    a = _learner()
    a.observe(KEY, 4295, truncated=True)
    a.observe(KEY, 800, truncated=False)
    path = tmp_path / "ratios.json"
    write_snapshot([], path, encode_output_states(a.items()), a.fleet_tail_share)
    b = _learner()
    assert load_output_states(b, path) == len(a.items()) == 2  # the class and its all-bands parent
    assert b.fleet_tail_share == a.fleet_tail_share < a.cfg.tail_share  # the controller's λ too
    restored, state = b.get(KEY), a.get(KEY)
    assert restored is not None and state is not None and restored.to_dict() == state.to_dict()
    # a snapshot of an earlier router (no output_lengths) restores nothing; a damaged one raises
    write_snapshot([], path)
    assert load_output_states(_learner(), path) == 0
    doc = json.loads(path.read_text())
    path.write_text(json.dumps({**doc, "output_lengths": {"x|y": {"counts": {}}}}))
    with pytest.raises(ValueError, match="invalid output lengths"):
        load_output_states(_learner(), path)


async def test_router_restores_saves_and_shows_the_output_lengths(tmp_path: Path) -> None:
    snap = tmp_path / "ratios.json"
    seed = _learner()
    for _ in range(3):
        seed.observe(KEY, 4295, truncated=True)
    write_snapshot([], snap, encode_output_states(seed.items()))
    cfg = parse_config(
        {
            "pools": POOLS,
            "calibration": {"snapshot_path": str(snap)},
            "estimator": {"output_reserve": {"learned": True}},
        }
    )
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        learner = app.output_learner
        assert learner is not None and learner is app.current_router().estimator.output_learner
        state = learner.get(KEY)
        assert state is not None and state.truncated == 3
        view = (await admin_get(app.admin_port, "/output-lengths")).json()
        assert view["learned"] is True and view["truncations"] == 0  # restored, not observed here
        assert [r["prompt_band"] for r in view["classes"]] == [-1, 1]  # the all-bands parent first
        row = view["classes"][1]
        assert (row["model"], row["prompt_band"], row["answers"], row["truncated"]) == ("m", 1, 3, 3)
        assert row["reserve_tokens"] == state.reserve_tokens > 0
        metrics = (await admin_get(app.admin_port, "/metrics")).text
        line = (
            'tbr_output_reserve_tokens{endpoint="chat",model_name="m",prompt_band="1",reasoning="off",'
            f'tools="false"}} {float(state.reserve_tokens)}'
        )
        assert line in metrics and "tbr_output_tail_share " in metrics
        assert 'tbr_output_unjudged_total{reason="no_usage"} 0.0' in metrics
        learner.count_unjudged("multi_prompt")
        metrics = (await admin_get(app.admin_port, "/metrics")).text
        assert 'tbr_output_unjudged_total{reason="multi_prompt"} 1.0' in metrics
        learner.observe(OTHER, 50, truncated=False)
    doc = json.loads(snap.read_text())  # saved at shutdown with the new class
    keys = {k for c in (KEY, OTHER) for k in (c, c._replace(prompt_band=ALL_BANDS))}
    assert set(doc["output_lengths"]) == {encode_class_key(k) for k in keys}


async def test_output_lengths_view_says_when_nothing_is_learned() -> None:
    cfg = parse_config({"pools": POOLS, "estimator": {"output_reserve": {"learned": False}}})
    async with RouterApp(cfg, grpc_port=0, admin_port=0) as app:
        assert app.output_learner is None
        view = (await admin_get(app.admin_port, "/output-lengths")).json()
        assert view == {"learned": False, "classes": []}


async def test_two_routers_share_answers_through_redis(redis_server: RedisServer) -> None:
    def cfg() -> dict[str, object]:
        return {
            "pools": POOLS,
            "calibration": {"redis_url": redis_server.url, "redis_sync_interval_s": 3600.0},
            "estimator": {"output_reserve": {"learned": True}},
        }

    async with (
        RouterApp(parse_config(cfg()), grpc_port=0, admin_port=0) as a,
        RouterApp(parse_config(cfg()), grpc_port=0, admin_port=0) as b,
    ):
        assert a.output_sync is not None and b.output_sync is not None
        assert await a.output_sync.sync_once() and await b.output_sync.sync_once()
        a.current_router().observe_output(KEY, 4295, truncated=True, capped=False)
        assert a.output_sync.queue_length == 1
        assert await a.output_sync.sync_once() and await b.output_sync.sync_once()
        assert b.output_learner is not None
        state = b.output_learner.get(KEY)
        assert state is not None and state.truncated == 1
        rows = b.metrics.registry.get_sample_value("tbr_output_sync_rows_total", {"outcome": "applied"})
        assert rows == 1
        assert a.status()["output_sync_up"] is True
