"""Configuration reload without dropping streams or learned ratios.

A reload (file change seen by ``watchfiles``, or SIGHUP) reads and validates the file, then
builds a new :class:`~extproc.adapter.runtime.Router` that shares the running ratio store and metrics
and swaps it in; streams already open keep the Router they started with. An invalid file keeps
the running configuration (logged, counted in ``tbr_config_reloads_total{outcome="invalid"}``).

Settings bound at start (listeners, TLS, Redis settings, snapshot path, decision log, the pool
``/metrics`` scraper) are not changed by a reload; a changed value is logged as needing a
restart and otherwise ignored.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

from watchfiles import awatch

from extproc.config import ConfigError, RouterConfig, load_config
from extproc.service.overrides import changed_fields

__all__ = ["ConfigReloader", "restart_only_changes"]

log = logging.getLogger(__name__)


def restart_only_changes(old: RouterConfig, new: RouterConfig) -> list[str]:
    """Names of changed settings that only take effect after a restart."""
    changed = []
    if old.server != new.server:
        changed.append("server")
    if old.admin != new.admin:
        changed.append("admin")
    for field in ("decision_log_path", "decision_log_flush_interval_s", "decision_log_queue_max"):
        if getattr(old, field) != getattr(new, field):
            changed.append(field)
    # The pool /metrics scraper is started once (thresholds themselves do reload).
    for field in ("enabled", "scrape_interval_s", "scrape_timeout_s"):
        if getattr(old.spillover, field) != getattr(new.spillover, field):
            changed.append(f"spillover.{field} (scraping)")
    if [p.metrics_url for p in old.pools] != [p.metrics_url for p in new.pools]:
        changed.append("pools[].metrics_url (scraping)")
    for field in (
        "redis_url",
        "redis_key_prefix",
        "redis_sync_interval_s",
        "redis_timeout_s",
        "redis_queue_max",
        "snapshot_path",
        "snapshot_interval_s",
    ):
        if getattr(old.calibration, field) != getattr(new.calibration, field):
            changed.append(f"calibration.{field}")
    return changed


class ConfigReloader:
    """Reloads ``path`` on demand (:meth:`reload`) and, when watching, on every change.

    Args:
        path: the YAML file the router was started with.
        current: returns the configuration in use.
        apply: installs a validated new configuration (builds and swaps the Router).
        on_outcome: called with ``applied``, ``invalid`` or ``unchanged`` after each attempt.
        load: reads and validates the file (default :func:`~extproc.config.load_config`; ``tbr
            serve`` passes one that applies its environment and flag overrides).

    A reload whose validated configuration equals the running one (e.g. SIGHUP on an unchanged
    file) is ``unchanged``; an applied one logs the names of the changed settings.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        current: Callable[[], RouterConfig],
        apply: Callable[[RouterConfig], None],
        on_outcome: Callable[[str], None],
        load: Callable[[Path], RouterConfig] = load_config,
    ) -> None:
        self.path = Path(path)
        self._load = load
        self._current = current
        self._apply = apply
        self._on_outcome = on_outcome
        self._digest = self._file_digest()
        self._task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def _file_digest(self) -> bytes | None:
        try:
            return hashlib.sha256(self.path.read_bytes()).digest()
        except OSError:
            return None

    def reload(self, *, force: bool = False) -> str:
        """Re-read the file and apply it if valid; returns the outcome (never raises on bad input).

        ``force`` reloads even when the file's bytes did not change (SIGHUP).
        """
        digest = self._file_digest()
        if not force and digest is not None and digest == self._digest:
            outcome = "unchanged"
        else:
            try:
                new = self._load(self.path)
            except ConfigError as exc:
                log.error("config reload rejected, keeping the running configuration: %s", exc)
                outcome = "invalid"
            except Exception:  # a loader bug must not stop the watcher or escape a signal handler
                log.exception("config reload failed, keeping the running configuration")
                outcome = "invalid"
            else:
                old = self._current()
                changed = changed_fields(old, new)
                self._digest = digest
                if not changed:
                    outcome = "unchanged"
                    log.info("config reload: %s has no changed setting", self.path)
                else:
                    ignored = restart_only_changes(old, new)
                    if ignored:
                        log.warning(
                            "config reload: %s changed; takes effect after a restart", ", ".join(ignored)
                        )
                    self._apply(new)
                    outcome = "applied"
                    log.info(
                        "config reloaded from %s; changed: %s",
                        self.path,
                        ", ".join(changed),
                        extra={"changed": changed},
                    )
        self._on_outcome(outcome)
        return outcome

    def start_watching(self) -> None:
        """Start a task reloading on every change of the file (or of its directory entry, which
        covers editors that replace files and Kubernetes ConfigMap symlink swaps)."""
        self._task = asyncio.create_task(self._watch(), name="config-watch")

    async def _watch(self) -> None:
        target = self.path.resolve()
        directory = self.path.parent.resolve()

        def relevant(_change: object, changed: str) -> bool:
            p = Path(changed)
            return p == target or p.name == self.path.name or p.name.startswith("..")

        try:
            async for _ in awatch(
                directory, watch_filter=relevant, debounce=200, step=50, stop_event=self._stop
            ):
                self.reload()
        except Exception:
            log.exception("config file watcher stopped; SIGHUP still reloads")

    async def stop(self) -> None:
        """Stop watching."""
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, timeout=2.0)
            except TimeoutError:
                self._task.cancel()
            self._task = None
