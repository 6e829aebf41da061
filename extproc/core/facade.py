"""The core's two entry points: :func:`decide` routes a request, :func:`learn` learns from its answer.

Everything the router decides lives behind these two functions; a transport only translates its
messages to and from them (the Envoy adapter: :mod:`extproc.adapter.processor`,
:mod:`extproc.adapter.response_phases`), and the evaluation replays call the same functions.

* :func:`decide` — request features + the router's state (:class:`CoreState`: the estimator with
  its learned ratios, the pools per model set over the load tracker, the Responses API id → pool
  map, the read policy) → a :class:`Decision`: the token budget (screened by the byte bound when
  nobody reads the exact estimate, :mod:`extproc.core.estimate.screen`; a chat batch's longest
  conversation), the pool (a ``previous_response_id`` pins the pool that stored that response;
  an unknown model goes to its default set or the largest pool, reason ``unknown_model``; else the
  shortest fit with spillover, :mod:`extproc.core.route.policy`), and whether the answer is read
  (:mod:`extproc.core.learn.read_decision`).
* :func:`learn` — a :class:`Decision` + the answer's :class:`~extproc.core.learn.usage_reader.ResponseUsage`
  → a :class:`LearnOutcome`: the ratio learned (:meth:`Estimator.observe`), the misroute recovery
  ratchet (:mod:`extproc.core.learn.recovery`), the truncation judgement and the output lengths learned
  (:mod:`extproc.core.learn.truncation`), the cause of a retried request (:mod:`extproc.core.learn.misroute_cause`),
  and the outcomes to count. The state it teaches is in :class:`CoreState`; the outcomes it returns
  are for the transport to report (metrics, decision records, sharing with other replicas).

Both are plain functions over plain objects (no I/O, no clock other than the ``clock`` argument, no
randomness other than the ``draw`` argument), so a replay with a virtual clock and a seeded draw is
deterministic.
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from extproc.config import RouterConfig
from extproc.core.estimate.budget import TokenBudget
from extproc.core.estimate.calibration import InMemoryRatioStore, RatioStore
from extproc.core.estimate.estimator import Estimator
from extproc.core.estimate.output_reserve import ALL_BANDS, OutputClassKey, OutputLengthLearner
from extproc.core.estimate.screen import route_budget
from extproc.core.learn.batch import batch_budget
from extproc.core.learn.misroute_cause import ESTIMATE_TOO_LOW, TRUNCATED, UNKNOWN, cause_of_served_retry
from extproc.core.learn.outcomes import CalibrationOutcome, MisrouteCalibrationOutcome, MisrouteOutcome
from extproc.core.learn.read_decision import ReadPolicyParams, ResponseReadPolicy, truncation_possible
from extproc.core.learn.recovery import MisrouteRecovery, overflowed
from extproc.core.learn.truncation import LENGTH_REASONS, judge_output
from extproc.core.learn.usage_reader import ResponseUsage
from extproc.core.request.endpoints import EndpointSpec, spec_of
from extproc.core.request.request_body import RequestFeatures
from extproc.core.response.sse import is_context_length_error
from extproc.core.route.load import LoadTracker
from extproc.core.route.model_sets import ModelRouting
from extproc.core.route.policy import PoolDecision
from extproc.core.route.response_ids import ResponsePools

__all__ = [
    "CoreState",
    "Decision",
    "LearnOutcome",
    "OutputSeen",
    "choose_pool",
    "decide",
    "decide_read",
    "fallback_pool",
    "learn",
    "read_params",
]


def read_params(config: RouterConfig) -> ReadPolicyParams:
    """The read policy's parameters from ``calibration.response_reads``."""
    rr = config.calibration.response_reads
    return ReadPolicyParams(
        cold_samples=rr.cold_samples,
        output_cold_samples=rr.output_cold_samples,
        drift_rel_error=rr.drift_rel_error,
        drift_reads=rr.drift_reads,
        floor_rate=rr.floor_rate,
        reads_per_key_per_s=rr.reads_per_key_per_s,
        burst_reads=rr.burst_reads,
    )


class CoreState:
    """What :func:`decide` reads and :func:`learn` teaches, built once per configuration.

    Args:
        config: the validated configuration.
        store: the ratio store (kept across reloads); a new in-memory store when None.
        load: the process-wide pool load tracker (kept across reloads); a new one when None.
        response_pools: the Responses API ``id`` → pool map (kept across reloads); new when None.
        output_learner: the learned answer lengths (kept across reloads); None = the estimator's
            own (a new one when ``estimator.output_reserve.learned``, else none).
        served_limits: pool name → the ``max_model_len`` its server reports (kept across reloads);
            where known it replaces the configured limit in the truncation judgement.
        read_policy: the adaptive read decision's state (kept while its parameters do not change).
    """

    __slots__ = (
        "estimator",
        "load",
        "models",
        "pool_max_model_len_tokens",
        "pools_with_larger",
        "read_policy",
        "recovery",
        "response_pools",
        "screen",
        "served_limits",
        "store",
        "truncation_reserve_factor",
    )

    def __init__(
        self,
        config: RouterConfig,
        *,
        store: RatioStore | None = None,
        load: LoadTracker | None = None,
        response_pools: ResponsePools | None = None,
        output_learner: OutputLengthLearner | None = None,
        served_limits: Mapping[str, int] | None = None,
        read_policy: ResponseReadPolicy | None = None,
    ) -> None:
        self.store: RatioStore = (
            store if store is not None else InMemoryRatioStore.from_config(config.calibration)
        )
        self.estimator = Estimator(
            estimator=config.estimator,
            calibration=config.calibration,
            store=self.store,
            output_learner=output_learner,
            max_model_len_tokens=max(p.max_model_len for p in config.pools),
            # names the model sets serve take key slots at once (others after a 2xx with usage)
            reserved_models=[name for ms in config.models for name in ms.models],
            reserved_patterns=[ms.pattern for ms in config.models if ms.pattern is not None],
        )
        self.screen = config.estimator.screen
        self.served_limits: Mapping[str, int] = served_limits if served_limits is not None else {}
        params = read_params(config)
        self.read_policy = (
            read_policy
            if read_policy is not None and read_policy.params == params
            else ResponseReadPolicy(params)
        )
        self.truncation_reserve_factor = config.calibration.response_reads.truncation_reserve_factor
        self.load = load if load is not None else LoadTracker()
        self.models = ModelRouting(config, self.load)
        self.pool_max_model_len_tokens: dict[str, int] = {p.name: p.max_model_len for p in config.pools}
        """Pool name → its configured ``max_model_len`` (tokens)."""
        self.pools_with_larger: frozenset[str] = frozenset(
            p.name for p in config.pools if self.models.next_larger(p.name) is not None
        )
        """Pools whose model set has a larger pool (a request cut there could have been served)."""
        self.response_pools = response_pools if response_pools is not None else ResponsePools()
        self.recovery = MisrouteRecovery(config.recovery, self.models, self.load, self.estimator)


@dataclass(slots=True)
class Decision:
    """Where a request goes, on which budget, and whether its answer is read.

    Built once per request and not changed afterwards (not frozen only because a frozen dataclass
    costs more to build, and this is the request path).

    Attributes:
        pool: the chosen pool's name.
        reason: why (a bounded label: ``fits``, ``spillover``, ``previous_response``, ``unknown_model``, …).
        budget: the budget recorded and learned against (the exact estimate whenever the answer is
            read; the byte bound otherwise when it routed, :mod:`extproc.core.estimate.screen`).
        routed_budget: the budget the pool was chosen on (reported with the decision).
        endpoint: the endpoint's row (:mod:`extproc.core.request.endpoints`), None when unknown.
        learn: whether the served usage may be learned from (False for a ``previous_response_id``
            continuation, whose usage counts stored turns the router never saw).
        client_max_output_tokens: the client's own output maximum, None when it sent none.
        read: whether the answer is read (None: the caller did not decide and there is no
            adaptive decision, which :func:`decide` never returns).
        read_reason: the adaptive read decision's reason, None when the caller decided ``read``.
        batch_budgets: a chat batch's budget per conversation (None for other requests).
        pool_decision: the policy's decision (saturation seen, spillover), None when the pool was
            not chosen by :func:`decide` (an off-path stream's payload).
    """

    pool: str
    reason: str
    budget: TokenBudget
    routed_budget: TokenBudget
    endpoint: EndpointSpec | None
    learn: bool = True
    client_max_output_tokens: int | None = None
    read: bool | None = True
    read_reason: str | None = None
    batch_budgets: tuple[TokenBudget, ...] | None = None
    pool_decision: PoolDecision | None = None

    @classmethod
    def routed_elsewhere(
        cls,
        budget: TokenBudget,
        pool: str,
        endpoint: str,
        *,
        learn: bool,
        client_max_output_tokens: int | None,
    ) -> Decision:
        """A decision taken by another stream or replica and carried to the one reading the answer
        (off-path calibration): ``budget`` is the one to learn against (a batch's already summed)."""
        return cls(
            pool,
            "",
            budget,
            budget,
            spec_of(endpoint),
            learn=learn,
            client_max_output_tokens=client_max_output_tokens,
        )

    @property
    def category(self) -> str:
        """The recorded budget's category (metric label)."""
        return self.budget.key[1]


def fallback_pool(core: CoreState, model: str | None) -> str:
    """The pool of a request the router cannot budget (unreadable body, unsupported path, body
    missing): the largest pool of ``model``'s set (of the default set, else of all pools, when
    ``model`` is unknown or None)."""
    return core.models.fallback_for(model).name


def decide(
    core: CoreState,
    features: RequestFeatures,
    endpoint: EndpointSpec | None,
    *,
    read: bool | None,
    exact_estimate: bool,
    draw: Callable[[], float] = random.random,
    clock: Callable[[], float] = time.monotonic,
) -> Decision:
    """Budget and route one readable request (module docstring).

    Args:
        core: the router's state.
        features: the parsed body (:func:`extproc.core.request.endpoints.parse_body`).
        endpoint: its endpoint's row.
        read: whether its answer is read, when decided before the body (a Responses API request, a
            ``sample_rate`` draw); None to decide here (``response_reads.mode: adaptive``).
        exact_estimate: someone reads the estimate besides the pool choice (decision log, request
            records): never screened.
        draw: uniform [0, 1) draws for the adaptive decision's floor rate (one per decision).
        clock: monotonic seconds (the adaptive decision's per-key budget).

    Returns:
        the :class:`Decision`. Raises nothing for a parsed request.
    """
    est = core.estimator
    batch: tuple[TokenBudget, ...] | None = None
    if features.conversations:
        # chat batch: each conversation is its own sequence; the longest decides the fit
        batch = tuple(est.estimate(c) for c in features.conversations)
        budget = max(batch, key=lambda b: b.total_tokens)
    elif read or exact_estimate or not core.screen or features.previous_response_id is not None:
        budget = est.estimate(features)
    else:
        # nobody reads the exact estimate: the screened budget, same pool, bounded work
        policy = core.models.select(features.model)
        budget = route_budget(est, features, policy.limits_tokens if policy is not None else ())
    pool_decision = choose_pool(core, features.model, features.previous_response_id, budget.total_tokens)
    pool = pool_decision.pool.name
    routed = budget
    read_reason: str | None = None
    if read is None:
        read, read_reason = decide_read(core, budget, pool, features.max_output_tokens, draw(), clock())
        if read and budget.screened:
            budget = est.estimate(features)  # learned against the exact estimate
    return Decision(
        pool,
        pool_decision.reason,
        budget,
        routed,
        endpoint,
        learn=features.previous_response_id is None,
        client_max_output_tokens=features.max_output_tokens,
        read=read,
        read_reason=read_reason,
        batch_budgets=batch,
        pool_decision=pool_decision,
    )


def choose_pool(
    core: CoreState, model: str, previous_response_id: str | None, total_tokens: int
) -> PoolDecision:
    """Pool set by ``model``, then pool by budget; a ``previous_response_id`` pins the pool that
    stored that response (docs/endpoints.md)."""
    models = core.models
    if previous_response_id is not None:
        name = core.response_pools.get(previous_response_id)
        pool = models.pool(name) if name is not None else None
        if pool is not None:
            return PoolDecision(pool, "previous_response")
        return PoolDecision(models.fallback_for(model), "previous_response_unknown")
    policy = models.select(model)
    if policy is None:
        return PoolDecision(models.largest, "unknown_model")
    decision = policy.choose(total_tokens)
    if not models.known(model):
        return dataclasses.replace(decision, reason="unknown_model")
    return decision


def decide_read(
    core: CoreState,
    budget: TokenBudget,
    pool_name: str,
    client_max_output_tokens: int | None,
    draw: float,
    now_s: float,
) -> tuple[bool, str]:
    """The adaptive read decision for a request routed with ``budget`` to ``pool_name``
    (:class:`extproc.core.learn.read_decision.ResponseReadPolicy`): (read, reason). A request
    skipped while its pool cannot cut its answer counts as one untruncated answer for the output
    learner's truncation controller (:meth:`OutputLengthLearner.count_untruncated`)."""
    # the largest pool's cuts are not misroutes: no truncation to look for there
    truncation = pool_name in core.pools_with_larger and truncation_possible(
        prompt_tokens=budget.prompt_tokens,
        output_reserve_tokens=budget.output_reserve_tokens,
        client_max_output_tokens=client_max_output_tokens,
        pool_max_model_len=core.served_limits.get(pool_name, core.pool_max_model_len_tokens[pool_name]),
        larger_pool=True,
        reserve_factor=core.truncation_reserve_factor,
    )
    learner = core.estimator.output_learner
    output_samples: int | None = None
    key = budget.output_class
    if learner is not None and key is not None:
        # a bound's prompt band is not the request's (reads teach the exact estimate's class):
        # the all-bands parent, which learns from every band, says whether the output is cold
        if budget.screened:  # prompt_band is the key's last field: key._replace(prompt_band=ALL_BANDS)
            key = OutputClassKey(*key[:-1], ALL_BANDS)
        state = learner.get(key)
        output_samples = state.samples if state is not None else 0
    ratio = core.store.get(budget.key) if not budget.screened else None
    decision = core.read_policy.decide(
        budget.key,
        ratio_samples=ratio.samples if ratio is not None else 0,
        output_samples=output_samples,
        truncation=truncation,
        required=False,  # a Responses API request was marked at the request line
        now_s=now_s,
        draw=draw,
    )
    if not decision.read and not truncation and learner is not None and key is not None:
        # an answer skipped because it cannot be cut: untruncated, for the truncation controller
        learner.count_untruncated(key)
    return decision.read, decision.reason


# -- learning --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class OutputSeen:
    """One answer length the output learner was taught (to share with other replicas).

    Attributes:
        key: the request's output class.
        completion_tokens: the sequence's answer length (tokens).
        truncated: a pool cut it (a misroute).
        capped: the client's maximum or the largest pool cut it.
    """

    key: OutputClassKey
    completion_tokens: int
    truncated: bool
    capped: bool


Misroute = tuple[str, str, MisrouteOutcome, str]
"""``(from_pool, to_pool, outcome, cause)`` of one misroute to count (``tbr_misroutes_total``)."""


@dataclass(slots=True)
class LearnOutcome:
    """What :func:`learn` found, for the transport to report and record.

    Attributes:
        prompt_tokens / completion_tokens / response_id: what the answer reported (None when not read).
        calibration: calibration outcomes to count, in order (``applied``, ``no_usage``,
            ``screened``, ``previous_response``, ``batch_mixed_keys``, ``not_text_dominated``,
            ``error_in_stream``).
        retry_cause: the cause to count the pending retry with (None when none was pending).
        misroutes: misroutes of the serving pool to count after the retry (truncation, an error in
            the stream).
        misroute / misroute_cause / finish_reason / truncated: the decision record's fields.
        estimate_error: ``(category, relative error)`` of the estimate learned from, or None.
        recovery: the misroute recovery outcomes of the first pool (``tbr_misroute_calibration``).
        ratio_key: the ratio key whose learned value changed (to publish), or None.
        outputs: the answer lengths the output learner was taught.
    """

    misroute: str | None
    misroute_cause: str | None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    response_id: str | None = None
    calibration: list[CalibrationOutcome] = field(default_factory=list)
    retry_cause: str | None = None
    misroutes: list[Misroute] = field(default_factory=list)
    finish_reason: str | None = None
    truncated: bool | None = None
    estimate_error: tuple[str, float] | None = None
    recovery: tuple[MisrouteCalibrationOutcome, ...] = ()
    ratio_key: tuple[str, str] | None = None
    outputs: list[OutputSeen] = field(default_factory=list)


def learn(
    core: CoreState,
    decision: Decision,
    usage: ResponseUsage,
    *,
    routed_pool: str | None,
    retried_to: str | None,
    retry_pending: bool,
    misroute: str | None = None,
    misroute_cause: str | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> LearnOutcome:
    """Learn from one read answer of a request routed by ``decision`` (module docstring).

    Args:
        core: the router's state (taught here).
        decision: the request's decision.
        usage: what the answer reported (:meth:`extproc.core.learn.usage_reader.UsageReader.close`).
        routed_pool: the pool the router sent it to (None when the stream cannot tell).
        retried_to: the pool Envoy's retry sent it to, None when not retried.
        retry_pending: that retry is not counted yet (counted with :attr:`LearnOutcome.retry_cause`).
        misroute / misroute_cause: the record's fields so far (a retry names the request a misroute).
        clock: monotonic seconds (the read policy's drift tracking).

    Returns:
        the :class:`LearnOutcome`. Never raises for a well-formed ``usage``.
    """
    out = LearnOutcome(misroute, misroute_cause)
    retry_counts = retry_pending and routed_pool is not None and retried_to is not None
    if usage.error is not None:
        # a 2xx SSE stream carried an error event: never learned from (its usage, if any, is not the
        # served request's); a context-length error is a misroute of the pool that served it
        out.calibration.append("error_in_stream")
        length_error = is_context_length_error(usage.error)
        if retry_counts:
            out.retry_cause = out.misroute_cause = ESTIMATE_TOO_LOW if length_error else UNKNOWN
        if routed_pool is not None and length_error:
            served = retried_to or routed_pool
            out.misroute, out.misroute_cause = "error_in_stream", ESTIMATE_TOO_LOW
            out.misroutes.append((served, served, "error_in_stream", ESTIMATE_TOO_LOW))
        return out
    out.prompt_tokens, out.completion_tokens = usage.prompt_tokens, usage.completion_tokens
    out.response_id = usage.response_id
    if usage.response_id is not None:
        core.response_pools.put(usage.response_id, retried_to or decision.pool)
    if usage.prompt_tokens is None:
        out.calibration.append("no_usage")
        _judge_without_usage(core, decision, usage.finish_reasons, out, routed_pool, retried_to)
        return out
    if retry_counts and routed_pool is not None:
        # a retried request the larger pool served with usage: estimate_too_low when the served
        # prompt cannot have fitted the first pool, else pool_unavailable
        first = core.recovery.policy.pool(routed_pool)
        over = (
            None if first is None else overflowed(decision.budget, usage.prompt_tokens, first.max_model_len)
        )
        out.retry_cause = out.misroute_cause = cause_of_served_retry(over)
    _judge_answer(core, decision, usage, out, routed_pool, retried_to)
    learned = _learned_budget(decision, out)
    if learned is None:
        return out
    obs = core.estimator.observe(learned, usage.prompt_tokens)
    # the observation's own key: a model admitted by this very answer learns under its name
    core.read_policy.observed(
        obs.key if obs is not None else learned.key,
        obs.central_rel_error if obs is not None else None,
        clock(),
    )
    if obs is None:
        out.calibration.append("not_text_dominated")
    else:
        out.calibration.append("applied")
        out.estimate_error = (obs.key[1], obs.rel_error)
    # recovery runs even when the observation taught the text key nothing (media, unexplained)
    if retried_to is not None and routed_pool is not None and decision.batch_budgets is None:
        out.recovery = core.recovery.on_usage(decision.budget, routed_pool, retried_to, usage.prompt_tokens)
    if obs is not None:
        out.ratio_key = obs.key
    return out


def _is_batch(decision: Decision) -> bool:
    spec = decision.endpoint
    return (spec is not None and spec.sums_conversations) or decision.batch_budgets is not None


def _usage_shape(decision: Decision) -> str:
    return decision.endpoint.usage_shape if decision.endpoint is not None else "openai"


def _judge_answer(
    core: CoreState,
    decision: Decision,
    usage: ResponseUsage,
    out: LearnOutcome,
    routed_pool: str | None,
    retried_to: str | None,
) -> None:
    """Was the answer cut by the pool that served it (:func:`extproc.core.learn.truncation.judge_output`)?
    A cut answer is a misroute of that pool (``outcome="truncated"``, ``to_pool`` = the serving pool:
    nothing was retried); the record's ``misroute`` says ``truncated`` unless a retry already named
    the request a misroute. Each sequence's length then teaches the output learner the request's
    class (censored when a limit cut it). A chat batch (usage summed over conversations) is not judged."""
    budget = decision.budget
    if routed_pool is None:
        return
    learner = core.estimator.output_learner
    if _is_batch(decision):
        spec = decision.endpoint
        if learner is not None:
            learner.count_unjudged(
                "chat_batch" if spec is not None and spec.sums_conversations else "multi_prompt"
            )
        return
    served = retried_to or routed_pool
    models = core.models
    pool, larger = models.pool(served), models.next_larger(served)
    # where the server really cuts: its reported max_model_len when the pool check read it
    served_len = core.served_limits.get(served, pool.max_model_len) if pool is not None else None
    larger_len = core.served_limits.get(larger.name, larger.max_model_len) if larger is not None else None
    report = judge_output(
        api=_usage_shape(decision),
        finish_reasons=usage.finish_reasons,
        prompt_tokens=usage.prompt_tokens,
        completion_tokens=usage.completion_tokens,
        n_sequences=budget.n_sequences,
        served_max_model_len=served_len,
        larger_max_model_len=larger_len,
        client_max_output_tokens=decision.client_max_output_tokens,
    )
    out.finish_reason = report.finish_reason
    out.truncated = report.truncated
    if report.truncated:
        out.misroute = out.misroute or "truncated"
        out.misroute_cause = out.misroute_cause or TRUNCATED
        out.misroutes.append((served, served, "truncated", TRUNCATED))
    key = budget.output_class
    if key is None or learner is None:
        return
    if not report.sequences:
        if len(usage.finish_reasons) > max(1, budget.n_sequences):  # a prompt list read off the path
            learner.count_unjudged("multi_prompt")
        else:
            learner.count_unjudged("no_choice_reasons" if budget.n_sequences > 1 else "no_usage")
    # an answer's length is exact also where its prompt is not learned from
    for tokens, censored in report.sequences:
        truncated, capped = censored and report.truncated, censored and not report.truncated
        learner.observe(key, tokens, truncated=truncated, capped=capped)
        out.outputs.append(OutputSeen(key, tokens, truncated, capped))


def _judge_without_usage(
    core: CoreState,
    decision: Decision,
    finish_reasons: tuple[str, ...],
    out: LearnOutcome,
    routed_pool: str | None,
    retried_to: str | None,
) -> None:
    """A served answer without usage (a stream without ``stream_options.include_usage``): its
    length is unknown, so the output learner is not taught (counted ``no_usage``). A token-limit
    stop of a single-prompt request without a client maximum is still the serving pool's cut
    (vLLM's only limit is then ``max_model_len − prompt``): a truncation misroute of that pool when
    a larger pool exists, judged as in :func:`_judge_answer`."""
    if routed_pool is None:
        return
    learner = core.estimator.output_learner
    if decision.budget.output_class is not None and learner is not None:
        learner.count_unjudged("no_usage")
    length = LENGTH_REASONS.get(_usage_shape(decision), "length")
    if length not in finish_reasons:
        return
    out.finish_reason = length
    served = retried_to or routed_pool
    if (
        _is_batch(decision)
        or decision.client_max_output_tokens is not None
        or core.models.next_larger(served) is None
    ):
        return
    out.truncated = True
    out.misroute = out.misroute or "truncated"
    out.misroute_cause = out.misroute_cause or TRUNCATED
    out.misroutes.append((served, served, "truncated", TRUNCATED))


def _learned_budget(decision: Decision, out: LearnOutcome) -> TokenBudget | None:
    """The budget the served usage is learned against, or None (outcome counted): a
    ``previous_response_id`` continuation's usage counts stored turns; a chat batch's usage is
    the sum over its conversations, learned against the summed estimate (extproc.core.learn.batch)."""
    if not decision.learn:
        out.calibration.append("previous_response")
        return None
    if decision.budget.screened:
        out.calibration.append("screened")  # a routing-only budget (extproc.core.estimate.screen)
        return None
    if decision.batch_budgets is None:
        return decision.budget
    learned = batch_budget(list(decision.batch_budgets))
    if learned is None:
        out.calibration.append("batch_mixed_keys")
    return learned
