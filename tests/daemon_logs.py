"""A failing test prints the end of each daemon's log (issue 25 item 8): what the NameNodes
and JournalNodes it ran said last, also where only the test's output is kept (a CI run, a
fresh clone on a busy machine). Registered in ``tests/conftest.py``; the tails come from
``hadev.daemon.failure_log_tails``: every daemon the hadev launchers started in this process
whose log changed since the test began (its fixtures included)."""

from __future__ import annotations

import time
from collections.abc import Generator

import pytest

from hadev.daemon import failure_log_tails

_BEGAN = pytest.StashKey[float]()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    item.stash[_BEGAN] = time.time()
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.failed and call.when in ("setup", "call"):
        tails = failure_log_tails(item.stash.get(_BEGAN, 0.0))
        if tails:
            report.sections.append(("daemon logs (last lines)", tails))
    return report
