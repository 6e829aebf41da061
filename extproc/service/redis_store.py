"""Redis-backed :class:`~extproc.core.estimate.calibration.RatioStore` shared by router replicas.

The request path never waits for Redis. Each replica keeps a local
:class:`~extproc.core.estimate.calibration.InMemoryRatioStore` that ``get`` reads and ``observe`` updates at
once; every observation is also queued and a background task, every ``sync_interval_s``:

1. **pushes** queued observations in batches to a Lua script that applies the same learner as
   :func:`~extproc.core.estimate.calibration.learn` (weighted EMA of ĉ and σ̂, low-quantile tracker) atomically
   on the server (EVALSHA; the script is
   (re)loaded automatically, e.g. after a Redis restart). Each batch carries an id the script
   records (``SET NX``, 1 h TTL), so a batch retried after a lost reply is applied once; then
2. **pulls** the shared ratios into the local cache when they changed (one ``GET`` of a version
   token the script replaces with the batch's unique id; one ``HGETALL`` when it changed),
   re-folding the observations still queued locally so a replica always sees its own writes.
   The version is a unique token, not a counter: a Redis that restarts and counts again can
   never present a value a replica already pulled, so no replica skips pulls after a restart.

Before pushing, a replica that finds a new data-set epoch (``{prefix}ratios-epoch`` absent or
changed: Redis restarted without its data) **re-seeds** the shared hash from its in-memory states
(a field is written when absent or when the shared state has fewer samples) instead of letting
the next pulls reset it to the first observations; queued observations already folded into a
seeded state are not pushed again. Counted in ``tbr_ratio_store_seeded_keys_total``.

Consistency model: eventual. The shared state of a key is the EMA of all observations of all
replicas in the order the Redis server executed their batches (per-observation order is kept
within a batch); replicas see each other's observations within about one ``sync_interval_s``.
Between pulls a replica's local state can differ from the shared one by its own recent
observations; the next pull replaces it (last writer wins at the server).

Connections are health-checked (``PING`` before a command on a connection idle for more than
``sync_interval_s``, capped at 30 s) and a command that fails on a broken connection is retried
once on a fresh one, so a server that closes idle clients (``redis-server --timeout 1``) or a
proxy that drops them is not reported down. Redis unavailable (the retry failed too): routing
continues on the local cache; the failure is logged once and counted
(``tbr_ratio_store_errors_total``, ``tbr_ratio_store_up 0``); observations queue up to
``queue_max`` (oldest dropped first, counted); retries back off from 0.1 s to 5 s; on recovery the
queue is flushed and pulls resume.

Redis layout (``prefix`` defaults to ``tbr:``): hash ``{prefix}ratios`` with one field per key,
``{category}:{model}`` → ``"{mean_ratio} {dev_ratio} {samples} {low_ratio}"`` (model-to-true ratios
as ``%.17g``); ``{prefix}ratios-version`` (the id of the last applied batch or seed),
``{prefix}ratios-epoch`` (set once per data set), ``{prefix}batch:{id}`` markers. The value is
positional and unchanged since the learned ratio was renamed from "bytes per token" (only names
changed, not values or their meaning): replicas of the release before and of this one share the hash
during a rollout.
"""

from __future__ import annotations

import logging
import math
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.exceptions import RedisError

from extproc.core.estimate.calibration import InMemoryRatioStore, LearnerParams, RatioKey, RatioState, learn
from extproc.service.metrics import RouterMetrics
from extproc.service.periodic_sync import PeriodicSync
from extproc.service.redis_lua import EMA_BATCH_LUA, SEED_LUA

__all__ = ["EMA_BATCH_LUA", "SEED_LUA", "RedisRatioStore"]

log = logging.getLogger(__name__)

_BATCH_MAX = 512
_BATCH_MARKER_TTL_S = 3600
_BACKOFF_MIN_S = 0.1
_BACKOFF_MAX_S = 5.0


class RedisRatioStore(PeriodicSync):
    """Shared ratio store: local cache for the request path, Redis behind it (module docstring);
    its background sync is a :class:`~extproc.service.periodic_sync.PeriodicSync` that backs off
    from 0.1 s to 5 s while Redis fails.

    Args:
        url: Redis URL (``redis://host:port/db``, ``unix:///path``).
        params: learner parameters (applied locally and by the server-side script).
        password: Redis AUTH password when not in ``url`` (from the environment or a file).
        metrics: where store health is counted.
        key_prefix: prefix of the Redis hashes.
        sync_interval_s: push/pull period in seconds.
        timeout_s: connect and command timeout in seconds.
        queue_max: observations kept while Redis is down (oldest dropped beyond it).
        max_keys: most keys pulled into the local cache (bounds metric label cardinality).
        client: an existing ``redis.asyncio.Redis`` (tests); built from ``url`` when None.

    Building it does no I/O; :meth:`start` connects, :meth:`close` flushes and disconnects.
    """

    backoff_min_s = _BACKOFF_MIN_S
    backoff_max_s = _BACKOFF_MAX_S

    def __init__(
        self,
        *,
        url: str,
        params: LearnerParams,
        password: str | None = None,
        metrics: RouterMetrics,
        key_prefix: str = "tbr:",
        sync_interval_s: float = 1.0,
        timeout_s: float = 1.0,
        queue_max: int = 10_000,
        max_keys: int = 4096,
        client: aioredis.Redis | None = None,
    ) -> None:
        super().__init__(
            client,
            url=url,
            password=password,
            client_options={
                "decode_responses": True,
                "socket_keepalive": True,
                # PING a connection idle longer than this before using it; a broken one is
                # replaced. One retry on a fresh connection for a command that fails on a
                # connection the server (or a proxy) closed meanwhile: only a failure of that
                # retry reports the store down.
                "health_check_interval": min(max(sync_interval_s, 1.0), 30.0),
                "retry": Retry(NoBackoff(), 1),
            },
            interval_s=sync_interval_s,
            timeout_s=timeout_s,
            task_name="redis-ratio-sync",
        )
        self.local = InMemoryRatioStore(beta=params.beta, params=params)
        self.metrics = metrics
        self.prefix = key_prefix
        self.queue_max = queue_max
        self.max_keys = max_keys
        self.on_update: Callable[[RatioKey], None] | None = None
        """Called with each key whose local state changed after a pull (e.g. to publish gauges)."""
        self._url = url
        self._script: Any = None
        self._seed_script: Any = None
        self._queue: deque[tuple[RatioKey, float, float]] = deque()
        self._batch: list[tuple[RatioKey, float, float]] = []
        """The batch being pushed; kept (with its id) until Redis confirms it, then retried as is."""
        self._batch_id = ""
        self._version: str | None = None
        self._epoch: str | None = None
        """Epoch of the shared data set this replica last synced with (None: not synced yet)."""
        """Version counter value of the last pull (None: pull everything next time)."""
        self.up = False
        self._down_logged = False
        self._cap_logged = False
        self.last_sync_ok_s = 0.0

    @property
    def sync_interval_s(self) -> float:
        """Push/pull period in seconds (the :class:`PeriodicSync` ``interval_s``)."""
        return self.interval_s

    # -- RatioStore (synchronous, request path) -------------------------------------------

    @property
    def beta(self) -> float:
        """EMA decay β (local and server-side)."""
        return self.local.beta

    @beta.setter
    def beta(self, value: float) -> None:
        self.local.beta = value

    @property
    def params(self) -> LearnerParams:
        """Learner parameters sent with each pushed batch and used locally (settable on reload)."""
        return self.local.params

    @params.setter
    def params(self, value: LearnerParams) -> None:
        self.local.params = value
        self.local.beta = value.beta

    def get(self, key: RatioKey) -> RatioState | None:
        """See :meth:`extproc.core.estimate.calibration.RatioStore.get` (local cache, no I/O)."""
        return self.local.get(key)

    def observe(self, key: RatioKey, c_obs: float, weight: float = 1.0) -> RatioState:
        """Fold ``c_obs`` (weight in (0, 1]) locally now and queue it for Redis (drop-oldest when
        full).

        Raises:
            ValueError: ``c_obs`` is not a positive finite number (nothing is queued).
        """
        state = self.local.observe(key, c_obs, weight)
        w = min(1.0, max(weight, 1e-6)) if math.isfinite(weight) else 1.0
        if self._queue and len(self._queue) >= self.queue_max:
            self._queue.popleft()
            self.metrics.store_dropped.inc()
        self._queue.append((key, c_obs, w))
        self.metrics.store_queue.set(self.queue_length)
        return state

    def items(self) -> list[tuple[RatioKey, RatioState]]:
        """See :meth:`extproc.core.estimate.calibration.RatioStore.items` (local cache)."""
        return self.local.items()

    @property
    def queue_length(self) -> int:
        """Observations not yet confirmed by Redis (at most ``queue_max`` + one batch)."""
        return len(self._queue) + len(self._batch)

    # -- lifecycle --------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect, do a first sync (bounded by the timeout; failure is counted, not raised),
        and start the background sync task."""
        self._script = self._client.register_script(EMA_BATCH_LUA)
        self._seed_script = self._client.register_script(SEED_LUA)
        await self.sync_once()
        self._start_task(last_ok=self.up)

    def _has_queued(self) -> bool:
        return self.queue_length > 0

    def _close_failed(self, step: str, exc: BaseException) -> None:
        if step == "push":
            log.warning("could not push %d ratio observations at shutdown: %s", self.queue_length, exc)
        else:
            log.warning("shared ratio store connections not closed cleanly at shutdown: %r", exc)

    # -- background sync --------------------------------------------------------------------

    async def sync_once(self) -> bool:
        """Push queued observations, then pull every shared ratio. Returns True on success.

        Never raises (except cancellation): the background task must outlive any failure."""
        op = "seed"
        try:
            await self._seed_if_reset()
            op = "push"
            await self._push()
            op = "pull"
            await self._pull()
        except (RedisError, OSError, TimeoutError) as exc:
            self.metrics.store_errors.labels(op).inc()
            self._set_up(False, f"{op}: {exc.__class__.__name__}: {exc}")
            return False
        except Exception as exc:  # a bug or an unexpected reply: count, log with traceback, go on
            self.metrics.store_errors.labels(op).inc()
            log.exception("unexpected error syncing the shared ratio store (%s)", op)
            self._set_up(False, f"{op}: {exc.__class__.__name__}")
            return False
        self._set_up(True, "")
        self.last_sync_ok_s = time.time()
        return True

    def _set_up(self, up: bool, why: str) -> None:
        if up and not self.up and self._down_logged:
            log.warning("shared ratio store %s reachable again; resuming sync", self._redacted_url())
            self._down_logged = False
        if not up and not self._down_logged:
            log.warning(
                "shared ratio store %s unreachable (%s); routing on local ratios, retrying with backoff",
                self._redacted_url(),
                why,
            )
            self._down_logged = True
        self.up = up
        self.metrics.store_up.set(1 if up else 0)

    def _redacted_url(self) -> str:
        url = self._url
        if "@" in url:
            scheme, _, rest = url.partition("://")
            url = f"{scheme}://***@{rest.rpartition('@')[2]}"
        return url

    async def _seed_if_reset(self) -> None:
        """When the shared data set changed epoch (Redis restarted without its data), write this
        replica's local states into it (a shared state with more samples is kept) and drop the
        queued observations of the keys written here: their states already include them."""
        client = self._client
        assert client is not None and self._seed_script is not None
        epoch = _text(await client.get(self._epoch_key))
        if epoch == self._epoch:
            return
        states = self.local.items()
        if self._epoch is None or not states:
            # First sync with this data set (a fresh deployment, or Redis came up after this
            # replica started): the queued observations are pushed as usual.
            self._epoch = epoch
            return
        args: list[object] = [uuid.uuid4().hex]
        for (model, category), st in states:
            args += [
                f"{category}:{model}",
                f"{st.mean_ratio:.17g} {st.dev_ratio:.17g} {st.samples} {st.low_ratio:.17g}",
            ]
        reply = [
            _text(x) or ""
            for x in await self._seed_script(keys=[self._hash, self._version_key, self._epoch_key], args=args)
        ]
        self._epoch, written = reply[0], set(reply[1:])
        self._version = None  # pull everything next
        if not written:
            return
        seeded = {key for key, _ in states if f"{key[1]}:{key[0]}" in written}
        self._queue = deque(obs for obs in self._queue if obs[0] not in seeded)
        self._batch = [obs for obs in self._batch if obs[0] not in seeded]
        self.metrics.store_seeded.inc(len(written))
        self.metrics.store_queue.set(self.queue_length)
        log.warning(
            "shared ratio store %s has a new data set (restarted without its data?): re-seeded %d "
            "keys from this replica's local state",
            self._redacted_url(),
            len(written),
        )

    async def _push(self) -> None:
        """Send queued observations in batches. A batch that failed (even if Redis applied it
        before the reply was lost) is retried with the same id, which the script applies at
        most once: observations are applied exactly once while markers live (1 h)."""
        assert self._script is not None
        while self._batch or self._queue:
            if not self._batch:
                self._batch = [self._queue.popleft() for _ in range(min(_BATCH_MAX, len(self._queue)))]
                self._batch_id = uuid.uuid4().hex
            batch = self._batch
            p = self.params
            args: list[object] = [
                repr(p.beta),
                repr(p.quantile),
                repr(p.quantile_step),
                repr(p.initial_margin),
                repr(p.initial_rel_dev),
                _BATCH_MARKER_TTL_S,
            ]
            for (model, category), c, w in batch:
                args += [f"{category}:{model}", repr(c), repr(w)]
            await self._script(
                keys=[f"{self.prefix}batch:{self._batch_id}", self._hash, self._version_key, self._epoch_key],
                args=args,
            )
            self._batch = []
            self.metrics.store_pushed.inc(len(batch))
            self.metrics.store_queue.set(self.queue_length)

    @property
    def _hash(self) -> str:
        return f"{self.prefix}ratios"

    @property
    def _version_key(self) -> str:
        return f"{self.prefix}ratios-version"

    @property
    def _epoch_key(self) -> str:
        return f"{self.prefix}ratios-epoch"

    async def _pull(self) -> None:
        """Refresh the local cache from Redis if the shared version moved since the last pull."""
        client = self._client
        assert client is not None
        t0 = time.perf_counter()
        version = _text(await client.get(self._version_key))
        if version is not None and version == self._version:
            return
        rows = {_text(f) or "": _text(v) or "" for f, v in (await client.hgetall(self._hash)).items()}
        pending: dict[RatioKey, list[tuple[float, float]]] = {}
        for k, c, w in (*self._batch, *self._queue):
            pending.setdefault(k, []).append((c, w))
        accepted = 0
        for field, value in rows.items():
            category, sep, model = field.partition(":")
            state = _parse_state(value)
            if not sep or not category or not model or state is None:
                continue
            key = (model, category)
            if self.local.get(key) is None and accepted >= self.max_keys:
                if not self._cap_logged:
                    log.warning("more than %d shared ratio keys; ignoring the rest", self.max_keys)
                    self._cap_logged = True
                continue
            accepted += 1
            for c, w in pending.get(key, ()):
                state = learn(state, c, self.params, w)
            if self.local.get(key) != state:
                self.local.put(key, state)
                if self.on_update is not None:
                    self.on_update(key)
        self._version = version
        self.metrics.store_sync_seconds.observe(time.perf_counter() - t0)


def _text(value: bytes | str | None) -> str | None:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _parse_state(value: str) -> RatioState | None:
    """A RatioState from ``"{mean_ratio} {dev_ratio} {samples} {low_ratio}"``, or None if malformed."""
    parts = value.split(" ")
    if len(parts) != 4:
        return None
    try:
        mean, dev, n, low = float(parts[0]), float(parts[1]), int(parts[2]), float(parts[3])
    except ValueError:
        return None
    finite = math.isfinite(mean) and math.isfinite(dev) and math.isfinite(low)
    if not (finite and mean > 0 and dev >= 0 and n >= 1 and 0.0 <= low <= mean):
        return None
    return RatioState(mean, dev, n, low)
