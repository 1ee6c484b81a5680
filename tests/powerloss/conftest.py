"""Power-cut tests (issue 26, docs/protocol.md §14): files and daemons on ``hadev.crashfs``
mounts, which lose on a cut what a disk would lose. The machine must be able to mount FUSE
(``scripts/bootstrap.sh`` installs fuse3): a test fails, rather than skips, when it cannot."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from hadev.crashfs import CrashMount, fuse_available


@pytest.fixture
def mount(tmp_path: Path) -> Iterator[CrashMount]:
    why = fuse_available()
    assert why is None, f"cannot mount FUSE here: {why}"
    with CrashMount(tmp_path / "backing", tmp_path / "mnt") as crash_mount:
        yield crash_mount
