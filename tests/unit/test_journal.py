"""The Journal's rules, one test per rule, over MemoryJournalStorage (no disk, no sockets)."""

from __future__ import annotations

from collections.abc import Iterable

import grpc
import pytest

from conf.mutants import Mutant, planted
from journalnode.epochs import EPOCH_WINDOW, MAX_EPOCH, epoch_out_of_range
from journalnode.errors import (
    ERROR_CLASS_KEY,
    EpochError,
    InvalidRequestError,
    JournalInconsistentError,
    JournalInUseError,
    JournalNotEmptyError,
    JournalNotFormattedError,
    JournalOutOfSyncError,
    JournalStateError,
    NamespaceMismatchError,
    from_status,
    to_status,
)
from journalnode.journal import DEFAULT_WRITER_HOLD_SECONDS, Journal
from journalnode.storage import MemoryJournalStorage
from proto import edits_pb2, records
from proto.values import NamespaceInfo, RequestInfo, SegmentState

JID = "ns1"
NS = NamespaceInfo("CID-test", 4242)


def ops(first: int, n: int, payload: bytes = b"x") -> bytes:
    return records.frame_ops(
        edits_pb2.EditOp(txid=t, noop=edits_pb2.NoOp(payload=payload))
        for t in range(first, first + n)
    )


class Writer:
    """Plays a QJM writer against one Journal: numbers IPCs the way AsyncLogger does."""

    def __init__(self, journal: Journal, epoch: int, cluster_id: str = NS.cluster_id) -> None:
        self.journal = journal
        self.epoch = epoch
        self.cluster_id = cluster_id
        self.serial = 0
        self.committed = 0

    def req(self, serial: int | None = None) -> RequestInfo:
        if serial is None:
            serial = self.serial
            self.serial += 1
        return RequestInfo(JID, self.cluster_id, self.epoch, serial, self.committed)

    def new_epoch(self) -> int | None:
        return self.journal.new_epoch(NS, self.epoch)

    def start(self, txid: int) -> None:
        self.journal.start_log_segment(self.req(), txid)

    def write(self, segment: int, first: int, n: int, payload: bytes = b"x") -> None:
        self.journal.journal(
            self.req(),
            segment_txid=segment,
            first_txid=first,
            num_txns=n,
            framed=ops(first, n, payload),
        )

    def finalize(self, start: int, end: int) -> None:
        self.journal.finalize_log_segment(self.req(), start, end)


def formatted(storage: MemoryJournalStorage | None = None) -> Journal:
    journal = Journal(JID, storage or MemoryJournalStorage())
    journal.format(NS)
    return journal


def writer_with_segment(journal: Journal, epoch: int = 1, start: int = 1) -> Writer:
    w = Writer(journal, epoch)
    w.new_epoch()
    w.start(start)
    return w


def fetch_from(source: Journal):  # type: ignore[no-untyped-def]
    def fetch(url: str, jid: str, start: int, end: int) -> Iterable[bytes]:
        return source.storage.read_segment(start, end)

    return fetch


# --------------------------------------------------------------- formatting and identity


def test_unformatted_journal_refuses_every_call() -> None:
    journal = Journal(JID, MemoryJournalStorage())
    assert not journal.is_formatted()
    with pytest.raises(JournalNotFormattedError, match="not formatted"):
        journal.new_epoch(NS, 1)
    with pytest.raises(JournalNotFormattedError):
        journal.get_journal_state(NS.cluster_id)
    with pytest.raises(JournalNotFormattedError):
        journal.start_log_segment(RequestInfo(JID, NS.cluster_id, 1, 0), 1)
    with pytest.raises(JournalNotFormattedError):
        journal.get_edit_log_manifest(NS.cluster_id, 0)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_format_refuses_a_journal_holding_data_unless_forced() -> None:
    clock = FakeClock()
    journal = Journal(JID, MemoryJournalStorage(), clock=clock)
    journal.format(NS)
    w = writer_with_segment(journal)
    w.write(1, 1, 3)
    with pytest.raises(JournalNotEmptyError, match="holds data"):
        journal.format(NamespaceInfo("CID-other", 1))
    # Forced, but the writer called just now: it holds the journal (issue 10 row 3).
    with pytest.raises(JournalInUseError, match=r"in use: a writer in epoch 1 called 0\.0 s ago"):
        journal.format(NamespaceInfo("CID-other", 1), force=True)
    assert journal.segments() == [SegmentState(1, 3, True)]
    clock.now += DEFAULT_WRITER_HOLD_SECONDS
    journal.format(NamespaceInfo("CID-other", 1), force=True)
    assert journal.segments() == []
    assert journal.last_promised_epoch == 0
    assert journal.namespace_info == NamespaceInfo("CID-other", 1)


def test_when_a_writer_holds_the_journal() -> None:
    """Held: a promise, and a call of the promised epoch accepted within the hold window
    (or the journal loaded that recently). A fenced writer's calls do not count."""
    clock = FakeClock()
    storage = MemoryJournalStorage()
    journal = Journal(JID, storage, clock=clock, writer_hold_seconds=30)
    journal.format(NS)
    assert not journal.writer_holds()  # no promise: nobody ever wrote
    w1 = Writer(journal, 1)
    w1.new_epoch()
    assert journal.writer_holds()
    clock.now += 29
    journal.heartbeat(w1.req())
    clock.now += 29
    assert journal.writer_holds()  # the heartbeat 29 s ago renewed it
    clock.now += 1
    assert not journal.writer_holds()
    w2 = Writer(journal, 2)
    w2.new_epoch()
    clock.now += 30
    with pytest.raises(EpochError):
        journal.heartbeat(w1.req())  # the fenced writer: refused, and renews nothing
    assert not journal.writer_holds()
    # A restarted JournalNode cannot know whether the writer is still there: held at first.
    restarted = Journal(JID, storage, clock=clock, writer_hold_seconds=30)
    assert restarted.writer_holds()
    clock.now += 30
    assert not restarted.writer_holds()
    restarted.format(NS, force=True)
    assert restarted.last_promised_epoch == 0 and not restarted.writer_holds()


def test_format_of_a_formatted_but_unused_journal_is_allowed() -> None:
    journal = formatted()
    journal.format(NamespaceInfo("CID-2", 7))
    assert journal.namespace_info == NamespaceInfo("CID-2", 7)


def test_wrong_cluster_id_is_refused_on_every_call() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 2)
    intruder = Writer(journal, 1, cluster_id="CID-intruder")
    intruder.serial = 100
    with pytest.raises(NamespaceMismatchError, match="CID-intruder"):
        intruder.write(1, 3, 1)
    with pytest.raises(NamespaceMismatchError):
        journal.new_epoch(NamespaceInfo("CID-test", 9999), 5)
    with pytest.raises(NamespaceMismatchError):
        journal.get_journal_state("CID-intruder")
    with pytest.raises(NamespaceMismatchError):
        journal.get_edit_log_manifest("CID-intruder", 0)
    assert journal.last_promised_epoch == 1


def test_request_for_another_journal_id_is_refused() -> None:
    journal = formatted()
    with pytest.raises(InvalidRequestError, match="other"):
        journal.heartbeat(RequestInfo("other", NS.cluster_id, 1, 0))


# --------------------------------------------------------------- epochs (HDFS-3077 §2.3, §2.5)


def test_new_epoch_must_be_strictly_higher() -> None:
    journal = formatted()
    assert journal.new_epoch(NS, 3) is None
    with pytest.raises(EpochError, match="proposed epoch 3 <= last promise 3"):
        journal.new_epoch(NS, 3)
    with pytest.raises(EpochError):
        journal.new_epoch(NS, 2)
    assert journal.last_promised_epoch == 3


def test_new_epoch_reports_the_newest_segment() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 5)
    w.finalize(1, 5)
    w.start(6)
    w.write(6, 6, 2)
    assert journal.new_epoch(NS, 2) == 6


def test_stale_epoch_is_fenced() -> None:
    journal = formatted()
    old = writer_with_segment(journal, epoch=1)
    old.write(1, 1, 1)
    Writer(journal, 2).new_epoch()
    with pytest.raises(EpochError, match="less than the last promised epoch 2"):
        old.write(1, 2, 1)
    with pytest.raises(EpochError):
        old.finalize(1, 1)
    with pytest.raises(EpochError):
        journal.heartbeat(old.req())


def test_higher_epoch_in_any_call_is_promised_before_acting() -> None:
    # A JN that missed newEpoch(5) learns of the new writer from its first call.
    storage = MemoryJournalStorage()
    journal = formatted(storage)
    Writer(journal, 5).start(1)
    assert journal.last_promised_epoch == 5
    assert storage.last_promised_epoch == 5
    assert storage.last_writer_epoch == 5


def test_write_needs_the_writer_epoch() -> None:
    # Epoch 2 promised but that writer never started a segment: epoch 2 may not journal()
    # into the segment epoch 1 started (lastWriterEpoch is still 1).
    journal = formatted()
    writer_with_segment(journal, epoch=1).write(1, 1, 1)
    w2 = Writer(journal, 2)
    w2.new_epoch()
    with pytest.raises(EpochError, match="not the current writer epoch 1"):
        w2.write(1, 2, 1)


# --------------------------------------------------------------- IPC ordering


def test_replayed_ipc_serial_is_refused() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 1)
    with pytest.raises(JournalOutOfSyncError, match="IPC serial 1"):
        journal.journal(w.req(serial=1), segment_txid=1, first_txid=2, num_txns=1, framed=ops(2, 1))


def test_reordered_ipc_serial_is_refused() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    late = w.req()  # serial 1, sent first but arrives second
    w.write(1, 1, 1)  # serial 2
    with pytest.raises(JournalOutOfSyncError, match="not higher"):
        journal.journal(late, segment_txid=1, first_txid=2, num_txns=1, framed=ops(2, 1))


def test_ipc_serial_restarts_with_a_new_epoch() -> None:
    journal = formatted()
    writer_with_segment(journal, epoch=1).write(1, 1, 3)
    w2 = Writer(journal, 2)
    w2.new_epoch()
    journal.heartbeat(w2.req(serial=0))


# --------------------------------------------------------------- txid contiguity


def test_txid_gap_is_refused() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 3)
    with pytest.raises(JournalOutOfSyncError, match="can't write txid 5: expecting txid 4"):
        w.write(1, 5, 1)
    assert journal.segments() == [SegmentState(1, 3, True)]


def test_reordered_batch_is_refused() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 3)
    with pytest.raises(JournalOutOfSyncError, match="expecting txid 4"):
        w.write(1, 2, 2)


def test_records_must_match_the_announced_txids() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    with pytest.raises(InvalidRequestError, match="txid 7 where 1 was expected"):
        journal.journal(w.req(), segment_txid=1, first_txid=1, num_txns=1, framed=ops(7, 1))
    with pytest.raises(InvalidRequestError, match="2 records where 3 were announced"):
        journal.journal(w.req(), segment_txid=1, first_txid=1, num_txns=3, framed=ops(1, 2))
    with pytest.raises(InvalidRequestError, match="at least one"):
        journal.journal(w.req(), segment_txid=1, first_txid=1, num_txns=0, framed=b"")


def test_corrupt_records_are_refused_and_nothing_is_written() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    framed = bytearray(ops(1, 2))
    framed[-1] ^= 0xFF
    with pytest.raises(InvalidRequestError, match="checksum"):
        journal.journal(w.req(), segment_txid=1, first_txid=1, num_txns=2, framed=bytes(framed))
    assert journal.segments() == []
    w.write(1, 1, 2)
    assert journal.segments() == [SegmentState(1, 2, True)]


def test_write_without_a_segment_is_refused() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 2)
    w.finalize(1, 2)
    with pytest.raises(JournalOutOfSyncError, match="no segment is open"):
        w.write(3, 3, 1)


def test_write_to_another_segment_than_the_open_one_is_refused() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 2)
    with pytest.raises(JournalOutOfSyncError, match="writing segment 7"):
        w.write(7, 3, 1)


def test_restarted_journal_accepts_no_write_before_a_new_segment() -> None:
    # After a JN restart the writer's logger is out of sync until its next segment
    # (HDFS-3077 §2.2), rather than appending to a file it may have lost the tail of.
    storage = MemoryJournalStorage()
    journal = formatted(storage)
    w = writer_with_segment(journal)
    w.write(1, 1, 2)
    w.journal = Journal(JID, storage)
    with pytest.raises(JournalOutOfSyncError, match="no segment is open"):
        w.write(1, 3, 1)
    assert w.journal.segments() == [SegmentState(1, 2, True)]


def test_committed_txid_only_moves_forward() -> None:
    storage = MemoryJournalStorage()
    journal = formatted(storage)
    w = writer_with_segment(journal)
    w.write(1, 1, 5)
    w.committed = 5
    journal.heartbeat(w.req())
    assert storage.committed_txid == 5
    w.committed = 3
    with pytest.raises(JournalOutOfSyncError, match="backward"):
        journal.heartbeat(w.req())


# --------------------------------------------------------------- segments


def test_start_log_segment_persists_writer_epoch_before_the_segment() -> None:
    order: list[str] = []

    class Recording(MemoryJournalStorage):
        def persist_last_writer_epoch(self, epoch: int) -> None:
            order.append(f"writer-epoch {epoch}")
            super().persist_last_writer_epoch(epoch)

        def start_segment(self, txid: int) -> None:
            order.append(f"segment {txid}")
            super().start_segment(txid)

    journal = formatted(Recording())
    writer_with_segment(journal, epoch=3, start=1)
    assert order == ["writer-epoch 3", "segment 1"]
    assert journal.last_writer_epoch == 3


def test_start_log_segment_refuses_to_overwrite_finalized_or_covered_txids() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 10)
    w.finalize(1, 10)
    with pytest.raises(JournalStateError, match="finalized segment"):
        w.start(1)
    with pytest.raises(JournalStateError, match="already holds txid 5"):
        w.start(5)


# Exactly 2 is the boundary: a segment holding only the writer's first transaction may be
# restarted (below), one transaction more may not (issue 10: "> 2" survived every test).
@pytest.mark.parametrize("n", [2, 3])
def test_start_log_segment_refuses_an_in_progress_segment_with_data(n: int) -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, n)
    w2 = Writer(journal, 2)
    w2.new_epoch()
    with pytest.raises(JournalStateError, match="recover it first"):
        w2.start(1)


def test_start_log_segment_may_restart_a_segment_holding_only_its_first_txn() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 1)
    w2 = Writer(journal, 2)
    w2.new_epoch()
    w2.start(1)
    w2.write(1, 1, 2, payload=b"epoch2")
    assert journal.segments() == [SegmentState(1, 2, True)]


def test_finalize_is_idempotent_and_never_unfinalizes() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 4)
    w.finalize(1, 4)
    w.finalize(1, 4)
    assert journal.segments() == [SegmentState(1, 4, False)]
    with pytest.raises(JournalStateError, match="re-finalize"):
        w.finalize(1, 3)
    # A recovery can't turn it back into an in-progress segment of another length either.
    w2 = Writer(journal, 2)
    w2.new_epoch()
    with pytest.raises(JournalStateError, match="never changed"):
        journal.accept_recovery(w2.req(), SegmentState(1, 6, True), "src", fetch_from(journal))
    assert journal.segments() == [SegmentState(1, 4, False)]


def test_finalize_with_a_wrong_last_txid_is_refused() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 4)
    with pytest.raises(JournalOutOfSyncError, match="only written up to txid 4"):
        w.finalize(1, 6)


def test_finalize_of_a_missing_segment_is_refused() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    with pytest.raises(JournalOutOfSyncError, match="no segment to finalize at txid 50"):
        w.finalize(50, 60)


def test_finalize_of_a_recovered_segment_checks_its_length_on_disk() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 4)
    w2 = Writer(journal, 2)
    w2.new_epoch()
    recovered = journal.prepare_recovery(w2.req(), 1).segment_state
    assert recovered is not None
    with pytest.raises(JournalOutOfSyncError, match="holds transactions up to 4"):
        journal.finalize_log_segment(w2.req(), 1, 5, recovered.md5)
    journal.finalize_log_segment(w2.req(), 1, 4, recovered.md5)
    assert journal.segments() == [SegmentState(1, 4, False)]


def test_empty_in_progress_segment_is_moved_aside() -> None:
    storage = MemoryJournalStorage()
    journal = formatted(storage)
    w = writer_with_segment(journal, start=1)
    w.write(1, 1, 3)
    w.finalize(1, 3)
    w.start(4)  # crashed before writing txid 4
    assert journal.new_epoch(NS, 2) == 1  # the empty segment 4 is moved aside, 1 is newest
    assert [start for start, reason, _ in storage.moved_aside] == [4]
    assert journal.segments() == [SegmentState(1, 3, False)]


def test_purge_removes_only_finalized_segments_wholly_below() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    for start in (1, 11, 21):
        if start != 1:
            w.start(start)
        w.write(start, start, 10)
        w.finalize(start, start + 9)
    w.start(31)
    w.write(31, 31, 2)
    removed = journal.purge_logs(w.req(), 15)
    assert removed == ["edits_1-10"]
    assert [s.start_txid for s in journal.segments()] == [11, 21, 31]


def test_purge_keeps_a_segment_ending_at_the_first_txid_to_keep() -> None:
    """``min_txid_to_keep`` is kept: a segment ending exactly there is not purged, neither
    from storage nor from what the Journal lists (issue 10: ``<=`` survived every test)."""
    journal = formatted()
    w = writer_with_segment(journal)
    for start in (1, 11):
        if start != 1:
            w.start(start)
        w.write(start, start, 10)
        w.finalize(start, start + 9)
    w.start(21)
    w.write(21, 21, 1)
    assert journal.purge_logs(w.req(), 10) == []
    assert journal.purge_logs(w.req(), 20) == ["edits_1-10"]
    assert [(s.start_txid, s.end_txid) for s in journal.segments()] == [(11, 20), (21, 21)]
    assert journal.get_edit_log_manifest(NS.cluster_id, 11)[0].start_txid == 11


# --------------------------------------------------------------- epoch bounds


@pytest.mark.parametrize(
    ("epoch", "promised", "refused"),
    [
        (1, 0, False),
        (EPOCH_WINDOW, 0, False),
        (EPOCH_WINDOW + 1, 0, True),
        (5 + EPOCH_WINDOW, 5, False),
        (6 + EPOCH_WINDOW, 5, True),
        (MAX_EPOCH, MAX_EPOCH - 1, False),
        (MAX_EPOCH + 1, MAX_EPOCH, True),  # the window would allow it; the ceiling does not
        (2**64 - 1, 0, True),
        (3, 7, False),  # below the promise: the fence's business (EpochError), not this rule
    ],
)
def test_epoch_out_of_range(epoch: int, promised: int, refused: bool) -> None:
    assert (epoch_out_of_range(epoch, promised) is not None) is refused


@pytest.mark.parametrize("call", ["heartbeat", "new_epoch", "start", "purge"])
def test_an_absurd_epoch_is_refused_and_leaves_the_promise(call: str) -> None:
    """One request with epoch 2^64-1 used to be promised, leaving no epoch for any writer."""
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 2)
    bad = Writer(journal, 2**64 - 1)
    with pytest.raises(InvalidRequestError, match="above the largest epoch"):
        if call == "heartbeat":
            journal.heartbeat(bad.req())
        elif call == "new_epoch":
            bad.new_epoch()
        elif call == "start":
            bad.start(3)
        else:
            journal.purge_logs(bad.req(), 100)
    assert journal.last_promised_epoch == 1
    far = Writer(journal, 1 + EPOCH_WINDOW + 1)
    with pytest.raises(InvalidRequestError, match="no election could have produced it"):
        far.new_epoch()
    # The writer goes on, and the next one takes the next epoch as usual.
    w.write(1, 3, 1)
    w2 = Writer(journal, 2)
    assert w2.new_epoch() == 1


def test_manifest_lists_finalized_segments_since_a_txid() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 10)
    w.finalize(1, 10)
    w.start(11)
    w.write(11, 11, 5)
    assert [
        (log.start_txid, log.end_txid) for log in journal.get_edit_log_manifest(NS.cluster_id, 0)
    ] == [(1, 10)]
    assert journal.get_edit_log_manifest(NS.cluster_id, 11) == []
    with_ip = journal.get_edit_log_manifest(NS.cluster_id, 5, in_progress_ok=True)
    assert [(log.start_txid, log.end_txid, log.is_in_progress) for log in with_ip] == [
        (1, 10, False),
        (11, 15, True),
    ]


# --------------------------------------------------------------- recovery (HDFS-3077 §2.8)


def test_prepare_recovery_reports_disk_state_and_writer_epoch() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 7)
    w2 = Writer(journal, 2)
    w2.new_epoch()
    result = journal.prepare_recovery(w2.req(), 1)
    assert result.segment_state == SegmentState(1, 7, True)
    assert result.accepted_in_epoch is None
    assert result.last_writer_epoch == 1
    assert journal.prepare_recovery(w2.req(), 99).segment_state is None


def with_accepted_recovery(storage: MemoryJournalStorage, n: int) -> Journal:
    """A journal where writer 1 wrote txids 1..n of segment 1 and writer 2's recovery of that
    segment was accepted (in epoch 2)."""
    journal = formatted(storage)
    writer_with_segment(journal).write(1, 1, n)
    w2 = Writer(journal, 2)
    w2.new_epoch()
    journal.accept_recovery(w2.req(), SegmentState(1, n, True), "", fetch_from(journal))
    return journal


def test_accepted_recovery_is_persisted_and_returned_by_prepare() -> None:
    storage = MemoryJournalStorage()
    with_accepted_recovery(storage, 7)
    # A restart (new Journal over the same storage) still knows the decision.
    restarted = Journal(JID, storage)
    w3 = Writer(restarted, 3)
    w3.new_epoch()
    result = restarted.prepare_recovery(w3.req(), 1)
    assert result.accepted_in_epoch == 2
    assert result.segment_state == SegmentState(1, 7, True)


def test_accept_recovery_downloads_a_missing_or_different_segment() -> None:
    source = formatted()
    sw = writer_with_segment(source)
    sw.write(1, 1, 9, payload=b"source")
    target = formatted()
    tw = writer_with_segment(target)
    tw.write(1, 1, 4, payload=b"source")
    w2 = Writer(target, 2)
    w2.new_epoch()
    fetched: list[tuple[int, int]] = []

    def fetch(url: str, jid: str, start: int, end: int) -> Iterable[bytes]:
        fetched.append((start, end))
        return source.storage.read_segment(start, end)

    target.accept_recovery(w2.req(), SegmentState(1, 9, True), "jn-source:8485", fetch)
    assert fetched == [(1, 9)]
    assert target.segments() == [SegmentState(1, 9, True)]
    # Same length already on disk: no download.
    target.accept_recovery(w2.req(), SegmentState(1, 9, True), "jn-source:8485", fetch)
    assert fetched == [(1, 9)]
    w2.finalize(1, 9)
    assert b"".join(target.storage.read_segment(1)) == b"".join(source.storage.read_segment(1, 9))


def test_accept_recovery_refuses_a_download_that_does_not_match() -> None:
    source = formatted()
    writer_with_segment(source).write(1, 1, 3)
    target = formatted()
    w = Writer(target, 2)
    w.new_epoch()
    with pytest.raises(JournalStateError, match="expected up to 5"):
        target.accept_recovery(w.req(), SegmentState(1, 5, True), "src", fetch_from(source))
    assert target.segments() == []


def test_accept_recovery_never_drops_a_committed_txid() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 8)
    w.committed = 8
    journal.heartbeat(w.req())
    source = formatted()
    writer_with_segment(source).write(1, 1, 5)
    w2 = Writer(journal, 2)
    w2.new_epoch()
    with pytest.raises(JournalStateError, match="committed txid 8"):
        journal.accept_recovery(w2.req(), SegmentState(1, 5, True), "src", fetch_from(source))


def test_prepare_recovery_refuses_disk_state_that_contradicts_the_accepted_one() -> None:
    storage = MemoryJournalStorage()
    with_accepted_recovery(storage, 7)
    # The disk loses the tail behind the Journal's back (a bad disk, an operator).
    data, _ = storage.segments[1]
    del data[-5:]
    restarted = Journal(JID, storage)
    w3 = Writer(restarted, 3)
    w3.new_epoch()
    with pytest.raises(
        JournalInconsistentError, match="does not match the recovery accepted in epoch 2"
    ):
        restarted.prepare_recovery(w3.req(), 1)
    # A bug or a bad disk, not a refusal of the caller: its own status code and class name.
    code, _, trailers = to_status(JournalInconsistentError("x"))
    assert code is grpc.StatusCode.INTERNAL
    assert isinstance(from_status(code, "x", dict(trailers)[ERROR_CLASS_KEY]), JournalStateError)


@pytest.mark.parametrize("keeps", [False, True], ids=["fixed", "start-keeps-accepted"])
def test_starting_a_segment_discards_an_abandoned_accepted_recovery(
    keeps: bool,
) -> None:
    """The record of an abandoned recovery of segment 1, kept past a new start of segment 1,
    describes a copy the node no longer holds once the new writer writes more: the next
    prepareRecovery finds the node's own records disagreeing."""
    storage = MemoryJournalStorage()
    with planted(*([Mutant.START_KEEPS_ACCEPTED] if keeps else [])):
        journal = with_accepted_recovery(storage, 1)
        w3 = Writer(journal, 3)
        w3.new_epoch()
        w3.start(1)
        # Starting segment 1 again means its recovery was abandoned: the record goes.
        assert (1 in storage.accepted) is keeps
        w3.write(1, 1, 4)
        w4 = Writer(journal, 4)
        w4.new_epoch()
        if keeps:
            with pytest.raises(JournalInconsistentError, match="accepted in epoch 2"):
                journal.prepare_recovery(w4.req(), 1)
        else:
            answer = journal.prepare_recovery(w4.req(), 1)
            assert answer.accepted_in_epoch is None and answer.last_writer_epoch == 3
            assert answer.segment_state is not None and answer.segment_state.end_txid == 4


def test_finalize_clears_the_accepted_recovery() -> None:
    storage = MemoryJournalStorage()
    journal = formatted(storage)
    w = writer_with_segment(journal)
    w.write(1, 1, 3)
    w2 = Writer(journal, 2)
    w2.new_epoch()
    journal.accept_recovery(w2.req(), SegmentState(1, 3, True), "", fetch_from(journal))
    w2.finalize(1, 3)
    assert storage.accepted == {}


def test_stats_follow_journal_metrics() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 3)
    w.write(1, 4, 2)
    assert journal.stats.batches_written == 2
    assert journal.stats.txns_written == 5
    assert journal.stats.last_written_txid == 5
    assert journal.stats.bytes_written == len(ops(1, 3)) + len(ops(4, 2))


def test_accept_recovery_replaces_a_copy_of_equal_length_but_other_content() -> None:
    # HDFS-3077 §2.8 identifies a segment by its last txid and its md5: an
    # in-progress copy written by an older epoch may have the chosen copy's length and still
    # hold other edits (JN1 in 2.10.6 had it received txids 151-153 from writer 1 as JN2/JN3
    # did from writer 2). Skipping the download on length alone would finalize divergent copies.
    source = formatted()
    writer_with_segment(source, epoch=2).write(1, 1, 3, payload=b"epoch-2")
    stale = formatted()
    writer_with_segment(stale, epoch=1).write(1, 1, 3, payload=b"epoch-1")
    w3 = Writer(source, 3)
    w3.new_epoch()
    chosen = source.prepare_recovery(w3.req(), 1).segment_state
    assert chosen is not None and chosen.md5
    w3_stale = Writer(stale, 3)
    w3_stale.new_epoch()
    stale.accept_recovery(w3_stale.req(), chosen, "src", fetch_from(source))
    w3_stale.finalize(1, 3)
    assert b"".join(stale.storage.read_segment(1)) == b"".join(source.storage.read_segment(1, 3))


def test_recovery_finalize_refuses_a_copy_with_other_records() -> None:
    # A JN that missed acceptRecovery may hold another epoch's copy of the same length; the
    # recovery's finalize names the accepted md5, and the stale copy is not finalized.
    source = formatted()
    writer_with_segment(source, epoch=2).write(1, 1, 3, payload=b"epoch-2")
    stale = formatted()
    writer_with_segment(stale, epoch=1).write(1, 1, 3, payload=b"epoch-1")
    w3 = Writer(source, 3)
    w3.new_epoch()
    chosen = source.prepare_recovery(w3.req(), 1).segment_state
    assert chosen is not None
    w3_stale = Writer(stale, 3)
    w3_stale.new_epoch()
    with pytest.raises(JournalOutOfSyncError, match="md5 differs"):
        stale.finalize_log_segment(w3_stale.req(), 1, 3, chosen.md5)
    assert stale.segments() == [SegmentState(1, 3, True)]
    stale.accept_recovery(w3_stale.req(), chosen, "src", fetch_from(source))
    stale.finalize_log_segment(w3_stale.req(), 1, 3, chosen.md5)
    assert stale.segments() == [SegmentState(1, 3, False)]


def test_writer_finalize_refuses_a_copy_it_never_started() -> None:
    # Writer 2's finalize reaches a JN that missed its startLogSegment and still holds
    # writer 1's copy of that segment: same length, other records; it must stay unfinalized.
    journal = formatted()
    writer_with_segment(journal, epoch=1, start=1).write(1, 1, 1, payload=b"epoch-1")
    w2 = Writer(journal, 2)
    w2.new_epoch()
    with pytest.raises(JournalOutOfSyncError, match="was not started by epoch 2"):
        w2.finalize(1, 1)
    assert journal.segments() == [SegmentState(1, 1, True)]
