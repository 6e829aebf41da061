"""Ratio snapshots on disk: learned ratios written atomically as JSON and restored at start.

The document is :func:`extproc.core.estimate.calibration.encode_snapshot`'s, plus, when the output reserve
is learned (issue 30), the learned answer lengths under ``"output_lengths"``: encoded class key
(:func:`~extproc.core.estimate.output_reserve.encode_class_key`) → :meth:`OutputLengthState.to_dict`
(a router without it ignores the key; a snapshot without it restores no output state). This
module only does the file I/O: write to a temporary file in the same directory, fsync, then ``os.replace`` (atomic on POSIX),
so a crash never leaves a half-written snapshot. :class:`PeriodicSnapshot` writes one every
``calibration.snapshot_interval_s`` (in a worker thread, off the event loop) and at shutdown, so
a crash or SIGKILL loses at most one interval of learning.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from extproc.core.estimate.calibration import (
    InMemoryRatioStore,
    RatioKey,
    RatioState,
    decode_snapshot,
    encode_snapshot,
)
from extproc.core.estimate.output_reserve import (
    OutputClassKey,
    OutputLengthLearner,
    OutputLengthState,
    decode_class_key,
    encode_class_key,
)

__all__ = [
    "OutputStates",
    "PeriodicSnapshot",
    "encode_output_states",
    "load_output_states",
    "load_snapshot",
    "save_snapshot",
    "snapshot_unwritable",
    "write_snapshot",
]

OutputStates = dict[str, dict[str, Any]]
"""Learned answer lengths as stored: encoded class key → :meth:`OutputLengthState.to_dict`."""


def encode_output_states(items: list[tuple[OutputClassKey, OutputLengthState]]) -> OutputStates:
    """The ``"output_lengths"`` value of a snapshot (copies: safe to write from another thread)."""
    return {encode_class_key(k): s.to_dict() for k, s in items}


def load_output_states(learner: OutputLengthLearner, path: str | Path) -> int:
    """Restore the learned answer lengths of a snapshot into ``learner``; returns how many classes
    (0 for a missing file or a snapshot without them).

    Raises:
        ValueError: the file is not JSON, or a class key or state does not parse (nothing restored).
    """
    p = Path(path)
    if not p.exists():
        return 0
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
        raw = doc.get("output_lengths") if isinstance(doc, dict) else None
        if raw is None:
            return 0
        if not isinstance(raw, dict):
            raise ValueError("output_lengths is not an object")
        states = [(decode_class_key(str(k)), OutputLengthState.from_dict(v)) for k, v in raw.items()]
        fleet = doc.get("output_fleet")
        share = float(fleet["tail_share"]) if isinstance(fleet, dict) and "tail_share" in fleet else None
    except (ValueError, TypeError) as exc:
        raise ValueError(f"invalid output lengths in snapshot {p}: {exc}") from exc
    if share is not None:
        learner.restore_fleet_tail_share(share)
    return learner.restore(states)


log = logging.getLogger(__name__)


def save_snapshot(store: InMemoryRatioStore, path: str | Path) -> None:
    """Atomically write every state of ``store`` to ``path`` as JSON.

    Raises:
        OSError: the directory is not writable.
    """
    write_snapshot(store.items(), path)


def write_snapshot(
    items: list[tuple[RatioKey, RatioState]],
    path: str | Path,
    outputs: OutputStates | None = None,
    fleet_tail_share: float | None = None,
) -> None:
    """Atomically write ``items`` (a copy taken by the caller) and, when given, the learned answer
    lengths ``outputs`` (:func:`encode_output_states`) and the truncation controller's fleet tail
    share (``"output_fleet": {"tail_share": λ}``, restored by :func:`load_output_states`) to
    ``path``; creates the directory.

    Raises:
        OSError: the directory cannot be created or written.
    """
    p = Path(path)
    doc = encode_snapshot(items)
    if outputs is not None:
        doc["output_lengths"] = outputs
    if fleet_tail_share is not None:
        doc["output_fleet"] = {"tail_share": fleet_tail_share}
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".ratios-", dir=str(p.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def snapshot_unwritable(path: str | Path) -> str | None:
    """Why a snapshot cannot be written to ``path`` (None when it can): creates the directory and
    a temporary file in it, as :func:`write_snapshot` does, then removes the file."""
    p = Path(path)
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".ratios-", dir=str(p.parent))
    except OSError as exc:
        return exc.strerror or str(exc)
    os.close(fd)
    Path(tmp).unlink(missing_ok=True)
    if p.is_dir():
        return "it is a directory"
    return None


def load_snapshot(store: InMemoryRatioStore, path: str | Path) -> int | None:
    """Restore states into ``store`` from a snapshot written by :func:`save_snapshot`.

    Returns the number of keys restored; None when the file does not exist (nothing restored).

    Raises:
        ValueError: the file exists but is not a valid snapshot (nothing is restored).
    """
    p = Path(path)
    if not p.exists():
        return None
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
        states = decode_snapshot(data)
    except ValueError as exc:
        raise ValueError(f"invalid ratio snapshot {p}: {exc}") from exc
    return store.restore(states)


class PeriodicSnapshot:
    """Writes ``store`` to ``path`` every ``interval_s`` and once more at :meth:`stop`.

    The states are copied on the event loop (the store is not thread-safe); serialising and
    writing run in a worker thread. A failed write is logged and counted, never raised: the
    router keeps serving and the previous snapshot stays in place.

    Args:
        store: the in-memory ratio store.
        path: the snapshot file.
        interval_s: seconds between writes (the most learning a crash can lose).
        on_outcome: called with ``("save", "ok" | "error")`` after each write (metrics).
        outputs: returns the learner whose answer lengths are saved too (None: none).
    """

    def __init__(
        self,
        store: InMemoryRatioStore,
        path: str | Path,
        interval_s: float,
        on_outcome: Callable[[str, str], None],
        outputs: Callable[[], OutputLengthLearner | None] | None = None,
    ) -> None:
        self.store = store
        self._outputs = outputs
        self.path = Path(path)
        self.interval_s = interval_s
        self._on_outcome = on_outcome
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start the periodic writes (call on the running loop)."""
        self._task = asyncio.create_task(self._run(), name="ratio-snapshot")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self.save()

    async def save(self) -> bool:
        """Write one snapshot now; True on success."""
        items = self.store.items()
        learner = self._outputs() if self._outputs is not None else None
        outputs = encode_output_states(learner.items()) if learner is not None else None
        share = learner.fleet_tail_share if learner is not None else None
        try:
            await asyncio.to_thread(write_snapshot, items, self.path, outputs, share)
        except OSError as exc:
            log.error("cannot save ratio snapshot %s: %s", self.path, exc)
            self._on_outcome("save", "error")
            return False
        self._on_outcome("save", "ok")
        return True

    async def stop(self) -> None:
        """Stop the periodic writes and write a final snapshot."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if await self.save():
            log.info("saved %d learned ratios to %s", len(self.store.items()), self.path)
