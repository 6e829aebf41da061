"""The ``tbr mock-pool`` subcommand: argument parsing and a real process serving on a free port."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest

from mockpool import cmd
from mockpool.server import PoolThread, bind_socket
from mockpool.settings import PoolSettings
from tbr.cli import SUBCOMMAND_MODULES


def parse(argv: list[str]) -> argparse.Namespace:
    """Parse ``argv`` with a parser holding only the mock-pool subcommand."""
    parser = argparse.ArgumentParser(prog="tbr")
    cmd.add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(argv)


def test_args_to_settings() -> None:
    args = parse(
        [
            "mock-pool",
            "--name",
            "long",
            "--max-model-len",
            "32768",
            "--tokenizer",
            "llama3",
            "--served-model-name",
            "a",
            "--served-model-name",
            "b",
            "--max-num-seqs",
            "4",
            "--gzip",
        ]
    )
    settings = cmd.settings_from_args(args)
    assert settings == PoolSettings(
        name="long",
        max_model_len=32768,
        tokenizer="llama3",
        served_model_names=("a", "b"),
        max_num_seqs=4,
        gzip=True,
    )
    assert args.func is cmd.run


def test_bad_settings_exit_2() -> None:
    assert cmd.run(parse(["mock-pool", "--name", "x", "--max-model-len", "0"])) == 2


def test_cli_process_serves_and_stops() -> None:
    code = "import sys; from tbr.cli import main; sys.exit(main(sys.argv[1:]))"
    registered = all(importlib.util.find_spec(m) is not None for m in SUBCOMMAND_MODULES)
    if not registered:  # other subcommands not on this branch yet: drive mockpool.cmd directly
        code = (
            "import argparse, sys; from mockpool import cmd; p = argparse.ArgumentParser();"
            "cmd.add_parser(p.add_subparsers(dest='c', required=True)); a = p.parse_args(sys.argv[1:]);"
            "sys.exit(a.func(a))"
        )
    proc = subprocess.Popen(
        [sys.executable, "-c", code, "mock-pool", "--name", "cli", "--port", "0", "--max-model-len", "4096"],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 60
        url = None
        while url is None and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line and proc.poll() is not None:
                pytest.fail(f"mock-pool exited early with {proc.returncode}")
            if m := re.search(r"on (http://127\.0\.0\.1:\d+)", line):
                url = m.group(1)
        assert url is not None
        r = httpx.post(
            url + "/v1/chat/completions", json={"messages": [{"role": "user", "content": "Hello"}]}
        )
        assert r.status_code == 200 and r.headers["x-served-by-pool"] == "cli"
        assert r.json()["usage"]["prompt_tokens"] == 9
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
    assert proc.returncode == 0


def test_pool_thread_for_sync_code() -> None:
    with PoolThread(PoolSettings(name="sync", max_model_len=64)) as pool:
        r = httpx.post(
            pool.base_url + "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 65},
        )
        assert (
            r.status_code == 400
        )  # max_tokens above max_model_len and r.headers["x-served-by-pool"] == "sync"
        assert httpx.get(pool.base_url + "/health").status_code == 200
    with pytest.raises(httpx.ConnectError):
        httpx.get(pool.base_url + "/health")


def test_listening_socket_is_tcp_proto_so_asyncio_sets_nodelay() -> None:
    """proto 0 would make asyncio skip TCP_NODELAY on accepted sockets (+40 ms per response, Nagle)."""
    sock = bind_socket("127.0.0.1", 0)
    try:
        assert sock.proto == socket.IPPROTO_TCP
    finally:
        sock.close()
