"""Share learned answer lengths (:mod:`extproc.core.estimate.output_reserve`) across router replicas.

With ``calibration.redis_url`` set, every replica appends each answer it learns from (output class,
``completion_tokens``, truncated / capped) to one Redis stream and replays the other replicas'
answers from it into its own learner, every ``redis_sync_interval_s`` (the cadence and consistency
model of the shared ratios and of :mod:`extproc.service.response_sync`). Every replica thus learns
from the whole fleet's answers, and its truncation controller sees the fleet-wide truncation rate
(issue 30 item 2). Each replica also writes the states of the classes that changed to a hash, from
which a replica that starts with nothing learned restores them (its stream reading starts at the
stream's end). The request path never waits for Redis; when Redis is down, answers stay queued (the
newest ``QUEUE_MAX``) and the failure is logged once.

Redis layout (``{prefix}`` = ``calibration.redis_key_prefix``):

* stream ``{prefix}output-lengths`` (``XADD … MAXLEN ~ 100000``), fields ``r`` (replica id), ``k``
  (:func:`~extproc.core.estimate.output_reserve.encode_class_key`), ``t`` (completion tokens), ``c``
  (``0`` an answer that ended, ``1`` cut by the client's maximum or the largest pool, ``2``
  truncated by a pool, a misroute);
* hash ``{prefix}output-states``: encoded class key → :meth:`OutputLengthState.to_dict` as JSON;
* hash ``{prefix}output-fleet``: the truncation controller's fleet state: ``tail_share`` (λ, as
  the replica that pushed last had steered it), ``observations`` and ``truncations`` (answers and
  truncations of the whole fleet, each replica adding its own with ``HINCRBY``).

The fleet's λ is shared twice over: every replica replays every other replica's answers into its
own controller (whose steps multiply, so replicas that saw the same answers hold the same λ), and a
replica that starts with nothing learned takes the fleet's λ from ``{prefix}output-fleet`` instead
of starting again at ``tail_share``.

A row that does not parse is skipped (counted in ``tbr_output_sync_rows_total{outcome="bad_row"}``);
at most ``MAX_CLASSES`` classes are taken from Redis.
"""

from __future__ import annotations

import collections
import json
import logging
from collections.abc import Callable
from typing import Any

from extproc.core.estimate.output_reserve import (
    OutputClassKey,
    OutputLengthLearner,
    OutputLengthState,
    decode_class_key,
    encode_class_key,
)
from extproc.service.periodic_sync import PeriodicSync

__all__ = ["MAX_CLASSES", "QUEUE_MAX", "OutputLengthSync"]

log = logging.getLogger(__name__)

STREAM_MAXLEN = 100_000
READ_COUNT = 10_000
QUEUE_MAX = 10_000
"""Answers kept for the next push while Redis is down (the oldest are dropped)."""
MAX_CLASSES = 4096
"""Classes a replica takes from Redis (its own are not limited here: the learner bounds them)."""
_KIND = {(False, False): 0, (False, True): 1, (True, False): 2, (True, True): 2}


class OutputLengthSync(PeriodicSync):
    """Background push/pull of answer lengths through a Redis stream, and class states through a hash.

    Args:
        learner: the process-wide learner (kept across config reloads).
        url: Redis URL.
        key_prefix: ``calibration.redis_key_prefix``.
        interval_s: sync period (``calibration.redis_sync_interval_s``).
        timeout_s: connect and per-command timeout.
        password: Redis password (as for the ratio store).
        on_row: called with ``"applied"`` or ``"bad_row"`` per stream row of another replica (metrics).
        client: a Redis client to use instead of one built from ``url`` (tests).
    """

    sharing = "output length sharing"
    while_down = "answers stay local"

    def __init__(
        self,
        learner: OutputLengthLearner,
        *,
        url: str,
        key_prefix: str,
        interval_s: float,
        timeout_s: float,
        password: str | None = None,
        on_row: Callable[[str], None] | None = None,
        client: Any = None,
    ) -> None:
        super().__init__(
            client,
            url=url,
            password=password,
            interval_s=interval_s,
            timeout_s=timeout_s,
            task_name="redis-output-lengths",
        )
        self.learner = learner
        self.stream_key = f"{key_prefix}output-lengths"
        self.hash_key = f"{key_prefix}output-states"
        self.fleet_key = f"{key_prefix}output-fleet"
        self._on_row = on_row or (lambda _outcome: None)
        self._queue: collections.deque[tuple[str, int, int]] = collections.deque(maxlen=QUEUE_MAX)
        self._dirty: set[OutputClassKey] = set()
        self._last_id = "$"
        self.fleet_observations = 0
        """Answers the whole fleet learned from (``{prefix}output-fleet``, read at each sync)."""
        self.fleet_truncations = 0
        """Truncations of the whole fleet (``{prefix}output-fleet``, read at each sync)."""

    def add(self, key: OutputClassKey, completion_tokens: int, *, truncated: bool, capped: bool) -> None:
        """Queue one answer this replica learned from (called on the event loop, never blocks)."""
        self._queue.append((encode_class_key(key), int(completion_tokens), _KIND[(truncated, capped)]))
        self._dirty.add(key)

    @property
    def queue_length(self) -> int:
        """Answers waiting to be pushed."""
        return len(self._queue)

    async def _sync_round(self) -> None:
        """One push of queued answers and changed states, one pull of the others' answers (when
        Redis fails, answers stay queued)."""
        if self._last_id == "$":
            await self._begin()
        await self._push()
        await self._pull()
        await self._share_fleet()

    async def _begin(self) -> None:
        """First contact: read from the stream's current end; with nothing learned locally (no
        snapshot), restore the states the other replicas wrote."""
        exists = await self._client.exists(self.stream_key)
        info = await self._client.xinfo_stream(self.stream_key) if exists else None
        last = info["last-generated-id"] if info else "0-0"
        self._last_id = last.decode() if isinstance(last, bytes) else str(last)
        if self.learner.items():
            return
        fleet: Any = await self._client.hget(self.fleet_key, "tail_share")
        if fleet is not None:
            try:
                self.learner.restore_fleet_tail_share(float(fleet))
            except (ValueError, UnicodeDecodeError):
                self._on_row("bad_row")
        raw: dict[Any, Any] = await self._client.hgetall(self.hash_key)
        states: list[tuple[OutputClassKey, OutputLengthState]] = []
        for field, value in list(raw.items())[:MAX_CLASSES]:
            try:
                key = decode_class_key(field.decode() if isinstance(field, bytes) else str(field))
                states.append((key, OutputLengthState.from_dict(json.loads(value))))
            except (ValueError, UnicodeDecodeError):
                self._on_row("bad_row")
        if states:
            self.learner.restore(states)
            log.info("restored %d output classes from Redis", len(states))

    async def _push(self) -> None:
        rows = list(self._queue)
        dirty = set(self._dirty)
        if not rows and not dirty:
            return
        self._queue.clear()
        self._dirty.clear()
        try:
            async with self._client.pipeline(transaction=False) as pipe:
                for key, tokens, kind in rows:
                    fields: dict[Any, Any] = {"r": self.replica_id, "k": key, "t": tokens, "c": kind}
                    pipe.xadd(self.stream_key, fields, maxlen=STREAM_MAXLEN, approximate=True)
                states: dict[Any, Any] = {
                    encode_class_key(k): json.dumps(s.to_dict(), separators=(",", ":"))
                    for k in dirty
                    if (s := self.learner.get(k)) is not None
                }
                if states:
                    pipe.hset(self.hash_key, mapping=states)
                if rows:
                    pipe.hincrby(self.fleet_key, "observations", len(rows))
                    pipe.hincrby(self.fleet_key, "truncations", sum(1 for *_, kind in rows if kind == 2))
                await pipe.execute()
        except BaseException:
            self._queue.extendleft(reversed(rows))  # keep them for the next attempt (bounded)
            self._dirty |= dirty
            raise

    async def _share_fleet(self) -> None:
        """After the pull (this replica's λ has seen every answer it read): write its λ, read the
        fleet's answer and truncation counts."""
        async with self._client.pipeline(transaction=False) as pipe:
            pipe.hset(self.fleet_key, "tail_share", repr(self.learner.fleet_tail_share))
            pipe.hmget(self.fleet_key, ["observations", "truncations"])
            replies = await pipe.execute()
        values = replies[-1]
        try:
            observations, truncations = (int(v) if v is not None else 0 for v in values)
        except (TypeError, ValueError):
            self._on_row("bad_row")
            return
        self.fleet_observations, self.fleet_truncations = observations, truncations

    async def _pull(self) -> None:
        while True:
            got: Any = await self._client.xread({self.stream_key: self._last_id}, count=READ_COUNT)
            if not got:
                return
            rows: list[Any] = got[0][1]
            n_classes = len(self.learner.items())
            for entry_id, fields in rows:
                self._last_id = entry_id.decode() if isinstance(entry_id, bytes) else str(entry_id)
                n_classes += self._apply(fields, n_classes)
            if len(rows) < READ_COUNT:
                return

    def _apply(self, fields: dict[bytes, bytes], n_classes: int) -> int:
        """Learn one answer another replica read (its own rows are skipped); returns 1 when it
        opened a new class, else 0."""
        if fields.get(b"r", b"").decode("ascii", "replace") == self.replica_id:
            return 0
        try:
            key = decode_class_key(fields[b"k"].decode())
            tokens, kind = int(fields[b"t"]), int(fields[b"c"])
            if kind not in (0, 1, 2) or tokens < 0:
                raise ValueError("bad kind or tokens")
        except (KeyError, ValueError, UnicodeDecodeError):
            self._on_row("bad_row")
            return 0
        new = self.learner.get(key) is None
        if new and n_classes >= MAX_CLASSES:
            self._on_row("bad_row")
            return 0
        self.learner.observe(key, tokens, truncated=kind == 2, capped=kind == 1)
        self._on_row("applied")
        return int(new)
