"""Real-process fixtures: mock pools → router → Envoy on loopback.

Session-scoped, started in that order and each waited on (HTTP /health, TCP, Envoy /ready).
Every process log is attached to a failing test's report (and only then shown). Everything is
stopped by pid at the end of the session.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from devstack.envoy_runner import EnvoyPorts, EnvoyProcess
from devstack.procs import ManagedProcess, free_port
from devstack.stack import envoy_process, pool_process, render_router_config, router_process
from tbr.cli import SUBCOMMAND_MODULES

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = REPO.parent / "shared" / "data"
SHORT_MAX_MODEL_LEN = 8192
LONG_MAX_MODEL_LEN = 65536

_RUNNING: list[ManagedProcess] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    report = yield
    if report.failed:  # type: ignore[attr-defined]
        for proc in _RUNNING:
            report.sections.append((f"log of {proc.name}", proc.log_tail(80)))  # type: ignore[attr-defined]
    return report


def data_dir() -> Path | None:
    """``../shared/data`` when present (tests then use real prompts), else None (built-in text)."""
    return DATA_DIR if (DATA_DIR / "text").is_dir() else None


def router_available() -> bool:
    """True when ``tbr serve`` exists in this checkout (the lead's ext_proc server)."""
    return "tbr.cmd_serve" in SUBCOMMAND_MODULES and importlib.util.find_spec("tbr.cmd_serve") is not None


@dataclass(frozen=True)
class Pools:
    short_port: int
    long_port: int


@dataclass(frozen=True)
class Router:
    grpc_port: int
    admin_url: str
    decision_log: Path


@dataclass(frozen=True)
class Gateway:
    envoy: EnvoyProcess
    base_url: str  # http://127.0.0.1:<listener>/v1


def _track(proc: ManagedProcess) -> ManagedProcess:
    _RUNNING.append(proc)
    return proc


@pytest.fixture(scope="session")
def e2e_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("e2e")


@pytest.fixture(scope="session")
def pools(e2e_dir: Path) -> Iterator[Pools]:
    short = _track(pool_process("short", free_port(), SHORT_MAX_MODEL_LEN, log_dir=e2e_dir))
    long = _track(pool_process("long", free_port(), LONG_MAX_MODEL_LEN, log_dir=e2e_dir))
    short_port = int(short.argv[short.argv.index("--port") + 1])
    long_port = int(long.argv[long.argv.index("--port") + 1])
    try:
        short.launch()
        long.launch()
        short.wait_ready()
        long.wait_ready()
        yield Pools(short_port, long_port)
    finally:
        short.stop()
        long.stop()


@pytest.fixture(scope="session")
def router(pools: Pools, e2e_dir: Path) -> Iterator[Router]:
    if not router_available():
        pytest.skip("the ext_proc server (tbr.cmd_serve, `tbr serve`) is not in this checkout yet")
    grpc_port, admin_port = free_port(), free_port()
    decision_log = e2e_dir / "decisions.jsonl"
    cfg = render_router_config(
        grpc_port=grpc_port,
        admin_port=admin_port,
        short_max_model_len=SHORT_MAX_MODEL_LEN,
        long_max_model_len=LONG_MAX_MODEL_LEN,
        decision_log_path=decision_log,
    )
    cfg_path = e2e_dir / "router.yaml"
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
    with _track(router_process(cfg_path, grpc_port, admin_port, log_dir=e2e_dir)):
        yield Router(grpc_port, f"http://127.0.0.1:{admin_port}", decision_log)


def _gateway(pools: Pools, router_grpc_port: int, e2e_dir: Path, tag: str) -> Iterator[Gateway]:
    ports = EnvoyPorts(
        listener=free_port(),
        admin=free_port(),
        router_grpc=router_grpc_port,
        short_pool=pools.short_port,
        long_pool=pools.long_port,
    )
    proc = envoy_process(ports, log_dir=e2e_dir, tag=tag)
    with _track(proc):
        yield Gateway(proc, f"http://127.0.0.1:{ports.listener}/v1")


@pytest.fixture(scope="session")
def gateway(pools: Pools, router: Router, e2e_dir: Path) -> Iterator[Gateway]:
    """Envoy in front of the running router and both pools."""
    yield from _gateway(pools, router.grpc_port, e2e_dir, "envoy")


@pytest.fixture(scope="session")
def gateway_router_down(pools: Pools, e2e_dir: Path) -> Iterator[Gateway]:
    """Envoy whose ext_proc cluster points at a port nothing listens on (router down)."""
    yield from _gateway(pools, free_port(), e2e_dir, "envoy-router-down")
