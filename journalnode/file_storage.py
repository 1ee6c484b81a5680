"""The JournalNode's storage on a real directory (docs/protocol.md §7.1, HDFS-3077 §4.1).

``FileJournalStorage`` implements ``journalnode.storage.JournalStorage`` for one journal id::

    <root>/<journal_id>/in_use.lock                    flock held while the object lives
                                                       (not with lock=False: the JournalNode)
    <root>/<journal_id>/current/VERSION                clusterID, namespaceID, cTime, ...
    <root>/<journal_id>/current/last-promised-epoch    "N\\n", replaced atomically
    <root>/<journal_id>/current/last-writer-epoch      "N\\n", replaced atomically
    <root>/<journal_id>/current/committed-txid         8 bytes big-endian, best effort
    <root>/<journal_id>/current/paxos/<segment_txid>   PersistedRecoveryPaxosData
    <root>/<journal_id>/current/edits_inprogress_<txid 19 digits>
    <root>/<journal_id>/current/edits_<first 19 digits>-<last 19 digits>
    <root>/<journal_id>/current/edits_<first>-<last>.md5   md5 of its records, "<hex>\\n"

Segment files hold ``proto.records.SEGMENT_HEADER`` then framed records. A crash can leave a
torn record at the end of an in-progress segment; ``load`` and ``scan_segment`` cut it off at
the last valid record, as HDFS-3077 asks. Files that must not be used any more are
moved aside under their name plus a suffix (``.empty``, ``.corrupt``, ``.stale``) and are
only ever removed by ``purge``.

The parts that need no directory live beside it: file names and the purge rule in
``journalnode.segment_names``, the validated record stream in ``journalnode.record_stream``,
the small files' encodings (VERSION, epochs, paxos) in ``journalnode.meta_files``, and the
crash-safe primitives, shared with the NameNode, in ``durable``.

Calls that change state are serialized by the Journal; ``read_segment`` and
``verify_finalized`` read through their own file descriptors and may run concurrently with
them (a segment renamed or purged under a reader keeps streaming from the open inode).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import structlog

from conf.mutants import Mutant, active
from journalnode import fsutil, meta_files, record_stream, segment_names
from journalnode.errors import InvalidRequestError, JournalStateError, StorageError
from journalnode.fsutil import storage_errors, validate_journal_id
from journalnode.meta_files import (
    COMMITTED_TXID_FILE,
    LAST_PROMISED_EPOCH_FILE,
    LAST_WRITER_EPOCH_FILE,
    PAXOS_DIR,
    SYNC_UNTIL_FILE,
    VERSION_FILE,
)
from journalnode.record_stream import CHUNK_SIZE
from journalnode.segment_names import (
    FINALIZED,
    IN_PROGRESS,
    REASON,
    digest_name,
    finalized_name,
    finalized_prefix,
    in_progress_name,
)
from journalnode.storage import AcceptedRecovery, LoadedJournal, StagedSegment, records_md5
from proto import records
from proto.values import NamespaceInfo, SegmentState

__all__ = [
    "CHUNK_SIZE",
    "FileJournalStorage",
    "finalized_name",
    "in_progress_name",
    "validate_journal_id",
]


@dataclass(frozen=True, slots=True)
class _InProgressScan:
    state: SegmentState
    header: str  # "ok", "short" (torn at creation) or "bad-magic"


class FileJournalStorage:
    """One journal's storage directory, locked for the life of the object (``lock=False``:
    not locked, for a caller that already holds a lock covering it, such as the JournalNode's
    lock on its whole storage root; then an idle journal holds no file descriptor).

    Usage::

        with FileJournalStorage(Path("/data/jn"), "ns1", sync_observer=hist.observe) as st:
            loaded = st.load()
            st.start_segment(1)
            st.append(1, records.frame_ops(ops))

    ``sync_observer`` receives the seconds each fdatasync of an append took.
    """

    def __init__(
        self,
        root: Path,
        journal_id: str,
        *,
        sync_observer: Callable[[float], None] | None = None,
        lock: bool = True,
    ) -> None:
        self.journal_id = validate_journal_id(journal_id)
        self.journal_dir = Path(root) / journal_id
        self.current_dir = self.journal_dir / "current"
        self.paxos_dir = self.current_dir / PAXOS_DIR
        self._sync_observer = sync_observer
        self._log = structlog.get_logger(__name__).bind(journal=journal_id)
        fsutil.ensure_dir(self.journal_dir)
        self._lock_fd: int | None = fsutil.lock_directory(self.journal_dir) if lock else None
        self._open = True
        # The one in-progress segment open for appends, and segments whose append failed
        # half-way: appending after a torn write would bury garbage mid-segment, so they
        # refuse appends until a scan has cut the tail or a new segment replaces them.
        self._segment_txid: int | None = None
        self._segment_fd: int | None = None
        self._poisoned: set[int] = set()
        self._committed_fd: int | None = None
        try:
            fsutil.ensure_dir(self.paxos_dir)
        except BaseException:
            self.close()
            raise

    # ----------------------------------------------------------------- lifetime

    def close(self) -> None:
        """Close every fd and release ``in_use.lock``; safe to call twice."""
        try:
            self._close_segment()
        finally:
            committed_fd, self._committed_fd = self._committed_fd, None
            lock_fd, self._lock_fd = self._lock_fd, None
            self._open = False
            try:
                if committed_fd is not None:
                    os.close(committed_fd)
            finally:
                if lock_fd is not None:
                    os.close(lock_fd)  # closing the only fd of the lock releases the flock

    def __enter__(self) -> FileJournalStorage:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"FileJournalStorage({self.journal_dir})"

    # ----------------------------------------------------------------- start-up

    def load(self) -> LoadedJournal:
        """Read everything, remove crash leftovers, repair in-progress tails.

        Finalized segments are listed from their names only: a quorum agreed on them and
        scanning a large journal would make start-up slow; ``verify_finalized`` checks one.
        """
        self._require_open()
        self._close_segment()
        self._poisoned.clear()
        self._remove_temp_files(self.current_dir)
        self._remove_temp_files(self.paxos_dir)
        namespace_info = self._read_version()
        promised = self._read_epoch(LAST_PROMISED_EPOCH_FILE)
        writer = self._read_epoch(LAST_WRITER_EPOCH_FILE)
        committed = self._read_committed_txid()
        accepted = self._read_paxos()
        sync_until = self._read_epoch(SYNC_UNTIL_FILE)

        finalized: dict[int, int] = {}
        in_progress: list[int] = []
        for name in self._list(self.current_dir):
            if m := FINALIZED.fullmatch(name):
                start, end = int(m.group(1)), int(m.group(2))
                if start > end:
                    raise StorageError(
                        f"finalized segment {self.current_dir / name} ends before it starts"
                    )
                if start in finalized:
                    raise StorageError(
                        f"two finalized segments start at txid {start} in {self.current_dir}:"
                        f" {finalized_name(start, finalized[start])} and {name}"
                    )
                finalized[start] = end
            elif m := IN_PROGRESS.fullmatch(name):
                in_progress.append(int(m.group(1)))

        segments = [
            SegmentState(s, e, False, self._read_digest(s, e)) for s, e in finalized.items()
        ]
        for start in in_progress:
            path = self.current_dir / in_progress_name(start)
            if start in finalized:
                # Finalizing is a rename, so both cannot come from this code; never let an
                # in-progress copy shadow what a quorum agreed on.
                self._log.warning(
                    "in-progress segment shadows a finalized one; moving it aside",
                    file=str(path),
                    finalized=finalized_name(start, finalized[start]),
                )
                self._move_aside_path(path, "stale")
                continue
            scanned = self._scan_in_progress(path, start)
            if scanned.state.num_txns == 0:
                reason = "corrupt" if scanned.header == "bad-magic" else "empty"
                self._log.warning(
                    "in-progress segment holds no transaction; moving it aside",
                    file=str(path),
                    header=scanned.header,
                    suffix=reason,
                )
                self._move_aside_path(path, reason)
                continue
            segments.append(scanned.state)
        segments.sort(key=lambda s: s.start_txid)
        return LoadedJournal(
            namespace_info, promised, writer, committed, tuple(segments), accepted, sync_until
        )

    def format(
        self, namespace_info: NamespaceInfo, *, promised_epoch: int = 0, sync_until: int = 0
    ) -> None:
        """Erase everything under current/ and write VERSION; epochs go back to 0 (or the
        promise to ``promised_epoch``, and the rejoin mark is ``sync_until``: a JournalNode
        formatting itself from its peers, HDFS-16690).

        VERSION goes first and comes back last: a crash half-way leaves an unformatted
        journal, never a formatted one holding part of the old data, nor one that forgot the
        promise and the rejoin mark it was formatted with.
        """
        self._require_open()
        version = meta_files.version_bytes(namespace_info)
        self._close_segment()
        self._poisoned.clear()
        if self._committed_fd is not None:
            os.close(self._committed_fd)
            self._committed_fd = None
        version_path = self.current_dir / VERSION_FILE
        with storage_errors("remove", version_path):
            version_path.unlink(missing_ok=True)
        fsutil.fsync_dir(self.current_dir)
        for entry in self._scandir(self.current_dir):
            path = Path(entry.path)
            with storage_errors("remove", path):
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(path)
                else:
                    path.unlink()
        fsutil.fsync_dir(self.current_dir)
        fsutil.ensure_dir(self.paxos_dir)
        if promised_epoch:
            self.persist_last_promised_epoch(promised_epoch)
        if sync_until:
            self.persist_sync_until(sync_until)
        fsutil.atomic_write(version_path, version)

    def persist_sync_until(self, txid: int) -> None:
        self._require_open()
        path = self.current_dir / SYNC_UNTIL_FILE
        if txid:
            fsutil.atomic_write(path, meta_files.epoch_bytes(txid))
            return
        with storage_errors("remove", path):
            if not path.exists():
                return
            path.unlink()
        fsutil.fsync_dir(self.current_dir)

    # ----------------------------------------------------------------- small files

    def persist_last_promised_epoch(self, epoch: int) -> None:
        self._require_open()
        fsutil.atomic_write(
            self.current_dir / LAST_PROMISED_EPOCH_FILE, meta_files.epoch_bytes(epoch)
        )

    def persist_last_writer_epoch(self, epoch: int) -> None:
        self._require_open()
        fsutil.atomic_write(
            self.current_dir / LAST_WRITER_EPOCH_FILE, meta_files.epoch_bytes(epoch)
        )

    def persist_committed_txid(self, txid: int) -> None:
        """Best effort (HDFS-3077 §4.1): one pwrite, no fsync; lag metrics only."""
        self._require_open()
        path = self.current_dir / COMMITTED_TXID_FILE
        with storage_errors("write", path):
            if self._committed_fd is None:
                self._committed_fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
            os.pwrite(self._committed_fd, meta_files.committed_bytes(txid), 0)

    def persist_accepted_recovery(self, segment_txid: int, accepted: AcceptedRecovery) -> None:
        self._require_open()
        data = meta_files.accepted_bytes(accepted)
        fsutil.ensure_dir(self.paxos_dir)
        fsutil.atomic_write(self.paxos_dir / str(segment_txid), data)

    def clear_accepted_recovery(self, segment_txid: int) -> None:
        self._require_open()
        path = self.paxos_dir / str(segment_txid)
        with storage_errors("remove", path):
            if not path.exists():
                return
            path.unlink()
        fsutil.fsync_dir(self.paxos_dir)

    # ----------------------------------------------------------------- writing segments

    def start_segment(self, txid: int) -> None:
        """Create ``edits_inprogress_<txid>`` with only the header, replacing any file of that
        name atomically, and keep it open for appends."""
        self._require_open()
        self._refuse_if_finalized(txid, "start a segment")
        self._close_segment()
        path = self.current_dir / in_progress_name(txid)
        fd, tmp = fsutil.open_temp(self.current_dir, path.name)
        try:
            try:
                fsutil.write_all(fd, records.SEGMENT_HEADER)
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except OSError as exc:
            fsutil.remove_quietly(tmp)
            raise fsutil.storage_error("create", path, exc) from exc
        fsutil.fsync_dir(self.current_dir)
        self._poisoned.discard(txid)
        self._open_for_append(txid)

    def append(self, segment_txid: int, framed: bytes) -> None:
        """Append validated framed records and fdatasync: the hot path, one write + one sync."""
        fd = self._segment_fd if segment_txid == self._segment_txid else None
        if fd is None:
            fd = self._open_for_append(segment_txid)
        try:
            fsutil.write_all(fd, framed)
            began = time.perf_counter()
            if not active(Mutant.APPEND_WITHOUT_FDATASYNC):
                os.fdatasync(fd)
            took = time.perf_counter() - began
        except OSError as exc:
            # After a failed write or fsync the file's tail is unknown (and after a failed
            # fsync the page cache may lie): refuse further appends until repaired.
            self._close_segment()
            self._poisoned.add(segment_txid)
            raise fsutil.storage_error(
                "append to", self.current_dir / in_progress_name(segment_txid), exc
            ) from exc
        if self._sync_observer is not None:
            self._sync_observer(took)

    def finalize_segment(
        self, start_txid: int, end_txid: int, md5: bytes | None = None
    ) -> bytes:
        """Write ``edits_<start>-<end>.md5`` (the md5 of the records, read from the segment
        when ``md5`` is None), then rename in-progress to ``edits_<start>-<end>``. A no-op,
        returning the recorded md5, if that is already done.

        The digest goes first, replacing any left by a crash before an earlier rename: a
        finalized segment always has its digest beside it, and a leftover from another
        copy of the segment never stays beside this one."""
        self._require_open()
        src = self.current_dir / in_progress_name(start_txid)
        dst = self.current_dir / finalized_name(start_txid, end_txid)
        if self._segment_txid == start_txid:
            self._close_segment()
        with storage_errors("finalize", src):
            src_exists = src.exists()
            dst_exists = dst.exists()
        if dst_exists:
            if src_exists:
                raise JournalStateError(f"both {src} and {dst} exist; refusing to overwrite {dst}")
            recorded = self._read_digest(start_txid, end_txid)
            if not recorded:
                recorded = records_md5(self.read_segment(start_txid))
                self.record_digest(start_txid, end_txid, recorded)
            return recorded
        if not src_exists:
            other = self._find_finalized(start_txid)
            if other is not None:
                raise JournalStateError(
                    f"segment {start_txid} is already finalized as {other[0].name},"
                    f" not with end txid {end_txid}"
                )
            raise JournalStateError(f"no in-progress segment {src} to finalize")
        if md5 is None:
            # The raw bytes: every record was checked when its batch was appended, and a
            # validated read costs ten times as much on the writer's path (a roll).
            md5 = self.raw_md5(start_txid)
        self.record_digest(start_txid, end_txid, md5)
        with storage_errors("rename", src):
            os.rename(src, dst)
        fsutil.fsync_dir(self.current_dir)
        self._poisoned.discard(start_txid)
        return md5

    def record_digest(self, start_txid: int, end_txid: int, md5: bytes) -> None:
        """Write ``edits_<start>-<end>.md5`` atomically (temp, fsync, rename, fsync dir)."""
        self._require_open()
        path = self.current_dir / digest_name(start_txid, end_txid)
        fsutil.atomic_write(path, meta_files.digest_bytes(md5))

    def _read_digest(self, start_txid: int, end_txid: int) -> bytes:
        """The md5 recorded beside a finalized segment; b"" when there is none (a segment
        finalized before digests were kept) or it is unreadable (logged): its first reader
        computes and records it again (docs/protocol.md §8.7)."""
        path = self.current_dir / digest_name(start_txid, end_txid)
        data = fsutil.read_if_exists(path)
        if data is None:
            return b""
        try:
            return meta_files.parse_digest(path, data)
        except StorageError as exc:
            self._log.error(
                "segment digest file is malformed; the digest is computed again from the "
                "segment and compared with the peers'",
                file=str(path),
                error=str(exc),
            )
            return b""

    def move_aside(self, start_txid: int, reason: str) -> None:
        """Rename ``edits_inprogress_<start>`` to ``<name>.<reason>``; never deletes."""
        self._require_open()
        if not REASON.fullmatch(reason):
            raise InvalidRequestError(f"invalid move-aside reason {reason!r}")
        path = self.current_dir / in_progress_name(start_txid)
        if self._segment_txid == start_txid:
            self._close_segment()
        with storage_errors("stat", path):
            if not path.exists():
                raise JournalStateError(f"no in-progress segment {path} to move aside")
        self._move_aside_path(path, reason)
        self._poisoned.discard(start_txid)

    def move_aside_finalized(self, start_txid: int, reason: str) -> None:
        """Rename ``edits_<start>-<end>`` to ``<name>.<reason>``: a copy found corrupt, which
        the sync thread replaces from a peer. Never deletes."""
        self._require_open()
        if not REASON.fullmatch(reason):
            raise InvalidRequestError(f"invalid move-aside reason {reason!r}")
        found = self._find_finalized(start_txid)
        if found is None:
            raise JournalStateError(f"no finalized segment starting at txid {start_txid}")
        target = self._move_aside_path(found[0], reason)
        # The digest it was recorded with goes along, as evidence; the copy that replaces
        # the segment records its own.
        digest = self.current_dir / digest_name(start_txid, found[1])
        with storage_errors("stat", digest):
            has_digest = digest.exists()
        if has_digest:
            with storage_errors("move aside", digest):
                os.rename(digest, target.with_name(target.name + ".md5"))
            fsutil.fsync_dir(self.current_dir)

    def install_segment(self, start_txid: int, chunks: Iterable[bytes], expected_end: int) -> None:
        """Replace ``edits_inprogress_<start>`` with downloaded bytes, after checking they hold
        exactly start..expected_end (``check_downloaded_segment`` semantics, streamed)."""
        self._require_open()
        self._refuse_if_finalized(start_txid, "install a segment")
        path = self.current_dir / in_progress_name(start_txid)
        self._write_checked(start_txid, chunks, expected_end, path)
        self._poisoned.discard(start_txid)

    def _staged_path(self, start_txid: int, epoch: int) -> Path:
        # A name load() takes for a moved-aside file (kept, purged with its segment).
        return self.current_dir / f"{in_progress_name(start_txid)}.epoch-{epoch}.synced"

    def stage_segment(
        self, start_txid: int, chunks: Iterable[bytes], expected_end: int, epoch: int
    ) -> None:
        """Write downloaded bytes to ``edits_inprogress_<start>.epoch-<epoch>.synced``, checked
        as ``install_segment`` checks them; ``install_staged_segment`` renames it into place
        once the accepted recovery is persisted (HDFS-3955)."""
        self._require_open()
        self._refuse_if_finalized(start_txid, "stage a segment")
        self._write_checked(start_txid, chunks, expected_end, self._staged_path(start_txid, epoch))

    def install_staged_segment(self, start_txid: int, epoch: int) -> bool:
        self._require_open()
        staged = self._staged_path(start_txid, epoch)
        with storage_errors("stat", staged):
            if not staged.exists():
                return False
        self._refuse_if_finalized(start_txid, "install a staged segment")
        if self._segment_txid == start_txid:
            self._close_segment()  # its fd would keep appending to the replaced inode
        path = self.current_dir / in_progress_name(start_txid)
        with storage_errors("rename", staged):
            os.replace(staged, path)
        fsutil.fsync_dir(self.current_dir)
        self._poisoned.discard(start_txid)
        return True

    def stage_finalized(
        self, start_txid: int, end_txid: int, chunks: Iterable[bytes]
    ) -> StagedSegment:
        """Write a downloaded finalized segment to a temp file (fsynced; removed at start-up
        if a crash leaves it), checked to hold exactly start..end, with the md5 of its
        records. Touches nothing in place, so it runs without the Journal's lock."""
        self._require_open()
        target = finalized_name(start_txid, end_txid)
        tmp, size, md5 = self._write_temp_checked(start_txid, chunks, end_txid, target)
        return StagedSegment(start_txid, end_txid, size, md5, tmp)

    def install_finalized(self, staged: StagedSegment) -> None:
        """Rename a staged segment to ``edits_<start>-<end>`` and fsync the directory; then
        move a stale in-progress copy aside. A crash between the two leaves both, and
        ``load`` moves the in-progress copy aside (a finalized copy is never shadowed)."""
        self._require_open()
        start = staged.start_txid
        self._refuse_if_finalized(start, "install a synced segment")
        tmp = staged.handle
        assert isinstance(tmp, Path)
        path = self.current_dir / finalized_name(start, staged.end_txid)
        self.record_digest(start, staged.end_txid, staged.md5)
        with storage_errors("rename", tmp):
            os.replace(tmp, path)
        fsutil.fsync_dir(self.current_dir)
        stale = self.current_dir / in_progress_name(start)
        with storage_errors("stat", stale):
            stale_exists = stale.exists()
        if stale_exists:
            if self._segment_txid == start:
                self._close_segment()
            self._move_aside_path(stale, "stale")
            self._poisoned.discard(start)

    def discard_staged(self, staged: StagedSegment) -> None:
        tmp = staged.handle
        assert isinstance(tmp, Path)
        with storage_errors("remove", tmp):
            tmp.unlink(missing_ok=True)

    def _write_temp_checked(
        self, start_txid: int, chunks: Iterable[bytes], expected_end: int, target_name: str
    ) -> tuple[Path, int, bytes]:
        """Write ``chunks`` to a temp file for ``target_name``, fsync it and check it holds
        exactly the records start..expected_end; return it with its size and the md5 of its
        records. On any failure the temp file is removed."""
        what = f"segment {start_txid}"
        fd, tmp = fsutil.open_temp(self.current_dir, target_name)
        size = 0
        digest = hashlib.md5()
        try:
            try:
                # Only our own writes become StorageError: a failing download (the chunks'
                # iterator; ConnectionError is an OSError too) propagates as itself.
                for chunk in chunks:
                    with storage_errors("write", tmp):
                        fsutil.write_all(fd, chunk)
                    skip = max(0, records.HEADER_LEN - size)
                    digest.update(memoryview(chunk)[skip:])
                    size += len(chunk)
                with storage_errors("fsync", tmp):
                    os.fsync(fd)
            finally:
                os.close(fd)
            with storage_errors("read", tmp), open(tmp, "rb", buffering=0) as f:
                if record_stream.read_exact(f, records.HEADER_LEN) != records.SEGMENT_HEADER:
                    raise JournalStateError(
                        f"downloaded {what} does not start with a segment header"
                    )
                progress = record_stream.drain(record_stream.stream_records(f, start_txid, None))
            if progress.error is not None:
                raise JournalStateError(f"downloaded {what} is corrupt: {progress.error}")
            if progress.count == 0 or progress.last_txid != expected_end:
                got = f"up to txid {progress.last_txid}" if progress.count else "no transactions"
                raise JournalStateError(
                    f"downloaded {what} holds {got}, expected up to {expected_end}"
                )
        except BaseException:
            fsutil.remove_quietly(tmp)
            raise
        return tmp, size, digest.digest()

    def _write_checked(
        self, start_txid: int, chunks: Iterable[bytes], expected_end: int, path: Path
    ) -> None:
        """Write ``chunks`` to a temp file, fsync, check it holds exactly the records
        start..expected_end, rename it to ``path`` and fsync the directory."""
        tmp, _, _ = self._write_temp_checked(start_txid, chunks, expected_end, path.name)
        try:
            if path.name == in_progress_name(start_txid) and self._segment_txid == start_txid:
                self._close_segment()  # its fd would keep appending to the replaced inode
            with storage_errors("rename", tmp):
                os.replace(tmp, path)
        except BaseException:
            fsutil.remove_quietly(tmp)
            raise
        fsutil.fsync_dir(self.current_dir)

    def purge(self, min_txid_to_keep: int) -> list[str]:
        """Remove finalized segments ending below ``min_txid_to_keep``, moved-aside files
        starting below it and their paxos files; return the removed paths (relative to current/)."""
        self._require_open()
        removed: list[str] = []
        for name in self._list(self.current_dir):
            if segment_names.purgeable(name, min_txid_to_keep):
                path = self.current_dir / name
                with storage_errors("remove", path):
                    path.unlink()
                removed.append(name)
        for name in self._list(self.paxos_dir):
            if name.isdigit() and int(name) < min_txid_to_keep:
                path = self.paxos_dir / name
                with storage_errors("remove", path):
                    path.unlink()
                removed.append(f"{PAXOS_DIR}/{name}")
        if removed:
            fsutil.fsync_dir(self.current_dir)
            fsutil.fsync_dir(self.paxos_dir)
            self._log.info(
                "purged edit log files", min_txid_to_keep=min_txid_to_keep, removed=removed
            )
        return removed

    # ----------------------------------------------------------------- reading segments

    def scan_segment(self, start_txid: int) -> SegmentState | None:
        """On-disk state now: a finalized segment from its name; an in-progress one by
        scanning it (cutting a torn or corrupt tail, as ``load`` does); None if absent."""
        self._require_open()
        found = self._find_finalized(start_txid)
        if found is not None:
            return SegmentState(start_txid, found[1], False)
        path = self.current_dir / in_progress_name(start_txid)
        with storage_errors("stat", path):
            if not path.exists():
                return None
        state = self._scan_in_progress(path, start_txid).state
        self._poisoned.discard(start_txid)  # the tail is whole again: appends may resume
        return state

    def read_segment(self, start_txid: int, end_txid: int | None = None) -> Iterator[bytes]:
        """The segment's bytes (header and records) in chunks of about CHUNK_SIZE.

        A finalized segment, and any segment read up to ``end_txid``, is validated while it
        streams: a bad record raises CorruptSegmentError naming the file and byte offset
        before any of its bytes are yielded. The file is opened here, not at the first
        ``next``, so a missing segment fails at once and a concurrent finalize or purge
        cannot pull the file from under the reader.
        """
        if end_txid is not None and end_txid < start_txid - 1:
            raise InvalidRequestError(
                f"end txid {end_txid} is before the start of segment {start_txid}"
            )
        for attempt in (1, 2):  # a finalize may rename the file between finding and opening it
            finalized = self._find_finalized(start_txid)
            if finalized is not None:
                path, fin_end = finalized
                if end_txid is not None and end_txid > fin_end:
                    raise JournalStateError(
                        f"{path} ends at txid {fin_end}, before the requested txid {end_txid}"
                    )
            else:
                path, fin_end = self.current_dir / in_progress_name(start_txid), None
            try:
                f = open(path, "rb", buffering=0)  # noqa: SIM115 - the generator closes it
                break
            except FileNotFoundError:
                if attempt == 2:
                    raise JournalStateError(
                        f"no segment starting at txid {start_txid} in {self.current_dir}"
                    ) from None
            except OSError as exc:
                raise fsutil.storage_error("open", path, exc) from exc
        if fin_end is None and end_txid is None:
            return record_stream.read_raw(f, path)
        return record_stream.read_validated(f, path, start_txid, end_txid, fin_end)

    def raw_md5(self, start_txid: int) -> bytes:
        """md5 of everything after the header of the segment file starting at ``start_txid``
        (finalized, else in progress), read as it is: no record is checked."""
        found = self._find_finalized(start_txid)
        path = found[0] if found else self.current_dir / in_progress_name(start_txid)
        try:
            f = open(path, "rb", buffering=0)  # noqa: SIM115 - read_raw closes it
        except FileNotFoundError:
            raise JournalStateError(
                f"no segment starting at txid {start_txid} in {self.current_dir}"
            ) from None
        except OSError as exc:
            raise fsutil.storage_error("open", path, exc) from exc
        return records_md5(record_stream.read_raw(f, path))

    def verify_finalized(self, start_txid: int) -> SegmentState:
        """Read every record of a finalized segment; CorruptSegmentError (file and offset) on
        a bad record or if the records do not run exactly from the name's first to last txid."""
        found = self._find_finalized(start_txid)
        if found is None:
            raise JournalStateError(f"no finalized segment starting at txid {start_txid}")
        for _ in self.read_segment(start_txid):
            pass
        return SegmentState(start_txid, found[1], False)

    def finalized_md5s(self) -> dict[str, str]:
        """md5 of every finalized segment file, by file name, each verified record by record
        as it is read (CorruptSegmentError naming file and offset on a bad one).

        HDFS-3077's system test (§7.4.1) collates these across JournalNodes: files of the
        same name must be byte-identical everywhere. Nothing on disk is changed.
        """
        digests: dict[str, str] = {}
        for name in self._list(self.current_dir):
            if m := FINALIZED.fullmatch(name):
                digest = hashlib.md5()
                for chunk in self.read_segment(int(m.group(1))):
                    digest.update(chunk)
                digests[name] = digest.hexdigest()
        return digests

    def describe(self) -> list[tuple[str, int]]:
        """(path relative to the journal dir, size) of every file, for printing the layout."""
        out: list[tuple[str, int]] = []
        with storage_errors("list", self.journal_dir):
            for dirpath, _, filenames in os.walk(self.journal_dir):
                for name in filenames:
                    full = Path(dirpath) / name
                    rel = full.relative_to(self.journal_dir).as_posix()
                    out.append((rel, full.lstat().st_size))
        return sorted(out)

    # ----------------------------------------------------------------- helpers

    def _require_open(self) -> None:
        """Writing without the lock could race another JournalNode on the same directory."""
        if not self._open:
            raise StorageError(f"{self!r} is closed")

    def _open_for_append(self, segment_txid: int) -> int:
        self._require_open()
        if segment_txid in self._poisoned:
            raise StorageError(
                f"an earlier append to {self.current_dir / in_progress_name(segment_txid)}"
                " failed; the segment must be recovered before it takes more edits"
            )
        self._close_segment()
        path = self.current_dir / in_progress_name(segment_txid)
        try:
            # O_APPEND: a tail cut by scan_segment must not leave the fd writing past the end.
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        except FileNotFoundError:
            raise JournalStateError(f"no in-progress segment {path} to append to") from None
        except OSError as exc:
            raise fsutil.storage_error("open", path, exc) from exc
        self._segment_txid, self._segment_fd = segment_txid, fd
        return fd

    def _close_segment(self) -> None:
        if self._segment_fd is not None:
            fd, self._segment_fd, self._segment_txid = self._segment_fd, None, None
            with storage_errors("close", self.current_dir):
                os.close(fd)

    def _refuse_if_finalized(self, start_txid: int, action: str) -> None:
        found = self._find_finalized(start_txid)
        if found is not None:
            raise JournalStateError(
                f"cannot {action} at txid {start_txid}: {found[0].name} is finalized"
            )

    def _find_finalized(self, start_txid: int) -> tuple[Path, int] | None:
        prefix = finalized_prefix(start_txid)
        for name in self._list(self.current_dir):
            if name.startswith(prefix) and (m := FINALIZED.fullmatch(name)):
                return self.current_dir / name, int(m.group(2))
        return None

    def _scan_in_progress(self, path: Path, start_txid: int) -> _InProgressScan:
        """Validate an in-progress segment and cut a torn or corrupt tail, durably."""
        empty = SegmentState(start_txid, start_txid - 1, True)
        with storage_errors("scan", path), open(path, "rb", buffering=0) as f:
            header = record_stream.read_exact(f, records.HEADER_LEN)
            status = record_stream.header_status(header, path)
            if status != "ok":
                return _InProgressScan(empty, status)
            progress = record_stream.drain(record_stream.stream_records(f, start_txid, None))
            size = os.fstat(f.fileno()).st_size
        if progress.error is not None:
            self._log.warning(
                "truncating in-progress segment at the last valid record",
                file=str(path),
                offset=progress.valid_end,
                error=str(progress.error),
                torn=progress.torn,
                discarded_bytes=size - progress.valid_end,
            )
            with storage_errors("truncate", path):
                fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.ftruncate(fd, progress.valid_end)
                    os.fsync(fd)
                finally:
                    os.close(fd)
        if progress.count == 0:
            return _InProgressScan(empty, "ok")
        return _InProgressScan(SegmentState(start_txid, progress.last_txid, True), "ok")

    def _move_aside_path(self, path: Path, reason: str) -> Path:
        target = path.with_name(f"{path.name}.{reason}")
        n = 0
        while target.exists():  # an earlier move-aside of the same name is kept too
            n += 1
            target = path.with_name(f"{path.name}.{reason}.{n}")
        with storage_errors("move aside", path):
            os.rename(path, target)
        fsutil.fsync_dir(path.parent)
        self._log.info("moved segment aside", file=str(path), to=target.name)
        return target

    def _remove_temp_files(self, directory: Path) -> None:
        removed = False
        for name in self._list(directory):
            if fsutil.is_temp_name(name):
                path = directory / name
                self._log.info("removing temp file left by a crash", file=str(path))
                with storage_errors("remove", path):
                    path.unlink()
                removed = True
        if removed:
            fsutil.fsync_dir(directory)

    def _read_version(self) -> NamespaceInfo | None:
        path = self.current_dir / VERSION_FILE
        data = fsutil.read_if_exists(path)
        return None if data is None else meta_files.parse_version(path, data)

    def _read_epoch(self, name: str) -> int:
        path = self.current_dir / name
        return meta_files.parse_epoch(path, fsutil.read_if_exists(path))

    def _read_committed_txid(self) -> int:
        return meta_files.parse_committed(
            fsutil.read_if_exists(self.current_dir / COMMITTED_TXID_FILE)
        )

    def _read_paxos(self) -> dict[int, AcceptedRecovery]:
        accepted: dict[int, AcceptedRecovery] = {}
        for name in self._list(self.paxos_dir):
            path = self.paxos_dir / name
            if not name.isdigit():
                self._log.warning("ignoring unexpected file in paxos dir", file=str(path))
                continue
            data = fsutil.read_if_exists(path)
            if data is None:
                continue
            accepted[int(name)] = meta_files.parse_accepted(path, data)
        return accepted

    def _list(self, directory: Path) -> list[str]:
        return sorted(entry.name for entry in self._scandir(directory))

    @staticmethod
    def _scandir(directory: Path) -> list[os.DirEntry[str]]:
        try:
            with os.scandir(directory) as it:
                return list(it)
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise fsutil.storage_error("list", directory, exc) from exc
