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
from devstack.procs import LOOPBACK, ManagedProcess, ProcessGroup, free_port
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

    Attributes (inside the ``with`` block): ``base_url``, ``router_admin_url``,
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
        self.pool_ports = {p["name"]: free_port() for p in self.config["pools"]}
        self.listener, self.admin, self.grpc = free_port(), free_port(), free_port()
        self.router_admin_port = free_port()
        self.router_admin_url = f"http://{LOOPBACK}:{self.router_admin_port}"
        self.base_url = f"http://{LOOPBACK}:{self.listener}/v1"
        self.decision_log_path = self.work_dir / "decisions.jsonl"
        self.envoy: EnvoyProcess | None = None
        self._procs = ProcessGroup(self.processes)
        limits = {p["name"]: int(p["max_model_len"]) for p in self.config["pools"]}
        self.models: dict[str, list[tuple[str, int]]] = {}
        for pool in sorted(limits, key=lambda n: limits[n]):
            self.models.setdefault(MODEL_POOLS[pool][1], []).append((pool, limits[pool]))

    def __enter__(self) -> ModelSetsStack:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        with self._procs.closed_on_error():
            pools = []
            for pool in self.config["pools"]:
                tokenizer, model = MODEL_POOLS[pool["name"]]
                port, limit = self.pool_ports[pool["name"]], int(pool["max_model_len"])
                if self.vllm is not None and pool["name"] in self.vllm_pools:
                    cpu = self.vllm_pools.index(pool["name"]) % 2
                    proc = self.vllm.process(
                        pool["name"], port, limit, family=tokenizer, cpu=cpu, log_dir=self.work_dir
                    )
                    pool["metrics_url"] = f"http://{LOOPBACK}:{port}/metrics"
                else:
                    args = ("--tokenizer", tokenizer, "--served-model-name", model)
                    proc = pool_process(pool["name"], port, limit, log_dir=self.work_dir, extra_args=args)
                pools.append(proc)
            self._procs.start_together(pools)
            cfg = dict(self.config)
            cfg["server"] = {**cfg.get("server", {}), "grpc_host": LOOPBACK, "grpc_port": self.grpc}
            cfg["admin"] = {"host": LOOPBACK, "port": self.router_admin_port, "enabled": True}
            cfg["decision_log_path"] = str(self.decision_log_path)
            cfg_path = self.work_dir / "router.yaml"
            cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False), encoding="utf-8")
            router = router_process(cfg_path, self.grpc, self.router_admin_port, log_dir=self.work_dir)
            self._procs.start(router)
            clusters = {"ext_proc": self.grpc, **{cluster_of(n): p for n, p in self.pool_ports.items()}}
            envoy_cfg = render_envoy_clusters(
                self.envoy_config, listener=self.listener, admin=self.admin, clusters=clusters
            )
            envoy_path = self.work_dir / "envoy.yaml"
            envoy_path.write_text(yaml.safe_dump(envoy_cfg, sort_keys=False), encoding="utf-8")
            self.envoy = EnvoyProcess(envoy_path, admin_port=self.admin, log_path=self.work_dir / "envoy.log")
            self._procs.start(self.envoy)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._procs.close()
