"""Ratio snapshots on disk: learned ratios written atomically as JSON and restored at start.

The document is :func:`extproc.core.calibration.encode_snapshot`'s; this module only does the file
I/O: write to a temporary file in the same directory, then ``os.replace`` (atomic on POSIX), so
a crash never leaves a half-written snapshot.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from extproc.core.calibration import InMemoryRatioStore, decode_snapshot, encode_snapshot

__all__ = ["load_snapshot", "save_snapshot"]


def save_snapshot(store: InMemoryRatioStore, path: str | Path) -> None:
    """Atomically write every state of ``store`` to ``path`` as JSON.

    Raises:
        OSError: the directory is not writable.
    """
    p = Path(path)
    doc = encode_snapshot(store.items())
    fd, tmp = tempfile.mkstemp(prefix=".ratios-", dir=str(p.parent or Path(".")))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load_snapshot(store: InMemoryRatioStore, path: str | Path) -> int:
    """Restore states into ``store`` from a snapshot written by :func:`save_snapshot`.

    Returns the number of keys restored; a missing file restores nothing (0).

    Raises:
        ValueError: the file exists but is not a valid snapshot (nothing is restored).
    """
    p = Path(path)
    if not p.exists():
        return 0
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        states = decode_snapshot(data)
    except ValueError as exc:
        raise ValueError(f"invalid ratio snapshot {p}: {exc}") from exc
    return store.restore(states)
