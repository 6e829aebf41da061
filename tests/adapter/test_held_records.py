"""extproc.adapter.held_records: one record per request whatever order the two streams end in, and
nothing held forever."""

from __future__ import annotations

import dataclasses

from extproc.adapter.held_records import HeldRecords
from extproc.core.route.decision import DecisionRecord


def _rec(rid: str) -> DecisionRecord:
    return DecisionRecord(
        ts_s=1.0,
        request_id=rid,
        model="m",
        category="latin",
        pool="short",
        reason="fits",
        estimated_prompt_tokens=10,
        output_reserve_tokens=5,
        n_sequences=1,
        budget_tokens=15,
        status=None,
        prompt_tokens=None,
        completion_tokens=None,
        end="complete",
        retried_to_pool=None,
        misroute=None,
    )


class _Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def _held(clock: _Clock, **kw: float) -> tuple[HeldRecords, list[tuple[str, str]]]:
    out: list[tuple[str, str]] = []
    held = HeldRecords(lambda r, tp: out.append((r.request_id, tp)), clock=clock, **kw)  # type: ignore[arg-type]
    return held, out


def _served(record: DecisionRecord) -> DecisionRecord:
    return dataclasses.replace(record, status=200, prompt_tokens=12)


def test_hold_claim_release_in_either_order() -> None:
    clock = _Clock()
    held, out = _held(clock)
    written: list[DecisionRecord] = []
    held._write = lambda r, tp: (written.append(r), out.append((r.request_id, tp)))  # type: ignore[assignment,func-returns-value]
    held.hold("a", _rec("a"), "tp-a")  # routing stream first (the usual order)
    held.claim("a")
    held.claim("b")  # observability stream starts first
    held.hold("b", _rec("b"), "tp-b")
    clock.t = 1000.0  # claimed records wait for their stream however long the response takes
    held.expire()
    assert out == []
    held.claim("c")  # observability stream starts and ends before the routing stream's end
    held.release("c", _served)
    held.release("a", _served)
    held.release("b", _served)
    assert out == [("a", "tp-a"), ("b", "tp-b")]
    clock.t = 1005.0
    held.hold("c", _rec("c"), "tp-c")  # within hold_s of its release: completed at once
    assert out[-1] == ("c", "tp-c")
    assert all((r.status, r.prompt_tokens) == (200, 12) for r in written)
    assert len(held) == 0
    held.release("a", _served)  # released twice: the second waits for a record that never comes
    clock.t = 2000.0
    held.expire()
    assert len(held) == 0 and len(out) == 3


def test_unclaimed_records_are_written_after_hold_s_and_at_flush() -> None:
    clock = _Clock()
    held, out = _held(clock, hold_s=10.0)
    held.hold("a", _rec("a"), "")
    clock.t = 5.0
    held.hold("b", _rec("b"), "")
    clock.t = 10.5
    held.expire()
    assert out == [("a", "")]
    held.claim("c")
    held.hold("c", _rec("c"), "")
    held.flush()  # shutdown: every record still held, claimed or not
    assert sorted(rid for rid, _ in out) == ["a", "b", "c"] and len(held) == 0


def test_ids_that_cannot_be_told_apart_are_written_at_once_and_the_table_is_bounded() -> None:
    clock = _Clock()
    held, out = _held(clock, max_entries=2)
    held.hold("", _rec(""), "")  # no request id
    held.hold("a", _rec("a"), "")
    held.hold("a", _rec("a"), "")  # the same id twice: the second cannot wait for a claim
    assert [rid for rid, _ in out] == ["", "a"]
    held.hold("b", _rec("b"), "")
    held.hold("c", _rec("c"), "")  # over max_entries: the oldest unclaimed goes out as it is
    assert [rid for rid, _ in out] == ["", "a", "a"] and len(held) == 2
    held.claim("zz")  # a claim whose record never comes is forgotten hold_s after its release
    held.release("zz", _served)
    clock.t = 100.0
    held.expire()
    assert len(held) == 0
