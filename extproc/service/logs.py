"""Structured logging for the router: JSON lines (default) or text, with the request id.

``configure_logging(level, fmt)`` installs one stderr handler on the root logger. Each JSON line
has ``ts`` (ISO-8601 UTC), ``level``, ``logger``, ``msg`` and, when known, ``request_id`` (from
``extra={"request_id": ...}`` or the :data:`request_id_var` context variable the gRPC servicer
sets per stream), plus any other ``extra`` fields and ``exc`` for exceptions.

Prompt text is never logged by the router's code: log calls pass ids, sizes, pools and reasons,
never request or response bodies. There is no redaction pass here to rely on.
"""

from __future__ import annotations

import logging
import sys
from datetime import UTC, datetime
from typing import Any

import orjson

from extproc.adapter.observer import request_id_var

__all__ = ["JsonFormatter", "configure_logging", "request_id_var"]


# Attributes every LogRecord has; anything else was passed with ``extra=`` and is emitted.
_STANDARD_ATTRS = frozenset(
    vars(logging.LogRecord("", 0, "", 0, "", (), None)).keys() | {"message", "asctime", "taskName"}
)


class JsonFormatter(logging.Formatter):
    """One JSON object per line (orjson); non-serialisable extras are rendered with ``str``."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "msg": record.getMessage(),
        }
        rid = getattr(record, "request_id", None) or request_id_var.get()
        if rid:
            out["request_id"] = rid
        for key, value in vars(record).items():
            if key not in _STANDARD_ATTRS and key not in out:
                out[key] = value
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


class _TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        rid = getattr(record, "request_id", None) or request_id_var.get()
        return f"{text} request_id={rid}" if rid and "request_id=" not in text else text


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    """Send all logs to stderr in ``fmt`` (``json`` or ``text``) at ``level``.

    Raises:
        ValueError: unknown level or format.
    """
    if fmt not in ("json", "text"):
        raise ValueError(f"log format must be json or text, got {fmt!r}")
    numeric = logging.getLevelName(level.upper())
    if not isinstance(numeric, int):
        raise ValueError(f"unknown log level {level!r}")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else _TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    )
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(numeric)
    # Keep third-party chatter at WARNING unless debugging.
    for noisy in ("uvicorn", "uvicorn.error", "asyncio"):
        logging.getLogger(noisy).setLevel(logging.DEBUG if numeric <= logging.DEBUG else logging.WARNING)
    # watchfiles stays at WARNING even at DEBUG: it logs every filtered file event, and a log file
    # beside the watched config would feed that loop forever (each log line is a new event).
    logging.getLogger("watchfiles").setLevel(logging.WARNING)
