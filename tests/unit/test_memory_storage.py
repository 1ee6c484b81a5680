"""``MemoryJournalStorage`` models a page cache: a machine crash (``lose_unsynced``) loses what
was written but not fsynced, so the simulator sees a missing fsync (mutant
``append-without-fdatasync``) as lost edits; the clean store loses only the best-effort committed
txid."""

from __future__ import annotations

from conf.mutants import Mutant, planted
from journalnode.journal import Journal
from journalnode.storage import MemoryJournalStorage
from proto import edits_pb2, records
from proto.values import NamespaceInfo, RequestInfo

NS = NamespaceInfo("CID-1", 42)


def _write(journal: Journal, first: int, count: int, serial: int) -> int:
    ops = [
        edits_pb2.EditOp(txid=t, noop=edits_pb2.NoOp(payload=b"x"))
        for t in range(first, first + count)
    ]
    journal.journal(
        RequestInfo("j", "CID-1", 1, serial, committed_txid=first - 1),
        segment_txid=1,
        first_txid=first,
        num_txns=count,
        framed=records.frame_ops(ops),
    )
    return serial + 1


def _journal_with_edits(count: int) -> tuple[MemoryJournalStorage, Journal]:
    storage = MemoryJournalStorage()
    journal = Journal("j", storage)
    journal.format(NS)
    journal.new_epoch(NS, 1)
    journal.start_log_segment(RequestInfo("j", "CID-1", 1, 0), 1)
    serial = 1
    for first in range(1, count + 1, 2):
        serial = _write(journal, first, 2, serial)
    return storage, journal


def test_fsynced_appends_survive_a_machine_crash() -> None:
    storage, journal = _journal_with_edits(6)
    assert journal.committed_txid == 4
    lost = storage.lose_unsynced()
    assert lost == ["committed txid 4"]  # best effort, never fsynced (design doc 4.1)
    again = Journal("j", storage)
    assert [s.end_txid for s in again.segments()] == [6]
    assert again.committed_txid == 0


def test_without_fsync_a_machine_crash_loses_acknowledged_edits() -> None:
    with planted(Mutant.APPEND_WITHOUT_FDATASYNC):
        storage, _ = _journal_with_edits(6)
    lost = storage.lose_unsynced()
    assert lost[0].startswith("segment 1: ") and "unsynced bytes" in lost[0]
    again = Journal("j", storage)
    # Only the header was synced (by startLogSegment): the in-progress segment is empty now.
    assert again.segments() == []


def test_a_process_crash_loses_nothing_even_without_fsync() -> None:
    with planted(Mutant.APPEND_WITHOUT_FDATASYNC):
        storage, _ = _journal_with_edits(4)
    again = Journal("j", storage)  # kill -9 and restart: the page cache survives
    assert [s.end_txid for s in again.segments()] == [4]
