"""The decision log (JSON Lines, one record per routing decision), written off the request path.

The ext_proc handler only appends the record to a bounded in-memory queue
(:meth:`DecisionLogWriter.submit`, O(1), no I/O). A background task serialises and writes the
queue every ``flush_interval_s`` in a worker thread (``asyncio.to_thread``), so a slow or stalled
disk delays the log, never a request. At shutdown (:meth:`DecisionLogWriter.close`) the queue is
written and the file closed. When the queue holds ``queue_max`` records (the disk is slower than
the traffic), further records are dropped and counted in ``tbr_decision_log_dropped_total``;
write errors are logged and their records counted as dropped too. Records never hold prompt text.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import IO

import orjson
from prometheus_client import Counter

from extproc.core.route.decision import DecisionRecord

__all__ = ["DecisionLogWriter"]

log = logging.getLogger(__name__)


class DecisionLogWriter:
    """Buffered, periodically flushed JSON Lines writer.

    Args:
        path: the log file (opened for append at :meth:`start`).
        dropped: counter of records not written (queue full or write error).
        written: counter of records written.
        queue_max: records held at most between flushes.
        flush_interval_s: time between flushes, seconds (staleness of the file).

    Raises:
        OSError: from :meth:`start` when the file cannot be opened.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        dropped: Counter,
        written: Counter,
        queue_max: int = 10_000,
        flush_interval_s: float = 1.0,
    ) -> None:
        self.path = Path(path)
        self.queue_max = queue_max
        self.flush_interval_s = flush_interval_s
        self._dropped = dropped
        self._written = written
        self._queue: list[DecisionRecord] = []
        self._file: IO[bytes] | None = None
        self._task: asyncio.Task[None] | None = None
        self._write_lock = asyncio.Lock()

    @property
    def queue_length(self) -> int:
        """Records waiting for the next flush."""
        return len(self._queue)

    def submit(self, record: DecisionRecord) -> None:
        """Queue one record (request path: no I/O, no serialisation); drop it when the queue is full."""
        if len(self._queue) >= self.queue_max:
            self._dropped.inc()
            return
        self._queue.append(record)

    async def start(self) -> None:
        """Open the file and start the periodic flush."""
        self._file = await asyncio.to_thread(open, self.path, "ab")
        self._task = asyncio.create_task(self._run(), name="decision-log-flush")

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.flush_interval_s)
            await self.flush()

    async def flush(self) -> None:
        """Write every queued record now (in a worker thread)."""
        async with self._write_lock:
            batch, self._queue = self._queue, []
            if batch and self._file is not None:
                await asyncio.to_thread(self._write, self._file, batch)

    def _write(self, file: IO[bytes], batch: list[DecisionRecord]) -> None:
        try:
            file.write(b"".join(orjson.dumps(r.as_json(), option=orjson.OPT_APPEND_NEWLINE) for r in batch))
            file.flush()
        except (OSError, ValueError, TypeError) as exc:
            self._dropped.inc(len(batch))
            log.warning("decision log write failed (%d records dropped): %s", len(batch), exc)
            return
        self._written.inc(len(batch))

    async def close(self) -> None:
        """Stop the periodic flush, write what is queued, close the file."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.flush()
        if self._file is not None:
            file, self._file = self._file, None
            try:
                await asyncio.to_thread(file.close)
            except OSError as exc:  # the last buffered bytes could not be written (full disk)
                log.warning("decision log %s: closing lost its last buffered records: %s", self.path, exc)
                raise
