"""``python -m benchmarks.run --variants … --sizes …``: which variants a side-by-side run measures,
and its report (each router against the one-message floor of the same repetition)."""

from __future__ import annotations

import pytest

from benchmarks.report import render_side_by_side
from benchmarks.variants import variants


def test_selected_variants_keep_bare_and_one_process_per_size() -> None:
    chosen = variants(["floor_1msg", "shipped_1msg"], ["1KB", "32KB"])
    names = [v.name for v in chosen]
    assert names == ["bare", "floor_1msg", "floor_1msg_32KB", "shipped_1msg", "shipped_1msg_32KB"]
    bare = chosen[0]
    assert bare.sizes == ("1KB", "32KB")
    assert all(v.sizes in (("1KB",), ("32KB",)) for v in chosen[1:])
    assert {v.name: v.shipped for v in chosen}["shipped_1msg_32KB"]


def test_all_variants_when_nothing_is_selected() -> None:
    assert len(variants()) == len(variants(None, None)) > len(variants(["route_1msg"]))


@pytest.mark.parametrize(
    ("names", "sizes", "bad"), [(["route_2msg"], None, "route_2msg"), (None, ["2KB"], "2KB")]
)
def test_unknown_names_and_sizes_are_refused_by_name(
    names: list[str] | None, sizes: list[str] | None, bad: str
) -> None:
    with pytest.raises(ValueError, match=bad):
        variants(names, sizes)


def _row(variant: str, rep: int, rps: float, cpu_ms: float) -> dict[str, object]:
    return {
        "phase": "throughput",
        "variant": variant,
        "size": "1KB",
        "rep": rep,
        "requests": int(rps * 3),
        "rps": rps,
        "p50_ms": 1.0,
        "p99_ms": 2.0,
        "router_cpu_ms_per_req": cpu_ms,
        "envoy_cpu_ms_per_req": 0.2,
        "msgs_per_req": 1.0,
        "fail_open": 0,
        "errors": 0,
        "short_share": 1.0,
        "command": "wrk",
    }


def test_side_by_side_report_pairs_each_repetition_with_its_floor() -> None:
    e2e = [
        _row("bare", 0, 4000, 0.0),
        _row("bare", 1, 3000, 0.0),
        _row("floor_1msg", 0, 2000, 0.40),
        _row("floor_1msg", 1, 1000, 0.30),
        _row("route_1msg", 0, 1800, 0.50),
        _row("route_1msg", 1, 1100, 0.33),
    ]
    res = {
        "command": "python -m benchmarks.run --variants floor_1msg,route_1msg --sizes 1KB",
        "date": "2026-12-05 07:00 UTC",
        "elapsed_s": 60.0,
        "quick": False,
        "machine": {
            "host": "h",
            "cpu": "c",
            "cores": 2,
            "mem_gib": 1.0,
            "kernel": "k",
            "loadavg_start": ["1", "1", "1"],
            "loadavg_end": ["2", "2", "2"],
            "python": "3.11",
            "grpcio": "g",
            "protobuf": "upb",
            "envoy": "e",
            "commit": "abc",
        },
        "params": {"reps": 2, "wrk_s": 3.0, "hey_s": 3.0, "latency_reps": 1},
        "bodies": [{"label": "1KB", "bytes": 1024, "prompt_tokens": 189, "source": "s"}],
        "variants": [
            {"name": "bare", "label": "bare", "sizes": ["1KB"]},
            {"name": "floor_1msg", "label": "floor", "sizes": ["1KB"]},
            {"name": "route_1msg", "label": "route", "sizes": ["1KB"]},
        ],
        "e2e": e2e,
        "phase_time": {"route_1msg": {"request_body": [0.5, 10000.0]}},
    }
    text = render_side_by_side(res)
    # req/s 1800/2000 and 1100/1000; CPU 0.50/0.40 and 0.33/0.30, medians of the two repetitions
    assert "| `route_1msg` | 1KB | `floor_1msg` | 0.90, 1.10 | 1.00 | 1.25, 1.10 | 1.18 |" in text
    assert "| `route_1msg` | 10,000 | – | 50.0 |" in text


def test_hot_path_times_every_part_of_a_request_and_refuses_unknown_configs() -> None:
    from benchmarks.hot_path import measure

    shipped = measure("shipped", "1KB", number=20, repeat=1)
    route = measure("route", "1KB", number=20, repeat=1)
    assert "read decision (incl. its counter)" in shipped  # adaptive reads are shipped
    assert "read decision (incl. its counter)" not in route  # routing only: nothing read
    assert all(us > 0 for us in [*shipped.values(), *route.values()])
    with pytest.raises(ValueError, match="shipped or route"):
        measure("calib_all")


def test_diagnostic_variants_run_only_when_named() -> None:
    from benchmarks.variants import DIAGNOSTIC

    every = {v.name for v in variants()}
    assert not DIAGNOSTIC & every  # make bench does not run them
    assert [v.name for v in variants(["shipped_nodecide_1msg"])] == ["bare", "shipped_nodecide_1msg"]


def test_shipped_targets_judge_the_shipped_default_against_the_floor_on_its_own_loop() -> None:
    from benchmarks.report import _shipped_targets

    e2e = [
        _row("floor_1msg", 0, 2000, 0.40),
        _row("floor_1msg_uvloop", 0, 2400, 0.30),
        _row("shipped_1msg", 0, 2000, 0.39),
    ]
    lines = _shipped_targets(e2e)
    assert "against the one-message floor on the same event loop" in lines[0]
    assert "`shipped_1msg` vs `floor_1msg_uvloop`" in lines[2]
    # same loop: 2000/2400 = 0.83 req/s (missed), 0.39/0.30 = 1.30 CPU (missed); the asyncio floor
    # would have passed both (1.00 and 0.97): the verdict is the same-loop one
    rps = next(line for line in lines if line.startswith("| 1 KB: throughput"))
    cpu = next(line for line in lines if line.startswith("| 1 KB: router CPU"))
    assert rps.split(" | ")[1:4] == ["0.83", "not met", "1.00"]
    assert cpu.split(" | ")[1:4] == ["1.30", "not met", "0.97"]
