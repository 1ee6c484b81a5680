"""acceptRecovery on a real disk, killed at each of its steps: whatever the JournalNode holds
after a restart, its next prepareRecovery reports a segment and a paxos record that agree
(HDFS-3955: the decision is persisted before the downloaded segment replaces the old one)."""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest

from journalnode.file_storage import FileJournalStorage
from journalnode.journal import Journal
from journalnode.storage import MemoryJournalStorage
from proto import records
from proto.values import SegmentState
from tests.unit.test_journal import JID, NS, Writer, formatted, writer_with_segment


class Crash(Exception):
    """The JournalNode process died here."""


class CrashingStorage(FileJournalStorage):
    """A real FileJournalStorage that dies on entering the named method once."""

    crash_in: str | None = None

    def _step(self, name: str) -> None:
        if self.crash_in == name:
            self.crash_in = None
            raise Crash(name)

    def install_segment(self, *args: Any) -> None:
        self._step("install_segment")
        super().install_segment(*args)

    def stage_segment(self, *args: Any) -> None:
        self._step("stage_segment")
        super().stage_segment(*args)

    def persist_accepted_recovery(self, *args: Any) -> None:
        self._step("persist_accepted_recovery")
        super().persist_accepted_recovery(*args)

    def install_staged_segment(self, *args: Any) -> bool:
        self._step("install_staged_segment")
        return super().install_staged_segment(*args)


@pytest.mark.parametrize(
    "crash_in",
    [None, "install_segment", "stage_segment", "persist_accepted_recovery",
     "install_staged_segment"],
)
def test_a_crash_anywhere_in_accept_recovery_leaves_segment_and_record_agreeing(
    tmp_path: Path, crash_in: str | None
) -> None:
    source = formatted(MemoryJournalStorage())
    writer_with_segment(source).write(1, 1, 9, payload=b"new")
    new_md5 = hashlib.md5(
        b"".join(source.storage.read_segment(1, 9))[records.HEADER_LEN :]
    ).digest()

    storage = CrashingStorage(tmp_path, JID)
    target = Journal(JID, storage)
    target.format(NS)
    writer_with_segment(target).write(1, 1, 4, payload=b"old")
    w2 = Writer(target, 2)
    w2.new_epoch()

    def fetch(url: str, jid: str, start: int, end: int) -> Iterable[bytes]:
        return source.storage.read_segment(start, end)

    storage.crash_in = crash_in
    # A step this version of acceptRecovery does not take (install_segment) never crashes.
    with contextlib.suppress(Crash):
        target.accept_recovery(w2.req(), SegmentState(1, 9, True, new_md5), "src", fetch)
    storage.close()

    with FileJournalStorage(tmp_path, JID) as restarted_storage:
        restarted = Journal(JID, restarted_storage)
        w3 = Writer(restarted, 3)
        w3.new_epoch()
        answer = restarted.prepare_recovery(w3.req(), 1)
        state = answer.segment_state
        assert state is not None
        if answer.accepted_in_epoch is None:
            # Nothing was decided here: the segment is still the one its writer wrote.
            assert state.end_txid == 4 and answer.last_writer_epoch == 1, answer
        else:
            # Decided in epoch 2: the segment is the accepted one, byte for byte.
            assert answer.accepted_in_epoch == 2
            assert (state.end_txid, state.md5) == (9, new_md5), answer
