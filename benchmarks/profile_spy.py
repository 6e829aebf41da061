"""Where the router's time goes under load: py-spy sampling profile of a running process.

``py-spy record --format raw`` writes collapsed stacks (``frame;frame;... count``); we group
samples by their leaf frame (self time) and by whether the stack passes through the router's
own code, the gRPC Cython layer or asyncio (inclusive time). With ``--native`` the C/C++ frames
of grpcio's extension are kept as well.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["profile_during", "summarize"]

_GROUPS = (
    ("router: processor.handle", "handle (extproc/adapter/processor.py"),
    ("router: parse_request_body", "parse_request_body (extproc/core/request/request_body.py"),
    ("router: estimate (classify + ratio)", "estimate (extproc/core/estimate/estimator.py"),
    ("router: prometheus metrics", "prometheus_client/"),
    ("router: servicer Process()", "Process (extproc/adapter/server.py"),
    ("grpc aio (Cython/C core)", "grpc/_cython"),
    ("asyncio event loop", "asyncio/"),
)


def _py_spy() -> str:
    return str(Path(sys.executable).parent / "py-spy")


def profile_during(
    pid: int, out: Path, duration_s: float, load: Callable[[], Any], native: bool = True
) -> Any:
    """Record ``pid`` for ``duration_s`` while ``load()`` runs; returns what ``load`` returned.

    Raises:
        RuntimeError: py-spy failed (e.g. no ptrace permission).
    """
    cmd = [_py_spy(), "record", "-p", str(pid), "-d", f"{duration_s:g}", "-r", "250", "--format", "raw"]
    cmd += ["-o", str(out)] + (["--native"] if native else ["--nonblocking"])
    result: dict[str, Any] = {}
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    t = threading.Thread(target=lambda: result.setdefault("load", load()))
    t.start()
    _, err = spy.communicate(timeout=duration_s + 60)
    t.join()
    if spy.returncode != 0 or not out.exists():
        raise RuntimeError(f"py-spy failed: {err.decode(errors='replace')[-300:]}")
    return result.get("load")


def _frame_name(frame: str) -> str:
    m = re.match(r"(.+?) \((.+?)(?::\d+)?\)$", frame.strip())
    if not m:
        return frame.strip()[:80]
    func, path = m.groups()
    short = "/".join(path.split("/")[-2:])
    return f"{func} ({short})"


_IDLE_LEAVES = (
    "epoll_wait",
    "epoll_pwait",
    "poll (",
    "select (",
    "pthread_cond_wait",
    "pthread_cond_timedwait",
)
_SYSCALLS = ("sendmsg", "recvmsg", "write (", "read (", "syscall (", "writev", "readv", "send (", "recv (")


def _layer(frame: str) -> str:
    if any(frame.startswith(s) for s in _SYSCALLS):
        return "system calls (sendmsg/recvmsg/write/futex…)"
    if "cygrpc" in frame or "libgrpc" in frame or "grpc/" in frame:
        return "gRPC C-core / Cython"
    if "/extproc/" in frame or "(extproc/" in frame or "benchmarks/router_proc" in frame:
        return "router Python code"
    if "prometheus_client" in frame:
        return "prometheus_client"
    if "asyncio" in frame or "_asynciomodule" in frame:
        return "asyncio"
    if "_message" in frame or "protobuf" in frame or "upb" in frame:
        return "protobuf (upb)"
    if "libc.so" in frame or "libpthread" in frame:
        return "libc (other)"
    return "other"


def summarize(raw: Path, top: int = 12) -> dict[str, Any]:
    """Busy samples only (leaves waiting in epoll/poll/condvars are idle and dropped): self
    time of the top leaf frames, self time by layer, and inclusive shares of the groups above
    (all as fractions of busy samples)."""
    leaf: Counter[str] = Counter()
    layers: Counter[str] = Counter()
    groups: Counter[str] = Counter()
    total = idle = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        frames = stack.split(";")
        name = _frame_name(frames[-1])
        if any(name.startswith(i) or i in name for i in _IDLE_LEAVES):
            idle += n
            continue
        total += n
        leaf[name] += n
        layers[_layer(name)] += n
        for gname, needle in _GROUPS:
            if needle in stack:
                groups[gname] += n
    return {
        "samples": total,
        "idle_samples": idle,
        "top_self": [(name, n / total) for name, n in leaf.most_common(top)] if total else [],
        "layers": [(name, n / total) for name, n in layers.most_common()] if total else [],
        "groups": [(name, groups[name] / total) for name, _ in _GROUPS] if total else [],
    }
