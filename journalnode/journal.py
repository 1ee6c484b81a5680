"""The Journal: one journal id's rules, as HDFS-3077 states them.

This is the protocol logic of a JournalNode (HDFS-3077 §2.3-§2.11, §4; docs/protocol.md
§3), free of sockets and files: it runs over any ``JournalStorage`` — a real
directory in the daemon, memory in the simulator — and a ``fetch`` callable that acceptRecovery
uses to download a segment from another JournalNode. The gRPC servicer is a thin shell that
turns messages into calls here and ``JournalError`` into status codes.

Rules, each with its test in tests/unit/test_journal.py:

* every call but format/isFormatted needs a formatted journal and the caller's cluster id;
* a writer call whose epoch is below lastPromisedEpoch is refused; a higher one is promised
  (persisted) before anything else happens (§2.3), and resets the IPC serial;
* newEpoch must be strictly higher than the promise;
* within an epoch IPC serial numbers strictly increase (a replayed or reordered call is refused);
* journal() needs writer epoch == lastWriterEpoch, an open segment the writer agrees on,
  and txids that continue exactly where the segment ends;
* startLogSegment persists lastWriterEpoch before it creates the segment (§2.4);
* finalize is idempotent and never un-finalizes or changes a finalized end (invariant 1);
* an in-progress segment without transactions is moved aside as if it never existed;
* acceptRecovery persists what it accepted; prepareRecovery returns it (§2.8).
"""

from __future__ import annotations

import errno
import hashlib
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from conf.mutants import Mutant, active
from durable import version
from journalnode.edits_cache import CachedEdits, JournaledEditsCache
from journalnode.epochs import epoch_out_of_range
from journalnode.errors import (
    CorruptSegmentError,
    EpochError,
    InvalidRequestError,
    JournalInconsistentError,
    JournalInUseError,
    JournalNotEmptyError,
    JournalNotFormattedError,
    JournalOutOfSyncError,
    JournalStateError,
    JournalSyncingError,
    NamespaceMismatchError,
    SegmentDigestError,
    StorageError,
)
from journalnode.segment_names import finalized_name
from journalnode.storage import AcceptedRecovery, JournalStorage, records_md5
from journalnode.subscriptions import (
    DEFAULT_MAX_SUBSCRIBERS,
    DEFAULT_SUBSCRIBER_QUEUE_BYTES,
    EditSubscribers,
    EditSubscription,
    EndReason,
    PushedEdits,
)
from journalnode.sync import DigestRepair, SegmentToSync, SyncPlan, covers, plan_sync
from proto import records
from proto.values import (
    NamespaceInfo,
    PrepareRecoveryResult,
    RemoteEditLog,
    RequestInfo,
    SegmentState,
)

log = structlog.get_logger(__name__)

DEFAULT_EDIT_CACHE_BYTES = 1 << 20
"""dfs.journalnode.edit-cache-size.bytes: recent edits kept for in-progress tailing."""

DEFAULT_WRITER_HOLD_SECONDS = 30.0
"""How long after its last call a writer still holds a journal (``Journal.writer_holds``).
A live QJM writer calls at least every heartbeat interval (1 s by default), so 30 s is
many missed heartbeats: a writer that quiet is gone or cut off."""

# Errnos that mean the disk (or the quota) is full: the JournalNode says so in its log and
# in journalnode_disk_full, and the writer's logger rejoins at the next segment.
_DISK_FULL = frozenset({errno.ENOSPC, errno.EDQUOT})

SLOW_APPEND_SECONDS = 0.002
"""An append (write and fdatasync) slower than this makes ``journal_if_quick`` decline the
next batch, so a server stops writing on its event loop while the disk is slow."""

# Downloads a segment: (from_url, journal_id, start_txid, end_txid) -> chunks of its bytes.
SegmentFetcher = Callable[[str, str, int, int], Iterable[bytes]]


@dataclass(slots=True)
class JournalStats:
    """Counters after Hadoop's JournalMetrics; the daemon exports them to Prometheus."""

    batches_written: int = 0
    txns_written: int = 0
    bytes_written: int = 0
    batches_written_while_lagging: int = 0
    last_written_txid: int = 0
    journaled_edits_served: int = 0
    """Transactions answered from the edit cache (GetJournaledEdits)."""
    journaled_edits_misses: int = 0
    """GetJournaledEdits or SubscribeEdits for a txid this node wrote but no longer caches."""
    edits_pushed: int = 0
    """Transactions pushed to subscribers (SubscribeEdits)."""
    disk_full: bool = False
    """The last write of a segment or small file failed for lack of space (ENOSPC/EDQUOT);
    cleared by the next write that succeeds."""
    storage_errors: int = 0
    """Writes or syncs that failed (any errno)."""
    segments_synced: int = 0
    """Finalized segments fetched from peers and installed (HDFS-4025)."""
    bytes_synced: int = 0
    """Bytes of those segments."""
    sync_failures: int = 0
    """Segments a sync round could not install: refused (md5, content, conflict) or failed."""
    corrupt_segments: int = 0
    """Finalized segments found corrupt here by a read and moved aside, to be synced."""
    segments_lacking: int = 0
    """Finalized segments peers hold that this node lacked at the last sync round, less
    those installed since."""
    digest_mismatches: int = 0
    """Finalized copies moved aside here because their records no longer had the md5
    recorded at finalize, or a majority of JournalNodes recorded another md5 (§8.7)."""
    digest_repairs: int = 0
    """Of those, segments installed again from the majority's copy."""


def check_format_request(ns: NamespaceInfo) -> None:
    """What a Format request must hold whatever the journal's state; checked before a new
    journal's directory is made, so that a refused Format leaves nothing behind. The rules
    are the VERSION file's own (one place): a namespace id of 0 used to pass this check and
    make the directories before VERSION refused it (found by tests/fuzz)."""
    if not ns.cluster_id:
        raise InvalidRequestError("format needs a non-empty cluster id")
    try:
        version.format_version(ns, "JOURNAL_NODE", title="format request check")
    except version.VersionFileError as err:
        raise InvalidRequestError(f"format refused: {err}") from err


class Journal:
    """One journal id on one JournalNode.

    Every public method is one RPC of QJournalService and is atomic with respect to the
    others (one lock, as Hadoop's ``synchronized Journal``)::

        journal = Journal("ns1", MemoryJournalStorage())
        journal.format(NamespaceInfo("CID-1", 42))
        journal.new_epoch(NamespaceInfo("CID-1", 42), epoch=1)
        journal.start_log_segment(RequestInfo("ns1", "CID-1", 1, 0), txid=1)
        journal.journal(RequestInfo("ns1", "CID-1", 1, 1), segment_txid=1, first_txid=1,
                        num_txns=1, framed=records.frame_ops([op]))
    """

    def __init__(
        self,
        journal_id: str,
        storage: JournalStorage,
        *,
        from_url: str = "",
        edit_cache_bytes: int = DEFAULT_EDIT_CACHE_BYTES,
        writer_hold_seconds: float = DEFAULT_WRITER_HOLD_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        subscriber_queue_bytes: int = DEFAULT_SUBSCRIBER_QUEUE_BYTES,
        max_subscribers: int = DEFAULT_MAX_SUBSCRIBERS,
    ) -> None:
        self.journal_id = journal_id
        self.storage = storage
        self.from_url = from_url
        self.writer_hold_seconds = writer_hold_seconds
        self._clock = clock
        self.stats = JournalStats()
        # Recent batches for GetJournaledEdits (standby tailing of the in-progress segment).
        self.edits_cache = JournaledEditsCache(edit_cache_bytes)
        # Readers the batches are pushed to as they are written (SubscribeEdits).
        self.subscribers = EditSubscribers()
        self.subscriber_queue_bytes = subscriber_queue_bytes
        self.max_subscribers = max_subscribers
        self._lock = threading.Lock()
        self._log = log.bind(journal=journal_id)
        self._last_append_seconds = 0.0
        self.slow_append_seconds = SLOW_APPEND_SECONDS
        self._load()

    # ------------------------------------------------------------------ state

    def _load(self) -> None:
        loaded = self.storage.load()
        self.edits_cache.clear()
        self.subscribers.end(EndReason.LOG_REPLACED, "the journal was reloaded (format)")
        self._ns = loaded.namespace_info
        self._last_promised_epoch = loaded.last_promised_epoch
        self._last_writer_epoch = loaded.last_writer_epoch
        self._committed_txid = loaded.committed_txid
        self._segments: dict[int, SegmentState] = {s.start_txid: s for s in loaded.segments}
        # Rejoin mark of a self-formatted node (0: none); finalized segments purged here.
        self._sync_until = loaded.sync_until
        self._purged_below = 0
        self._accepted: dict[int, AcceptedRecovery] = dict(loaded.accepted)
        # Finalized segments moved aside for a digest mismatch, not yet installed again.
        self._mismatched: set[int] = set()
        # The segment a writer is appending to: set by startLogSegment only, so that after a
        # restart nobody appends to a segment before a writer has (re)started or recovered it.
        self._cur_segment: int | None = None
        self._next_txid = 0
        # Highest IPC serial seen in the current promised epoch; -1 after a new promise.
        self._ipc_serial = -1
        # When a call of the promised epoch was last accepted (writer_holds). Loading counts
        # as one: after a restart, a live writer may not have called again yet.
        self._writer_seen_at = self._clock()
        if self._ns is not None:
            self._complete_half_done_accepts()
        if self._segments:
            self.stats.last_written_txid = max(s.end_txid for s in self._segments.values())

    @property
    def last_promised_epoch(self) -> int:
        return self._last_promised_epoch

    @property
    def last_writer_epoch(self) -> int:
        return self._last_writer_epoch

    @property
    def committed_txid(self) -> int:
        return self._committed_txid

    @property
    def namespace_info(self) -> NamespaceInfo | None:
        return self._ns

    def segments(self) -> list[SegmentState]:
        """Segments with at least one transaction, in txid order."""
        with self._lock:
            return [
                self._segments[k] for k in sorted(self._segments) if self._segments[k].num_txns > 0
            ]

    @property
    def current_segment_txid(self) -> int | None:
        """The segment a writer is appending to (None between segments and after a restart)."""
        return self._cur_segment

    @property
    def current_lag_txns(self) -> int:
        return max(0, self._committed_txid - self.stats.last_written_txid)

    @property
    def rejoining(self) -> bool:
        """A self-formatted node that does not vote yet (``_check_voting``)."""
        return self._sync_until > 0

    @property
    def rejoin_txid(self) -> int:
        """While rejoining, the txid through which it must hold finalized segments before
        it votes (its peers' highest when it formatted itself); 0 otherwise."""
        return self._sync_until

    @property
    def rejoin_pending(self) -> bool:
        """Whether it still lacks finalized segments through ``rejoin_txid``: ``rejoining``
        as its next vote will find it (``rejoining`` itself stays set until that vote clears
        it), read without clearing anything (the status page)."""
        with self._lock:
            return bool(self._sync_until) and not covers(self._finalized(), self._sync_until)

    # ------------------------------------------------------------------ checks

    def _check_formatted(self) -> NamespaceInfo:
        if self._ns is None:
            raise JournalNotFormattedError(f"journal {self.journal_id!r} is not formatted")
        return self._ns

    def _check_cluster(self, cluster_id: str) -> None:
        ns = self._check_formatted()
        if cluster_id != ns.cluster_id:
            raise NamespaceMismatchError(
                f"journal {self.journal_id!r} belongs to cluster {ns.cluster_id!r}, "
                f"request is for cluster {cluster_id!r}"
            )

    def _check_namespace(self, ns: NamespaceInfo) -> None:
        mine = self._check_formatted()
        if (ns.cluster_id, ns.namespace_id) != (mine.cluster_id, mine.namespace_id):
            raise NamespaceMismatchError(
                f"journal {self.journal_id!r} belongs to cluster {mine.cluster_id!r} namespace "
                f"{mine.namespace_id}, request is for cluster {ns.cluster_id!r} namespace "
                f"{ns.namespace_id}"
            )

    def _promise(self, epoch: int) -> None:
        self._log.info("promising epoch", old=self._last_promised_epoch, new=epoch)
        if not active(Mutant.PROMISE_NOT_PERSISTED):
            self.storage.persist_last_promised_epoch(epoch)
        self._last_promised_epoch = epoch
        self.subscribers.end(EndReason.EPOCH_CHANGED, f"epoch {epoch} was promised")
        self._ipc_serial = -1
        # A newer writer exists: whatever segment the old one had open is abandoned.
        self._cur_segment = None

    def _check_request(self, req: RequestInfo) -> None:
        """Fencing (HDFS-3077 §2.3) and IPC ordering for every writer call."""
        if req.journal_id != self.journal_id:
            raise InvalidRequestError(
                f"request for journal {req.journal_id!r} reached journal {self.journal_id!r}"
            )
        self._check_cluster(req.cluster_id)
        self._check_epoch_range(req.epoch)
        if req.epoch < self._last_promised_epoch:
            raise EpochError(
                f"IPC's epoch {req.epoch} is less than the last promised epoch "
                f"{self._last_promised_epoch} (journal {self.journal_id!r})"
            )
        if req.epoch > self._last_promised_epoch:
            self._promise(req.epoch)
        if req.ipc_serial_number <= self._ipc_serial:
            raise JournalOutOfSyncError(
                f"IPC serial {req.ipc_serial_number} in epoch {req.epoch} is not higher than the "
                f"prior highest serial {self._ipc_serial} (journal {self.journal_id!r})"
            )
        self._ipc_serial = req.ipc_serial_number
        self._writer_seen_at = self._clock()
        if req.committed_txid:
            if req.committed_txid < self._committed_txid:
                raise JournalOutOfSyncError(
                    f"writer tried to move the committed txid backward from "
                    f"{self._committed_txid} to {req.committed_txid}"
                )
            if req.committed_txid != self._committed_txid:
                self._committed_txid = req.committed_txid
                self.storage.persist_committed_txid(req.committed_txid)

    def _inconsistent(self, what: str) -> JournalInconsistentError:
        """The error for records of this node that contradict each other, logged as the bug
        it is (the caller only sees a failed RPC from one node)."""
        self._log.error("journal records contradict each other: a bug", problem=what)
        return JournalInconsistentError(what)

    def _check_voting(self, rpc: str) -> None:
        """A node that formatted itself to rejoin (HDFS-16690) lost what it acknowledged
        before; answering newEpoch or prepareRecovery from its empty storage would count it
        in a quorum as if it held what it lacks, and recovery could drop a committed edit
        (docs/protocol.md §10.3). It votes again once its finalized segments run through
        the txid its peers held when it rejoined."""
        if not self._rejoining_still():
            return
        raise JournalSyncingError(
            f"journal {self.journal_id!r} rejoined with empty storage and lacks finalized "
            f"segments through txid {self._sync_until}; it answers {rpc} once it has synced "
            "them from its peers"
        )

    def _rejoining_still(self) -> bool:
        """Whether this node still waits for segments through its rejoin point; clears the
        (durable) mark once its finalized segments cover it."""
        if not self._sync_until:
            return False
        if not covers(self._finalized(), self._sync_until):
            return True
        self._log.info(
            "rejoin complete: holding every segment through the rejoin point",
            sync_until=self._sync_until,
        )
        self.storage.persist_sync_until(0)
        self._sync_until = 0
        return False

    def _finalized(self) -> list[SegmentState]:
        return [s for s in self._segments.values() if not s.is_in_progress]

    def _check_epoch_range(self, epoch: int) -> None:
        """Refuse an epoch no election could have produced (``journalnode.epochs``), before it
        is promised: promised, it would leave no epoch for the next writer."""
        problem = epoch_out_of_range(epoch, self._last_promised_epoch)
        if problem is not None:
            raise InvalidRequestError(f"{problem} (journal {self.journal_id!r})")

    def writer_holds(self) -> bool:
        """Whether a writer holds this journal: it has a promise, and a call carrying the
        promised epoch was accepted within ``writer_hold_seconds`` (or the journal was loaded
        that recently). ``format(force=True)`` refuses a journal a writer holds."""
        if self._last_promised_epoch == 0:
            return False
        return self._clock() - self._writer_seen_at < self.writer_hold_seconds

    def _storage_write(self, action: Callable[[], None]) -> None:
        """Run a write of segment data; keep the disk-full flag and the error count, and say
        "disk full" in the log when it is."""
        try:
            action()
        except StorageError as exc:
            self.stats.storage_errors += 1
            full = exc.errno in _DISK_FULL
            if full and not self.stats.disk_full:
                self._log.error("disk full: edits are refused until space returns", error=str(exc))
            self.stats.disk_full = full
            raise
        if self.stats.disk_full:
            self._log.info("disk has space again: writes succeed")
        self.stats.disk_full = False

    def _check_write_request(self, req: RequestInfo) -> None:
        self._check_request(req)
        if req.epoch != self._last_writer_epoch:
            raise EpochError(
                f"IPC's epoch {req.epoch} is not the current writer epoch "
                f"{self._last_writer_epoch} (journal {self.journal_id!r})"
            )

    # ------------------------------------------------------------------ format

    def is_formatted(self) -> bool:
        return self._ns is not None

    def format(self, ns: NamespaceInfo, *, force: bool = False) -> None:
        """Write VERSION. Refuses a journal that holds data unless forced (HDFS-3077 §4.2)."""
        check_format_request(ns)
        with self._lock:
            holds_data = bool(self._segments) or self._last_promised_epoch > 0
            if self._ns is not None and holds_data and not force:
                raise JournalNotEmptyError(
                    f"journal {self.journal_id!r} is formatted for cluster {self._ns.cluster_id!r} "
                    f"and holds data (promised epoch {self._last_promised_epoch}, "
                    f"{len(self._segments)} segments); format with force to erase it"
                )
            if self._ns is not None and self.writer_holds():
                # Even forced: wiping a journal under a live writer drops acknowledged edits
                # from this copy while the writer counts it in its quorum (issue 10 row 3).
                quiet = self._clock() - self._writer_seen_at
                raise JournalInUseError(
                    f"journal {self.journal_id!r} is in use: a writer in epoch "
                    f"{self._last_promised_epoch} called {quiet:.1f} s ago; stop the NameNodes "
                    f"and format after {self.writer_hold_seconds:g} s without writer calls"
                )
            self._log.warning(
                "formatting journal", cluster=ns.cluster_id, namespace=ns.namespace_id
            )
            self.storage.format(ns)
            self.stats = JournalStats()
            self._load()

    # ------------------------------------------------------------------ epochs

    def get_journal_state(self, cluster_id: str) -> tuple[int, str]:
        """(lastPromisedEpoch, address to stream segments from), HDFS-3077 §2.5 step 1."""
        with self._lock:
            return self.promised_epoch_now(cluster_id), self.from_url

    def promised_epoch_now(self, cluster_id: str) -> int:
        """``get_journal_state``'s epoch without the lock, for the server's event loop (a
        read-index round must not wait behind a batch's fdatasync, which holds the lock). As
        safe as the locked read: ``_promise`` sets the epoch in memory only once it is on
        disk, so the answer is at least every promise this node acknowledged before the call
        arrived, which is all a read-index round asks (docs/consistency.md §4.1)."""
        self._check_cluster(cluster_id)
        return self._last_promised_epoch

    def new_epoch(self, ns: NamespaceInfo, epoch: int) -> int | None:
        """Promise ``epoch`` if strictly higher; return the newest segment's first txid."""
        with self._lock:
            self._check_namespace(ns)
            self._check_voting("newEpoch")
            self._check_epoch_range(epoch)
            equal_ok = active(Mutant.NEW_EPOCH_EQUAL) and epoch == self._last_promised_epoch
            if epoch <= self._last_promised_epoch and not equal_ok:
                raise EpochError(
                    f"proposed epoch {epoch} <= last promise {self._last_promised_epoch} "
                    f"(journal {self.journal_id!r})"
                )
            self._promise(epoch)
            self._writer_seen_at = self._clock()
            latest = self._latest_segment()
            return latest.start_txid if latest else None

    def _latest_segment(self) -> SegmentState | None:
        """The newest segment holding a transaction; empty in-progress ones are moved aside."""
        for start in sorted(self._segments, reverse=True):
            state = self._rescan(start)
            if state is not None:
                return state
        return None

    def _rescan(self, start: int) -> SegmentState | None:
        """Refresh an in-progress segment from storage; move it aside if it holds nothing."""
        known = self._segments.get(start)
        if known is not None and not known.is_in_progress:
            return known
        state = self.storage.scan_segment(start)
        if state is not None and state.is_in_progress and state.num_txns <= 0:
            self._log.info("moving aside empty in-progress segment", segment=start)
            self.storage.move_aside(start, "empty")
            state = None
        if state is None:
            self._segments.pop(start, None)
        else:
            self._segments[start] = state
        return state

    def _segment_md5(self, start: int, end: int) -> bytes:
        """md5 of a segment's records through ``end``, each record checked as it is read
        (CorruptSegmentError naming file and offset); it reads the whole segment."""
        return records_md5(self.storage.read_segment(start, end))

    def heartbeat(self, req: RequestInfo) -> None:
        with self._lock:
            self._check_request(req)

    # ------------------------------------------------------------------ writing

    def start_log_segment(self, req: RequestInfo, txid: int) -> None:
        with self._lock:
            self._check_request(req)
            if txid < 1:
                raise InvalidRequestError(f"segment txid must be positive, got {txid}")
            if self._cur_segment is not None:
                self._log.warning(
                    "writer started a new segment while one was open; abandoning it",
                    open_segment=self._cur_segment,
                    new_segment=txid,
                )
                self._cur_segment = None
            for state in self._segments.values():
                if state.start_txid == txid and not state.is_in_progress:
                    raise JournalStateError(
                        f"already have a finalized segment {state} at txid {txid}"
                    )
                if state.start_txid < txid <= state.end_txid:
                    raise JournalStateError(f"segment {state} already holds txid {txid}")
            existing = self._rescan(txid)
            most = 2 if active(Mutant.RESTART_TWO_TXN_SEGMENT) else 1
            if existing is not None and existing.num_txns > most:
                # Only the writer's own first transaction may be there (it crashed right after
                # writing it); anything longer holds data a recovery must decide about.
                raise JournalStateError(
                    f"in-progress segment {existing} holds transactions; recover it first"
                )
            if self._last_writer_epoch != req.epoch:
                self._log.info(
                    "updating lastWriterEpoch", old=self._last_writer_epoch, new=req.epoch
                )
                # Section 2.4: durable before the segment exists.
                if not active(Mutant.WRITER_EPOCH_NOT_PERSISTED):
                    self.storage.persist_last_writer_epoch(req.epoch)
                self._last_writer_epoch = req.epoch
            # Starting this segment means any recovery of it was abandoned (HDFS-3845).
            if txid in self._accepted and not active(Mutant.START_KEEPS_ACCEPTED):
                self.storage.clear_accepted_recovery(txid)
                del self._accepted[txid]
            self.edits_cache.invalidate_from(txid)
            self._end_subscriptions_past(txid, f"segment {txid} was started again")
            self._storage_write(lambda: self.storage.start_segment(txid))
            # Tracked while empty so that a later newEpoch/prepareRecovery moves it aside.
            self._segments[txid] = SegmentState(txid, txid - 1, True)
            self._cur_segment = txid
            self._next_txid = txid

    def journal(
        self, req: RequestInfo, *, segment_txid: int, first_txid: int, num_txns: int, framed: bytes
    ) -> None:
        """Append one batch (HDFS-3077 §2.11 step 4): epoch, contiguity, write, sync, ack."""
        with self._lock:
            self._journal_locked(req, segment_txid, first_txid, num_txns, framed)

    def journal_if_quick(
        self, req: RequestInfo, *, segment_txid: int, first_txid: int, num_txns: int, framed: bytes
    ) -> bool:
        """``journal`` when it can only wait on this batch's own write and sync, and the last
        append took under ``SLOW_APPEND_SECONDS``; False, with nothing done, when another
        call holds the journal (a finalize, a recovery, a sync) or the disk was slow last
        time (``slow_append_seconds``, ``SLOW_APPEND_SECONDS`` unless changed). A server's
        event loop calls this and hands a declined batch to a thread."""
        if self._last_append_seconds > self.slow_append_seconds:
            return False
        if not self._lock.acquire(blocking=False):
            return False
        try:
            self._journal_locked(req, segment_txid, first_txid, num_txns, framed)
        finally:
            self._lock.release()
        return True

    def _journal_locked(
        self, req: RequestInfo, segment_txid: int, first_txid: int, num_txns: int, framed: bytes
    ) -> None:
        self._check_write_request(req)
        if num_txns <= 0:
            raise InvalidRequestError(f"a batch needs at least one transaction, got {num_txns}")
        if self._cur_segment is None:
            raise JournalOutOfSyncError(f"can't write txid {first_txid}: no segment is open")
        if segment_txid != self._cur_segment:
            open_segment, self._cur_segment = self._cur_segment, None
            raise JournalOutOfSyncError(
                f"writer thinks it is writing segment {segment_txid} but the open segment is "
                f"{open_segment}"
            )
        if first_txid != self._next_txid:
            raise JournalOutOfSyncError(
                f"can't write txid {first_txid}: expecting txid {self._next_txid} next"
            )
        result = records.scan(framed, first_txid)
        last = first_txid + num_txns - 1
        if result.error is not None or result.count != num_txns:
            problem = result.error or f"{result.count} records where {num_txns} were announced"
            raise InvalidRequestError(f"malformed batch {first_txid}-{last}: {problem}")
        began = time.perf_counter()
        try:
            self._storage_write(lambda: self.storage.append(segment_txid, framed))
        finally:
            self._last_append_seconds = time.perf_counter() - began
        self.edits_cache.store(first_txid, last, req.epoch, framed, segment_txid)
        self.subscribers.publish(PushedEdits(req.epoch, segment_txid, first_txid, num_txns, framed))
        self._next_txid = last + 1
        self._segments[segment_txid] = SegmentState(segment_txid, last, True)
        stats = self.stats
        stats.batches_written += 1
        stats.txns_written += num_txns
        stats.bytes_written += len(framed)
        stats.last_written_txid = last
        if last <= self._committed_txid:
            stats.batches_written_while_lagging += 1

    def finalize_log_segment(
        self, req: RequestInfo, start_txid: int, end_txid: int, md5: bytes = b""
    ) -> None:
        """Finalize a segment (idempotent; invariant 1: never un-finalize).

        The open segment the writer just wrote is finalized on its length alone. Any other
        in-progress copy may hold another epoch's records of the same length, so it is
        finalized only when the caller vouches for its content: recovery passes the accepted
        segment's md5, a writer finalizing its own segment must be the last writer here.
        """
        with self._lock:
            self._check_request(req)
            if end_txid < start_txid:
                raise InvalidRequestError(f"can't finalize segment {start_txid} at txid {end_txid}")
            was_open = start_txid == self._cur_segment
            if was_open:
                # The segment this writer just wrote: its state is known, no need to re-read it.
                self._cur_segment = None
                if self._next_txid != end_txid + 1:
                    raise JournalOutOfSyncError(
                        f"trying to finalize in-progress segment {start_txid} at txid {end_txid} "
                        f"but only written up to txid {self._next_txid - 1}"
                    )
                state: SegmentState | None = self._segments.get(start_txid)
                if state is not None and state.num_txns <= 0:
                    state = self._rescan(start_txid)
            else:
                state = self._rescan(start_txid)
            if state is None:
                raise JournalOutOfSyncError(f"no segment to finalize at txid {start_txid}")
            if not state.is_in_progress:
                if state.end_txid != end_txid:
                    raise JournalStateError(
                        f"trying to re-finalize segment {state} with another end txid {end_txid}"
                    )
            else:
                if state.end_txid != end_txid:
                    raise JournalOutOfSyncError(
                        f"trying to finalize in-progress segment {start_txid} at txid {end_txid} "
                        f"but it holds transactions up to {state.end_txid}"
                    )
                if not was_open and not active(Mutant.FINALIZE_WITHOUT_CONTENT_CHECK):
                    self._check_finalize_content(req, state, md5)
                # The storage reads the records for their md5 and records it beside the
                # segment before the rename (§8.7): every later read is checked against it.
                recorded = self.storage.finalize_segment(start_txid, end_txid)
                self._segments[start_txid] = SegmentState(start_txid, end_txid, False, recorded)
            self.subscribers.end(
                EndReason.SEGMENT_FINALIZED,
                f"segment {start_txid}-{end_txid} was finalized",
                lambda sub: sub.next_txid <= end_txid + 1,
            )
            # A finalized segment is itself the decision; the accepted recovery is moot.
            if start_txid in self._accepted:
                self.storage.clear_accepted_recovery(start_txid)
                del self._accepted[start_txid]

    def _check_finalize_content(self, req: RequestInfo, state: SegmentState, md5: bytes) -> None:
        if md5:
            mine = self._segment_md5(state.start_txid, state.end_txid)
            if mine != md5:
                raise JournalOutOfSyncError(
                    f"in-progress segment {state} holds other records than the recovered one "
                    "(md5 differs); it needs acceptRecovery before it can be finalized"
                )
            return
        accepted = self._accepted.get(state.start_txid)
        if accepted is not None and accepted.accepted_in_epoch == req.epoch:
            return  # this epoch's own acceptRecovery installed these records
        if self._last_writer_epoch != req.epoch:
            raise JournalOutOfSyncError(
                f"in-progress segment {state} was not started by epoch {req.epoch} here "
                f"(last writer epoch {self._last_writer_epoch}); refusing to finalize it"
            )

    def purge_logs(self, req: RequestInfo, min_txid_to_keep: int) -> list[str]:
        with self._lock:
            self._check_request(req)
            removed = self.storage.purge(min_txid_to_keep)
            self._purged_below = max(self._purged_below, min_txid_to_keep)
            for start, state in list(self._segments.items()):
                if not state.is_in_progress and (
                    state.end_txid < min_txid_to_keep
                    or (active(Mutant.PURGE_INCLUSIVE) and state.end_txid == min_txid_to_keep)
                ):
                    del self._segments[start]
            for start in [s for s in self._accepted if s < min_txid_to_keep]:
                del self._accepted[start]
            return removed

    # ------------------------------------------------------------------ reading

    def get_edit_log_manifest(
        self, cluster_id: str, since_txid: int, *, in_progress_ok: bool = False
    ) -> list[RemoteEditLog]:
        """Segments that hold txids at or after since_txid (HDFS-3077 §3), each finalized one
        with its recorded md5 (§8.7; computed and recorded first if it has none yet)."""
        with self._lock:
            self._check_cluster(cluster_id)
            states = []
            for start in sorted(self._segments):
                state = self._segments[start]
                if state.end_txid < since_txid or state.num_txns <= 0:
                    continue
                if state.is_in_progress and not in_progress_ok:
                    continue
                states.append(state)
        logs = []
        for state in states:
            md5 = b""
            if not state.is_in_progress:
                md5 = state.md5 or self._record_missing_digest(state)
                if not md5:
                    continue  # found corrupt and moved aside: no longer held here
            logs.append(RemoteEditLog(state.start_txid, state.end_txid, state.is_in_progress, md5))
        return logs

    # ------------------------------------------------------------------ digests (§8.7)

    def ensure_digests(self) -> None:
        """Compute and record the md5 of every finalized segment that has none (one finalized
        before digests were kept): the sync thread compares them with its peers'."""
        with self._lock:
            missing = [s for s in self._finalized() if not s.md5]
        for state in sorted(missing, key=lambda s: s.start_txid):
            self._record_missing_digest(state)

    def _record_missing_digest(self, state: SegmentState) -> bytes:
        """The md5 of a finalized segment without a recorded one, read (outside the lock: a
        finalized file never changes in place) and recorded durably. b"" when the read finds
        the copy corrupt (it is then moved aside, ``quarantine_corrupt``) or it was purged
        meanwhile."""
        start, end = state.start_txid, state.end_txid
        try:
            md5 = self._segment_md5(start, end)
        except CorruptSegmentError as exc:
            self.quarantine_corrupt(start, exc)
            return b""
        except JournalStateError:
            with self._lock:
                if start not in self._segments:
                    return b""  # purged meanwhile
            raise
        with self._lock:
            now = self._segments.get(start)
            if now is None or now.is_in_progress or now.end_txid != end:
                return b""
            if now.md5:
                return now.md5  # recorded meanwhile by another reader
            self.storage.record_digest(start, end, md5)
            self._segments[start] = now.with_md5(md5)
        self._log.info(
            "recorded the digest of a segment finalized before digests were kept",
            segment=finalized_name(start, end),
            md5=md5.hex(),
        )
        return md5

    def verified_finalized_md5(
        self, cluster_id: str, start_txid: int, *, check_records: bool = True
    ) -> tuple[int, bytes]:
        """(end txid, md5) of a finalized segment, after reading its records and checking
        their md5 against the one recorded beside it. What every read of a finalized segment
        by another node goes through (GetSegment, GetSegmentMd5): a copy whose records
        changed since it was finalized is moved aside and a ``SegmentDigestError`` names the
        file and both digests; a corrupt record is a ``CorruptSegmentError`` as before. With
        ``check_records`` False the bytes are hashed as they are, unchecked (GetSegment: its
        stream checks every record as it goes out)."""
        with self._lock:
            self._check_cluster(cluster_id)
            state = self._segments.get(start_txid)
            if state is None or state.is_in_progress:
                raise JournalOutOfSyncError(f"no finalized segment starting at txid {start_txid}")
        if not state.md5:
            md5 = self._record_missing_digest(state)
            if not md5:
                raise JournalOutOfSyncError(
                    f"finalized segment {state} was found corrupt here and moved aside"
                )
            return state.end_txid, md5
        try:
            actual = (
                self._segment_md5(start_txid, state.end_txid)
                if check_records
                else self.storage.raw_md5(start_txid)
            )
            if actual != state.md5 and not check_records:
                # Damaged records are reported as such, with the offset of the first one.
                actual = self._segment_md5(start_txid, state.end_txid)
        except CorruptSegmentError as exc:
            self.quarantine_corrupt(start_txid, exc)
            raise
        if actual == state.md5:
            return state.end_txid, actual
        name = finalized_name(start_txid, state.end_txid)
        problem = (
            f"journal {self.journal_id!r}: the records of {name} have md5 {actual.hex()}, but "
            f"md5 {state.md5.hex()} was recorded when it was finalized; not served, moved aside "
            "to be fetched again from the peers"
        )
        self._move_aside_mismatched(
            state,
            "records changed since the segment was finalized",
            recorded=state.md5.hex(),
            actual=actual.hex(),
        )
        raise SegmentDigestError(problem)

    def move_aside_disagreeing(self, repair: DigestRepair) -> bool:
        """The sync thread found a majority of JournalNodes holding another md5 for a
        finalized segment than this copy: move it aside (``.mismatch``, never deleted) so that
        the next plan fetches the majority's copy. False when the copy changed meanwhile."""
        with self._lock:
            state = self._segments.get(repair.start_txid)
            if (
                state is None
                or state.is_in_progress
                or state.end_txid != repair.end_txid
                or state.md5 != repair.mine
            ):
                return False
        self._move_aside_mismatched(
            state,
            "a majority of JournalNodes hold another copy",
            recorded=repair.mine.hex(),
            majority=repair.majority.hex(),
            majority_holders=list(repair.holders),
        )
        return True

    def _move_aside_mismatched(self, state: SegmentState, why: str, **digests: object) -> None:
        with self._lock:
            now = self._segments.get(state.start_txid)
            if now is None or now.is_in_progress or now.end_txid != state.end_txid:
                return  # moved aside meanwhile by another reader
            self._log.error(
                "finalized segment copy does not match its digest; moved aside, to be fetched "
                "again from the majority",
                segment=finalized_name(state.start_txid, state.end_txid),
                why=why,
                **digests,
            )
            self.storage.move_aside_finalized(state.start_txid, "mismatch")
            del self._segments[state.start_txid]
            self._mismatched.add(state.start_txid)
            self.stats.digest_mismatches += 1

    def segment_for_reading(
        self, cluster_id: str, start_txid: int, end_txid: int | None
    ) -> SegmentState:
        """Check a GetSegment request: the segment must exist (finalized, or in progress when
        an end txid within it is named, as acceptRecovery's download does)."""
        with self._lock:
            self._check_cluster(cluster_id)
            state = self._segments.get(start_txid)
            if state is None or state.num_txns <= 0:
                raise JournalOutOfSyncError(f"no segment starting at txid {start_txid}")
            if end_txid is None and state.is_in_progress:
                raise JournalStateError(f"segment {state} is in progress; name an end txid")
            if end_txid is not None and end_txid > state.end_txid:
                raise JournalOutOfSyncError(
                    f"segment {state} holds transactions up to {state.end_txid}, not {end_txid}"
                )
            return state

    # ------------------------------------------------------------------ recovery

    def get_journaled_edits(self, cluster_id: str, since_txid: int, max_txns: int) -> CachedEdits:
        """Recent edits from ``since_txid`` on, from the cache (GetJournaledEdits), with the
        epoch of the writer that wrote them; count 0 when the cache does not hold that txid."""
        if since_txid < 1:
            raise InvalidRequestError(f"since_txid must be positive, got {since_txid}")
        if max_txns < 1:
            raise InvalidRequestError(f"max_txns must be positive, got {max_txns}")
        with self._lock:
            self._check_cluster(cluster_id)
            cached = self.edits_cache.retrieve(since_txid, max_txns)
            if cached.count:
                self.stats.journaled_edits_served += cached.count
            elif since_txid <= self.stats.last_written_txid:
                self.stats.journaled_edits_misses += 1
            return cached

    def subscribe_edits(
        self, cluster_id: str, since_txid: int, wake: Callable[[], None]
    ) -> EditSubscription:
        """A subscription to the batches written from ``since_txid`` on (SubscribeEdits): the
        cached ones from that txid at once, then each new one once it is synced. It ends at
        once (CACHE_MISS) when this node wrote ``since_txid`` but no longer caches it. The
        caller removes it from ``subscribers`` when its stream ends (an ended subscription
        is removed at once)."""
        if since_txid < 1:
            raise InvalidRequestError(f"since_txid must be positive, got {since_txid}")
        with self._lock:
            self._check_cluster(cluster_id)
            if len(self.subscribers) >= self.max_subscribers:
                raise InvalidRequestError(
                    f"journal {self.journal_id!r} already serves {len(self.subscribers)} edit "
                    f"subscriptions, the most dfs.journalnode.edit-subscription.max "
                    f"({self.max_subscribers}) allows"
                )
            sub = EditSubscription(since_txid, self.subscriber_queue_bytes, wake)
            backlog = self.edits_cache.batches_from(since_txid)
            for epoch, segment, first, count, framed in backlog:
                sub.offer(PushedEdits(epoch, segment, first, count, framed))
            written = max((seg.end_txid for seg in self._segments.values()), default=0)
            if not backlog and since_txid <= written:
                self.stats.journaled_edits_misses += 1
                sub.end(
                    EndReason.CACHE_MISS,
                    f"txid {since_txid} is written here but no longer in the edit cache",
                )
            if sub.ended is None:
                self.subscribers.add(sub)
            return sub

    def _end_subscriptions_past(self, txid: int, why: str) -> None:
        """End the subscriptions that were pushed ``txid`` or later: those edits are replaced."""
        self.subscribers.end(EndReason.LOG_REPLACED, why, lambda sub: sub.next_txid > txid)

    def prepare_recovery(self, req: RequestInfo, segment_txid: int) -> PrepareRecoveryResult:
        """Paxos phase 1 (HDFS-3077 §2.8 step 2): the segment as on disk, and what was accepted."""
        with self._lock:
            self._check_voting("prepareRecovery")
            self._check_request(req)
            # The writer is recovering: nothing may be appended to whatever was open.
            self._cur_segment = None
            accepted = self._accepted.get(segment_txid)
            if accepted is not None:
                self._install_staged(segment_txid, accepted.accepted_in_epoch)
            state = self._rescan(segment_txid)
            if state is not None:
                state = state.with_md5(self._segment_md5(segment_txid, state.end_txid))
            accepted = self._accepted.get(segment_txid)
            if accepted is not None and state is not None:
                want = accepted.segment_state
                if state.end_txid != want.end_txid or (want.md5 and want.md5 != state.md5):
                    raise self._inconsistent(
                        f"on-disk segment {state} does not match the recovery accepted in epoch "
                        f"{accepted.accepted_in_epoch}: {accepted.segment_state}"
                    )
            elif accepted is not None and state is None:
                raise self._inconsistent(
                    f"recovery {accepted.segment_state} was accepted in epoch "
                    f"{accepted.accepted_in_epoch} but the segment is missing on disk"
                )
            return PrepareRecoveryResult(
                segment_state=state,
                accepted_in_epoch=accepted.accepted_in_epoch if accepted else None,
                last_writer_epoch=self._last_writer_epoch,
                last_committed_txid=self._committed_txid,
            )

    def accept_recovery(
        self, req: RequestInfo, state: SegmentState, from_url: str, fetch: SegmentFetcher
    ) -> None:
        """Paxos phase 2 (HDFS-3077 §2.8 step 3): sync the segment, then persist the decision."""
        with self._lock:
            self._check_request(req)
            self._cur_segment = None
            # The segment may be replaced by another writer's copy: cache nothing of it.
            self.edits_cache.clear()
            self.subscribers.end(EndReason.LOG_REPLACED, "a recovery replaces the open segment")
            start = state.start_txid
            if state.num_txns <= 0:
                raise InvalidRequestError(f"can't accept recovery of an empty segment {state}")
            current = self._rescan(start)
            same_content = (
                current is not None
                and current.end_txid == state.end_txid
                and (not state.md5 or self._segment_md5(start, current.end_txid) == state.md5)
            )
            if current is not None and not current.is_in_progress:
                if not same_content:
                    raise JournalStateError(
                        f"asked to replace finalized segment {current} with {state}; a finalized "
                        "segment is never changed"
                    )
            elif not same_content:
                committed = self._committed_txid
                if (
                    current is not None
                    and current.start_txid <= committed <= current.end_txid
                    and not state.start_txid <= committed <= state.end_txid
                ):
                    raise JournalStateError(
                        f"can't replace segment {current} with {state}: it would drop committed "
                        f"txid {committed}"
                    )
                if not from_url:
                    raise InvalidRequestError(f"acceptRecovery of {state} needs a source address")
                self._log.info(
                    "synchronizing segment from recovery source",
                    have=str(current) if current else None,
                    want=str(state),
                    source=from_url,
                )
                data = b"".join(fetch(from_url, self.journal_id, start, state.end_txid))
                if state.md5 and hashlib.md5(data[records.HEADER_LEN :]).digest() != state.md5:
                    raise JournalStateError(
                        f"segment {state} downloaded from {from_url} does not have the accepted md5"
                    )
                # Aside first: until the decision below is persisted, the segment on disk
                # and the paxos record still agree with each other.
                self.storage.stage_segment(start, [data], state.end_txid, req.epoch)
            accepted = AcceptedRecovery(state, req.epoch)
            # The commit point (HDFS-3955): persisted before the segment changes, so a crash
            # leaves either the old segment and the old record, or the new record and a staged
            # copy that the next prepareRecovery or start-up installs.
            if not active(Mutant.ACCEPT_IN_MEMORY_ONLY) and not active(Mutant.ACCEPT_NO_EPOCH):
                self.storage.persist_accepted_recovery(start, accepted)
            if not active(Mutant.ACCEPT_NO_EPOCH):
                self._accepted[start] = accepted
            if not same_content:
                self._install_staged(start, req.epoch)
            self._log.info("accepted recovery", segment=str(state), epoch=req.epoch)

    def _install_staged(self, start: int, epoch: int) -> bool:
        """Rename the copy of segment ``start`` staged by acceptRecovery in ``epoch`` into
        place (after its paxos record was persisted), if it is still aside."""
        if not self.storage.install_staged_segment(start, epoch):
            return False
        accepted = self._accepted[start].segment_state
        self._segments[start] = SegmentState(start, accepted.end_txid, True)
        self._log.info("installed the segment of an accepted recovery", segment=str(accepted))
        return True

    def _complete_half_done_accepts(self) -> None:
        """An acceptRecovery that persisted its decision and died before installing the
        downloaded copy is finished here (Hadoop's completeHalfDoneAcceptRecovery)."""
        for start, accepted in sorted(self._accepted.items()):
            if self._install_staged(start, accepted.accepted_in_epoch):
                self._log.warning(
                    "completed a half-done acceptRecovery", segment=str(accepted.segment_state)
                )

    # ------------------------------------------------------------------ sync (HDFS-4025)

    def format_to_rejoin(self, ns: NamespaceInfo, promised_epoch: int, sync_until: int) -> None:
        """Format an empty journal with its peers' namespace info (HDFS-16690), promising at
        once the highest epoch a majority of them had promised (so no writer a quorum fenced
        gets through here) and marking it rejoining until it holds finalized segments
        through ``sync_until`` (``_check_voting``)."""
        check_format_request(ns)
        with self._lock:
            if self._ns is not None or self._segments or self._last_promised_epoch:
                raise JournalNotEmptyError(
                    f"journal {self.journal_id!r} is not empty; a JournalNode formats itself "
                    "from its peers only when its storage is empty"
                )
            self._log.warning(
                "formatting journal from its peers to rejoin",
                cluster=ns.cluster_id,
                namespace=ns.namespace_id,
                promised_epoch=promised_epoch,
                sync_until=sync_until,
            )
            self.storage.format(ns, promised_epoch=promised_epoch, sync_until=sync_until)
            self.stats = JournalStats()
            self._load()

    def plan_sync(
        self, peers: Mapping[str, Sequence[RemoteEditLog]], *, configured: int = 0
    ) -> SyncPlan:
        """What to fetch, given the peers' manifests of finalized segments, and which copies
        here a majority of the ``configured`` JournalNodes disagree with (``sync.plan_sync``)."""
        with self._lock:
            plan = plan_sync(
                list(self._segments.values()),
                peers,
                open_segment=self._cur_segment,
                purged_below=self._purged_below,
                configured=configured,
            )
            self.stats.segments_lacking = len(plan.fetch) + len(plan.waiting)
            return plan

    def install_synced_segment(
        self, segment: SegmentToSync, md5: bytes, chunks: Iterable[bytes]
    ) -> int:
        """Install a finalized segment downloaded from a peer, once it holds exactly the
        records ``segment`` names and their md5 is ``md5`` (what the peers agree on); returns
        its size. The download is written and checked aside, without the lock; only the
        rename into place holds it. A stale in-progress copy is moved aside. Returns 0, and
        installs nothing, when the segment was finalized here meanwhile with the same end."""
        start, end = segment.start_txid, segment.end_txid
        staged = self.storage.stage_finalized(start, end, chunks)
        try:
            if staged.md5 != md5:
                raise JournalStateError(
                    f"segment {start}-{end} downloaded from a peer has md5 {staged.md5.hex()}, "
                    f"not {md5.hex()} as its peers report; not installed"
                )
            with self._lock:
                have = self._segments.get(start)
                if have is not None and not have.is_in_progress:
                    if have.end_txid == end:
                        # Finalized here meanwhile (the writer, or a recovery): nothing to do.
                        self.storage.discard_staged(staged)
                        return 0
                    raise JournalStateError(
                        f"segment {have} is finalized here with another end than the synced "
                        f"copy {start}-{end}; a finalized segment is never replaced"
                    )
                if have is not None and start == self._cur_segment:
                    raise JournalOutOfSyncError(
                        f"a writer is appending to segment {start} here; it is not replaced"
                    )
                self.storage.install_finalized(staged)
                self._segments[start] = SegmentState(start, end, False, staged.md5)
                repaired = start in self._mismatched
                if repaired:
                    self._mismatched.discard(start)
                    self.stats.digest_repairs += 1
                if start in self._accepted:
                    # As finalizing does: the finalized copy is the decision now.
                    self.storage.clear_accepted_recovery(start)
                    del self._accepted[start]
                if have is not None:
                    self.edits_cache.invalidate_from(start)  # the stale copy's edits
                    self._end_subscriptions_past(start, f"segment {start} was synced")
                self.stats.segments_synced += 1
                self.stats.bytes_synced += staged.size
                self.stats.segments_lacking = max(0, self.stats.segments_lacking - 1)
                self.stats.last_written_txid = max(self.stats.last_written_txid, end)
                self._rejoining_still()
        except BaseException:
            self.storage.discard_staged(staged)
            raise
        self._log.info(
            "installed a segment synced from a peer",
            segment=str(segment),
            bytes=staged.size,
            md5=staged.md5.hex(),
            replaced_in_progress=have is not None,
            repaired_mismatch=repaired,
        )
        return staged.size

    def finalized_md5(self, cluster_id: str, start_txid: int) -> tuple[int, bytes]:
        """(end txid, md5 of the records) of a finalized segment, read and checked record by
        record and against the recorded md5 (GetSegmentMd5; ``verified_finalized_md5``)."""
        return self.verified_finalized_md5(cluster_id, start_txid)

    def quarantine_corrupt(self, start_txid: int, error: CorruptSegmentError) -> bool:
        """A read found this node's finalized copy of a segment corrupt: move it aside
        (``.corrupt``) so that this node stops listing and serving it, and its sync thread
        fetches the segment from a peer (docs/protocol.md §10.2). False when the segment is
        not (or no longer) finalized here."""
        with self._lock:
            state = self._segments.get(start_txid)
            if state is None or state.is_in_progress:
                return False
            self._log.error(
                "finalized segment is corrupt here; moved aside, to be synced from a peer",
                segment=str(state),
                error=str(error),
            )
            self.storage.move_aside_finalized(start_txid, "corrupt")
            del self._segments[start_txid]
            self.stats.corrupt_segments += 1
            return True
