"""``tbr serve --config PATH``: run the ext_proc router until SIGTERM / SIGINT."""

from __future__ import annotations

import argparse
import asyncio
import logging
import signal
import sys

from extproc.app import RouterApp
from extproc.config import ConfigError, load_config

log = logging.getLogger("extproc")


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register ``tbr serve``."""
    p = subparsers.add_parser("serve", help="run the ext_proc router")
    p.add_argument("--config", required=True, help="router YAML configuration")
    p.add_argument(
        "--grpc-port", type=int, default=None, help="override server.grpc_port (0 = any free port)"
    )
    p.add_argument("--admin-port", type=int, default=None, help="override admin.port (0 = any free port)")
    p.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    p.set_defaults(func=run)


async def _serve(app: RouterApp) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with app:
        print(f"tbr serve: grpc_port={app.grpc_port} admin_port={app.admin_port}", flush=True)
        await stop.wait()
        log.info("shutting down: draining in-flight streams")


def run(args: argparse.Namespace) -> int:
    """Load the config (exit 2 with the errors if invalid) and serve."""
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        cfg = load_config(args.config)
    except ConfigError as exc:
        print(f"{args.config}: {exc}", file=sys.stderr)
        return 2
    asyncio.run(_serve(RouterApp(cfg, grpc_port=args.grpc_port, admin_port=args.admin_port)))
    return 0
