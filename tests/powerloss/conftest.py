"""Power-cut tests (issue 26, docs/protocol.md §14): files and daemons on ``hadev.crashfs``
mounts, which lose on a cut what a disk would lose. The machine must be able to mount FUSE
(``scripts/bootstrap.sh`` installs fuse3): a test fails, rather than skips, when it cannot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hadev.crashfs import CrashMount, fuse_available

SECONDS_PER_CUT = 30


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A series of ``--power-cuts`` cuts gets 30 s a cut before pytest-timeout ends it (an
    hour at least): a long run must not die of the default run's limit."""
    limit = max(3600, SECONDS_PER_CUT * int(config.getoption("--power-cuts")))
    for item in items:
        if item.name == "test_power_cuts_under_load":
            item.add_marker(pytest.mark.timeout(limit))


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[CrashMount]:
    why = fuse_available()
    assert why is None, f"cannot mount FUSE here: {why}"
    with CrashMount(tmp_path / "backing", tmp_path / "mnt") as crash_mount:
        yield crash_mount
