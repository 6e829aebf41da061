"""``GET /metrics``: Prometheus text in vLLM's shape, read from :class:`mockpool.state.PoolState` at scrape.

Names, help texts and labels follow vLLM V1 (``vllm/v1/metrics/loggers.py``; docs
https://docs.vllm.ai/en/stable/usage/metrics/): gauges ``vllm:num_requests_running``,
``vllm:num_requests_waiting``, ``vllm:kv_cache_usage_perc`` and counters ``vllm:prompt_tokens_total``,
``vllm:generation_tokens_total``, ``vllm:request_success_total{finished_reason}``, all labelled
``{engine="0", model_name="<served model>"}``.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from mockpool.state import PoolState

LABELS = ["engine", "model_name"]


class PoolCollector(Collector):
    """Custom collector exposing one pool's state in vLLM metric names."""

    def __init__(self, state: PoolState) -> None:
        """Collect from ``state`` (read at every scrape)."""
        self._state = state

    def collect(self) -> Iterable[Metric]:
        """Yield the metric families (see module docstring)."""
        state = self._state
        values = ["0", state.settings.model_names[0]]
        gauges = (
            ("vllm:num_requests_running", "Number of requests in model execution batches.", state.running),
            ("vllm:num_requests_waiting", "Number of requests waiting to be processed.", state.waiting),
            ("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", state.kv_cache_usage),
        )
        for name, doc, value in gauges:
            gauge = GaugeMetricFamily(name, doc, labels=LABELS)
            gauge.add_metric(values, float(value))
            yield gauge
        counters = (
            ("vllm:prompt_tokens", "Number of prefill tokens processed.", state.prompt_tokens_total),
            (
                "vllm:generation_tokens",
                "Number of generation tokens processed.",
                state.generation_tokens_total,
            ),
        )
        for name, doc, value in counters:
            counter = CounterMetricFamily(name, doc, labels=LABELS)
            counter.add_metric(values, float(value))
            yield counter
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*LABELS, "finished_reason"],
        )
        for reason in ("stop", "length", "abort"):
            success.add_metric([*values, reason], float(state.finished.get(reason, 0)))
        yield success


def make_registry(state: PoolState) -> CollectorRegistry:
    """A private registry (never the global one: several pools may live in one process)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PoolCollector(state))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    """Prometheus text exposition (``text/plain; version=0.0.4``) of ``registry``."""
    return generate_latest(registry)
