"""FSEditLog: the active NameNode's edit log through the QJM, with group commit
(docs/architecture.md §5.2; HDFS ``FSEditLog.logEdit``/``logSync``).

Each mutation takes the next txid, is applied, and only then is framed into the
``QuorumOutputStream``'s current buffer (``log_and_apply``), while the caller holds the
namesystem lock (so txids follow the order in which ops are applied, and an op that fails to
apply never leaves the process); the caller then releases the lock and calls
``log_sync(txid)``, and answers its client only when that returns. ``log_sync`` is group
commit over the stream's double buffer:

- one sync is in flight at a time; while it runs, other handlers keep appending into the
  other buffer;
- a handler whose txid is already durable returns at once;
- a handler that finds a sync in flight waits for it; if its txid is still not durable, it
  becomes the next syncer and sends *everything buffered so far* in one batch
  (``set_ready_to_flush`` + ``flush_ready``), so N concurrent mutations cost far fewer than
  N round trips to the JournalNodes.

A failed sync (``QuorumException``: a majority of JournalNodes down, or this writer fenced by
a newer epoch), and a newer epoch learned from any other call (a heartbeat, a finalize: the
QJM's fence listener), is fatal for this edit log: it is marked failed, nothing after the last
durable txid is ever acknowledged, every waiter gets ``EditLogError`` naming the reason, and
``on_failure`` tells the HA layer to leave the active state (in HDFS-3077, §2.11, the
NameNode aborts).

Segments: ``open_for_write(txid)`` starts a segment whose first transaction is a
StartLogSegmentOp; ``roll`` ends it with an EndLogSegmentOp, finalizes it and starts the
next; ``close`` ends and finalizes the last one. The markers go through the caller's
``apply`` too, so the namespace's ``last_applied_txid`` always equals the last txid logged.

    edit_log = FSEditLog(qjm, on_failure=leave_active)
    with namesystem_lock:
        edit_log.open_for_write(recovered_end + 1, namespace.apply)
    with namesystem_lock:
        txid, result = edit_log.log_and_apply(op, namespace.apply)
    edit_log.log_sync(txid)
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from hanamenode.errors import EditLogError
from hanamenode.metrics import NameNodeMetrics
from proto import edits_pb2, records
from qjm.errors import describe_exception
from qjm.journal_manager import QuorumJournalManager, QuorumOutputStream

log = structlog.get_logger(__name__)

Apply = Callable[[edits_pb2.EditOp], object]


class FSEditLog:
    """The write side of the edit log for one active period (one QJM writer epoch).

    Not reusable: once closed or failed, the next active period makes a new one.
    ``sync_wait_timeout`` bounds how long a handler waits for another handler's sync; the
    sync itself is bounded by the QJM's write timeout.
    """

    def __init__(
        self,
        qjm: QuorumJournalManager,
        *,
        on_failure: Callable[[str], None] | None = None,
        metrics: NameNodeMetrics | None = None,
        sync_wait_timeout: float | None = None,
        log_context: dict[str, object] | None = None,
    ) -> None:
        self.qjm = qjm
        self._on_failure = on_failure
        self._metrics = metrics
        write_timeout = float(getattr(qjm.timeouts, "write_txns_timeout", 20.0))
        self.sync_wait_timeout = (
            sync_wait_timeout if sync_wait_timeout is not None else 2 * write_timeout + 5.0
        )
        self._cond = threading.Condition(threading.Lock())
        self._stream: QuorumOutputStream | None = None
        self._last_written_txid = 0
        self._synced_txid = 0
        self._sync_running = False
        self._failure: str | None = None
        self._closed = False
        self._log = log.bind(journal=qjm.journal_id, epoch=qjm.epoch, **(log_context or {}))
        # A newer epoch learned from any call (a heartbeat, a write, a finalize) fails this
        # edit log at once, as a failed sync does.
        qjm.add_fence_listener(lambda reason: self._fail(f"writer fenced: {reason}"))

    # -- state ---------------------------------------------------------------------------------

    @property
    def last_written_txid(self) -> int:
        """The highest txid logged (buffered or durable)."""
        with self._cond:
            return self._last_written_txid

    @property
    def synced_txid(self) -> int:
        """The highest txid durable on a quorum: everything up to it may be acknowledged."""
        with self._cond:
            return self._synced_txid

    @property
    def segment_txid(self) -> int | None:
        with self._cond:
            return None if self._stream is None else self._stream.segment_txid

    @property
    def failure(self) -> str | None:
        """Why the edit log failed, or None while it works."""
        with self._cond:
            return self._failure

    @property
    def is_open(self) -> bool:
        with self._cond:
            return self._stream is not None and self._failure is None and not self._closed

    # -- segments (the caller holds the namesystem lock) ----------------------------------------

    def open_for_write(self, first_txid: int, apply: Apply) -> None:
        """Start the first segment at ``first_txid`` (the txid after the recovered log)."""
        with self._cond:
            if self._stream is not None or self._closed:
                raise EditLogError("the edit log is already open (or closed)")
            self._last_written_txid = self._synced_txid = first_txid - 1
        self._start_segment(first_txid, apply)

    def roll(self, apply: Apply) -> int:
        """End the current segment, finalize it, start the next; return the new segment's
        first txid. Any failure here is fatal, as for a sync."""
        end_txid = self._end_segment(apply)
        next_txid = end_txid + 1
        self._start_segment(next_txid, apply)
        if self._metrics is not None:
            self._metrics.rolls.inc()
        self._log.info("rolled edit log", finalized_through=end_txid, new_segment=next_txid)
        return next_txid

    def close(self, apply: Apply) -> None:
        """End and finalize the current segment (graceful ACTIVE -> STANDBY). Raises
        EditLogError when it cannot (quorum lost): then the segment stays in progress and the
        next writer's recovery decides where it ends."""
        try:
            if self.failure is None and self.segment_txid is not None:
                self._end_segment(apply)
        finally:
            with self._cond:
                self._closed = True
                self._stream = None
                self._cond.notify_all()

    def abort(self, reason: str) -> None:
        """Mark the edit log failed: nothing more is written or acknowledged."""
        self._fail(reason)

    def _start_segment(self, txid: int, apply: Apply) -> None:
        try:
            stream = self.qjm.start_log_segment(txid)
        except Exception as exc:
            reason = f"could not start log segment {txid}: {describe_exception(exc)}"
            self._fail(reason)
            raise EditLogError(reason) from exc
        with self._cond:
            if self._failure is not None:
                raise EditLogError(f"edit log failed: {self._failure}")
            self._stream = stream
        op = edits_pb2.EditOp(start_log_segment=edits_pb2.StartLogSegmentOp())
        if self.last_written_txid + 1 != txid:
            reason = f"segment {txid} would begin with txid {self.last_written_txid + 1}"
            self._fail(reason)
            raise EditLogError(reason)
        logged, _ = self.log_and_apply(op, apply)
        self.log_sync(logged)

    def _end_segment(self, apply: Apply) -> int:
        op = edits_pb2.EditOp(end_log_segment=edits_pb2.EndLogSegmentOp())
        end_txid, _ = self.log_and_apply(op, apply)
        self.log_sync(end_txid)
        with self._cond:
            stream = self._stream
            self._stream = None
        assert stream is not None, "log_edit succeeded, so a segment was open"
        try:
            self.qjm.finalize_log_segment(stream.segment_txid, end_txid)
        except Exception as exc:
            reason = (
                f"could not finalize log segment {stream.segment_txid}-{end_txid}: "
                f"{describe_exception(exc)}"
            )
            self._fail(reason)
            raise EditLogError(reason) from exc
        return end_txid

    # -- writing -------------------------------------------------------------------------------

    def log_edit(self, op: edits_pb2.EditOp) -> int:
        """Give ``op`` the next txid, frame it and buffer it; return the txid (for ops that
        change nothing in memory; the namesystem uses ``log_and_apply``)."""
        txid, _ = self.log_and_apply(op, None)
        return txid

    def log_and_apply(
        self, op: edits_pb2.EditOp, apply: Apply | None
    ) -> tuple[int, object]:
        """Give ``op`` the next txid, apply it, then buffer it; return the txid and what
        ``apply`` returned. The caller holds the namesystem lock, releases it, then calls
        ``log_sync``.

        The op reaches the stream's buffer only once it applied: a syncer cannot ship an op
        that then fails to apply (that failure makes the edit log fail instead, and nothing
        of it leaves this process). Applying under the edit log's lock also makes
        ``last_written_txid``, read after looking at the namespace, cover every effect seen.
        """
        failure: str | None = None
        result: object = None
        with self._cond:
            self._check_writable()
            stream = self._stream
            assert stream is not None
            txid = self._last_written_txid + 1
            op.txid = txid
            framed = records.frame(op.SerializeToString())
            try:
                if apply is not None:
                    result = apply(op)
            except Exception as exc:
                # The namespace may hold part of the op: this NameNode must not go on
                # writing. Failed before the lock is released, so no syncer runs meanwhile.
                failure = f"txid {txid} did not apply, so it was never logged: {exc}"
                reported = self._mark_failed_locked(failure)
            else:
                stream.write_framed(txid, framed)
                self._last_written_txid = txid
        if failure is not None:
            if reported:
                self._report_failure(failure)
            raise EditLogError(failure)
        return txid, result

    def _check_writable(self) -> None:
        if self._failure is not None:
            raise EditLogError(f"edit log failed, not accepting edits: {self._failure}")
        if self._closed or self._stream is None:
            raise EditLogError("the edit log is not open for write (no active segment)")

    def log_sync(self, txid: int | None = None) -> None:
        """Return once ``txid`` (default: everything logged so far) is durable on a quorum;
        EditLogError if it never will be (the edit log failed) or the wait timed out."""
        deadline = time.monotonic() + self.sync_wait_timeout
        with self._cond:
            target = self._last_written_txid if txid is None else txid
            while True:
                if target <= self._synced_txid:
                    return
                if self._failure is not None:
                    raise EditLogError(
                        f"txid {target} is not durable and never will be from this NameNode: "
                        f"{self._failure}"
                    )
                if target > self._last_written_txid:
                    raise EditLogError(f"txid {target} was never logged")
                if not self._sync_running:
                    break
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise EditLogError(
                        f"timed out after {self.sync_wait_timeout:.1f}s waiting for txid "
                        f"{target} to be synced"
                    )
                self._cond.wait(remaining)
            # This thread syncs everything buffered so far, its own txid and others'.
            stream = self._stream
            if stream is None:
                raise EditLogError(f"txid {target} is not durable: the segment was closed")
            sync_end = self._last_written_txid
            batch = sync_end - self._synced_txid
            self._sync_running = True
            stream.set_ready_to_flush()
        started = time.perf_counter()
        try:
            stream.flush_ready()
        except Exception as exc:
            reason = f"sync of txids up to {sync_end} failed: {describe_exception(exc)}"
            with self._cond:
                self._sync_running = False
                self._cond.notify_all()
            self._fail(reason)
            raise EditLogError(reason) from exc
        elapsed = time.perf_counter() - started
        with self._cond:
            self._synced_txid = sync_end
            self._sync_running = False
            self._cond.notify_all()
        if self._metrics is not None:
            self._metrics.sync_seconds.observe(elapsed)
            self._metrics.syncs.inc()
            self._metrics.txns_synced.inc(batch)
            self._metrics.sync_batch_txns.observe(batch)

    def _fail(self, reason: str) -> None:
        with self._cond:
            if not self._mark_failed_locked(reason):
                return
        self._report_failure(reason)

    def _mark_failed_locked(self, reason: str) -> bool:
        """Set the failure (the caller holds ``_cond``); False if it had failed already."""
        if self._failure is not None:
            return False
        self._failure = reason
        self._cond.notify_all()
        return True

    def _report_failure(self, reason: str) -> None:
        self._log.error(
            "edit log failed: no more edits will be acknowledged by this NameNode",
            reason=reason,
            last_durable_txid=self._synced_txid,
            last_written_txid=self._last_written_txid,
        )
        if self._metrics is not None:
            self._metrics.edit_log_failures.inc()
        if self._on_failure is not None:
            self._on_failure(reason)
