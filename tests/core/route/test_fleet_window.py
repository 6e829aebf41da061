"""The advice window (issue 33, item 1): bins, sliding on a fake clock, merging replicas' exports."""

from __future__ import annotations

import itertools
import json

import pytest

from extproc.core.route.fleet_window import BIN_UPPER_TOKENS, N_BINS, FleetWindow, WindowFormatError, bin_of


def test_bins_are_quarter_octaves_with_every_power_of_two_an_upper_edge() -> None:
    assert BIN_UPPER_TOKENS[0] == 16 and BIN_UPPER_TOKENS[-1] == 2**24
    for e in range(4, 25):
        i = bin_of(2**e)
        assert BIN_UPPER_TOKENS[i] == 2**e
        assert bin_of(2**e + 1) == i + 1 or 2**e == BIN_UPPER_TOKENS[-1]
    assert bin_of(0) == 0 and bin_of(10**9) == N_BINS - 1
    assert all(a < b for a, b in itertools.pairwise(BIN_UPPER_TOKENS))


def test_window_slides_by_buckets_on_the_callers_clock() -> None:
    w = FleetWindow(["short", "long"], window_s=60.0, bucket_s=10.0, started_s=0.0)
    for i in range(120):  # one request per second for two minutes, 1,000 tokens each
        w.add("short", 1000, float(i))
    w.add("long", None, 119.5)  # an unbudgeted request (unreadable body)
    w.add("other", 1000, 119.5)  # not a configured pool: not counted
    snap = w.snapshot(120.0)
    # buckets 7..12 are in the window at t = 120 (bucket 12 has just begun): t in [70, 120)
    assert snap.span_s == pytest.approx(50.0)
    assert snap.pools["short"].requests == 50
    assert snap.pools["short"].counts[bin_of(1000)] == 50
    assert snap.pools["long"].requests == 1 and snap.pools["long"].unbudgeted == 1
    assert snap.rate_req_per_s("short") == pytest.approx(1.0)
    assert "other" not in snap.pools and snap.rate_req_per_s("other") == 0.0
    assert w.snapshot(1000.0).pools["short"].requests == 0  # all expired


def test_a_young_window_measures_the_rate_over_the_time_since_start() -> None:
    w = FleetWindow(["p"], window_s=300.0, bucket_s=10.0, started_s=1000.0)
    for i in range(40):
        w.add("p", 500, 1000.0 + i * 0.5)
    snap = w.snapshot(1020.0)
    assert snap.span_s == pytest.approx(20.0)
    assert snap.rate_req_per_s("p") == pytest.approx(2.0)


def test_replicas_exports_add_up_exactly() -> None:
    a = FleetWindow(["short", "long"], window_s=60.0, bucket_s=5.0, started_s=0.0)
    b = FleetWindow(["short", "long"], window_s=60.0, bucket_s=5.0, started_s=0.0)
    for i in range(60):
        a.add("short", 100 + i, float(i))
        b.add("long" if i % 3 == 0 else "short", 20_000 if i % 3 == 0 else 300, float(i) + 0.25)
    doc = json.loads(json.dumps(b.export(59.9)))  # through JSON, as through Redis
    a.set_remote("replica-b", doc, 59.9)
    snap = a.snapshot(59.9)
    own_a, own_b = a.snapshot(59.9), b.snapshot(59.9)
    assert snap.replicas == 2 and own_b.replicas == 1
    assert snap.pools["short"].requests == 60 + 40 and snap.pools["long"].requests == 20
    assert own_a.pools["short"].requests == 100  # (the merged view; a's own windows unchanged)
    a.drop_remote([])
    assert a.snapshot(59.9).pools["short"].requests == 60 and a.snapshot(59.9).replicas == 1


@pytest.mark.parametrize(
    ("doc", "reason"),
    [
        ("nope", "version-1"),
        ({"v": 2}, "version-1"),
        ({"v": 1, "bucket_s": 10.0, "started_s": 0, "buckets": {}}, "bucket_s"),
        ({"v": 1, "bucket_s": 5.0, "started_s": "x", "buckets": {}}, "started_s"),
        ({"v": 1, "bucket_s": 5.0, "started_s": 0, "buckets": []}, "mapping"),
        ({"v": 1, "bucket_s": 5.0, "started_s": 0, "buckets": {"x": {}}}, "integer"),
        ({"v": 1, "bucket_s": 5.0, "started_s": 0, "buckets": {"11": {"p": [[999, 1]]}}}, "bounds"),
        ({"v": 1, "bucket_s": 5.0, "started_s": 0, "buckets": {"11": {"p": [[1, -1]]}}}, "bounds"),
        ({"v": 1, "bucket_s": 5.0, "started_s": 0, "buckets": {"11": {"p": [[1, 1.5]]}}}, "bounds"),
        ({"v": 1, "bucket_s": 5.0, "started_s": 0, "buckets": {"11": {"p": 3}}}, "list"),
    ],
)
def test_a_bad_export_is_refused_and_nothing_is_kept(doc: object, reason: str) -> None:
    w = FleetWindow(["p"], window_s=60.0, bucket_s=5.0, started_s=0.0)
    with pytest.raises(WindowFormatError, match=reason):
        w.set_remote("bad", doc, 60.0)
    assert w.snapshot(60.0).replicas == 1


def test_bad_window_parameters_are_refused() -> None:
    for window_s, bucket_s in ((10.0, 20.0), (0.0, 0.0), (float("inf"), 1.0), (10.0, -1.0)):
        with pytest.raises(ValueError, match="bucket_s"):
            FleetWindow(["p"], window_s=window_s, bucket_s=bucket_s, started_s=0.0)
