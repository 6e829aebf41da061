"""Hooks for every test: a failing test's report shows the logs of the child processes running for
it (stacks started with :func:`tests.stacks.running`)."""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.stacks import attach_logs


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed:
        attach_logs(report)
    return report
