"""The benchmark stack: fixed upstream Envoy, router processes, front Envoy (all on loopback).

:class:`Stack` starts everything for a list of :class:`Variant` and exposes per-variant URLs,
router pids and Envoy stats. Processes are devstack :class:`~devstack.procs.ManagedProcess`es
(logs in the work dir, shown when one fails to start), stopped by pid on exit.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml

from benchmarks.bodies import BenchBody
from benchmarks.envoy_configs import BODY_HEADER, ListenerSpec, front_bootstrap, upstream_bootstrap
from devstack.envoy_runner import EnvoyProcess
from devstack.procs import ManagedProcess, free_port, tcp_open
from extproc.config import parse_config

__all__ = ["Stack", "Variant", "envoy_proc", "router_proc"]


@dataclass
class Variant:
    """One configuration measured side by side with the others.

    Attributes:
        name: short id (listener + stat prefix).
        label: what it is, for the report.
        kind: ``bare`` (no ext_proc filter), ``floor`` (do-nothing ext_proc) or ``router``.
        sample_rate: router ``calibration.sample_rate``.
        flags: extra ``benchmarks.router_proc`` flags (``--uvloop``, ``--gc-freeze``, ...).
        processes: router processes behind the listener's ext_proc cluster.
        allow_mode_override: the filter setting (envoy/envoy.yaml: true).
        shares: use the router processes of this other variant instead of starting new ones.
        sizes: body labels this variant is measured with.
        skip_unsampled: router ``calibration.skip_unsampled_responses``.
        one_message: the listener uses the one-message design (``ListenerSpec.one_message``).
        processing_mode: overrides of the ext_proc filter's processing_mode fields.
    """

    name: str
    label: str
    kind: str = "router"
    sample_rate: float = 0.0
    flags: list[str] = field(default_factory=list)
    processes: int = 1
    allow_mode_override: bool = True
    shares: str | None = None
    sizes: tuple[str, ...] = ("1KB",)
    skip_unsampled: bool = True
    one_message: bool = False
    processing_mode: dict[str, str] = field(default_factory=dict)
    off_path: bool = False
    source_dir: str | None = None
    """Run the router from this source tree instead of the checkout's (a previous commit, e.g. from
    ``git worktree add``): before and after measured side by side in one run."""
    shipped: bool = False
    """Run the router on config/router.yaml as shipped (only its ports, admin server and snapshot
    file changed: :func:`shipped_router_config`), on the event loop ``tbr serve`` runs for it
    (``server.event_loop``); ``sample_rate`` etc. are then ignored."""


SHIPPED_CONFIG = Path(__file__).resolve().parents[1] / "config" / "router.yaml"
"""The configuration the project ships (what a user deploys)."""


def shipped_router_config(port: int) -> dict[str, object]:
    """config/router.yaml as shipped, on ``port``, without its admin server (ports are per variant)
    and without its ratio snapshot file (a benchmark must not write the user's state directory).
    Everything it learns and how it reads responses stay as shipped."""
    cfg = yaml.safe_load(SHIPPED_CONFIG.read_text())
    cfg.setdefault("server", {}).update({"grpc_port": port, "grace_period_s": 0.5})
    cfg["admin"] = {"enabled": False}
    cfg.get("calibration", {}).pop("snapshot_path", None)
    return dict(cfg)


def router_config(
    sample_rate: float, port: int, skip_unsampled: bool = True, off_path: bool = False
) -> dict[str, object]:
    """Router YAML for the benchmarks: two pools (8k / 64k), no admin server."""
    return {
        "pools": [
            {"name": "short", "max_model_len": 8192, "header_value": "short"},
            {"name": "long", "max_model_len": 65536, "header_value": "long"},
        ],
        "calibration": {
            "sample_rate": sample_rate,
            "skip_unsampled_responses": skip_unsampled,
            "off_path": off_path,
        },
        "server": {"grpc_port": port, "grace_period_s": 0.5},
        "admin": {"enabled": False},
    }


def router_proc(
    name: str,
    workdir: Path,
    *,
    sample_rate: float,
    skip_unsampled: bool = True,
    off_path: bool = False,
    flags: Sequence[str] = (),
    shipped: bool = False,
    source_dir: str | None = None,
) -> tuple[ManagedProcess, int]:
    """An unstarted ``benchmarks.router_proc`` (the real RouterApp, or ``--floor`` in ``flags``)
    on a free port with :func:`router_config`; ready when the port accepts connections.
    Returns (process, port)."""
    port = free_port()
    cfg = workdir / f"{name}.yaml"
    data = (
        shipped_router_config(port) if shipped else router_config(sample_rate, port, skip_unsampled, off_path)
    )
    cfg.write_text(yaml.safe_dump(data))
    if shipped and parse_config(data).server.event_loop == "uvloop" and "--uvloop" not in flags:
        flags = [*flags, "--uvloop"]  # the event loop `tbr serve` runs for this config
    module = ["-m", "benchmarks.router_proc"]
    if source_dir is not None:  # that tree's packages first on sys.path, then its router_proc as __main__
        module = ["-c", _RUN_FROM.format(source=str(Path(source_dir).resolve()))]
    argv = [sys.executable, *module, "--config", str(cfg), "--port", str(port), *flags]
    if "--floor" not in flags:
        argv += ["--stats-out", str(workdir / f"{name}.phases.json")]
    proc = ManagedProcess(
        name, argv, log_path=workdir / f"{name}.log", ready=lambda: tcp_open(port), ready_timeout_s=180.0
    )
    return proc, port


_RUN_FROM = (
    "import runpy, sys; sys.path.insert(0, {source!r}); runpy.run_module('benchmarks.router_proc',"
    " run_name='__main__', alter_sys=True)"
)


def envoy_proc(name: str, workdir: Path, bootstrap: dict[str, Any], admin_port: int) -> EnvoyProcess:
    """An unstarted Envoy (``--concurrency 1``) on ``bootstrap`` written to ``<name>.json``."""
    path = workdir / f"{name}.json"
    path.write_text(json.dumps(bootstrap))
    proc = EnvoyProcess(path, admin_port=admin_port, log_path=workdir / f"{name}.log")
    proc.name = name
    return proc


class Stack:
    """Upstream Envoy + router processes + front Envoy for ``variants``."""

    def __init__(self, workdir: Path, variants: list[Variant], bodies: list[BenchBody]) -> None:
        self.workdir = workdir
        self.variants = {v.name: v for v in variants}
        self.bodies = {b.label: b for b in bodies}
        self._exit = contextlib.ExitStack()
        self.front_admin = 0
        self.ports: dict[str, int] = {}
        self.router_pids: dict[str, list[int]] = {}
        self.router_ports: dict[str, list[int]] = {}
        self.front_pid = 0
        self.upstream_pid = 0
        self.body_files: dict[str, Path] = {}

    def _envoy(self, name: str, cfg: dict[str, Any], admin: int) -> int:
        proc = envoy_proc(name, self.workdir, cfg, admin)
        self._exit.callback(proc.stop)
        proc.start()
        assert proc.pid is not None
        return proc.pid

    def start(self) -> None:
        """Start all processes and wait until each is ready.

        Raises:
            devstack.procs.StartupError: a process did not become ready.
        """
        up_admin, up_port = free_port(), free_port()
        usage = {
            label: json.dumps(
                {
                    "id": "bench",
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {"role": "assistant", "content": "ok"},
                            "finish_reason": "stop",
                        }
                    ],
                    "usage": {
                        "prompt_tokens": b.prompt_tokens,
                        "completion_tokens": 1,
                        "total_tokens": b.prompt_tokens + 1,
                    },
                }
            )
            for label, b in self.bodies.items()
        }
        self.upstream_pid = self._envoy("upstream", upstream_bootstrap(up_admin, up_port, usage), up_admin)
        for label, b in self.bodies.items():
            f = self.workdir / f"body_{label}.json"
            f.write_bytes(b.body)
            self.body_files[label] = f
        routers: list[ManagedProcess] = []
        for v in self.variants.values():
            if v.kind == "bare" or v.shares:
                continue
            ports, procs = [], []
            for i in range(v.processes):
                flags = ["--floor"] if v.kind == "floor" else []
                flags += ["--one-message"] if v.kind == "floor" and v.one_message else []
                proc, port = router_proc(
                    f"router_{v.name}_{i}",
                    self.workdir,
                    sample_rate=v.sample_rate,
                    skip_unsampled=v.skip_unsampled,
                    off_path=v.off_path,
                    flags=flags + v.flags,
                    shipped=v.shipped,
                    source_dir=v.source_dir,
                )
                self._exit.callback(proc.stop)
                proc.launch()
                ports.append(port)
                procs.append(proc)
            routers.extend(procs)
            self.router_ports[v.name] = ports
            self.router_pids[v.name] = [p.pid for p in procs if p.pid is not None]
        for v in self.variants.values():
            if v.shares:
                self.router_ports[v.name] = self.router_ports[v.shares]
                self.router_pids[v.name] = self.router_pids[v.shares]
        for proc in routers:  # started together, waited on together
            proc.wait_ready()
        listeners = []
        for v in self.variants.values():
            self.ports[v.name] = free_port()
            listeners.append(
                ListenerSpec(
                    name=v.name,
                    port=self.ports[v.name],
                    ext_proc_ports=self.router_ports.get(v.name, []),
                    allow_mode_override=v.allow_mode_override,
                    one_message=v.one_message,
                    processing_mode=v.processing_mode,
                )
            )
        self.front_admin = free_port()
        self.front_pid = self._envoy(
            "front", front_bootstrap(self.front_admin, listeners, [up_port], [up_port]), self.front_admin
        )

    def url(self, variant: str) -> str:
        """The front listener URL of a variant (chat completions path)."""
        return f"http://127.0.0.1:{self.ports[variant]}/v1/chat/completions"

    def headers(self, size: str) -> dict[str, str]:
        """Request headers selecting the upstream's usage for body ``size``."""
        return {BODY_HEADER: size}

    def stats(self) -> dict[str, int]:
        """Front Envoy counters and gauges (``/stats``, integer values only)."""
        text = httpx.get(f"http://127.0.0.1:{self.front_admin}/stats", timeout=5.0).text
        out: dict[str, int] = {}
        for line in text.splitlines():
            name, _, value = line.partition(": ")
            if value.isdigit():
                out[name] = int(value)
        return out

    def endpoint_requests(self, variant: str) -> dict[int, int]:
        """Requests Envoy sent to each router endpoint of a variant's ext_proc cluster."""
        text = httpx.get(f"http://127.0.0.1:{self.front_admin}/clusters", timeout=5.0).text
        out: dict[int, int] = {}
        prefix = f"ext_proc_{variant}::127.0.0.1:"
        for line in text.splitlines():
            if line.startswith(prefix) and "::rq_total::" in line:
                port = int(line[len(prefix) :].split("::", 1)[0])
                out[port] = int(line.rsplit("::", 1)[1])
        return out

    def __enter__(self) -> Stack:
        try:
            self.start()
        except BaseException:
            self._exit.close()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._exit.close()
