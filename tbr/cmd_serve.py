"""``tbr serve --config PATH``: run the ext_proc router until SIGTERM / SIGINT.

Signals: SIGTERM/SIGINT start a graceful shutdown (not ready, drain in-flight streams within
``server.grace_period_s``, persist ratios); a second one exits at once. SIGHUP reloads the
configuration file (as does any change of the file unless ``--no-watch``).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from extproc.config import ConfigError, RouterConfig
from extproc.service.logs import configure_logging
from extproc.service.otel import otel_enabled
from extproc.service.overrides import env_overrides, load_config_with_overrides, redis_password

if TYPE_CHECKING:  # imported in run(): `tbr --help` and the other subcommands skip gRPC's import cost
    from extproc.service.app import RouterApp

log = logging.getLogger("extproc.serve")


def port_number(text: str) -> int:
    """argparse type of a TCP port: an integer 0..65535 (0 = any free port).

    Raises:
        argparse.ArgumentTypeError: not an integer, or out of range (reported as a usage error).
    """
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port number: {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port {port} is not in 0..65535")
    return port


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``tbr serve``."""
    p = subparsers.add_parser("serve", help="run the ext_proc router")
    p.add_argument("--config", required=True, help="router YAML configuration")
    # Flags > TBR_* environment > YAML (extproc/service/overrides.py); kept across reloads.
    p.add_argument("--grpc-host", help="override server.grpc_host (env TBR_GRPC_HOST)")
    p.add_argument(
        "--grpc-port",
        type=port_number,
        default=None,
        help="override server.grpc_port, 0 = any free port (env TBR_GRPC_PORT)",
    )
    p.add_argument("--admin-host", help="override admin.host (env TBR_ADMIN_HOST)")
    p.add_argument(
        "--admin-port",
        type=port_number,
        default=None,
        help="override admin.port, 0 = any free port (env TBR_ADMIN_PORT)",
    )
    p.add_argument(
        "--redis-url",
        help="override calibration.redis_url (env TBR_REDIS_URL; password: TBR_REDIS_PASSWORD[_FILE])",
    )
    p.add_argument(
        "--pool",
        action="append",
        metavar="NAME=MAX_MODEL_LEN",
        help="replace the pools, repeated once per pool (env TBR_POOLS=NAME=LEN,NAME=LEN)",
    )
    p.add_argument(
        "--log-level", default="INFO", type=str.upper, choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    p.add_argument("--log-format", default="json", choices=["json", "text"], help="log line format")
    p.add_argument(
        "--no-watch",
        dest="watch",
        action="store_false",
        help="do not reload when the config file changes (SIGHUP still reloads)",
    )
    p.set_defaults(func=run)


async def _serve(app: RouterApp) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_stop(sig: signal.Signals) -> None:
        if stop.is_set():
            log.warning("second %s: exiting without draining", sig.name)
            os._exit(1)
        log.info("%s received: shutting down gracefully", sig.name)
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_stop, sig)
    loop.add_signal_handler(signal.SIGHUP, lambda: log.info("SIGHUP: reload %s", app.request_reload()))
    async with app:
        print(f"tbr serve: grpc_port={app.grpc_port} admin_port={app.admin_port}", flush=True)
        log.info(
            "serving",
            extra={
                "grpc_port": app.grpc_port,
                "admin_port": app.admin_port,
                "event_loop": type(loop).__module__.split(".")[0],  # asyncio or uvloop
            },
        )
        await stop.wait()
    log.info("stopped")


def flag_overrides(args: argparse.Namespace) -> dict[str, str]:
    """The ``tbr serve`` flags that were given, as {dotted setting: raw value}."""
    flags = {
        "server.grpc_host": args.grpc_host,
        "server.grpc_port": args.grpc_port,
        "admin.host": args.admin_host,
        "admin.port": args.admin_port,
        "calibration.redis_url": args.redis_url,
        "pools": ",".join(args.pool) if args.pool else None,
    }
    return {k: str(v) for k, v in flags.items() if v is not None}


def run(args: argparse.Namespace) -> int:
    """Load the config with its overrides (exit 2 with the errors if invalid) and serve; 0 after
    a clean stop."""
    configure_logging(args.log_level, args.log_format)
    from extproc.service.memprof import start_from_env

    if start_from_env():
        log.warning("tracemalloc on (TBR_TRACEMALLOC): allocation is slower; for soaks only")
    overrides = env_overrides(os.environ) | flag_overrides(args)

    def load(path: str | Path) -> RouterConfig:
        return load_config_with_overrides(path, overrides)

    try:
        cfg = load(args.config)
        password = redis_password(os.environ)
    except ConfigError as exc:
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 2
    if cfg.advice.enabled:  # the advice's profiles are files or names: checked before serving
        from extproc.service.fleet_advice import advice_pools

        try:
            advice_pools(cfg)
        except ValueError as exc:
            print(f"{args.config}: {exc}", file=sys.stderr)
            return 2
    otel = None
    if otel_enabled(os.environ):
        from extproc.service.otel import OtelRecorder

        try:
            otel = OtelRecorder.from_env()
        except ImportError as exc:
            print(
                f"TBR_OTEL_ENABLED needs the otel extra (pip install 'token-budget-router[otel]'): {exc}",
                file=sys.stderr,
            )
            return 2
        log.info("OpenTelemetry export on (OTEL_* environment)")
    if overrides:
        log.info("settings over %s: %s", args.config, ", ".join(sorted(overrides)))
    from extproc.service.app import RouterApp

    app = RouterApp(
        cfg,
        config_path=args.config,
        watch_config=args.watch,
        config_loader=load,
        redis_password=password,
        otel=otel,
    )
    try:
        if cfg.server.event_loop == "uvloop":
            import uvloop

            uvloop.run(_serve(app))
        else:
            asyncio.run(_serve(app))
    except (OSError, RuntimeError) as exc:
        log.error("cannot serve: %s", exc)
        return 1
    return 0
