"""Waiting on an event in tests: poll a condition until it holds, with a bound, instead of sleeping
for an interval and hoping the event happened (which flakes on a loaded machine)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

__all__ = ["until", "until_async"]


def until(
    cond: Callable[[], object], timeout_s: float = 10.0, what: str = "condition", poll_s: float = 0.02
) -> None:
    """Return as soon as ``cond()`` is truthy; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, f"{what} not reached within {timeout_s} s"
        time.sleep(poll_s)


async def until_async(
    cond: Callable[[], object | Awaitable[object]],
    timeout_s: float = 10.0,
    what: str = "condition",
    poll_s: float = 0.02,
) -> None:
    """:func:`until` on the event loop; ``cond`` may be a coroutine function."""
    deadline = time.monotonic() + timeout_s
    while True:
        got = cond()
        if isinstance(got, Awaitable):
            got = await got
        if got:
            return
        assert time.monotonic() < deadline, f"{what} not reached within {timeout_s} s"
        await asyncio.sleep(poll_s)
