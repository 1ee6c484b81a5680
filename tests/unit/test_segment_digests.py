"""Finalized copies are compared, never trusted alone (issue 25 item 1; docs/protocol.md §8.7).

Pure and in-memory parts: the Journal records a finalized segment's md5, checks it when the
segment is served, moves a changed copy aside and counts its repair; the reader applies a
finalized segment only from JournalNodes in a majority that share its md5, and checks the
bytes it receives. The real-process case (NameNodes, JournalNode processes, a failover) is
tests/process/test_tampered_journal_copy.py.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from journalnode.errors import SegmentDigestError
from journalnode.file_storage import FileJournalStorage
from journalnode.journal import Journal
from journalnode.segment_names import digest_name, finalized_name
from journalnode.storage import MemoryJournalStorage
from journalnode.sync import DigestRepair, SegmentToSync
from proto import edits_pb2, records
from proto.values import RemoteEditLog
from qjm.reader import EditLogReadError, chain_segments
from tests.unit.test_journal import JID, NS, Writer, formatted, ops


def md5_of(data: bytes) -> bytes:
    return hashlib.md5(data[records.HEADER_LEN :]).digest()


def finalized_journal(storage: MemoryJournalStorage | None = None) -> Journal:
    """A journal holding the finalized segments 1-3 and 4-6."""
    journal = formatted(storage)
    w = Writer(journal, 1)
    w.new_epoch()
    for first in (1, 4):
        w.start(first)
        w.write(first, first, 3)
        w.finalize(first, first + 2)
    return journal


def forged(data: bytes, txid: int, payload: bytes) -> bytes:
    """``data`` with the op of ``txid`` changed and its record's checksum recomputed: every
    record check passes, only the md5 differs."""
    body = memoryview(data)[records.HEADER_LEN :]
    edit_ops = [edits_pb2.EditOp.FromString(bytes(b)) for _, b in records.iter_records(body)]
    for op in edit_ops:
        if op.txid == txid:
            op.noop.payload = payload
    return records.SEGMENT_HEADER + records.frame_ops(edit_ops)


# ------------------------------------------------------------------- the Journal


def test_finalize_records_the_md5_and_the_manifest_lists_it() -> None:
    storage = MemoryJournalStorage()
    journal = finalized_journal(storage)
    want = md5_of(b"".join(storage.read_segment(1)))
    assert storage.digests[1] == want
    manifest = journal.get_edit_log_manifest(NS.cluster_id, 1)
    assert [(e.start_txid, e.md5) for e in manifest] == [(1, want), (4, storage.digests[4])]
    assert journal.verified_finalized_md5(NS.cluster_id, 1) == (3, want)
    assert Journal(JID, storage).segments()[0].md5 == want  # durable: loaded again


def test_a_copy_changed_after_finalize_is_not_served_but_moved_aside_and_repaired() -> None:
    storage = MemoryJournalStorage()
    journal = finalized_journal(storage)
    good = b"".join(storage.read_segment(1))
    recorded = storage.digests[1]
    bad = forged(good, 2, b"not what the quorum wrote")
    storage.segments[1] = (bytearray(bad), 3)  # the disk changed under the JournalNode
    with capture_logs() as logs, pytest.raises(SegmentDigestError) as err:
        journal.verified_finalized_md5(NS.cluster_id, 1)
    message = str(err.value)
    assert finalized_name(1, 3) in message
    assert recorded.hex() in message and md5_of(bad).hex() in message
    (logged,) = [e for e in logs if e["log_level"] == "error"]
    assert logged["recorded"] == recorded.hex() and logged["actual"] == md5_of(bad).hex()
    assert [(s, reason, data) for s, reason, data in storage.moved_aside] == [
        (1, "mismatch", bad)
    ]
    assert [s.start_txid for s in journal.segments()] == [4]
    assert journal.stats.digest_mismatches == 1
    assert journal.stats.digest_repairs == 0
    # The sync thread then finds the segment lacking and installs the majority's copy.
    plan = journal.plan_sync({"jn2": [RemoteEditLog(1, 3, False, recorded)]}, configured=3)
    assert plan.fetch == (SegmentToSync(1, 3, ("jn2",)),)
    assert journal.install_synced_segment(plan.fetch[0], recorded, [good]) == len(good)
    assert journal.stats.digest_repairs == 1
    assert b"".join(storage.read_segment(1)) == good and storage.digests[1] == recorded


def test_a_copy_the_majority_disagrees_with_is_moved_aside() -> None:
    storage = MemoryJournalStorage()
    journal = finalized_journal(storage)
    mine = storage.digests[1]
    theirs = b"\x01" * 16
    peers = {p: [RemoteEditLog(1, 3, False, theirs)] for p in ("jn2", "jn3")}
    plan = journal.plan_sync(peers, configured=3)
    assert plan.repair == (DigestRepair(1, 3, mine, theirs, ("jn2", "jn3")),)
    with capture_logs() as logs:
        assert journal.move_aside_disagreeing(plan.repair[0])
    (logged,) = [e for e in logs if e["log_level"] == "error"]
    assert logged["recorded"] == mine.hex() and logged["majority"] == theirs.hex()
    assert journal.stats.digest_mismatches == 1
    assert [(s, reason) for s, reason, _ in storage.moved_aside] == [(1, "mismatch")]
    assert not journal.move_aside_disagreeing(plan.repair[0])  # gone already: nothing twice
    assert journal.plan_sync(peers, configured=3).fetch == (SegmentToSync(1, 3, ("jn2", "jn3")),)


def test_a_segment_finalized_before_digests_gets_one_on_first_use() -> None:
    """The upgrade: no digest recorded; the first manifest computes and records it."""
    storage = MemoryJournalStorage()
    finalized_journal(storage)
    storage.digests.clear()
    journal = Journal(JID, storage)
    assert journal.segments()[0].md5 == b""
    with capture_logs() as logs:
        manifest = journal.get_edit_log_manifest(NS.cluster_id, 1)
    want = md5_of(b"".join(storage.read_segment(1)))
    assert manifest[0].md5 == want and storage.digests[1] == want
    assert sum("before digests were kept" in e["event"] for e in logs) == 2
    journal.ensure_digests()  # nothing left to do
    assert Journal(JID, storage).segments()[0].md5 == want


# ------------------------------------------------------------------- on disk


def test_the_digest_file_sits_beside_the_segment_and_moves_aside_with_it(
    tmp_path: Path,
) -> None:
    with FileJournalStorage(tmp_path, JID) as storage:
        storage.format(NS)
        storage.start_segment(1)
        storage.append(1, ops(1, 3))
        md5 = storage.finalize_segment(1, 3)
        current = storage.current_dir
        assert (current / digest_name(1, 3)).read_text() == md5.hex() + "\n"
        assert md5 == md5_of((current / finalized_name(1, 3)).read_bytes())
        assert storage.raw_md5(1) == md5 == md5_of(b"".join(storage.read_segment(1)))
        assert storage.finalize_segment(1, 3) == md5  # idempotent
        assert storage.load().segments[0].md5 == md5
        storage.move_aside_finalized(1, "mismatch")
        assert sorted(p.name for p in current.glob("edits_*")) == [
            finalized_name(1, 3) + ".mismatch",
            finalized_name(1, 3) + ".mismatch.md5",
        ]


def test_a_malformed_digest_file_is_logged_and_computed_again(tmp_path: Path) -> None:
    with FileJournalStorage(tmp_path, JID) as storage:
        storage.format(NS)
        storage.start_segment(1)
        storage.append(1, ops(1, 3))
        md5 = storage.finalize_segment(1, 3)
        (storage.current_dir / digest_name(1, 3)).write_text("not a digest\n")
        with capture_logs() as logs:
            assert storage.load().segments[0].md5 == b""
        assert any(e["event"].startswith("segment digest file is malformed") for e in logs)
    with FileJournalStorage(tmp_path, JID) as storage:
        journal = Journal(JID, storage)
        assert journal.get_edit_log_manifest(NS.cluster_id, 1)[0].md5 == md5
        assert (storage.current_dir / digest_name(1, 3)).read_text() == md5.hex() + "\n"


# ------------------------------------------------------------------- the reader


@dataclass(eq=False)
class Source:
    """A JournalNode as the reader sees it: an address and the bytes it serves."""

    address: str
    data: bytes
    served: list[int] = field(default_factory=list)

    def get_segment(self, start: int, end: int | None) -> Iterator[bytes]:
        self.served.append(start)
        yield self.data


GOOD = records.SEGMENT_HEADER + ops(1, 3)
BAD = forged(GOOD, 2, b"forged")


def manifest(md5: bytes) -> list[RemoteEditLog]:
    return [RemoteEditLog(1, 3, False, md5)]


def test_the_reader_skips_a_copy_no_majority_holds_whatever_the_address_order() -> None:
    first, second, third = Source("a:1", BAD), Source("b:1", GOOD), Source("c:1", GOOD)
    manifests = {first: manifest(md5_of(BAD)), second: manifest(md5_of(GOOD)),
                 third: manifest(md5_of(GOOD))}
    (stream,) = chain_segments(manifests, 1, cluster_size=3)
    assert [s.address for s in stream.sources] == ["b:1", "c:1"]
    assert [op.noop.payload for op in stream] == [b"x", b"x", b"x"]
    assert first.served == []


def test_the_reader_checks_the_bytes_against_the_majority_md5() -> None:
    """A JournalNode that lists the majority's md5 but serves other bytes is skipped."""
    liar, honest = Source("a:1", BAD), Source("b:1", GOOD)
    manifests = {liar: manifest(md5_of(GOOD)), honest: manifest(md5_of(GOOD))}
    with capture_logs():
        (stream,) = chain_segments(manifests, 1, cluster_size=3)
        assert [op.noop.payload for op in stream] == [b"x", b"x", b"x"]
    assert liar.served == [1] and honest.served == [1]


def test_no_majority_md5_among_the_answers_ends_the_chain_there() -> None:
    """The segments before it are read; it is not, from either copy, and nothing after it."""
    earlier = records.SEGMENT_HEADER + ops(1, 3)
    later = records.SEGMENT_HEADER + ops(4, 3)
    good = records.SEGMENT_HEADER + ops(4, 3, b"y")
    one, other = Source("a:1", earlier), Source("b:1", earlier)

    def listing(mine: bytes) -> list[RemoteEditLog]:
        return [RemoteEditLog(1, 3, False, md5_of(earlier)), RemoteEditLog(4, 6, False, mine),
                RemoteEditLog(7, 9, False, b"\x07" * 16)]

    with capture_logs() as logs:
        first, refused = chain_segments(
            {one: listing(md5_of(later)), other: listing(md5_of(good))}, 1, cluster_size=3
        )
    (logged,) = [e for e in logs if e["log_level"] == "error"]
    assert logged["md5s"] == {md5_of(later).hex(): ["a:1"], md5_of(good).hex(): ["b:1"]}
    assert [op.txid for op in first] == [1, 2, 3]
    with pytest.raises(EditLogReadError, match="disagree: no md5 is held by a majority"):
        list(refused)
    assert one.served == [1] and other.served == []  # segment 4-6 asked of nobody


def test_a_copy_fewer_than_a_majority_list_is_not_read() -> None:
    """One JournalNode of three lists the segment (the other that answered lacks it): one
    copy is not a majority, whatever its md5."""
    alone = Source("a:1", GOOD)
    lacking = Source("b:1", GOOD)
    with capture_logs():
        (refused,) = chain_segments({alone: manifest(md5_of(GOOD)), lacking: []}, 1,
                                    cluster_size=3)
    with pytest.raises(EditLogReadError, match="listed by fewer than a majority of the 3"):
        list(refused)
    assert alone.served == []


def test_older_journalnodes_without_md5s_are_read_as_before() -> None:
    sources = [Source(f"{c}:1", GOOD) for c in "abc"]
    (stream,) = chain_segments({s: manifest(b"") for s in sources}, 1, cluster_size=3)
    assert stream.md5 == b"" and len(list(stream)) == 3


def test_in_progress_copies_of_the_same_txids_vote_for_a_lone_finalized_copy() -> None:
    """A writer finalized segment 1-3 on one JournalNode and stopped; another holds 1-5 in
    progress (the same txids 1-3 and two more). Its records up to txid 3 have the finalized
    copy's md5: two of three hold the segment, which is read (the logtester case). A forged
    lone copy gets no such vote and is not read."""
    longer = records.SEGMENT_HEADER + ops(1, 5)
    finalized = Source("a:1", GOOD)
    in_progress = InProgressSource("b:1", longer)
    listing = {finalized: manifest(md5_of(GOOD)), in_progress: [RemoteEditLog(1, 5, True)]}
    with capture_logs() as logs:
        (stream,) = chain_segments(listing, 1, cluster_size=3)
        assert [op.txid for op in stream] == [1, 2, 3]
    assert in_progress.asked == [(1, 3)] and finalized.served == [1]
    assert not [e for e in logs if e["log_level"] == "error"]

    forged_alone = Source("a:1", BAD)
    honest = InProgressSource("b:1", longer)
    with capture_logs():
        (refused,) = chain_segments(
            {forged_alone: manifest(md5_of(BAD)), honest: [RemoteEditLog(1, 5, True)]}, 1,
            cluster_size=3,
        )
        with pytest.raises(EditLogReadError, match="listed by fewer than a majority"):
            list(refused)
    assert forged_alone.served == []


@dataclass(eq=False)
class InProgressSource:
    """A JournalNode holding an in-progress segment: it serves its records up to ``end``."""

    address: str
    data: bytes
    asked: list[tuple[int, int | None]] = field(default_factory=list)

    def get_segment(self, start: int, end: int | None) -> Iterator[bytes]:
        self.asked.append((start, end))
        body = memoryview(self.data)[records.HEADER_LEN :]
        kept = [b for _, b in records.iter_records(body)
                if end is None or edits_pb2.EditOp.FromString(bytes(b)).txid <= end]
        yield records.SEGMENT_HEADER + b"".join(records.frame(bytes(b)) for b in kept)
