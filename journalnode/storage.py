"""The small storage interface the Journal's rules run over, and an in-memory implementation.

docs/architecture.md §3.1: the same ``Journal`` logic runs over a real
directory in the daemon (``journalnode.file_storage.FileJournalStorage``) and over
``MemoryJournalStorage`` in the unit tests and the deterministic simulator.

A storage holds, for one journal id: the namespace info (VERSION), lastPromisedEpoch,
lastWriterEpoch, committed txid, the segments (each a header plus framed records) and the
accepted recoveries (paxos/). Durability is the storage's job: when a method returns, what
it wrote survives a crash (except ``persist_committed_txid``, which is best effort, as HDFS-3077
§4.1 allows).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Protocol

from conf.mutants import Mutant, active
from journalnode.errors import JournalStateError
from proto import edits_pb2, records
from proto.values import NamespaceInfo, SegmentState


@dataclass(frozen=True, slots=True)
class AcceptedRecovery:
    """A recovery accepted for one segment (paxos/<segment_txid>)."""

    segment_state: SegmentState
    accepted_in_epoch: int


@dataclass(frozen=True, slots=True)
class LoadedJournal:
    """Everything a storage knows at start-up, after tail repair of in-progress segments.

    ``segments`` is sorted by start txid and holds only segments with at least one valid
    transaction; empty in-progress segments were moved aside while loading. A finalized
    segment carries the md5 recorded beside it (``SegmentState.md5``), or b"" when none was
    (a segment finalized before digests were recorded, docs/protocol.md §8.7).
    """

    namespace_info: NamespaceInfo | None
    last_promised_epoch: int
    last_writer_epoch: int
    committed_txid: int
    segments: tuple[SegmentState, ...]
    accepted: dict[int, AcceptedRecovery] = field(default_factory=dict)
    sync_until: int = 0
    """Set while a JournalNode that formatted itself to rejoin (HDFS-16690) still lacks
    finalized segments through this txid (``journalnode.sync.covers``); 0 otherwise."""


@dataclass(frozen=True, slots=True)
class StagedSegment:
    """A finalized segment downloaded from a peer (HDFS-4025), durable and checked to hold
    exactly the records ``start_txid..end_txid``, kept aside until ``install_finalized``.
    ``md5`` is the md5 of its records (after the header), ``size`` its bytes."""

    start_txid: int
    end_txid: int
    size: int
    md5: bytes
    handle: object = field(compare=False, repr=False)


class JournalStorage(Protocol):
    """What the Journal needs from a place to keep one journal."""

    def load(self) -> LoadedJournal:
        """Read everything; truncate a torn or corrupt tail of in-progress segments at the
        last valid record; move aside in-progress segments without a valid record."""
        ...

    def format(
        self, namespace_info: NamespaceInfo, *, promised_epoch: int = 0, sync_until: int = 0
    ) -> None:
        """Erase everything and write VERSION; epochs and committed txid go back to 0, or
        the promise to ``promised_epoch`` and the rejoin mark to ``sync_until`` when a
        JournalNode formats itself from its peers (both durable before VERSION is)."""
        ...

    def persist_sync_until(self, txid: int) -> None:
        """Persist the rejoin mark (``LoadedJournal.sync_until``); 0 removes it."""
        ...

    def persist_last_promised_epoch(self, epoch: int) -> None: ...

    def persist_last_writer_epoch(self, epoch: int) -> None: ...

    def persist_committed_txid(self, txid: int) -> None:
        """Best effort: lag metrics only; may be lost or removed safely."""
        ...

    def start_segment(self, txid: int) -> None:
        """Create ``edits_inprogress_<txid>`` holding only the header, replacing any file
        of that name; durable on return."""
        ...

    def append(self, segment_txid: int, framed: bytes) -> None:
        """Append already validated framed records to the in-progress segment and fdatasync."""
        ...

    def finalize_segment(
        self, start_txid: int, end_txid: int, md5: bytes | None = None
    ) -> bytes:
        """Record the md5 of the segment's records beside it (computed from the records when
        ``md5`` is None), then rename the in-progress segment to ``edits_<start>-<end>``;
        both durable on return. Returns the recorded md5."""
        ...

    def record_digest(self, start_txid: int, end_txid: int, md5: bytes) -> None:
        """Record, durably, the md5 of a finalized segment that has none recorded yet (one
        finalized before digests were kept): computed by its first reader."""
        ...

    def move_aside(self, start_txid: int, reason: str) -> None:
        """Rename an in-progress segment out of the way (``.empty``, ``.stale``); never delete."""
        ...

    def move_aside_finalized(self, start_txid: int, reason: str) -> None:
        """Rename a finalized segment out of the way (``.corrupt``); never delete. Only for a
        copy found corrupt: the sync thread then fetches the segment from a peer."""
        ...

    def scan_segment(self, start_txid: int) -> SegmentState | None:
        """Current on-disk state of the segment starting at start_txid (None if absent)."""
        ...

    def read_segment(self, start_txid: int, end_txid: int | None = None) -> Iterator[bytes]:
        """The segment's bytes (header and records) in chunks, up to and including end_txid
        when given. A corrupt record raises CorruptSegmentError naming file and offset."""
        ...

    def raw_md5(self, start_txid: int) -> bytes:
        """md5 of everything after the header of the segment starting at start_txid
        (finalized, else in progress), as it is stored: no record is checked. The fast digest
        for callers that check the records elsewhere (``records_md5`` of a valid segment)."""
        ...

    def install_segment(self, start_txid: int, chunks: Iterable[bytes], expected_end: int) -> None:
        """Replace the in-progress segment at start_txid with downloaded bytes, atomically,
        after checking they hold exactly the records start_txid..expected_end."""
        ...

    def stage_segment(
        self, start_txid: int, chunks: Iterable[bytes], expected_end: int, epoch: int
    ) -> None:
        """Keep downloaded bytes aside, durably, as the copy of segment start_txid accepted in
        ``epoch`` (checked as for ``install_segment``); the segment itself is untouched."""
        ...

    def install_staged_segment(self, start_txid: int, epoch: int) -> bool:
        """Replace the in-progress segment with the copy staged in ``epoch``, atomically;
        False when there is none (installed already, or never staged)."""
        ...

    def stage_finalized(
        self, start_txid: int, end_txid: int, chunks: Iterable[bytes]
    ) -> StagedSegment:
        """Write downloaded bytes aside, durably, checked to hold exactly the records
        start_txid..end_txid (JournalStateError otherwise, nothing kept); nothing in place
        changes. May run without the Journal's lock."""
        ...

    def install_finalized(self, staged: StagedSegment) -> None:
        """Put a staged segment in place under its finalized name, atomically and durably,
        with its md5 recorded beside it; an in-progress copy of the same segment is then moved
        aside (``.stale``)."""
        ...

    def discard_staged(self, staged: StagedSegment) -> None:
        """Remove a staged segment that will not be installed."""
        ...

    def purge(self, min_txid_to_keep: int) -> list[str]:
        """Remove finalized segments that end below min_txid_to_keep (and their leftovers);
        return what was removed."""
        ...

    def persist_accepted_recovery(self, segment_txid: int, accepted: AcceptedRecovery) -> None: ...

    def clear_accepted_recovery(self, segment_txid: int) -> None: ...


def records_md5(chunks: Iterable[bytes]) -> bytes:
    """md5 of a segment's records: its bytes (header and records, in chunks) less the
    header. What ``SegmentState.md5``, GetSegmentMd5 and the digest files hold."""
    digest = hashlib.md5()
    skip = records.HEADER_LEN
    for chunk in chunks:
        if skip:
            cut = min(skip, len(chunk))
            chunk, skip = chunk[cut:], skip - cut
        digest.update(chunk)
    return digest.digest()


def _read_segment_bytes(data: bytes, end_txid: int | None) -> bytes:
    """Header plus records up to end_txid (all when None); pure helper for the memory store."""
    if end_txid is None:
        return data
    view = memoryview(data)[records.HEADER_LEN :]
    keep = records.HEADER_LEN
    for offset, body in records.iter_records(view):
        txid = edits_pb2.EditOp.FromString(body).txid
        if txid > end_txid:
            break
        keep = records.HEADER_LEN + offset + records.FRAME_LEN + len(body)
    return data[:keep]


class MemoryJournalStorage:
    """A JournalStorage in memory: the simulator's disk, with a page cache.

    Every method is durable on return, as the Protocol says, except what a real store would
    leave in the page cache: bytes appended but not (yet) fsynced, and the best-effort
    committed txid. A restarted Journal over the same object sees what a disk keeps after
    ``kill -9`` of the process; ``lose_unsynced()`` first drops what a machine crash (power
    loss) loses, so a missing or misordered fsync shows up as lost edits.
    """

    def __init__(self) -> None:
        self.namespace_info: NamespaceInfo | None = None
        self.last_promised_epoch = 0
        self.last_writer_epoch = 0
        self.committed_txid = 0
        # start txid -> (bytes, finalized end or None)
        self.segments: dict[int, tuple[bytearray, int | None]] = {}
        # start txid -> how many of the segment's bytes have been fsynced
        self.synced_len: dict[int, int] = {}
        self.moved_aside: list[tuple[int, str, bytes]] = []
        # start txid -> the md5 recorded for the finalized segment (docs/protocol.md §8.7)
        self.digests: dict[int, bytes] = {}
        self.accepted: dict[int, AcceptedRecovery] = {}
        # (start txid, epoch) -> a downloaded copy acceptRecovery has not installed yet
        self.staged: dict[tuple[int, int], bytes] = {}
        self.sync_until = 0

    def load(self) -> LoadedJournal:
        states = []
        for start in sorted(self.segments):
            state = self.scan_segment(start)
            if state is None:
                continue
            if not state.is_in_progress:
                state = state.with_md5(self.digests.get(start, b""))
            if state.num_txns <= 0:
                self.move_aside(start, "empty")
                continue
            states.append(state)
        return LoadedJournal(
            self.namespace_info,
            self.last_promised_epoch,
            self.last_writer_epoch,
            self.committed_txid,
            tuple(states),
            dict(self.accepted),
            self.sync_until,
        )

    def format(
        self, namespace_info: NamespaceInfo, *, promised_epoch: int = 0, sync_until: int = 0
    ) -> None:
        self.__init__()  # type: ignore[misc]
        self.namespace_info = namespace_info
        self.last_promised_epoch = promised_epoch
        self.sync_until = sync_until

    def persist_sync_until(self, txid: int) -> None:
        self.sync_until = txid

    def persist_last_promised_epoch(self, epoch: int) -> None:
        self.last_promised_epoch = epoch

    def persist_last_writer_epoch(self, epoch: int) -> None:
        self.last_writer_epoch = epoch

    def persist_committed_txid(self, txid: int) -> None:
        self.committed_txid = txid

    def _entry(self, start_txid: int) -> tuple[bytearray, int | None]:
        entry = self.segments.get(start_txid)
        if entry is None:
            raise JournalStateError(f"no segment starting at txid {start_txid}")
        return entry

    def _refuse_finalized(self, txid: int) -> None:
        entry = self.segments.get(txid)
        if entry is not None and entry[1] is not None:
            raise JournalStateError(f"segment {txid} is finalized; it is never replaced")

    def start_segment(self, txid: int) -> None:
        self._refuse_finalized(txid)
        self.segments[txid] = (bytearray(records.SEGMENT_HEADER), None)
        self.synced_len[txid] = records.HEADER_LEN

    def append(self, segment_txid: int, framed: bytes) -> None:
        data, end = self._entry(segment_txid)
        if end is not None:
            raise JournalStateError(f"segment {segment_txid} is finalized; no appends")
        data.extend(framed)
        if not active(Mutant.APPEND_WITHOUT_FDATASYNC):
            self.synced_len[segment_txid] = len(data)  # fdatasync

    def lose_unsynced(self) -> list[str]:
        """A machine crash: drop every segment's bytes past its fsynced length and the
        best-effort committed txid. Returns what was lost, for the simulator's trace."""
        lost = []
        for start, (data, _) in sorted(self.segments.items()):
            keep = self.synced_len.get(start, len(data))
            if keep < len(data):
                lost.append(f"segment {start}: {len(data) - keep} unsynced bytes")
                del data[keep:]
        if self.committed_txid:
            lost.append(f"committed txid {self.committed_txid}")
            self.committed_txid = 0
        return lost

    def finalize_segment(
        self, start_txid: int, end_txid: int, md5: bytes | None = None
    ) -> bytes:
        data, _ = self._entry(start_txid)
        if md5 is None:
            md5 = records_md5([_read_segment_bytes(bytes(data), end_txid)])
        self.digests[start_txid] = md5
        self.segments[start_txid] = (data, end_txid)
        return md5

    def record_digest(self, start_txid: int, end_txid: int, md5: bytes) -> None:
        self.digests[start_txid] = md5

    def move_aside(self, start_txid: int, reason: str) -> None:
        data, _ = self.segments.pop(start_txid)
        self.moved_aside.append((start_txid, reason, bytes(data)))

    def move_aside_finalized(self, start_txid: int, reason: str) -> None:
        data, end = self._entry(start_txid)
        if end is None:
            raise JournalStateError(f"segment {start_txid} is not finalized")
        del self.segments[start_txid]
        self.digests.pop(start_txid, None)
        self.moved_aside.append((start_txid, reason, bytes(data)))

    def scan_segment(self, start_txid: int) -> SegmentState | None:
        entry = self.segments.get(start_txid)
        if entry is None:
            return None
        data, end = entry
        if end is not None:
            return SegmentState(start_txid, end, False)
        result = records.scan(bytes(data[records.HEADER_LEN :]), start_txid)
        if result.error is not None:
            # Same repair as the file store: keep the valid prefix.
            del data[records.HEADER_LEN + result.valid_len :]
            synced = self.synced_len.get(start_txid, len(data))
            self.synced_len[start_txid] = min(synced, len(data))
        if result.count == 0:
            return SegmentState(start_txid, start_txid - 1, True)
        return SegmentState(start_txid, result.last_txid, True)

    def read_segment(self, start_txid: int, end_txid: int | None = None) -> Iterator[bytes]:
        data, _ = self._entry(start_txid)
        yield _read_segment_bytes(bytes(data), end_txid)

    def raw_md5(self, start_txid: int) -> bytes:
        data, _ = self._entry(start_txid)
        return records_md5([bytes(data)])

    def install_segment(self, start_txid: int, chunks: Iterable[bytes], expected_end: int) -> None:
        self._refuse_finalized(start_txid)
        data = b"".join(chunks)
        check_downloaded_segment(data, start_txid, expected_end, f"segment {start_txid}")
        self.segments[start_txid] = (bytearray(data), None)
        self.synced_len[start_txid] = len(data)

    def stage_segment(
        self, start_txid: int, chunks: Iterable[bytes], expected_end: int, epoch: int
    ) -> None:
        self._refuse_finalized(start_txid)
        data = b"".join(chunks)
        check_downloaded_segment(data, start_txid, expected_end, f"segment {start_txid}")
        self.staged[(start_txid, epoch)] = data

    def install_staged_segment(self, start_txid: int, epoch: int) -> bool:
        data = self.staged.pop((start_txid, epoch), None)
        if data is None:
            return False
        self._refuse_finalized(start_txid)
        self.segments[start_txid] = (bytearray(data), None)
        self.synced_len[start_txid] = len(data)  # installed with an fsync
        return True

    def stage_finalized(
        self, start_txid: int, end_txid: int, chunks: Iterable[bytes]
    ) -> StagedSegment:
        data = b"".join(chunks)
        check_downloaded_segment(data, start_txid, end_txid, f"segment {start_txid}")
        md5 = hashlib.md5(data[records.HEADER_LEN :]).digest()
        return StagedSegment(start_txid, end_txid, len(data), md5, data)

    def install_finalized(self, staged: StagedSegment) -> None:
        self._refuse_finalized(staged.start_txid)
        if staged.start_txid in self.segments:
            self.move_aside(staged.start_txid, "stale")
        assert isinstance(staged.handle, bytes)
        self.digests[staged.start_txid] = staged.md5
        self.segments[staged.start_txid] = (bytearray(staged.handle), staged.end_txid)
        self.synced_len[staged.start_txid] = staged.size

    def discard_staged(self, staged: StagedSegment) -> None:
        pass  # only the StagedSegment held the bytes

    def purge(self, min_txid_to_keep: int) -> list[str]:
        removed = []
        for start, (_, end) in list(self.segments.items()):
            if end is not None and end < min_txid_to_keep:
                del self.segments[start]
                self.digests.pop(start, None)
                removed.append(f"edits_{start}-{end}")
        for start in [s for s in self.accepted if s < min_txid_to_keep]:
            del self.accepted[start]
        return removed

    def persist_accepted_recovery(self, segment_txid: int, accepted: AcceptedRecovery) -> None:
        self.accepted[segment_txid] = accepted

    def clear_accepted_recovery(self, segment_txid: int) -> None:
        self.accepted.pop(segment_txid, None)


def check_downloaded_segment(data: bytes, start_txid: int, expected_end: int, what: str) -> None:
    """Raise JournalStateError unless ``data`` is a header plus exactly the records
    start_txid..expected_end, whole and valid (what acceptRecovery may install)."""
    if not data.startswith(records.SEGMENT_HEADER):
        raise JournalStateError(f"downloaded {what} does not start with a segment header")
    result = records.scan(memoryview(data)[records.HEADER_LEN :], start_txid)
    if result.error is not None:
        raise JournalStateError(f"downloaded {what} is corrupt: {result.error}")
    if result.count == 0 or result.last_txid != expected_end:
        got = f"up to txid {result.last_txid}" if result.count else "no transactions"
        raise JournalStateError(f"downloaded {what} holds {got}, expected up to {expected_end}")
