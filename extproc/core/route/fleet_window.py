"""Sliding windows of routing decisions per pool: the traffic fleet advice is computed from (issue 33).

Each decision adds one arrival to its pool in the current time bucket (``floor(now_s / bucket_s)``),
with its token budget in a quarter-octave histogram bin (:data:`BIN_UPPER_TOKENS`). The window is the
last ``ceil(window_s / bucket_s)`` buckets; older buckets are dropped as time moves on. Time is always
an argument (the router passes wall-clock seconds, so the buckets of several replicas line up; tests
and the simulator pass their own clock).

Replicas share their buckets (:meth:`FleetWindow.export` / :meth:`FleetWindow.set_remote`): each sees
a share of the traffic, the sum over replicas is the fleet's. Bucket counts add, so merging is exact.

Pure: no I/O, no clock of its own.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BIN_UPPER_TOKENS",
    "N_BINS",
    "FleetWindow",
    "PoolWindow",
    "WindowFormatError",
    "WindowSnapshot",
    "bin_of",
]

BIN_UPPER_TOKENS: tuple[int, ...] = tuple(round(2 ** (k / 4)) for k in range(16, 97))
"""Upper edges of the budget bins, tokens: 16, 19, 23, 27, 32, … 16,777,216 (four per octave, every
power of two an edge). Bin ``i`` holds budgets in ``(BIN_UPPER_TOKENS[i-1], BIN_UPPER_TOKENS[i]]``;
bin 0 everything up to 16 tokens, the last bin everything above its lower edge."""
N_BINS = len(BIN_UPPER_TOKENS)
MAX_COUNT = 10**12
"""Largest count accepted from another replica per bin and bucket (larger: a corrupt row)."""


def bin_of(budget_tokens: int) -> int:
    """Index of the bin holding ``budget_tokens`` (bisection over :data:`BIN_UPPER_TOKENS`)."""
    lo, hi = 0, N_BINS - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if budget_tokens <= BIN_UPPER_TOKENS[mid]:
            hi = mid
        else:
            lo = mid + 1
    return lo


class WindowFormatError(ValueError):
    """Another replica's exported window could not be read (the reason is the message)."""


@dataclass(frozen=True)
class PoolWindow:
    """One pool's traffic over the window: ``counts[i]`` requests with a budget in bin ``i``
    (length :data:`N_BINS`), and ``unbudgeted`` requests the router could not read (no budget)."""

    counts: tuple[int, ...]
    unbudgeted: int

    @property
    def requests(self) -> int:
        """All arrivals in the window, budgeted or not."""
        return sum(self.counts) + self.unbudgeted


@dataclass(frozen=True)
class WindowSnapshot:
    """The fleet's traffic over the window at ``now_s``: per pool a :class:`PoolWindow`;
    ``span_s`` the seconds it covers (shorter than the window until the window has filled);
    ``replicas`` how many replicas' buckets it sums (this one included)."""

    now_s: float
    span_s: float
    pools: Mapping[str, PoolWindow]
    replicas: int

    def rate_req_per_s(self, pool: str) -> float:
        """Arrival rate λ of ``pool`` over the window, requests per second (0 for an unknown pool)."""
        w = self.pools.get(pool)
        return 0.0 if w is None or self.span_s <= 0 else w.requests / self.span_s


_Buckets = dict[int, dict[str, list[int]]]
"""bucket index → pool → N_BINS + 1 counts (the last: unbudgeted)."""


class FleetWindow:
    """Per-pool sliding windows of arrivals and token budgets (module docstring).

    Args:
        pools: the configured pool names; decisions for another name are not counted.
        window_s: window length, seconds (> 0).
        bucket_s: bucket length, seconds (0 < bucket_s <= window_s).
        started_s: when counting started (the window is shorter than ``window_s`` until
            ``started_s + window_s``), seconds on the caller's clock.

    Raises:
        ValueError: a non-positive or non-finite window or bucket, or a bucket longer than the window.
    """

    def __init__(self, pools: Iterable[str], *, window_s: float, bucket_s: float, started_s: float) -> None:
        if not (math.isfinite(window_s) and math.isfinite(bucket_s) and 0 < bucket_s <= window_s):
            raise ValueError(f"need 0 < bucket_s <= window_s, got bucket_s={bucket_s}, window_s={window_s}")
        self.pools = tuple(pools)
        self.window_s = float(window_s)
        self.bucket_s = float(bucket_s)
        self.n_buckets = math.ceil(window_s / bucket_s)
        self.started_s = float(started_s)
        self._local: _Buckets = {}
        self._remote: dict[str, tuple[float, _Buckets]] = {}

    def _bucket(self, now_s: float) -> int:
        return math.floor(now_s / self.bucket_s)

    def _expire(self, buckets: _Buckets, now_s: float) -> None:
        first = self._bucket(now_s) - self.n_buckets + 1
        for b in [b for b in buckets if b < first]:
            del buckets[b]

    def add(self, pool: str, budget_tokens: int | None, now_s: float) -> None:
        """Count one routing decision for ``pool`` at ``now_s`` (``budget_tokens`` None: unbudgeted)."""
        if pool not in self.pools:
            return
        b = self._bucket(now_s)
        per_pool = self._local.get(b)
        if per_pool is None:
            self._expire(self._local, now_s)
            per_pool = self._local[b] = {}
        counts = per_pool.get(pool)
        if counts is None:
            counts = per_pool[pool] = [0] * (N_BINS + 1)
        counts[N_BINS if budget_tokens is None else bin_of(max(0, budget_tokens))] += 1

    def export(self, now_s: float) -> dict[str, Any]:
        """This replica's buckets in the window as a JSON-ready dict (sparse: only non-zero bins)."""
        self._expire(self._local, now_s)
        out: dict[str, Any] = {}
        for b, per_pool in self._local.items():
            out[str(b)] = {
                pool: [[i, c] for i, c in enumerate(counts) if c] for pool, counts in per_pool.items()
            }
        return {"v": 1, "bucket_s": self.bucket_s, "started_s": self.started_s, "buckets": out}

    def set_remote(self, replica: str, data: Any, now_s: float) -> None:
        """Replace what ``replica`` exported (:meth:`export`'s dict) with ``data``.

        Raises:
            WindowFormatError: not an export of the same format and bucket length; nothing is kept.
        """
        buckets = self._decode(data, now_s)
        self._remote[replica] = (_started(data), buckets)

    def drop_remote(self, keep: Iterable[str]) -> None:
        """Forget every other replica not in ``keep`` (it stopped exporting)."""
        keep_set = set(keep)
        for replica in [r for r in self._remote if r not in keep_set]:
            del self._remote[replica]

    def _decode(self, data: Any, now_s: float) -> _Buckets:
        if not isinstance(data, dict) or data.get("v") != 1:
            raise WindowFormatError("not a version-1 window export")
        if data.get("bucket_s") != self.bucket_s:
            raise WindowFormatError(f"bucket_s {data.get('bucket_s')!r} differs from {self.bucket_s}")
        raw = data.get("buckets")
        if not isinstance(raw, dict):
            raise WindowFormatError("buckets is not a mapping")
        first = self._bucket(now_s) - self.n_buckets + 1
        out: _Buckets = {}
        for key, per_pool in raw.items():
            try:
                b = int(key)
            except (TypeError, ValueError):
                raise WindowFormatError(f"bucket key {key!r} is not an integer") from None
            if not isinstance(per_pool, dict):
                raise WindowFormatError("a bucket is not a mapping")
            if b < first:
                continue
            dest: dict[str, list[int]] = {}
            for pool, pairs in per_pool.items():
                if pool not in self.pools:
                    continue
                counts = [0] * (N_BINS + 1)
                if not isinstance(pairs, list):
                    raise WindowFormatError("a pool's bins are not a list")
                for pair in pairs:
                    if (
                        not isinstance(pair, list)
                        or len(pair) != 2
                        or not all(type(x) is int for x in pair)
                        or not 0 <= pair[0] <= N_BINS
                        or not 0 <= pair[1] <= MAX_COUNT
                    ):
                        raise WindowFormatError("a bin is not [index, count] within bounds")
                    counts[pair[0]] += pair[1]
                dest[pool] = counts
            out[b] = dest
        return out

    def snapshot(self, now_s: float) -> WindowSnapshot:
        """The fleet's window at ``now_s``: this replica's buckets plus every remote replica's."""
        first = self._bucket(now_s) - self.n_buckets + 1
        self._expire(self._local, now_s)
        sums = {p: [0] * (N_BINS + 1) for p in self.pools}
        started = self.started_s
        sources = [self._local, *(buckets for _, buckets in self._remote.values())]
        for buckets in sources:
            for b, per_pool in buckets.items():
                if first <= b <= self._bucket(now_s):
                    for pool, counts in per_pool.items():
                        acc = sums[pool]
                        for i, c in enumerate(counts):
                            acc[i] += c
        for remote_started, _ in self._remote.values():
            started = min(started, remote_started)
        window_start = max(first * self.bucket_s, started)
        span = max(0.0, now_s - window_start)
        pools = {p: PoolWindow(tuple(c[:N_BINS]), c[N_BINS]) for p, c in sums.items()}
        return WindowSnapshot(now_s=now_s, span_s=span, pools=pools, replicas=1 + len(self._remote))


def _started(data: Any) -> float:
    s = data.get("started_s") if isinstance(data, dict) else None
    if not isinstance(s, int | float) or isinstance(s, bool) or not math.isfinite(s):
        raise WindowFormatError("started_s is not a finite number")
    return float(s)
