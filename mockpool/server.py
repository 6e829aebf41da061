"""Run a pool with uvicorn: in the current event loop (:func:`serve_pool`) or in a thread (:class:`PoolThread`).

Both bind the listening socket themselves (port 0 → a free port chosen by the kernel), so there is no race
between picking a port and binding it, and both return the base URL ``http://host:port`` (no ``/v1``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
from collections.abc import AsyncIterator
from types import TracebackType

import uvicorn

from mockpool.app import build_app
from mockpool.settings import PoolSettings
from mockpool.tokencount import load_counter

STARTUP_TIMEOUT_S = 30.0


def bind_socket(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (``port=0`` → free port), IPv4 or IPv6 by ``host``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto must be IPPROTO_TCP (not 0): asyncio sets TCP_NODELAY on accepted sockets only then. With proto 0,
    # Nagle + delayed ACK add ~40 ms to every response whose headers and body are separate writes.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(1024)
    sock.setblocking(False)
    return sock


def base_url_of(sock: socket.socket) -> str:
    """``http://host:port`` of a bound socket (IPv6 hosts bracketed)."""
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def make_server(
    settings: PoolSettings, log_level: str = "warning", access_log: bool = False, own_logging: bool = True
) -> uvicorn.Server:
    """A uvicorn server for the pool app (no lifespan, no websockets, h11).

    ``own_logging=False`` leaves uvicorn's loggers to the root handler (``tbr mock-pool``'s JSON
    lines) instead of uvicorn's own plain-text configuration."""
    config = uvicorn.Config(
        build_app(settings),
        log_level=log_level,
        access_log=access_log,
        lifespan="off",
        ws="none",
        http="h11",
        timeout_graceful_shutdown=2,
    )
    if not own_logging:  # uvicorn.Config configured its loggers in __init__: hand them back to the root
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
            logger = logging.getLogger(name)
            logger.handlers.clear()
            logger.propagate = True
    return uvicorn.Server(config)


@contextlib.asynccontextmanager
async def serve_pool(settings: PoolSettings, host: str = "127.0.0.1", port: int = 0) -> AsyncIterator[str]:
    """Serve one pool in the running event loop for the duration of the ``async with`` block.

    Usage::

        async with serve_pool(PoolSettings(name="short", max_model_len=8192)) as base_url:
            client = AsyncOpenAI(base_url=base_url + "/v1", api_key="x")

    Args:
        settings: pool configuration.
        host: interface to bind (loopback by default).
        port: TCP port; 0 picks a free one.

    Yields:
        The base URL ``http://host:port``.

    Raises:
        OSError: the port cannot be bound. RuntimeError: uvicorn did not start within 30 s.
    """
    await asyncio.to_thread(load_counter, settings.tokenizer)  # load the tokenizer off the loop
    server = make_server(settings)
    sock = bind_socket(host, port)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        deadline = asyncio.get_running_loop().time() + STARTUP_TIMEOUT_S
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn exited during startup")
            if asyncio.get_running_loop().time() > deadline:
                raise RuntimeError("uvicorn did not start in time")
            await asyncio.sleep(0.005)
        yield base_url_of(sock)
    finally:
        server.should_exit = True
        try:
            await asyncio.wait_for(task, timeout=10)
        except (TimeoutError, asyncio.CancelledError):
            task.cancel()
        finally:
            sock.close()


class PoolThread:
    """A pool served by uvicorn in a daemon thread with its own event loop, for synchronous code.

    Usage::

        with PoolThread(PoolSettings(name="long", max_model_len=32768)) as pool:
            httpx.get(pool.base_url + "/health")

    ``start()`` blocks until the server accepts connections; ``stop()`` shuts it down and joins the thread.
    """

    def __init__(self, settings: PoolSettings, host: str = "127.0.0.1", port: int = 0) -> None:
        """Prepare (not start) a pool on ``host:port`` (0 → free port)."""
        self.settings = settings
        self._host = host
        self._port = port
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self.base_url = ""

    def start(self) -> str:
        """Start serving; return the base URL. Raises ``RuntimeError`` if uvicorn fails to start."""
        load_counter(self.settings.tokenizer)
        self._server = make_server(self.settings)
        self._sock = bind_socket(self._host, self._port)
        self.base_url = base_url_of(self._sock)
        server, sock = self._server, self._sock
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve(sockets=[sock])),
            name=f"mockpool-{self.settings.name}",
            daemon=True,
        )
        self._thread.start()
        waited = 0.0
        while not server.started:
            if not self._thread.is_alive():
                raise RuntimeError("mock pool thread exited during startup")
            if waited > STARTUP_TIMEOUT_S:
                raise RuntimeError("mock pool did not start in time")
            threading.Event().wait(0.005)
            waited += 0.005
        return self.base_url

    def stop(self) -> None:
        """Ask uvicorn to exit and join the thread (idempotent)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._sock is not None:
            self._sock.close()
        self._server = self._thread = self._sock = None

    def __enter__(self) -> PoolThread:
        """Start and return self."""
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        """Stop."""
        self.stop()
