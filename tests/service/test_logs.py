"""Structured logging: JSON lines with request id from the stream context or ``extra``."""

from __future__ import annotations

import json
import logging

import pytest

from extproc.service.logs import JsonFormatter, configure_logging, request_id_var


def record(msg: str, *args: object, **extra: object) -> logging.LogRecord:
    rec = logging.LogRecord("extproc.test", logging.WARNING, __file__, 1, msg, args, None)
    for k, v in extra.items():
        setattr(rec, k, v)
    return rec


def test_json_line_fields_and_request_id_from_context() -> None:
    token = request_id_var.set("req-42")
    try:
        line = JsonFormatter().format(record("routed %d bytes to %s", 812, "short", pool="short"))
    finally:
        request_id_var.reset(token)
    out = json.loads(line)
    assert out["msg"] == "routed 812 bytes to short" and out["level"] == "WARNING"
    assert out["request_id"] == "req-42" and out["pool"] == "short" and out["logger"] == "extproc.test"
    assert out["ts"].endswith("+00:00")


def test_explicit_request_id_wins_and_absent_is_omitted() -> None:
    assert json.loads(JsonFormatter().format(record("x", request_id="r9")))["request_id"] == "r9"
    assert "request_id" not in json.loads(JsonFormatter().format(record("x")))


def test_exception_is_serialised() -> None:
    try:
        raise RuntimeError("boom")
    except RuntimeError:
        import sys

        rec = logging.LogRecord("t", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    out = json.loads(JsonFormatter().format(rec))
    assert "RuntimeError: boom" in out["exc"]


def test_configure_logging_validates_and_sets_level(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = (root.level, list(root.handlers))
    try:
        configure_logging("warning", "text")
        assert root.level == logging.WARNING
        token = request_id_var.set("abc")
        logging.getLogger("extproc.x").warning("hello")
        request_id_var.reset(token)
        assert "hello request_id=abc" in capsys.readouterr().err
        with pytest.raises(ValueError):
            configure_logging("INFO", "xml")
        with pytest.raises(ValueError):
            configure_logging("LOUD", "json")
    finally:
        root.handlers[:] = saved[1]
        root.setLevel(saved[0])
