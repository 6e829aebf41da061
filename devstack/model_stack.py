"""The two-model stack on loopback: four stand-in pools (a Qwen3 pair and a Llama-3 pair), the
router on ``config/router-2models.yaml`` and Envoy on ``envoy/envoy-2models.yaml``.

Used by ``tbr demo --two-models``. Pool ``p`` of the router config is served by cluster
``p_pool`` of the Envoy config; each pool serves only its model (``--strict-model``: vLLM's 404
for any other), so a request routed to the wrong model's pool fails visibly.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from devstack.envoy_runner import EnvoyProcess, render_envoy_clusters
from devstack.procs import LOOPBACK, ManagedProcess, PortsBuilder, ProcessGroup
from devstack.stack import pool_process, router_process
from devstack.vllm_pool import VllmSetup

__all__ = ["ENVOY_2MODELS", "MODEL_POOLS", "ROUTER_2MODELS", "ModelSetsStack"]

_REPO = Path(__file__).resolve().parents[1]
ROUTER_2MODELS = _REPO / "config" / "router-2models.yaml"
ENVOY_2MODELS = _REPO / "envoy" / "envoy-2models.yaml"

MODEL_POOLS: dict[str, tuple[str, str]] = {
    # pool → (tokenizer family, served model name)
    "qwen-short": ("qwen3", "Qwen/Qwen3-8B"),
    "qwen-long": ("qwen3", "Qwen/Qwen3-8B"),
    "llama-short": ("llama3", "meta-llama/Llama-3.1-8B-Instruct"),
    "llama-long": ("llama3", "meta-llama/Llama-3.1-8B-Instruct"),
}


def cluster_of(pool: str) -> str:
    """Envoy cluster of a router pool: ``qwen-short`` → ``qwen-short_pool`` (as
    :func:`devstack.inprocess.pool_cluster`)."""
    return f"{pool}_pool"


@dataclass
class ModelSetsStack:
    """Pools → router → Envoy, stopped in reverse order on exit.

    Each process's ports are picked right before it starts; one that exits because a port was
    taken in between starts again on fresh ones (as :class:`devstack.stack.Stack`).

    Attributes (inside the ``with`` block; ports are 0 before): ``pool_ports``, ``base_url``, ``router_admin_url``,
    ``decision_log_path``, ``envoy``, ``config`` (the rendered router config), ``models``
    (model name → its pools, smallest first, as ``(name, max_model_len)``).

    ``vllm`` with ``vllm_pools`` runs those pools as real vLLM servers (their family's tiny model,
    one core each, at most two: the box has two cores) and the others as stand-ins; the router
    then gets the real pools' ``metrics_url``.

    Raises:
        StartupError: from ``__enter__`` when a process fails to start.
    """

    work_dir: Path
    router_config: Path = ROUTER_2MODELS
    envoy_config: Path = ENVOY_2MODELS
    processes: list[ManagedProcess] = field(default_factory=list)
    vllm: VllmSetup | None = None
    vllm_pools: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.config: dict[str, Any] = yaml.safe_load(self.router_config.read_text(encoding="utf-8"))
        # every port is picked right before the process that binds it starts (in __enter__): a
        # port picked ahead of a slow start (vLLM, ~1 min) can be taken in between
        self.pool_ports = {p["name"]: 0 for p in self.config["pools"]}
        self.listener, self.admin, self.grpc, self.router_admin_port = 0, 0, 0, 0
        self.decision_log_path = self.work_dir / "decisions.jsonl"
        self.envoy: EnvoyProcess | None = None
        self._procs = ProcessGroup(self.processes)
        limits = {p["name"]: int(p["max_model_len"]) for p in self.config["pools"]}
        self.models: dict[str, list[tuple[str, int]]] = {}
        for pool in sorted(limits, key=lambda n: limits[n]):
            self.models.setdefault(MODEL_POOLS[pool][1], []).append((pool, limits[pool]))

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<listener>/v1`` of the stack's Envoy (inside the ``with`` block)."""
        return f"http://{LOOPBACK}:{self.listener}/v1"

    @property
    def router_admin_url(self) -> str:
        """``http://127.0.0.1:<port>`` of the router's admin server (inside the ``with`` block)."""
        return f"http://{LOOPBACK}:{self.router_admin_port}"

    def _pool_builder(self, pool: dict[str, Any]) -> PortsBuilder:
        """Builds pool ``pool`` of the router config on its one port (real vLLM or a stand-in)."""
        name = pool["name"]
        tokenizer, model = MODEL_POOLS[name]
        limit = int(pool["max_model_len"])

        def build(ports: tuple[int, ...]) -> ManagedProcess:
            if self.vllm is not None and name in self.vllm_pools:
                cpu = self.vllm_pools.index(name) % 2
                pool["metrics_url"] = f"http://{LOOPBACK}:{ports[0]}/metrics"
                return self.vllm.process(
                    name, ports[0], limit, family=tokenizer, cpu=cpu, log_dir=self.work_dir
                )
            args = ("--tokenizer", tokenizer, "--served-model-name", model)
            return pool_process(name, ports[0], limit, log_dir=self.work_dir, extra_args=args)

        return build

    def __enter__(self) -> ModelSetsStack:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with self._procs.closed_on_error():
            pools = self.config["pools"]
            started = self._procs.start_together_on_free_ports([(1, self._pool_builder(p)) for p in pools])
            for pool, (_, (port,)) in zip(pools, started, strict=True):
                self.pool_ports[pool["name"]] = port

            def router(ports: tuple[int, ...]) -> ManagedProcess:
                self.grpc, self.router_admin_port = ports
                cfg = dict(self.config)
                cfg["server"] = {**cfg.get("server", {}), "grpc_host": LOOPBACK, "grpc_port": self.grpc}
                cfg["admin"] = {"host": LOOPBACK, "port": self.router_admin_port, "enabled": True}
                cfg["decision_log_path"] = str(self.decision_log_path)
                cfg_path = self.work_dir / "router.yaml"
                cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
                return router_process(cfg_path, self.grpc, self.router_admin_port, log_dir=self.work_dir)

            self._procs.start_on_free_ports(2, router)

            def envoy(ports: tuple[int, ...]) -> EnvoyProcess:
                self.listener, self.admin = ports
                clusters = {"ext_proc": self.grpc, **{cluster_of(n): p for n, p in self.pool_ports.items()}}
                envoy_cfg = render_envoy_clusters(
                    self.envoy_config, listener=self.listener, admin=self.admin, clusters=clusters
                )
                envoy_path = self.work_dir / "envoy.yaml"
                envoy_path.write_text(yaml.safe_dump(envoy_cfg, sort_keys=False), encoding="utf-8")
                return EnvoyProcess(envoy_path, admin_port=self.admin, log_path=self.work_dir / "envoy.log")

            self.envoy, _ = self._procs.start_on_free_ports(2, envoy)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._procs.close()
