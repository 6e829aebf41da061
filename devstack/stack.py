"""The whole local stack on loopback, in start order: two mock pools, the router, Envoy.

Used by ``tbr demo`` (:class:`Stack`) and by the end-to-end tests (the ``*_process`` builders as
session fixtures). Each builder returns an unstarted :class:`ManagedProcess`; entering it starts
the child and waits until it is ready.
"""

from __future__ import annotations

import copy
import dataclasses
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import yaml
from prometheus_client.parser import text_string_to_metric_families

from devstack.envoy_runner import DEFAULT_ENVOY_CONFIG, EnvoyPorts, EnvoyProcess, write_envoy_config
from devstack.procs import LOOPBACK, ManagedProcess, PortsBuilder, ProcessGroup, free_port, http_ok, tcp_open
from devstack.vllm_pool import VllmSetup

__all__ = [
    "DEFAULT_ROUTER_CONFIG",
    "Gateway",
    "Stack",
    "StackOptions",
    "envoy_process",
    "merge_overrides",
    "pool_process",
    "render_router_config",
    "router_process",
]

DEFAULT_ROUTER_CONFIG = Path(__file__).resolve().parents[1] / "config" / "router.yaml"
"""``config/router.yaml`` of this checkout."""

_TBR = [sys.executable, "-m", "tbr"]


def pool_process(
    name: str, port: int, max_model_len: int, *, log_dir: Path, extra_args: tuple[str, ...] = ()
) -> ManagedProcess:
    """``tbr mock-pool`` named ``name`` on ``127.0.0.1:port``; ready when ``GET /health`` is 200."""
    argv = [
        *_TBR,
        "mock-pool",
        "--name",
        name,
        "--host",
        LOOPBACK,
        "--port",
        str(port),
        "--max-model-len",
        str(max_model_len),
        "--log-level",
        "warning",
        *extra_args,
    ]
    return ManagedProcess(
        f"pool-{name}",
        argv,
        log_path=log_dir / f"pool-{name}.log",
        ready=lambda: http_ok(f"http://{LOOPBACK}:{port}/health"),
    )


def render_router_config(
    *,
    grpc_port: int,
    admin_port: int,
    short_max_model_len: int,
    long_max_model_len: int,
    decision_log_path: Path | None = None,
    snapshot_path: Path | None = None,
    source: Path = DEFAULT_ROUTER_CONFIG,
    metrics_urls: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """``config/router.yaml`` with loopback ports, the pools' limits, an optional decision log,
    an optional ratio snapshot (``snapshot_path``; None drops the shipped one, so every stack
    starts from the priors and leaves nothing behind) and optional pool ``metrics_url`` values
    (pool name → URL of its vLLM ``/metrics``).

    Raises:
        ValueError: the source has no pool named ``short`` or ``long``.
    """
    cfg: dict[str, Any] = yaml.safe_load(source.read_text(encoding="utf-8"))
    limits = {"short": short_max_model_len, "long": long_max_model_len}
    names = {p["name"] for p in cfg["pools"]}
    if not set(limits) <= names:
        raise ValueError(f"{source}: expected pools named 'short' and 'long', found {sorted(names)}")
    for pool in cfg["pools"]:
        if pool["name"] in limits:
            pool["max_model_len"] = limits[pool["name"]]
        if metrics_urls and pool["name"] in metrics_urls:
            pool["metrics_url"] = metrics_urls[pool["name"]]
    cfg.setdefault("server", {}).update(grpc_host=LOOPBACK, grpc_port=grpc_port)
    cfg.setdefault("admin", {}).update(host=LOOPBACK, port=admin_port, enabled=True)
    if decision_log_path is not None:
        cfg["decision_log_path"] = str(decision_log_path)
    calibration = cfg.setdefault("calibration", {})
    calibration.pop("snapshot_path", None)
    if snapshot_path is not None:
        calibration["snapshot_path"] = str(snapshot_path)
    return cfg


def router_process(config_path: Path, grpc_port: int, admin_port: int, *, log_dir: Path) -> ManagedProcess:
    """``tbr serve`` on a rendered config; ready when its gRPC port accepts connections and admin
    ``GET /readyz`` answers 200."""
    argv = [
        *_TBR,
        "serve",
        "--config",
        str(config_path),
        "--grpc-port",
        str(grpc_port),
        "--admin-port",
        str(admin_port),
    ]
    return ManagedProcess(
        "router",
        argv,
        log_path=log_dir / "router.log",
        ready=lambda: tcp_open(grpc_port) and http_ok(f"http://{LOOPBACK}:{admin_port}/readyz"),
    )


def envoy_process(
    ports: EnvoyPorts, *, log_dir: Path, tag: str = "envoy", source: Path = DEFAULT_ENVOY_CONFIG
) -> EnvoyProcess:
    """Envoy on ``envoy/envoy.yaml`` rendered for ``ports`` (config written to ``log_dir/<tag>.yaml``)."""
    cfg = write_envoy_config(log_dir / f"{tag}.yaml", ports=ports, source=source)
    proc = EnvoyProcess(cfg, admin_port=ports.admin, log_path=log_dir / f"{tag}.log")
    proc.name = tag
    return proc


def merge_overrides(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` merged in place, recursively for mappings (a non-mapping
    value replaces); returns ``base``."""
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            merge_overrides(base[key], value)
        else:
            base[key] = copy.deepcopy(value)
    return base


@dataclass(frozen=True)
class Gateway:
    """A running Envoy of a stack and its OpenAI base URL (``http://127.0.0.1:<listener>/v1``)."""

    envoy: EnvoyProcess
    base_url: str


@dataclass(frozen=True)
class StackOptions:
    """What :class:`Stack` starts.

    Attributes:
        short_max_model_len / long_max_model_len: the pools' vLLM ``max_model_len`` (tokens).
        start_router: False leaves the ext_proc port unbound (Envoy then fails open to long).
        decision_log: True makes the router write its JSON Lines decision log in the work dir.
        pool_args: extra ``tbr mock-pool`` arguments for both pools.
        router_config / envoy_config: the files to render.
        router_overrides: merged into the rendered router config (nested mappings merge), e.g.
            ``{"calibration": {"warmup_samples": 2}}``.
        pool_health: True gives the router each pool's ``health_url`` (its ``/health``), so the
            router checks pool health (issue 34); real vLLM pools get it through ``metrics_url``.
        vllm: None starts ``tbr mock-pool`` stand-ins; a :class:`~devstack.vllm_pool.VllmSetup`
            starts real vLLM servers instead (Qwen3 tiny model, short on core 0, long on core 1;
            ``pool_args`` are ignored) and gives the router each pool's ``metrics_url``.
    """

    short_max_model_len: int = 8192
    long_max_model_len: int = 65536
    start_router: bool = True
    decision_log: bool = False
    pool_args: tuple[str, ...] = ()
    router_config: Path = DEFAULT_ROUTER_CONFIG
    envoy_config: Path = DEFAULT_ENVOY_CONFIG
    router_overrides: Mapping[str, Any] = field(default_factory=dict)
    pool_health: bool = False
    vllm: VllmSetup | None = None


@dataclass
class Stack:
    """Pools → router → Envoy on free loopback ports, stopped in reverse order on exit.

    Each process's ports are picked right before it starts, and a process that exits because one
    was taken in between starts again on fresh ones (:meth:`ProcessGroup.start_together_on_free_ports`):
    a port picked ahead of a slow start (two vLLM servers, ~1 min) could be taken meanwhile.

    Attributes (valid inside the ``with`` block; ports are 0 before): ``ports``, ``processes`` (every process
    started, in order, for log reports), ``pools`` (name → process), ``router`` (the current
    ``tbr serve`` process, or None), ``envoy``, ``base_url`` (``http://127.0.0.1:<listener>/v1``),
    ``router_admin_url``, ``router_config_path``, ``decision_log_path`` (None unless
    ``options.decision_log``).

    Raises:
        StartupError: from ``__enter__`` (or :meth:`start_router`, :meth:`add_envoy`) when a
            process fails to start (everything started so far is stopped first).
    """

    work_dir: Path
    options: StackOptions = field(default_factory=StackOptions)
    processes: list[ManagedProcess] = field(default_factory=list)
    pick_port: Callable[[], int] = free_port
    """Returns a free loopback port (a test passes one that hands out taken ports)."""

    def __post_init__(self) -> None:
        # every port is picked right before the process that binds it starts (in __enter__): a
        # port picked ahead of a slow start (vLLM, ~1 min) can be taken in between
        self.ports = EnvoyPorts(listener=0, admin=0, router_grpc=0, short_pool=0, long_pool=0)
        self.router_admin_port = 0
        self.decision_log_path: Path | None = (
            self.work_dir / "decisions.jsonl" if self.options.decision_log else None
        )
        self.router_config_path = self.work_dir / "router.yaml"
        self._procs = ProcessGroup(self.processes, pick_port=self.pick_port)
        self.pools: dict[str, ManagedProcess] = {}
        self.router: ManagedProcess | None = None
        self.envoy: EnvoyProcess | None = None

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<listener>/v1`` of the stack's Envoy (inside the ``with`` block)."""
        return f"http://{LOOPBACK}:{self.ports.listener}/v1"

    @property
    def router_admin_url(self) -> str:
        """``http://127.0.0.1:<port>`` of the router's admin server (inside the ``with`` block)."""
        return f"http://{LOOPBACK}:{self.router_admin_port}"

    def __enter__(self) -> Stack:
        o = self.options
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with self._procs.closed_on_error():

            def pool(cpu: int, name: str, limit: int) -> PortsBuilder:
                def build(ports: tuple[int, ...]) -> ManagedProcess:
                    if o.vllm is None:
                        return pool_process(
                            name, ports[0], limit, log_dir=self.work_dir, extra_args=o.pool_args
                        )
                    return o.vllm.process(
                        name, ports[0], limit, family="qwen3", cpu=cpu % 2, log_dir=self.work_dir
                    )

                return build

            limits = {"short": o.short_max_model_len, "long": o.long_max_model_len}
            # both at once: stand-ins load their tokenizer (~3 s each), vLLM one core each (~40 s)
            started = self._procs.start_together_on_free_ports(
                [(1, pool(cpu, name, limit)) for cpu, (name, limit) in enumerate(limits.items())]
            )
            for name, (proc, (port,)) in zip(limits, started, strict=True):
                self.pools[name] = proc
                self.ports = dataclasses.replace(self.ports, **{f"{name}_pool": port})
            if o.start_router:
                self.start_router()
            else:  # nothing listens there: Envoy fails open to long
                self.ports = dataclasses.replace(self.ports, router_grpc=self.pick_port())
                self.router_admin_port = self.pick_port()
                self.write_router_config()

            def envoy(ports: tuple[int, ...]) -> EnvoyProcess:
                self.ports = dataclasses.replace(self.ports, listener=ports[0], admin=ports[1])
                return envoy_process(self.ports, log_dir=self.work_dir, source=o.envoy_config)

            self.envoy, _ = self._procs.start_on_free_ports(2, envoy)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._procs.close()

    def pool_url(self, name: str) -> str:
        """``http://127.0.0.1:<port>`` of pool ``short`` or ``long`` (no ``/v1``)."""
        port = {"short": self.ports.short_pool, "long": self.ports.long_pool}[name]
        return f"http://{LOOPBACK}:{port}"

    def write_router_config(self) -> Path:
        """Render ``options.router_config`` (ports, pool limits, decision log, overrides) into
        ``router_config_path``; returns the path."""
        o = self.options
        cfg = render_router_config(
            grpc_port=self.ports.router_grpc,
            admin_port=self.router_admin_port,
            short_max_model_len=o.short_max_model_len,
            long_max_model_len=o.long_max_model_len,
            decision_log_path=self.decision_log_path,
            source=o.router_config,
            metrics_urls=(
                {name: f"{self.pool_url(name)}/metrics" for name in ("short", "long")}
                if o.vllm is not None
                else None
            ),
        )
        if o.pool_health:
            for pool in cfg["pools"]:
                pool["health_url"] = f"{self.pool_url(pool['name'])}/health"
        merge_overrides(cfg, o.router_overrides)
        self.router_config_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
        return self.router_config_path

    def start_router(self) -> ManagedProcess:
        """Start a new ``tbr serve`` (the previous one must be stopped); the n-th router after the
        first logs to ``router-<n>.log``. The first one binds ports picked right before it starts
        (and writes the router config for them); a later one binds the same ports, which Envoy
        points at. Returns it once ready.

        Raises:
            RuntimeError: the router is still running.
            StartupError: it did not start.
        """
        if self.router is not None and self.router.running():
            raise RuntimeError("the router is still running; stop it first")
        restarts = sum(p.name == "router" for p in self.processes)

        def build(ports: tuple[int, ...]) -> ManagedProcess:
            if ports:
                self.ports = dataclasses.replace(self.ports, router_grpc=ports[0])
                self.router_admin_port = ports[1]
                self.write_router_config()
            proc = router_process(
                self.router_config_path, self.ports.router_grpc, self.router_admin_port, log_dir=self.work_dir
            )
            if restarts:
                proc.log_path = self.work_dir / f"router-{restarts}.log"
            self.router = proc
            return proc

        first = self.router is None and self.envoy is None
        proc, _ = self._procs.start_on_free_ports(2 if first else 0, build)
        return proc

    @property
    def gateway(self) -> Gateway:
        """The stack's Envoy and its ``/v1`` URL (inside the ``with`` block)."""
        if self.envoy is None:
            raise RuntimeError("the stack is not running")
        return Gateway(self.envoy, self.base_url)

    def add_envoy(self, *, router_grpc: int, tag: str, source: Path | None = None) -> Gateway:
        """Start one more Envoy on the same pools whose ext_proc cluster points at
        ``router_grpc`` (e.g. a port nothing listens on: the router is down), rendered from
        ``source`` (default ``options.envoy_config``); stopped with the stack."""

        def build(picked: tuple[int, ...]) -> EnvoyProcess:
            ports = dataclasses.replace(
                self.ports, listener=picked[0], admin=picked[1], router_grpc=router_grpc
            )
            return envoy_process(
                ports, log_dir=self.work_dir, tag=tag, source=source or self.options.envoy_config
            )

        proc, (listener, _) = self._procs.start_on_free_ports(2, build)
        return Gateway(proc, f"http://{LOOPBACK}:{listener}/v1")

    def router_metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        """Sum of the router's Prometheus samples ``name`` whose labels include ``labels``
        (admin ``/metrics``; 0.0 when absent)."""
        text = httpx.get(f"{self.router_admin_url}/metrics", timeout=5.0).text
        return sum(
            s.value
            for fam in text_string_to_metric_families(text)
            for s in fam.samples
            if s.name == name and all(s.labels.get(k) == v for k, v in (labels or {}).items())
        )

    def logs(self, lines: int = 40) -> str:
        """Tail of every process log, for error reports."""
        return "\n".join(p.log_tail(lines) for p in self.processes)
