"""Decision records completed by an off-path calibration stream.

A request sampled off the request path (docs/design/005-off-path-calibration.md, and every sampled
request in the one-message design, docs/design/004-one-message.md) is seen by two ext_proc streams:
the routing stream, which decides and ends at once, and the observability stream, which sees the
response (status, ``usage``, a misroute retry). The decision log and the per-request telemetry want
one record per request with both halves. So the routing stream *holds* its record here, keyed by
a key it generates per request (:func:`new_record_key`, carried in the calibration payload: a
client's ``x-request-id`` may repeat); the observability stream *claims* it when its request headers arrive (a few
milliseconds later) and *releases* it when the response ends, with the function that fills in the
response half. Either stream may end first (a fast error response can finish the observability
stream before the routing stream's end is processed): whichever comes second writes the record.

Nothing is lost: a held record that no stream claims within ``hold_s`` is written as it is (the
Envoy config has no calibration filter, or the response never started), and so is every record
still held at shutdown (:meth:`HeldRecords.flush`) or beyond ``max_entries``. The table is touched
only from the event loop, with no I/O: writing a record means queueing it for the decision-log
writer.
"""

from __future__ import annotations

import itertools
import secrets
import time
from collections import OrderedDict
from collections.abc import Callable

from extproc.core.route.decision import DecisionRecord

__all__ = ["Completer", "HeldRecords", "RecordWriter", "new_record_key"]

_KEY_PREFIX = secrets.token_hex(6)  # per process: replicas never share a key
_KEY_SEQ = itertools.count(1)


def new_record_key() -> str:
    """A key no other request of any router process uses: a random per-process prefix and a
    counter (19+ ASCII characters)."""
    return f"{_KEY_PREFIX}-{next(_KEY_SEQ):x}"


RecordWriter = Callable[[DecisionRecord, str], None]
"""Writes one finished record with its ``traceparent`` (decision log and per-request telemetry)."""
Completer = Callable[[DecisionRecord], DecisionRecord]
"""The routing record → the record completed with what the observability stream saw."""


class HeldRecords:
    """Routing records waiting for their observability stream, by record key (:func:`new_record_key`).

    Args:
        write: where a record goes when it is released, expires or is flushed.
        hold_s: how long an unclaimed record waits (seconds). The observability stream's request
            headers follow the routing answer within milliseconds; a claimed record waits for its
            response however long that takes (the stream always ends, :meth:`release`).
        max_entries: records held at most; beyond it the oldest unclaimed one is written as it is.
        clock: monotonic seconds (tests pass their own).
    """

    __slots__ = ("_claimed", "_clock", "_released", "_unclaimed", "_write", "hold_s", "max_entries")

    def __init__(
        self,
        write: RecordWriter,
        *,
        hold_s: float = 10.0,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._write = write
        self.hold_s = hold_s
        self.max_entries = max_entries
        self._clock = clock
        # key -> (record, traceparent, deadline); oldest first
        self._unclaimed: OrderedDict[str, tuple[DecisionRecord, str, float]] = OrderedDict()
        # key -> (record or None until the routing stream holds it, traceparent)
        self._claimed: dict[str, tuple[DecisionRecord | None, str]] = {}
        # key -> (completer, deadline): the observability stream ended before the routing one
        self._released: OrderedDict[str, tuple[Completer, float]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._unclaimed) + len(self._claimed) + len(self._released)

    def hold(self, key: str, record: DecisionRecord, traceparent: str) -> None:
        """The routing stream ended: keep ``record`` for the observability stream (written at once
        when ``key`` is empty or already held, since it could not be told apart, and completed
        at once when that stream has already ended)."""
        self.expire()
        if not key or key in self._unclaimed:
            self._write(record, traceparent)
            return
        released = self._released.pop(key, None)
        if released is not None:
            self._claimed.pop(key, None)
            self._write(released[0](record), traceparent)
            return
        claimed = self._claimed.get(key)
        if claimed is not None:
            if claimed[0] is None:
                self._claimed[key] = (record, traceparent)
            else:
                self._write(record, traceparent)
            return
        self._unclaimed[key] = (record, traceparent, self._clock() + self.hold_s)
        while len(self) > self.max_entries and self._unclaimed:
            old, tp, _ = self._unclaimed.popitem(last=False)[1]
            self._write(old, tp)

    def claim(self, key: str) -> None:
        """The observability stream of ``key`` started: its record waits for :meth:`release`
        (also when the routing stream has not ended yet)."""
        if not key or key in self._claimed:
            return
        held = self._unclaimed.pop(key, None)
        self._claimed[key] = (held[0], held[1]) if held is not None else (None, "")
        self.expire()

    def release(self, key: str, complete: Completer) -> None:
        """The observability stream of ``key`` ended: write its record completed by
        ``complete``, now or when the routing stream holds it (within ``hold_s``; never, when that
        stream writes no record: no decision log)."""
        entry = self._claimed.pop(key, None)
        self.expire()
        if not key:
            return
        if entry is not None and entry[0] is not None:
            self._write(complete(entry[0]), entry[1])
            return
        self._released[key] = (complete, self._clock() + self.hold_s)
        while len(self) > self.max_entries and self._released:
            self._released.popitem(last=False)

    def expire(self) -> None:
        """Write the unclaimed records whose ``hold_s`` has passed; forget completers whose record
        did not come within it."""
        now = self._clock()
        while self._unclaimed:
            k, (record, tp, deadline) = next(iter(self._unclaimed.items()))
            if deadline > now:
                break
            del self._unclaimed[k]
            self._write(record, tp)
        while self._released:
            k, (_, deadline) = next(iter(self._released.items()))
            if deadline > now:
                break
            del self._released[k]

    def flush(self) -> None:
        """Write every held record as it is (shutdown)."""
        for record, tp, _ in self._unclaimed.values():
            self._write(record, tp)
        self._unclaimed.clear()
        for held, tp in self._claimed.values():
            if held is not None:
                self._write(held, tp)
        self._claimed.clear()
        self._released.clear()
