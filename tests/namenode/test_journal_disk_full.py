"""A JournalNode whose disk fills up under a live NameNode (issue 10 row 6), on a real full
filesystem: the JournalNode's directory is a small tmpfs mounted by the test (real ENOSPC),
filled to the last byte, emptied again, and unmounted at the end.

What must hold: writes go on (the other two JournalNodes are a quorum); the full JournalNode
says "disk full" in its log and in ``journalnode_disk_full``; the active NameNode's journal
status (``FSNamesystem.journal_status`` and ``hanamenode_journal_out_of_sync``) names it with
cause ``disk-full``; once space returns, it writes again from the next segment.
"""

from __future__ import annotations

import errno
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.namenode.cluster import JOURNAL_ID, NameNodeCluster, wait_for

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root"),
]


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path/journal/jn0`` as a 2 MiB tmpfs: JournalNode 0's storage root."""
    mount_point = tmp_path / "journal" / "jn0"
    mount_point.mkdir(parents=True)
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m,mode=0755", "tmpfs", str(mount_point)],
        check=True,
    )
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=True)


def fill(directory: Path) -> Path:
    """Write a filler file until the filesystem is full (real ENOSPC); return its path."""
    filler = directory / "filler"
    chunk = b"\0" * 4096
    with open(filler, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    return filler


def test_a_full_journalnode_says_so_and_catches_up_when_space_returns(
    tmp_path: Path, small_tmpfs: Path
) -> None:
    with capture_logs() as logs, NameNodeCluster(tmp_path) as c:
        c.transition_to_active("nn1")
        c.mkdir("nn1", "/before")
        jn0 = c.journal.node(0)
        address = c.journal.addresses[0]  # no dfs.journalnode.ids here: the id is the address
        fsn = c.fsn("nn1")

        def jn0_disk_full() -> float | None:
            return jn0.registry.get_sample_value("journalnode_disk_full", {"journal": JOURNAL_ID})

        assert jn0_disk_full() == 0
        filler = fill(small_tmpfs)
        # The open segment's last page has some room: write until an append needs more.
        for i in range(400):
            c.mkdir("nn1", f"/while-full/{i:04d}-" + "x" * 100, create_parent=True)
            if jn0_disk_full() == 1:
                break
        assert jn0_disk_full() == 1, "JournalNode 0 never ran out of space"
        assert any(e["event"].startswith("disk full") and "[ENOSPC]" in e["error"] for e in logs), [
            e["event"] for e in logs
        ]
        # The JournalNode sets its gauge before it answers; the writer marks its logger out of
        # sync when that answer arrives, a moment later.
        wait_for(
            lambda: "No space left on device [ENOSPC]" in dict(fsn.journal_status())[address],
            what="the NameNode to name JN0's full disk",
        )
        status = dict(fsn.journal_status())
        assert all(cause == "" for a, cause in status.items() if a != address), status
        metrics = c.server("nn1").metrics
        assert (
            metrics.value(
                "hanamenode_journal_out_of_sync",
                {"journalnode": address, "address": address, "cause": "disk-full"},
            )
            == 1.0
        )
        # Writes go on with the other two; then space returns and a new segment starts.
        c.mkdir("nn1", "/still-writing")
        filler.unlink()
        fsn.roll_edit_log()
        c.mkdir("nn1", "/after")
        wait_for(lambda: dict(fsn.journal_status())[address] == "", what="JN0 back in sync")
        assert jn0_disk_full() == 0
        last = fsn.edit_log.synced_txid if fsn.edit_log is not None else 0
        assert jn0.journal(JOURNAL_ID).stats.last_written_txid == last
        assert (
            metrics.value(
                "hanamenode_journal_out_of_sync",
                {"journalnode": address, "address": address, "cause": ""},
            )
            == 0.0
        )
