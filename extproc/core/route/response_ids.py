"""Which pool produced a stored Responses API response (``id`` → pool), for ``previous_response_id``.

vLLM keeps stored responses in the memory of the server that produced them unless a shared
store is configured (``vllm/entrypoints/openai/responses/serving.py``: a ``previous_response_id``
it does not hold is answered ``404 "Response with id '…' not found."``). A follow-up request must
therefore reach the same pool. The router records the ``id`` of every Responses API response it
reads (JSON body, or the ``response.completed`` event) with the pool that served it, and routes a
request whose ``previous_response_id`` it knows to that pool.

:class:`ResponsePools` is the bounded local map (least recently used entries dropped first).
Replicas share entries through :mod:`extproc.service.response_sync` when Redis is configured:
:meth:`ResponsePools.put` queues each new entry for the next push, :meth:`ResponsePools.merge`
folds entries pulled from the other replicas.
"""

from __future__ import annotations

from collections import OrderedDict, deque

__all__ = ["ResponsePools"]


class ResponsePools:
    """Bounded map of response ``id`` → pool name.

    Args:
        max_entries: entries kept (least recently used dropped first).
        queue_max: entries waiting to be shared (oldest dropped first).
    """

    def __init__(self, max_entries: int = 100_000, queue_max: int = 10_000) -> None:
        self.max_entries = max_entries
        self._map: OrderedDict[str, str] = OrderedDict()
        self._queue: deque[tuple[str, str]] = deque(maxlen=queue_max)

    def __len__(self) -> int:
        return len(self._map)

    def get(self, response_id: str) -> str | None:
        """The pool that produced ``response_id``, or None when unknown."""
        pool = self._map.get(response_id)
        if pool is not None:
            self._map.move_to_end(response_id)
        return pool

    def _set(self, response_id: str, pool: str) -> None:
        self._map[response_id] = pool
        self._map.move_to_end(response_id)
        while len(self._map) > self.max_entries:
            self._map.popitem(last=False)

    def put(self, response_id: str, pool: str) -> None:
        """Record that ``pool`` produced ``response_id`` (and queue it for sharing)."""
        if not response_id or len(response_id) > 256:
            return
        self._set(response_id, pool)
        self._queue.append((response_id, pool))

    def drain(self) -> list[tuple[str, str]]:
        """Take the entries queued for sharing since the last call."""
        out = list(self._queue)
        self._queue.clear()
        return out

    def requeue(self, response_id: str, pool: str) -> None:
        """Queue an entry again for sharing (its push failed)."""
        self._queue.append((response_id, pool))

    def merge(self, entries: list[tuple[str, str]]) -> None:
        """Fold entries learned by other replicas (not queued again)."""
        for response_id, pool in entries:
            if response_id and len(response_id) <= 256:
                self._set(response_id, pool)
