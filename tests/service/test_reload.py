"""Config reload on file change and SIGHUP, keeping streams and learned ratios (issue 5, item 3)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml

from extproc.config import load_config
from extproc.service.app import RouterApp
from tests.pb import json_response_msgs, open_stream, read_response, request_msgs
from tests.service.streams import (
    FAST_LEARNING,
    POOLS,
    TEXT_LONG,
    admin_get,
    calibrate,
    ratios,
    route_of,
    usage_at,
)
from tests.waiting import until_async


def write_config(path: Path, short_max_model_len: int) -> None:
    pools = [dict(POOLS[0], max_model_len=short_max_model_len), POOLS[1]]
    path.write_text(
        yaml.safe_dump({"pools": pools, "estimator": FAST_LEARNING, "calibration": {"warmup_samples": 3}})
    )


async def test_file_change_reroutes_without_restart_and_keeps_ratios(tmp_path: Path) -> None:
    cfg_path = tmp_path / "router.yaml"
    write_config(cfg_path, 8192)
    app = RouterApp(load_config(cfg_path), grpc_port=0, admin_port=0, config_path=cfg_path, watch_config=True)
    async with app:
        # Learn model-to-true 0.5: the text now budgets > 8192 tokens → long pool.
        usage = usage_at(TEXT_LONG, 0.5)
        await calibrate(app.grpc_port, TEXT_LONG, prompt_tokens=usage, times=3)
        assert await route_of(app.grpc_port, TEXT_LONG) == "long"
        before = await ratios(app.admin_port)
        # A stream opened before the reload keeps its Router.
        import grpc

        async with grpc.aio.insecure_channel(f"127.0.0.1:{app.grpc_port}") as ch:
            call = open_stream(ch)
            msgs = request_msgs(TEXT_LONG, request_id="inflight")
            await call.write(msgs[0])
            await call.read()

            write_config(cfg_path, 16384)  # the short pool now takes 16k-token budgets

            async def routed_short() -> bool:
                return await route_of(app.grpc_port, TEXT_LONG) == "short"

            await until_async(routed_short, timeout_s=5.0, what="the reload applied")

            await call.write(msgs[1])  # the old stream still decides with the old config
            body = await read_response(call)
            assert body.request_body.response.header_mutation.set_headers[0].header.raw_value == b"long"
            for m in json_response_msgs(usage):
                await call.write(m)
                await call.read()
            await call.done_writing()

        after = await ratios(app.admin_port)
        assert after[0]["mean_model_to_true_ratio"] == before[0]["mean_model_to_true_ratio"]
        assert after[0]["samples"] == 4  # the in-flight stream's usage was still learned
        metrics = (await admin_get(app.admin_port, "/metrics")).text
        assert 'tbr_config_reloads_total{outcome="applied"} 1.0' in metrics
        assert "tbr_config_generation 2.0" in metrics


async def test_invalid_config_keeps_running_one_and_is_counted(tmp_path: Path) -> None:
    cfg_path = tmp_path / "router.yaml"
    write_config(cfg_path, 8192)
    async with RouterApp(load_config(cfg_path), grpc_port=0, admin_port=0, config_path=cfg_path) as app:
        cfg_path.write_text("pools:\n  - name: short\n    max_model_len: -5\n")
        assert app.request_reload() == "invalid"
        assert app.current_router().config.pools[0].max_model_len == 8192
        assert await route_of(app.grpc_port, "hello") == "short"
        write_config(cfg_path, 8192)
        # SIGHUP re-reads the file; it equals the running configuration: unchanged, not applied.
        assert app.request_reload() == "unchanged"
        assert app.reloader is not None and app.reloader.reload() == "unchanged"
        write_config(cfg_path, 4096)
        assert app.request_reload() == "applied"
        metrics = (await admin_get(app.admin_port, "/metrics")).text
        assert 'tbr_config_reloads_total{outcome="invalid"} 1.0' in metrics
        assert 'tbr_config_reloads_total{outcome="applied"} 1.0' in metrics
        assert 'tbr_config_reloads_total{outcome="unchanged"} 2.0' in metrics


async def test_model_keys_survive_reloads(tmp_path: Path) -> None:
    """Reloads do not reset the bounded model-key map (max_models stays a bound)."""
    cfg_path = tmp_path / "router.yaml"
    cfg_path.write_text(yaml.safe_dump({"pools": POOLS, "estimator": {"max_models": 1}}))
    async with RouterApp(load_config(cfg_path), grpc_port=0, admin_port=0, config_path=cfg_path) as app:
        await calibrate(app.grpc_port, "hello there " * 40, prompt_tokens=130)  # model "m"
        pools = [dict(POOLS[0], max_model_len=4096), POOLS[1]]
        cfg_path.write_text(yaml.safe_dump({"pools": pools, "estimator": {"max_models": 1}}))
        assert app.request_reload() == "applied"
        assert app.current_router().estimator.model_key("m") == "m"
        assert app.current_router().estimator.model_key("another") == "_other"


async def test_reload_logs_the_changed_settings(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cfg_path = tmp_path / "router.yaml"
    write_config(cfg_path, 8192)
    async with RouterApp(load_config(cfg_path), grpc_port=0, admin_port=0, config_path=cfg_path) as app:
        with caplog.at_level(logging.INFO, logger="extproc.service.reload"):
            write_config(cfg_path, 16384)
            assert app.request_reload() == "applied"
        (record,) = [r for r in caplog.records if "changed:" in r.getMessage()]
        assert record.changed == ["pools[0].max_model_len"]  # type: ignore[attr-defined]
        assert "pools[0].max_model_len" in record.getMessage()
