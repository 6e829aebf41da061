"""Prometheus view of the output learner (issue 30): each class's current reserve and the
truncation controller's tail share, read at scrape time (no work on the request path).

The class labels are bounded: ``model_name`` by ``estimator.max_models`` (the estimator's model
keys), ``endpoint`` by the budgeted endpoints, ``reasoning`` by its fixed labels, ``tools`` by
``true``/``false``, ``prompt_band`` by ``estimator.output_reserve.prompt_band_edges_tokens``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from extproc.core.estimate.output_reserve import OutputLengthLearner

__all__ = ["OutputCollector"]

_CLASS_LABELS = ["model_name", "endpoint", "reasoning", "tools", "prompt_band"]


class OutputCollector(Collector):
    """Exports ``tbr_output_reserve_tokens`` per class, ``tbr_output_tail_share`` and
    ``tbr_output_unjudged_total`` by reason.

    Args:
        learner: returns the process-wide learner, or None while the output reserve is not learned
            (then nothing is exported).
    """

    def __init__(self, learner: Callable[[], OutputLengthLearner | None]) -> None:
        self._learner = learner

    def collect(self) -> Iterator[Metric]:
        """The current values (called by the registry at scrape time); the families are always
        exposed, without samples while the output reserve is not learned."""
        learner = self._learner()
        reserve = GaugeMetricFamily(
            "tbr_output_reserve_tokens",
            "Output reserve (tokens per sequence) a request of the class without a client maximum "
            "gets now, before the largest pool's room caps it; classes that learned an answer.",
            labels=_CLASS_LABELS,
        )
        share = GaugeMetricFamily(
            "tbr_output_tail_share",
            "The fleet's tail share: share of a class's answers allowed above its reserve (the reserve "
            "is the 1 - share quantile) under controller_scope fleet, steered by all observed "
            "truncations towards estimator.output_reserve.truncation_budget.",
        )
        unjudged = CounterMetricFamily(
            "tbr_output_unjudged_total",
            "Served answers the output learner could not learn from, by reason: chat_batch and "
            "multi_prompt (usage summed over conversations or prompts), no_usage (no usage in the "
            "response, e.g. a stream without stream_options.include_usage), no_choice_reasons "
            "(n > 1 without a finish reason per choice).",
            labels=["reason"],
        )
        if learner is not None:
            for reason, count in learner.unjudged.items():
                unjudged.add_metric([reason], count)
            for key, state in learner.items():
                value = state.reserve_tokens or learner.prior_quantile_tokens(key)
                labels = [
                    key.model,
                    key.endpoint,
                    key.reasoning,
                    str(key.tools).lower(),
                    str(key.prompt_band),
                ]
                reserve.add_metric(labels, value)
            share.add_metric([], learner.fleet_tail_share)
        yield reserve
        yield share
        yield unjudged
