"""extproc/service/request_metrics.py answers a scrape exactly as the prometheus-client ``Counter`` and
``Histogram`` it stands in for: the same exposition text for the same observations."""

from __future__ import annotations

import random

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

import extproc.service.metrics  # noqa: F401  (its process-wide setting: no `_created` samples)
from extproc.service.request_metrics import CountedCounter, CountedHistogram

_BOUNDS = (5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2)


def test_counter_exposition_is_prometheus_clients() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    a = CountedCounter("tbr_x_decisions", "Decisions.", ["pool", "reason"], registry=ours)
    b = Counter("tbr_x_decisions", "Decisions.", ["pool", "reason"], registry=theirs)
    rng = random.Random(7)
    for _ in range(500):
        labels = (rng.choice(["short", "long"]), rng.choice(["fits", "exceeds_all_pools", "body_empty"]))
        a.labels(*labels).inc()
        b.labels(*labels).inc()
    assert generate_latest(ours) == generate_latest(theirs)


def test_histogram_exposition_is_prometheus_clients_including_bucket_edges() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    a = CountedHistogram("tbr_x_seconds", "Seconds.", ["phase"], buckets=_BOUNDS, registry=ours)
    b = Histogram("tbr_x_seconds", "Seconds.", ["phase"], buckets=_BOUNDS, registry=theirs)
    rng = random.Random(11)
    # values on the edges (le is inclusive), between them, beyond the last, and zero
    values = [*_BOUNDS, 0.0, 1.0, *(rng.lognormvariate(-9, 1.5) for _ in range(1000))]
    for v in values:
        phase = rng.choice(["request_body", "request_headers"])
        a.labels(phase).observe(v)
        b.labels(phase).observe(v)
    assert generate_latest(ours) == generate_latest(theirs)


def test_integer_buckets_print_as_prometheus_client_prints_them() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    bounds = (256, 512, 1024, 2048, 4096, 8192)
    a = CountedHistogram("tbr_x_tokens", "Tokens.", ["pool"], buckets=bounds, registry=ours)
    b = Histogram("tbr_x_tokens", "Tokens.", ["pool"], buckets=bounds, registry=theirs)
    for v in (1, 256, 257, 8192, 10_000):
        a.labels("short").observe(v)
        b.labels("short").observe(v)
    assert generate_latest(ours) == generate_latest(theirs)


def test_wrong_label_count_and_unordered_buckets_are_refused() -> None:
    c = CountedCounter("tbr_x", "X.", ["a", "b"])
    with pytest.raises(ValueError, match="expected labels"):
        c.labels("only-one")
    with pytest.raises(ValueError, match="ascending"):
        CountedHistogram("tbr_y", "Y.", [], buckets=(2, 1))


def test_a_name_taken_twice_in_one_registry_is_refused_as_by_prometheus_client() -> None:
    r = CollectorRegistry()
    Counter("tbr_x_decisions", "Decisions.", ["pool"], registry=r)
    with pytest.raises(ValueError, match="Duplicated"):
        CountedCounter("tbr_x_decisions", "Decisions.", ["pool"], registry=r)
