"""The router process: builds the object graph from a config and runs it until told to stop.

:class:`RouterApp` owns the gRPC server, the admin HTTP server, the ratio store and the
decision log. ``async with RouterApp(cfg) as app`` starts everything (ports of 0 are replaced
by the bound ones: ``app.grpc_port``, ``app.admin_port``); leaving the block shuts down
gracefully: readiness off (gRPC health of the ext_proc service, ``/readyz``; liveness stays
on) for ``server.shutdown_delay_s``, then the listener closes and in-flight streams get
``server.grace_period_s``; ratios are pushed to Redis, or persisted to
``calibration.snapshot_path`` when Redis is not used (that file is also written every
``calibration.snapshot_interval_s``, :class:`~extproc.service.snapshot.PeriodicSnapshot`).

The ratio store is the in-memory one, or :class:`~extproc.service.redis_store.RedisRatioStore` when
``calibration.redis_url`` is set. With ``config_path``, :meth:`RouterApp.request_reload` and
(with ``watch_config``) file changes reload the configuration (:mod:`extproc.service.reload`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import httpx
import uvicorn

from extproc.adapter.held_records import HeldRecords
from extproc.adapter.runtime import Runtime
from extproc.adapter.server import GrpcServer, freeze_startup_objects, start_grpc_server
from extproc.config import RouterConfig
from extproc.core.estimate.calibration import InMemoryRatioStore
from extproc.core.estimate.output_reserve import OutputLengthLearner
from extproc.core.route.decision import DecisionRecord
from extproc.core.route.load import LoadTracker
from extproc.core.route.response_ids import ResponsePools
from extproc.core.text.runs import CONTENT_KINDS, RUNSCAN
from extproc.service.admin import build_admin_app
from extproc.service.decision_log import DecisionLogWriter
from extproc.service.fleet_advice import AdviceCollector, FleetAdvisor, sync_rows_counter
from extproc.service.fleet_sync import FleetWindowSync
from extproc.service.load_metrics import LoadCollector
from extproc.service.metrics import PrometheusObserver, RouterMetrics
from extproc.service.otel import OtelRecorder
from extproc.service.output_metrics import OutputCollector
from extproc.service.output_sync import OutputLengthSync
from extproc.service.pool_check import check_pool_limits
from extproc.service.pool_health import PoolHealthChecker
from extproc.service.redis_store import RedisRatioStore
from extproc.service.reload import ConfigReloader
from extproc.service.response_sync import ResponsePoolSync
from extproc.service.scrape import PoolScraper
from extproc.service.snapshot import PeriodicSnapshot, load_output_states, load_snapshot, snapshot_unwritable

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
        config_path: the file ``config`` came from; enables reloads.
        watch_config: reload when ``config_path`` changes (needs ``config_path``).
        http_client: client for scraping pool ``/metrics`` (spillover); one is built (and
            closed on stop) when None and a scrape is configured.
        config_loader: reads ``config_path`` on reload (default: the file alone; ``tbr serve``
            applies its environment and flag overrides, :mod:`extproc.service.overrides`).
        redis_password: password for ``calibration.redis_url`` (a secret kept out of the YAML).
        otel: OpenTelemetry export of each routed request (off when None); shut down on stop.
        grpc_options: extra gRPC channel arguments (the benchmarks measure e.g.
            ``("grpc.optimization_target", "latency")``).
        gc_freeze: ``gc.freeze()`` the startup objects once started (True; the benchmarks turn
            it off to measure the lever).

    Building it does no I/O.
    """

    def __init__(
        self,
        config: RouterConfig,
        *,
        grpc_port: int | None = None,
        admin_port: int | None = None,
        config_path: str | Path | None = None,
        watch_config: bool = False,
        http_client: httpx.AsyncClient | None = None,
        config_loader: Callable[[Path], RouterConfig] | None = None,
        redis_password: str | None = None,
        otel: OtelRecorder | None = None,
        grpc_options: Sequence[tuple[str, Any]] = (),
        gc_freeze: bool = True,
    ) -> None:
        self.config = config
        self._config_loader = config_loader
        self._grpc_options = tuple(grpc_options)
        self._gc_freeze = gc_freeze
        self._grpc_port_req = grpc_port
        self._admin_port_req = admin_port
        self._config_path = config_path
        self._watch_config = watch_config
        self.metrics = RouterMetrics()
        self.otel = otel
        self.observer = PrometheusObserver(self.metrics, otel=otel)
        cal = config.calibration
        self.store: InMemoryRatioStore | RedisRatioStore
        self.config_generation = 0
        self.redis: RedisRatioStore | None = None
        self.response_pools = ResponsePools()
        # routing records waiting for their off-path stream; written through the current runtime
        self.held_records = HeldRecords(self._write_record)
        self.response_sync: ResponsePoolSync | None = None
        self.memory: InMemoryRatioStore | None = None
        if cal.redis_url:
            self.redis = RedisRatioStore(
                url=cal.redis_url,
                password=redis_password,
                params=InMemoryRatioStore.from_config(cal).params,
                metrics=self.metrics,
                key_prefix=cal.redis_key_prefix,
                sync_interval_s=cal.redis_sync_interval_s,
                timeout_s=cal.redis_timeout_s,
                queue_max=cal.redis_queue_max,
                max_keys=config.estimator.max_models * (len(CONTENT_KINDS) + 2),  # + all, bounded
            )
            self.store = self.redis
        else:
            self.memory = InMemoryRatioStore.from_config(cal)
            self.store = self.memory
            self.metrics.store_up.set(1)  # nothing shared that could be down
        self.reloader: ConfigReloader | None = None
        self._redis_password = redis_password
        self.output_learner: OutputLengthLearner | None = None
        """The learned answer lengths (issue 30), kept across reloads; None while
        ``estimator.output_reserve.learned`` has never been on."""
        self.output_sync: OutputLengthSync | None = None
        self.served_limits: dict[str, int] = {}
        """Pool name → the ``max_model_len`` its vLLM server reports on ``/v1/models`` (the pool
        limit check at start); the truncation judgement uses it over the configured one."""
        self.metrics.registry.register(OutputCollector(self._active_learner))
        self.load = LoadTracker()
        self.metrics.registry.register(LoadCollector(self.load))
        self.advisor: FleetAdvisor | None = None
        """Live fleet advice (issue 33), built at start when ``advice.enabled``."""
        self.fleet_sync: FleetWindowSync | None = None
        self._fleet_rows = sync_rows_counter(self.metrics.registry)
        self.metrics.registry.register(AdviceCollector(lambda: self.advisor))
        self._http_client = http_client
        self._own_http_client = False
        self.scraper: PoolScraper | None = None
        self.health_checker: PoolHealthChecker | None = None
        self._pool_check: asyncio.Task[object] | None = None
        self._decision_log: DecisionLogWriter | None = None
        self._snapshot: PeriodicSnapshot | None = None
        self.router: Runtime | None = None
        self.grpc: GrpcServer | None = None
        self._admin: uvicorn.Server | None = None
        self._admin_task: asyncio.Task[None] | None = None
        self._admin_sock: socket.socket | None = None
        self.grpc_port = 0
        self.admin_port = 0
        self.ready = False

    def current_router(self) -> Runtime:
        """The runtime new streams use."""
        assert self.router is not None, "RouterApp not started"
        return self.router

    def _active_learner(self) -> OutputLengthLearner | None:
        """The learner the current runtime routes with (None while the reserve is not learned)."""
        return self.router.estimator.output_learner if self.router is not None else None

    def _output_learner_for(self, cfg: RouterConfig) -> OutputLengthLearner | None:
        """The process-wide learner for ``cfg``: created when ``output_reserve.learned`` is first on,
        rebuilt with the learned states when its settings change on reload; None while it is off."""
        out = cfg.estimator.output_reserve
        if not out.learned:
            return None
        if self.output_learner is None:
            self.output_learner = OutputLengthLearner(out)
        elif self.output_learner.cfg != out:
            learner = OutputLengthLearner(out)
            learner.restore(self.output_learner.items())
            self.output_learner = learner
            if self.output_sync is not None:
                self.output_sync.learner = learner
        return self.output_learner

    def _publish(self, key: tuple[str, str]) -> None:
        if self.router is not None:
            # a model another replica learned is served by the pools: it holds a key slot here too
            self.router.estimator.admit(key[0], learned=True)
            self.router.publish_ratio(*key)

    def _restore_snapshot(self, snap: str) -> None:
        """Restore the learned ratios and output classes of ``snap`` (counted, never raised) and
        report at once a path that cannot be written."""
        assert self.memory is not None
        cfg = self.config
        try:
            n = load_snapshot(self.memory, snap)
            if n is None:
                log.info("no ratio snapshot at %s yet: starting without learned ratios", snap)
            else:
                log.info("restored %d learned ratios from %s", n, snap)
                self.metrics.snapshots.labels("load", "ok").inc()
        except ValueError as exc:
            # Keep the bad file for inspection instead of overwriting it with the next save.
            aside = Path(f"{snap}.invalid")
            with contextlib.suppress(OSError):
                Path(snap).replace(aside)  # once, at start (a sync helper of start())
            log.error("ignoring ratio snapshot (moved to %s): %s", aside, exc)
            self.metrics.snapshots.labels("load", "invalid").inc()
        learner = self._output_learner_for(cfg)
        if learner is not None:
            try:
                classes = load_output_states(learner, snap)
                if classes:  # nothing is said of a snapshot that does not exist yet
                    log.info("restored %d output classes from %s", classes, snap)
            except ValueError as exc:
                log.error("ignoring the output lengths of the snapshot: %s", exc)
                self.metrics.snapshots.labels("load", "invalid").inc()
        problem = snapshot_unwritable(snap)
        if problem is not None:  # found now, not at the first periodic save or at shutdown
            log.error(
                "calibration.snapshot_path %s is not writable (%s): learned ratios will not survive a restart",
                snap,
                problem,
            )
            self.metrics.snapshots.labels("save", "error").inc()

    async def start(self) -> None:
        """Restore ratios (snapshot, or first Redis pull), open the decision log, start gRPC then
        admin HTTP, then the config watcher."""
        cfg = self.config
        if RUNSCAN != "c":
            log.warning(
                "estimator run counter: numpy (extproc.core.text._runscan was not built: no C compiler at "
                "install time); long prompts cost 10-25x more CPU to count (docs/performance.md §Run counter)"
            )
        snap = cfg.calibration.snapshot_path
        if snap and self.memory is not None:
            self._restore_snapshot(snap)
            self._snapshot = PeriodicSnapshot(
                self.memory,
                snap,
                cfg.calibration.snapshot_interval_s,
                lambda op, outcome: self.metrics.snapshots.labels(op, outcome).inc(),
                outputs=self._active_learner,
            )
            self._snapshot.start()
        if self.redis is not None:
            self.redis.on_update = self._publish
            await self.redis.start()
            cal = cfg.calibration
            assert cal.redis_url is not None
            self.response_sync = ResponsePoolSync(
                self.response_pools,
                url=cal.redis_url,
                key_prefix=cal.redis_key_prefix,
                interval_s=cal.redis_sync_interval_s,
                timeout_s=cal.redis_timeout_s,
                password=self._redis_password,
            )
            await self.response_sync.start()
            learner = self._output_learner_for(cfg)
            if learner is not None:
                self.output_sync = OutputLengthSync(
                    learner,
                    url=cal.redis_url,
                    key_prefix=cal.redis_key_prefix,
                    interval_s=cal.redis_sync_interval_s,
                    timeout_s=cal.redis_timeout_s,
                    password=self._redis_password,
                    on_row=lambda outcome: self.metrics.output_sync_rows.labels(outcome).inc(),
                )
                await self.output_sync.start()
        await self._start_advice(cfg)
        if cfg.decision_log_path:
            self._decision_log = DecisionLogWriter(
                cfg.decision_log_path,
                dropped=self.metrics.decision_log_dropped,
                written=self.metrics.decision_log_written,
                queue_max=cfg.decision_log_queue_max,
                flush_interval_s=cfg.decision_log_flush_interval_s,
            )
            await self._decision_log.start()
        self._install(cfg)
        self._start_scraper()
        self._start_health_checker()
        self._start_pool_check()
        self.grpc = await start_grpc_server(
            cfg.server, self.current_router, port=self._grpc_port_req, extra_options=self._grpc_options
        )
        self.grpc_port = self.grpc.port
        if cfg.admin.enabled:
            await self._start_admin()
        if self._config_path is not None:
            self.reloader = ConfigReloader(
                self._config_path,
                current=lambda: self.current_router().config,
                apply=self._install,
                on_outcome=lambda outcome: self.metrics.config_reloads.labels(outcome).inc(),
                **({"load": self._config_loader} if self._config_loader is not None else {}),
            )
            if self._watch_config:
                self.reloader.start_watching()
        if self._gc_freeze:
            freeze_startup_objects()  # GC pauses over startup objects (docs/performance.md)
        self.ready = True
        self.metrics.ready.set(1)

    async def _start_advice(self, cfg: RouterConfig) -> None:
        """Fleet advice (:mod:`extproc.service.fleet_advice`): the decision window, shared through
        Redis when ``calibration.redis_url`` is set (:mod:`extproc.service.fleet_sync`)."""
        if not cfg.advice.enabled:
            return
        self.advisor = FleetAdvisor(cfg)
        self.observer.on_decision = self.advisor.decision
        cal = cfg.calibration
        if cal.redis_url:
            rows = self._fleet_rows
            self.fleet_sync = FleetWindowSync(
                self.advisor.window,
                url=cal.redis_url,
                key_prefix=cal.redis_key_prefix,
                interval_s=cal.redis_sync_interval_s,
                timeout_s=cal.redis_timeout_s,
                clock=self.advisor.clock,
                password=self._redis_password,
                on_row=lambda outcome: rows.labels(outcome).inc(),
            )
            await self.fleet_sync.start()

    def _write_record(self, record: DecisionRecord, traceparent: str) -> None:
        """A record :attr:`held_records` lets go, written by the current runtime."""
        if self.router is not None:
            self.router.write_record(record, traceparent)

    def _install(self, cfg: RouterConfig) -> None:
        """Build a Runtime for ``cfg`` on the shared store and metrics and make it current."""
        params = InMemoryRatioStore.from_config(cfg.calibration).params
        self.store.beta = params.beta
        self.store.params = params
        router = Runtime(
            cfg,
            store=self.store,
            observer=self.observer,
            decision_log=self._decision_log,
            load=self.load,
            response_pools=self.response_pools,
            held_records=self.held_records,
            output_learner=self._output_learner_for(cfg),
            output_sink=self.output_sync,
            served_limits=self.served_limits,
            read_policy=self.router.read_policy if self.router is not None else None,
        )
        # Models already learned keep their keys across reloads/restarts (most observed first),
        # so the bounded model set (estimator.max_models) does not grow with each reload.
        samples: dict[str, int] = {}
        for (model, _), state in self.store.items():
            samples[model] = samples.get(model, 0) + state.samples
        for model in sorted(samples, key=lambda m: -samples[m]):
            if model != "_other":
                router.estimator.admit(model, learned=samples[model] > 0)
        for key, _ in self.store.items():
            router.publish_ratio(*key)
        self.router = router
        self.config_generation += 1
        self.metrics.config_generation.set(self.config_generation)

    def request_reload(self) -> str:
        """Reload the config file now (SIGHUP); returns ``applied``, ``invalid``, ``unchanged`` or
        ``disabled`` (no config file)."""
        if self.reloader is None:
            return "disabled"
        return self.reloader.reload(force=True)

    def status(self) -> dict[str, object]:
        """Operational state for the admin view: store kind and health, config generation."""
        out: dict[str, object] = {
            "ready": self.ready,
            "store": "redis" if self.redis is not None else "memory",
            "config_generation": self.config_generation,
        }
        if self.redis is not None:
            out["redis_up"] = self.redis.up
            out["redis_queue_length"] = self.redis.queue_length
        if self.output_sync is not None:
            out["output_sync_up"] = self.output_sync.up
            out["output_sync_queue_length"] = self.output_sync.queue_length
        return out

    def _start_scraper(self) -> None:
        """Scrape pool /metrics when spillover is on and some pool has a ``metrics_url``."""
        cfg = self.config
        if not cfg.spillover.enabled or not any(p.metrics_url for p in cfg.pools):
            return
        if self._http_client is None:
            self._http_client = httpx.AsyncClient(timeout=cfg.spillover.scrape_timeout_s)
            self._own_http_client = True
        self.scraper = PoolScraper(cfg.pools, cfg.spillover, self.load, self._http_client, self.metrics.load)
        self.scraper.start()

    def _start_health_checker(self) -> None:
        """Check pool ``GET /health`` when ``pool_health.enabled`` and some pool has a health or
        metrics URL (:mod:`extproc.service.pool_health`)."""
        cfg = self.config
        if not cfg.pool_health.enabled or not any(p.health_url or p.metrics_url for p in cfg.pools):
            return
        if self._http_client is None:
            self._http_client = httpx.AsyncClient(timeout=cfg.pool_health.check_timeout_s)
            self._own_http_client = True
        self.health_checker = PoolHealthChecker(
            cfg.pools, cfg.pool_health, self.load, self._http_client, self.metrics.pool_health
        )
        self.health_checker.start()

    async def _stop_pool_tasks(self) -> None:
        """Stop the /metrics scraper, the health checks and a pool limit check still waiting for its servers."""
        if self.scraper is not None:
            await self.scraper.stop()
        if self.health_checker is not None:
            await self.health_checker.stop()
        if self._pool_check is not None:
            self._pool_check.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pool_check

    def _start_pool_check(self) -> None:
        """Compare each pool's max_model_len with its server's /v1/models in the background
        (pools with a ``metrics_url``; :mod:`extproc.service.pool_check`)."""
        cfg = self.config
        if not any(p.metrics_url for p in cfg.pools):
            return

        async def run() -> object:
            async with httpx.AsyncClient() as client:
                checks = await check_pool_limits(cfg.pools, client, self.metrics.pool_check)
            for check in checks:  # what the server cuts answers at (extproc/core/learn/truncation.py)
                if check.served_tokens is not None:
                    self.served_limits[check.pool] = check.served_tokens
            return checks

        self._pool_check = asyncio.create_task(run(), name="tbr-pool-limit-check")

    async def _start_admin(self) -> None:
        cfg = self.config.admin
        port = cfg.port if self._admin_port_req is None else self._admin_port_req
        sock = socket.socket(socket.AF_INET6 if ":" in cfg.host else socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((cfg.host, port))
        except OSError as exc:
            sock.close()
            raise OSError(exc.errno, f"admin listener {cfg.host}:{port}: {exc.strerror or exc}") from exc
        self._admin_sock = sock
        self.admin_port = sock.getsockname()[1]
        app = build_admin_app(
            self.current_router,
            lambda: self.ready,
            self.status,
            registry=self.metrics.registry,
            advice=lambda: self.advisor.view() if self.advisor is not None else None,
        )
        server = _AdminServer(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off"))
        self._admin = server
        self._admin_task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started:
            if self._admin_task.done():
                self._admin_task.result()
            await asyncio.sleep(0.01)

    async def stop(self) -> None:
        """Graceful shutdown: not ready (shutdown delay), stop accepting, drain streams (grace
        period), push or persist ratios, flush the decision log, shut OpenTelemetry down.

        Every step runs even when an earlier one failed: a failure is logged and counted
        (``tbr_shutdown_steps_total{step,outcome="error"}``), never raised (a decision log on a
        full disk must not skip the OpenTelemetry flush or make ``tbr serve`` exit 1).
        """
        self.ready = False
        self.metrics.ready.set(0)
        if self.reloader is not None:
            await self._step("config_watch", self.reloader.stop)
        if self.grpc is not None:
            await self._step("grpc", self._stop_grpc)
        if self._admin is not None and self._admin_task is not None:
            await self._step("admin", self._stop_admin)
        if self._admin_sock is not None:
            self._admin_sock.close()
        if self.response_sync is not None:
            await self._step("response_sync", self.response_sync.close)
        if self.output_sync is not None:
            await self._step("output_sync", self.output_sync.close)
        if self.fleet_sync is not None:
            await self._step("fleet_sync", self.fleet_sync.close)
        if self.redis is not None:
            await self._step("redis", self.redis.close)
        await self._step("pool_tasks", self._stop_pool_tasks)
        if self._own_http_client and self._http_client is not None:
            await self._step("http_client", self._http_client.aclose)
        if self._snapshot is not None:
            await self._step("snapshot", self._snapshot.stop)
        # streams are drained: nothing will claim what is still held
        await self._step("held_records", self._flush_held)
        if self._decision_log is not None:
            await self._step("decision_log", self._decision_log.close)
        if self.otel is not None:  # flushes the last spans and metrics (blocking export)
            await self._step("otel", self._shutdown_otel)

    async def _step(self, name: str, step: Callable[[], Awaitable[object]]) -> None:
        """Run one shutdown step; log and count its failure instead of raising it."""
        try:
            await step()
        except Exception as exc:
            log.error("shutdown step %s failed (the next steps still run): %s", name, exc, exc_info=True)
            self.metrics.shutdown_steps.labels(name, "error").inc()
        else:
            self.metrics.shutdown_steps.labels(name, "ok").inc()

    async def _stop_grpc(self) -> None:
        assert self.grpc is not None
        await self.grpc.set_serving(False)
        if self.config.server.shutdown_delay_s > 0:
            log.info("not ready; closing the listener in %.1f s", self.config.server.shutdown_delay_s)
            await asyncio.sleep(self.config.server.shutdown_delay_s)
        log.info("draining %d in-flight streams", self.grpc.servicer.active_streams)
        await self.grpc.stop(self.config.server.grace_period_s)

    async def _stop_admin(self) -> None:
        assert self._admin is not None and self._admin_task is not None
        self._admin.should_exit = True
        await self._admin_task

    async def _flush_held(self) -> None:
        self.held_records.flush()

    async def _shutdown_otel(self) -> None:
        assert self.otel is not None
        await asyncio.to_thread(self.otel.shutdown)

    async def __aenter__(self) -> RouterApp:
        try:
            await self.start()
        except BaseException:
            await self.stop()  # release whatever started (listeners, Redis task, files)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
