"""The per-config runtime: everything one ext_proc stream needs, built once from the config.

A :class:`Runtime` is immutable in use: a config reload builds a new one (sharing the ratio
store and metrics so learned ratios survive) and swaps the reference; streams already open keep
the instance they started with.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Protocol

from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from extproc.adapter.held_records import HeldRecords
from extproc.adapter.observer import NullObserver, StreamObserver
from extproc.adapter.responses import route_by_metadata, route_request_body, route_request_headers
from extproc.config import RouterConfig
from extproc.core.estimate.calibration import RatioStore
from extproc.core.estimate.output_reserve import OutputClassKey, OutputLengthLearner
from extproc.core.facade import CoreState
from extproc.core.learn.read_decision import ResponseReadPolicy
from extproc.core.route.decision import DecisionRecord
from extproc.core.route.load import LoadTracker
from extproc.core.route.response_ids import ResponsePools

__all__ = ["DecisionSink", "OutputSink", "Runtime"]

log = logging.getLogger(__name__)


class DecisionSink(Protocol):
    """Where decision records go (extproc/service/decision_log.py): ``submit`` must not block."""

    def submit(self, record: DecisionRecord) -> None: ...


class OutputSink(Protocol):
    """Where the answers the learner saw go to be shared (extproc/service/output_sync.py): ``add``
    must not block."""

    def add(self, key: OutputClassKey, completion_tokens: int, *, truncated: bool, capped: bool) -> None: ...


class Runtime:
    """Runtime objects shared by all streams: config, the core's state (:class:`CoreState`, what
    :func:`extproc.core.facade.decide` and :func:`~extproc.core.facade.learn` read and teach),
    observer, decision log, prebuilt replies.

    Args:
        config: the validated configuration.
        store: the ratio store (kept across reloads); a new in-memory store when None.
        observer: where streams report outcomes (kept across reloads); a :class:`NullObserver`
            when None.
        decision_log: where :meth:`log_decision` appends JSON lines (None = no log).
        load: the process-wide pool load tracker (kept across reloads); a new one when None.
        response_pools: the Responses API ``id`` → pool map (kept across reloads); new when None.
        held_records: routing records waiting for their off-path stream (kept across reloads);
            new, writing through :meth:`write_record`, when None.
        output_learner: the learned answer lengths (kept across reloads); None = the estimator's
            own (a new one when ``estimator.output_reserve.learned``, else none).
        output_sink: where each answer learned from is also queued for the other replicas (Redis).
        served_limits: pool name → the ``max_model_len`` its server reports (kept across reloads,
            filled by the pool limit check); where known, the truncation judgement uses it instead of
            the configured limit: it is where the server cuts an answer.
        read_policy: the adaptive read decision's state (kept across reloads while its parameters
            do not change); a new one when None or when the config's parameters differ.
    """

    def __init__(
        self,
        config: RouterConfig,
        *,
        store: RatioStore | None = None,
        observer: StreamObserver | None = None,
        decision_log: DecisionSink | None = None,
        load: LoadTracker | None = None,
        response_pools: ResponsePools | None = None,
        held_records: HeldRecords | None = None,
        output_learner: OutputLengthLearner | None = None,
        output_sink: OutputSink | None = None,
        served_limits: Mapping[str, int] | None = None,
        read_policy: ResponseReadPolicy | None = None,
    ) -> None:
        self.config = config
        self.core = CoreState(
            config,
            store=store,
            load=load,
            response_pools=response_pools,
            output_learner=output_learner,
            served_limits=served_limits,
            read_policy=read_policy,
        )
        core = self.core
        # the core's parts, by the names the service and the tests use
        self.store: RatioStore = core.store
        self.estimator = core.estimator
        self.served_limits: Mapping[str, int] = core.served_limits
        self.read_policy = core.read_policy
        self.load = core.load
        self.models = core.models
        self.response_pools = core.response_pools
        self.recovery = core.recovery
        self.observer: StreamObserver = observer if observer is not None else NullObserver()
        self.output_sink = output_sink
        self.routing_header = config.routing_header
        self.decision_log = decision_log
        self.held_records = held_records if held_records is not None else HeldRecords(self.write_record)
        self.body_responses: dict[str, pb.ProcessingResponse] = {
            p.name: route_request_body(config.routing_header, p.header_value) for p in config.pools
        }
        self.header_responses: dict[str, pb.ProcessingResponse] = {
            p.name: route_request_headers(config.routing_header, p.header_value) for p in config.pools
        }
        self.metadata_responses: dict[str, pb.ProcessingResponse] = {
            p.name: route_by_metadata(config.routing_header, p.header_value) for p in config.pools
        }
        self.metadata_stream_responses: dict[str, pb.ProcessingResponse] = {
            p.name: route_by_metadata(config.routing_header, p.header_value, stream=True)
            for p in config.pools
        }
        """The one-message answers for a request that asked for SSE (``tbr.stream: true``)."""

    def publish_ratio(self, model: str, category: str) -> None:
        """Report the current learned ratio of a key to the observer (nothing when the key is unknown)."""
        state = self.store.get((model, category))
        if state is None:
            return
        self.observer.ratio_updated(model, category, state.mean_ratio, state.dev_ratio, state.samples)

    def observe_output(
        self, key: OutputClassKey, completion_tokens: int, *, truncated: bool, capped: bool
    ) -> None:
        """Teach the output learner one answer of class ``key`` (``completion_tokens`` per sequence;
        ``truncated``: a pool cut it, a misroute; ``capped``: the client's maximum or the largest
        pool cut it), and queue it for the other replicas. Nothing without a learner."""
        learner = self.estimator.output_learner
        if learner is None:
            return
        learner.observe(key, completion_tokens, truncated=truncated, capped=capped)
        if self.output_sink is not None:
            self.output_sink.add(key, completion_tokens, truncated=truncated, capped=capped)

    def write_record(self, record: DecisionRecord, traceparent: str) -> None:
        """One finished request: to the decision log and, when it records requests, the observer."""
        self.log_decision(record)
        if self.observer.records_requests:
            self.observer.request_finished(record, traceparent)

    def log_decision(self, record: DecisionRecord) -> None:
        """Queue one decision record (no prompt text) for the background writer; no I/O here."""
        if self.decision_log is not None:
            self.decision_log.submit(record)
