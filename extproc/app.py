"""The router process: builds the object graph from a config and runs it until told to stop.

:class:`RouterApp` owns the gRPC server, the admin HTTP server, the ratio store and the
decision log. ``async with RouterApp(cfg) as app`` starts everything (ports of 0 are replaced
by the bound ones: ``app.grpc_port``, ``app.admin_port``); leaving the block shuts down
gracefully: readiness off, in-flight streams get ``server.grace_period_s``, ratios are
persisted to ``calibration.snapshot_path``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import IO

import httpx
import uvicorn

from extproc.admin import build_admin_app
from extproc.calibration import InMemoryRatioStore
from extproc.config import RouterConfig
from extproc.load import LoadMetrics, LoadTracker
from extproc.metrics import RouterMetrics
from extproc.router import Router
from extproc.scrape import PoolScraper
from extproc.server import GrpcServer, start_grpc_server

__all__ = ["RouterApp"]

log = logging.getLogger(__name__)


class _AdminServer(uvicorn.Server):
    """uvicorn without its signal handlers: the router owns SIGTERM/SIGHUP (uvicorn would
    replace them with ``signal.signal`` and re-raise the signal after serving)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class RouterApp:
    """A running router (gRPC ext_proc + admin HTTP).

    Args:
        config: validated configuration.
        grpc_port: override of ``config.server.grpc_port`` (0 = any free port).
        admin_port: override of ``config.admin.port`` (0 = any free port).
        http_client: client for scraping pool ``/metrics`` (spillover); one is built (and
            closed on stop) when None and a scrape is configured.
    """

    def __init__(
        self,
        config: RouterConfig,
        *,
        grpc_port: int | None = None,
        admin_port: int | None = None,
        http_client: httpx.AsyncClient | None = None,
    ) -> None:
        self.config = config
        self._grpc_port_req = grpc_port
        self._admin_port_req = admin_port
        self.metrics = RouterMetrics()
        self.store = InMemoryRatioStore.from_config(config.calibration)
        self.load = LoadTracker(LoadMetrics(self.metrics.registry))
        self._http_client = http_client
        self._own_http_client = False
        self.scraper: PoolScraper | None = None
        self._decision_log: IO[bytes] | None = None
        self.router: Router | None = None
        self.grpc: GrpcServer | None = None
        self._admin: uvicorn.Server | None = None
        self._admin_task: asyncio.Task[None] | None = None
        self._admin_sock: socket.socket | None = None
        self.grpc_port = 0
        self.admin_port = 0
        self.ready = False

    def current_router(self) -> Router:
        """The runtime new streams use."""
        assert self.router is not None, "RouterApp not started"
        return self.router

    async def start(self) -> None:
        """Restore ratios, open the decision log, start gRPC then admin HTTP."""
        cfg = self.config
        snap = cfg.calibration.snapshot_path
        if snap:
            try:
                n = self.store.load_snapshot(snap)
                log.info("restored %d learned ratios from %s", n, snap)
            except ValueError as exc:
                log.error("ignoring ratio snapshot: %s", exc)
        if cfg.decision_log_path:
            self._decision_log = open(cfg.decision_log_path, "ab")  # noqa: SIM115, ASYNC230 (closed in stop(); once at start)
        self.router = Router(
            cfg, store=self.store, metrics=self.metrics, decision_log=self._decision_log, load=self.load
        )
        self._start_scraper()
        for key, _ in self.store.items():
            self.router.publish_ratio(*key)
        self.grpc = await start_grpc_server(cfg.server, self.current_router, port=self._grpc_port_req)
        self.grpc_port = self.grpc.port
        if cfg.admin.enabled:
            await self._start_admin()
        self.ready = True

    def _start_scraper(self) -> None:
        """Scrape pool /metrics when spillover is on and some pool has a ``metrics_url``."""
        cfg = self.config
        if not cfg.spillover.enabled or not any(p.metrics_url for p in cfg.pools):
            return
        if self._http_client is None:
            self._http_client = httpx.AsyncClient(timeout=cfg.spillover.scrape_timeout_s)
            self._own_http_client = True
        self.scraper = PoolScraper(cfg.pools, cfg.spillover, self.load, self._http_client)
        self.scraper.start()

    async def _start_admin(self) -> None:
        cfg = self.config.admin
        port = cfg.port if self._admin_port_req is None else self._admin_port_req
        sock = socket.socket(socket.AF_INET6 if ":" in cfg.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((cfg.host, port))
        self._admin_sock = sock
        self.admin_port = sock.getsockname()[1]
        app = build_admin_app(self.current_router, lambda: self.ready)
        server = _AdminServer(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
        self._admin = server
        self._admin_task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if self._admin_task.done():
                self._admin_task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Graceful shutdown: not ready, drain streams (grace period), persist ratios."""
        self.ready = False
        if self.grpc is not None:
            await self.grpc.stop(self.config.server.grace_period_s)
        if self._admin is not None and self._admin_task is not None:
            self._admin.should_exit = True
            await self._admin_task
        if self._admin_sock is not None:
            self._admin_sock.close()
        if self.scraper is not None:
            await self.scraper.stop()
        if self._own_http_client and self._http_client is not None:
            await self._http_client.aclose()
        snap = self.config.calibration.snapshot_path
        if snap:
            try:
                self.store.save_snapshot(Path(snap))
                log.info("saved %d learned ratios to %s", len(self.store.items()), snap)
            except OSError as exc:
                log.error("cannot save ratio snapshot %s: %s", snap, exc)
        if self._decision_log is not None:
            self._decision_log.close()

    async def __aenter__(self) -> RouterApp:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
