"""The per-request Prometheus series, counted in plain integers and exposed when scraped.

prometheus-client's ``Counter.inc`` and ``Histogram.observe`` take a lock and check the child
on every call; the router makes five such calls per request (decision, budget, phase time, stream
end, read decision): ~15 % of its own work per request at 1 KB (docs/performance.md, "Where the
router's own time goes"). The router updates these series from one thread, its event loop, so
the series here are plain ``int`` / ``float`` cells that a ``prometheus_client`` custom collector
(``collect()``, the library's interface for values kept elsewhere) turns into the same metric
families at scrape time: names, labels, types, buckets and ``_total`` / ``_bucket`` / ``_sum`` /
``_count`` samples are those of the ``Counter`` and ``Histogram`` they replace (docs/metrics.md).
A scrape from another thread reads values at most one update old (a read of an ``int`` is atomic
under the GIL).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterator, Sequence
from itertools import pairwise

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

__all__ = ["CountedCounter", "CountedHistogram", "CounterCell", "HistogramCell"]


class CounterCell:
    """One labelled child of a :class:`CountedCounter`: ``inc()`` adds 1."""

    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0

    def inc(self) -> None:
        """Count one event."""
        self.value += 1


class HistogramCell:
    """One labelled child of a :class:`CountedHistogram`: per-bucket counts (not cumulative; the last
    is ``+Inf``) and the sum of the observed values."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        """Count ``value`` in the first bucket whose upper bound is ≥ it (Prometheus ``le``)."""
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


class CountedCounter:
    """A labelled Prometheus counter kept as :class:`CounterCell` s (module docstring).

    Args:
        name: the metric name without ``_total`` (as for ``prometheus_client.Counter``).
        documentation: the HELP text.
        labelnames: the label names, in order.
        registry: where to register it (None: not registered).
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        registry: CollectorRegistry | None = None,
    ) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self._cells: dict[tuple[str, ...], CounterCell] = {}
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> CounterCell:
        """The child of these label values (created at 0 on first use).

        Raises:
            ValueError: not one value per label name.
        """
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
        cell = self._cells.get(values)
        if cell is None:
            cell = self._cells[values] = CounterCell()
        return cell

    def describe(self) -> list[Metric]:
        """The family without samples (registry name checks)."""
        return [CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        """The counter family with one ``_total`` sample per child."""
        family = CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, cell in list(self._cells.items()):
            family.add_metric(values, cell.value)
        yield family


class CountedHistogram:
    """A labelled Prometheus histogram kept as :class:`HistogramCell` s (module docstring).

    Args:
        name: the metric name.
        documentation: the HELP text.
        labelnames: the label names, in order.
        buckets: the finite upper bounds, ascending (``+Inf`` is added).
        registry: where to register it (None: not registered).

    Raises:
        ValueError: bounds not strictly ascending.
    """

    def __init__(
        self,
        name: str,
        documentation: str,
        labelnames: Sequence[str],
        buckets: Sequence[float],
        registry: CollectorRegistry | None = None,
    ) -> None:
        bounds = tuple(float(b) for b in buckets if b != float("inf"))
        if any(a >= b for a, b in pairwise(bounds)):
            raise ValueError(f"{name}: buckets must be strictly ascending, got {buckets}")
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = bounds
        self._le = [floatToGoString(b) for b in bounds] + ["+Inf"]  # type: ignore[no-untyped-call]
        self._cells: dict[tuple[str, ...], HistogramCell] = {}
        if registry is not None:
            registry.register(self)

    def labels(self, *values: str) -> HistogramCell:
        """The child of these label values (created empty on first use).

        Raises:
            ValueError: not one value per label name.
        """
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
        cell = self._cells.get(values)
        if cell is None:
            cell = self._cells[values] = HistogramCell(self.bounds)
        return cell

    def describe(self) -> list[Metric]:
        """The family without samples (registry name checks)."""
        return [HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)]

    def collect(self) -> Iterator[Metric]:
        """The histogram family: cumulative ``_bucket`` samples, ``_count`` and ``_sum`` per child."""
        family = HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)
        for values, cell in list(self._cells.items()):
            running, buckets = 0, []
            for le, n in zip(self._le, list(cell.counts), strict=True):
                running += n
                buckets.append((le, float(running)))
            family.add_metric(list(values), buckets, cell.sum)
        yield family
