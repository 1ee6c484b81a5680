"""FSEditLog: the active NameNode's edit log through the QJM, with asynchronous edit logging
(docs/architecture.md §5.2; HDFS ``FSEditLog``/``FSEditLogAsync``, HDFS-7964).

The edit log lives on the NameNode's event loop (``hanamenode.loop``). A mutation is
decided, given the next txid, applied and buffered in one step (``log_and_apply``, a plain
call on the loop, so txids follow the order in which ops are applied and an op that fails to
apply never leaves the process); its coroutine then awaits ``log_sync(txid)``, a future that
the syncer completes once the txid is durable. A waiting call is a suspended coroutine, not a
thread, so how many calls share one sync is not bounded by any thread count.

The syncer is one task:

- up to ``syncs_in_flight`` syncs are in flight at once (``dfs.namenode.edits.sync.in-flight``;
  1 by default, HDFS's double buffer); edits logged meanwhile accumulate in
  ``_pending``. Each JournalNode writes the batches of its stream in order, so a quorum for
  one batch is a quorum for every batch before it; a txid counts as durable only once
  every batch up to it is (``_in_flight`` is completed in order);
- when a slot frees, the next sync ships *everything accumulated* in one batch, bounded
  by bytes (``max_batch_bytes``, ``dfs.namenode.edits.sync.max-batch.bytes``): a longer
  backlog goes out as several consecutive batches;
- under concurrent writers it gathers first (``gather_delay``,
  ``dfs.namenode.edits.sync.gather-delay``): when recent batches held several edits, the next
  batch waits until as many edits as their median are pending, or until
  ``gather_delay`` after the previous sync started, whichever comes first. A lone writer
  (batches of one edit) never waits; many writers get fewer, larger batches, which cost the
  JournalNodes and the standbys per batch, not per edit (docs/architecture.md §5.2);
- the sync awaits the QJM's awaitable API (``QuorumOutputStream.aflush_ready``, issue 12's
  QJM on asyncio, docs/architecture.md §4.6): the writer's QJM is bound to this loop, and
  its loggers' JournalStreams are grpc.aio streams on it too.

A waiter that goes away (its client cancelled the call) loses nothing: its edit is already
in ``_pending`` and is shipped and applied like every other; a retry of the call finds it in
the retry cache and waits for the same txid.

A failed sync (``QuorumException``: a majority of JournalNodes down, or this writer fenced by
a newer epoch), and a newer epoch learned from any other call (a heartbeat, a finalize: the
QJM's fence listener, called from a QJM thread and brought onto the loop), is fatal for this
edit log: it is marked failed, nothing after the last durable txid is ever acknowledged, every
waiter gets ``EditLogError`` naming the reason, and ``on_failure`` tells the HA layer to leave
the active state (in HDFS-3077, §2.11, the NameNode aborts).

Segments: ``open_for_write(txid)`` starts a segment whose first transaction is a
StartLogSegmentOp; ``roll`` ends it with an EndLogSegmentOp, finalizes it and starts the
next; ``close`` ends and finalizes the last one. The markers go through the caller's
``apply`` too, so the namespace's ``last_applied_txid`` always equals the last txid logged.

    edit_log = FSEditLog(qjm, on_failure=leave_active)  # on the loop the QJM is bound to
    await edit_log.open_for_write(recovered_end + 1, namespace.apply)
    txid, result = edit_log.log_and_apply(op, namespace.apply)
    await edit_log.log_sync(txid)
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog

from conf.keys import MIB
from hanamenode.errors import EditLogError, SegmentOverrunError
from hanamenode.journal import JournalManager, JournalOutputStream
from hanamenode.metrics import NameNodeMetrics
from proto import edits_pb2, records
from qjm.errors import describe_exception

log = structlog.get_logger(__name__)

Apply = Callable[[edits_pb2.EditOp], object]

DEFAULT_MAX_BATCH_BYTES = 1 * MIB
GATHER_YIELDS = 16
QUIET_YIELDS = 2
DEFAULT_GATHER_DELAY = 0.016
"""dfs.namenode.edits.sync.gather-delay: the longest a batch waits for concurrent writers'
edits, counted from the start of the previous sync."""
DEFAULT_SYNCS_IN_FLIGHT = 1
"""dfs.namenode.edits.sync.in-flight: syncs the active keeps in flight at once."""
GATHER_MIN_BATCH = 2
"""The median of the recent batches must be this many edits before a batch waits for more:
one edit a batch is a lone writer, whom a wait would only slow down."""
GATHER_HISTORY = 16
"""Batches whose sizes set how many edits the next batch waits for (their median)."""


def take_batch(pending: deque[tuple[int, bytes]], max_bytes: int) -> list[tuple[int, bytes]]:
    """The longest prefix of ``pending`` within ``max_bytes`` (at least one edit, whatever
    its size: a single edit is bounded by the request limit, far below a batch)."""
    batch: list[tuple[int, bytes]] = []
    size = 0
    while pending:
        txid, framed = pending[0]
        if batch and size + len(framed) > max_bytes:
            break
        pending.popleft()
        batch.append((txid, framed))
        size += len(framed)
    return batch


@dataclass(eq=False, slots=True)
class _Sync:
    """One batch shipped: its last txid, its task, and whether a quorum acknowledged it."""

    end: int
    task: asyncio.Task[None] | None = None
    acknowledged: bool = False


class FSEditLog:
    """The write side of the edit log for one active period (one writer epoch of the
    journal: ``hanamenode.journal.JournalManager``, the QJM or the ZooKeeper journal).

    Made, used and closed on one event loop. Not reusable: once closed or failed, the next
    active period makes a new one. ``sync_wait_timeout`` bounds how long a caller waits for
    its txid; each sync itself is bounded by the QJM's write timeout.
    """

    def __init__(
        self,
        qjm: JournalManager,
        *,
        on_failure: Callable[[str], None] | None = None,
        metrics: NameNodeMetrics | None = None,
        max_batch_bytes: int = DEFAULT_MAX_BATCH_BYTES,
        gather_delay: float = DEFAULT_GATHER_DELAY,
        sync_wait_timeout: float | None = None,
        log_context: dict[str, object] | None = None,
        syncs_in_flight: int = DEFAULT_SYNCS_IN_FLIGHT,
    ) -> None:
        if syncs_in_flight < 1:
            raise ValueError(f"syncs_in_flight must be at least 1, not {syncs_in_flight}")
        self.qjm = qjm
        self.syncs_in_flight = syncs_in_flight
        self._loop = asyncio.get_running_loop()
        self._on_failure = on_failure
        self._metrics = metrics
        self.max_batch_bytes = max_batch_bytes
        self.gather_delay = gather_delay
        write_timeout = float(getattr(qjm.timeouts, "write_txns_timeout", 20.0))
        self.sync_wait_timeout = (
            sync_wait_timeout if sync_wait_timeout is not None else 2 * write_timeout + 5.0
        )
        self._stream: JournalOutputStream | None = None
        self._pending: deque[tuple[int, bytes]] = deque()
        self._last_written_txid = 0
        self._synced_txid = 0
        self._waiters: list[tuple[int, int, asyncio.Future[None]]] = []
        self._waiter_seq = itertools.count()
        self._wake = asyncio.Event()
        # Gathering: the sizes of recent batches, when the last sync started, and the event
        # log_and_apply sets once as many edits as the syncer waits for are pending.
        self._recent_batches: deque[int] = deque(maxlen=GATHER_HISTORY)
        self._last_sync_started = 0.0
        self._gather_target = 0
        self._gathered = asyncio.Event()
        # Held while a roll or the close ends the segment (and a roll starts the next).
        self._segment_lock = asyncio.Lock()
        self._syncer: asyncio.Task[None] | None = None
        self._in_flight: deque[_Sync] = deque()
        """The syncs under way or acknowledged but not yet counted as durable, oldest
        first."""
        self._failure: str | None = None
        self._closed = False
        self._log = log.bind(journal=qjm.journal_id, epoch=qjm.epoch, **(log_context or {}))
        # A newer epoch learned from any call (a heartbeat, a write, a finalize) fails this
        # edit log at once, as a failed sync does. The QJM calls from its own threads.
        qjm.add_fence_listener(self._fenced_from_any_thread)

    def _fenced_from_any_thread(self, reason: str) -> None:
        try:
            self._loop.call_soon_threadsafe(self._fail, f"writer fenced: {reason}")
        except RuntimeError:  # the loop is closed: this NameNode is gone
            self._log.warning("fenced after the event loop stopped", reason=reason)

    # -- state (plain reads: safe from any thread) -------------------------------------------

    @property
    def last_written_txid(self) -> int:
        """The highest txid logged (pending or durable)."""
        return self._last_written_txid

    @property
    def synced_txid(self) -> int:
        """The highest txid durable on a quorum: everything up to it may be acknowledged."""
        return self._synced_txid

    @property
    def segment_txid(self) -> int | None:
        stream = self._stream
        return None if stream is None else stream.segment_txid

    @property
    def failure(self) -> str | None:
        """Why the edit log failed, or None while it works."""
        return self._failure

    @property
    def is_open(self) -> bool:
        return self._stream is not None and self._failure is None and not self._closed

    @property
    def pending_txns(self) -> int:
        """Edits logged and not yet handed to a sync."""
        return len(self._pending)

    # -- segments ------------------------------------------------------------------------------

    async def open_for_write(self, first_txid: int, apply: Apply) -> None:
        """Start the first segment at ``first_txid`` (the txid after the recovered log)."""
        if self._stream is not None or self._closed:
            raise EditLogError("the edit log is already open (or closed)")
        self._last_written_txid = self._synced_txid = first_txid - 1
        self._syncer = self._loop.create_task(self._run_syncer(), name="edit-log-syncer")
        await self._start_segment(first_txid, apply)

    async def roll(self, apply: Apply) -> int:
        """End the current segment, finalize it, start the next; return the new segment's
        first txid. Any failure here is fatal, as for a sync. The caller keeps other
        mutations out meanwhile (``FSNamesystem``'s write gate)."""
        async with self._segment_lock:
            end_txid = await self._end_segment(apply)
            next_txid = end_txid + 1
            await self._start_segment(next_txid, apply)
        if self._metrics is not None:
            self._metrics.rolls.inc()
        self._log.info("rolled edit log", finalized_through=end_txid, new_segment=next_txid)
        return next_txid

    async def close(self, apply: Apply) -> None:
        """End and finalize the current segment (graceful ACTIVE -> STANDBY). Raises
        EditLogError when it cannot (quorum lost): then the segment stays in progress and the
        next writer's recovery decides where it ends."""
        try:
            # After a roll in flight (a standby's RollEditLog racing a step-down): both end
            # the segment, and two END ops in one segment would finalize it short of the
            # second, then find no segment left to end (issue 13's simulation found it).
            async with self._segment_lock:
                if self._failure is None and self._stream is not None:
                    await self._end_segment(apply)
        finally:
            self._closed = True
            self._stream = None
            self._release_waiters("the edit log was closed")
            syncer, self._syncer = self._syncer, None
            if syncer is not None:
                syncer.cancel()
                await asyncio.gather(syncer, return_exceptions=True)

    def abort(self, reason: str) -> None:
        """Mark the edit log failed: nothing more is written or acknowledged."""
        self._fail(reason)

    async def _start_segment(self, txid: int, apply: Apply) -> None:
        try:
            stream = await self.qjm.astart_log_segment(txid)
        except Exception as exc:
            reason = f"could not start log segment {txid}: {describe_exception(exc)}"
            self._fail(reason)
            raise EditLogError(reason) from exc
        if self._failure is not None:
            raise EditLogError(f"edit log failed: {self._failure}")
        if self._last_written_txid + 1 != txid:
            reason = f"segment {txid} would begin with txid {self._last_written_txid + 1}"
            self._fail(reason)
            raise EditLogError(reason)
        self._stream = stream
        op = edits_pb2.EditOp(start_log_segment=edits_pb2.StartLogSegmentOp())
        logged, _ = self.log_and_apply(op, apply)
        await self.log_sync(logged)

    async def _end_segment(self, apply: Apply) -> int:
        op = edits_pb2.EditOp(end_log_segment=edits_pb2.EndLogSegmentOp())
        end_txid, _ = self.log_and_apply(op, apply)
        await self.log_sync(end_txid)
        stream, self._stream = self._stream, None
        assert stream is not None, "log_and_apply succeeded, so a segment was open"
        if self._last_written_txid != end_txid:
            # The JournalNodes would refuse the finalize (they hold more than it ends with),
            # or take it and then refuse the edits after it: either way the log fails. Fail
            # it here, naming the cause, before anything is finalized short.
            reason = (
                f"txids {end_txid + 1}-{self._last_written_txid} were logged after the end "
                f"marker {end_txid} of segment {stream.segment_txid}, before its finalize "
                "(a bug: the write gate was open while the segment ended)"
            )
            self._fail(reason)
            raise SegmentOverrunError(reason)
        try:
            await self.qjm.afinalize_log_segment(stream.segment_txid, end_txid)
        except Exception as exc:
            reason = (
                f"could not finalize log segment {stream.segment_txid}-{end_txid}: "
                f"{describe_exception(exc)}"
            )
            self._fail(reason)
            raise EditLogError(reason) from exc
        return end_txid

    # -- writing (on the loop) -----------------------------------------------------------------

    def log_edit(self, op: edits_pb2.EditOp) -> int:
        """Give ``op`` the next txid, frame it and buffer it; return the txid (for ops that
        change nothing in memory; the namesystem uses ``log_and_apply``)."""
        txid, _ = self.log_and_apply(op, None)
        return txid

    def log_and_apply(self, op: edits_pb2.EditOp, apply: Apply | None) -> tuple[int, object]:
        """Give ``op`` the next txid, apply it, then buffer it for the syncer; return the txid
        and what ``apply`` returned. Then ``await log_sync(txid)`` before answering.

        The op is buffered only once it applied: the syncer cannot ship an op that then fails
        to apply (that failure fails the edit log instead, and nothing of it leaves this
        process). No await between the txid and the buffer: nothing interleaves."""
        self._check_writable()
        txid = self._last_written_txid + 1
        op.txid = txid
        framed = records.frame(op.SerializeToString())
        result: object = None
        if apply is not None:
            try:
                result = apply(op)
            except Exception as exc:
                # The namespace may hold part of the op: this NameNode must not go on writing.
                failure = f"txid {txid} did not apply, so it was never logged: {exc}"
                self._fail(failure)
                raise EditLogError(failure) from exc
        self._pending.append((txid, framed))
        self._last_written_txid = txid
        self._wake.set()
        if self._gather_target and len(self._pending) >= self._gather_target:
            self._gathered.set()
        return txid, result

    def _check_writable(self) -> None:
        if self._failure is not None:
            raise EditLogError(f"edit log failed, not accepting edits: {self._failure}")
        if self._closed or self._stream is None:
            raise EditLogError("the edit log is not open for write (no active segment)")

    async def log_sync(self, txid: int | None = None) -> None:
        """Return once ``txid`` (default: everything logged so far) is durable on a quorum;
        EditLogError if it never will be (the edit log failed) or the wait timed out. A
        cancelled caller leaves the edit to be shipped all the same."""
        target = self._last_written_txid if txid is None else txid
        if target <= self._synced_txid:
            return
        if self._failure is not None:
            raise EditLogError(
                f"txid {target} is not durable and never will be from this NameNode: "
                f"{self._failure}"
            )
        if target > self._last_written_txid:
            raise EditLogError(f"txid {target} was never logged")
        if self._closed:
            raise EditLogError(f"txid {target} is not durable: the edit log was closed")
        waiter: asyncio.Future[None] = self._loop.create_future()
        heapq.heappush(self._waiters, (target, next(self._waiter_seq), waiter))
        self._wake.set()
        try:
            async with asyncio.timeout(self.sync_wait_timeout):
                await waiter
        except TimeoutError:
            raise EditLogError(
                f"timed out after {self.sync_wait_timeout:.1f}s waiting for txid "
                f"{target} to be synced"
            ) from None

    # -- the syncer task -----------------------------------------------------------------------

    async def _run_syncer(self) -> None:
        try:
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._pending and self._failure is None and self._stream is not None:
                    await self._gather()
                    if self._stream is None or self._failure is not None:
                        break
                    if self.syncs_in_flight == 1:
                        await self._start_sync(self._stream)  # in this task, as HDFS
                    else:
                        self._start_sync(self._stream, in_task=True)
                        await self._slot()
        finally:
            for sync in self._in_flight:
                if sync.task is not None:
                    sync.task.cancel()

    async def _gather(self) -> None:
        """Let the calls the loop has already received log their edits before the batch is
        cut: yield while edits keep arriving, at most ``GATHER_YIELDS`` times. A request takes
        a few loop iterations from its bytes to its edit; without this, a busy loop cuts a
        batch as soon as one edit is pending and pays a sync for every few edits."""
        quiet = 0
        for _ in range(GATHER_YIELDS):
            before = self._last_written_txid
            await asyncio.sleep(0)
            quiet = quiet + 1 if self._last_written_txid == before else 0
            if quiet >= QUIET_YIELDS:
                break
        await self._gather_concurrent_writers()

    def gather_target(self) -> int:
        """How many pending edits the next batch waits for: the median of the recent batches
        when it shows concurrent writers (``GATHER_MIN_BATCH``), else 0 (no wait). The
        median, not the largest, so that a writer who comes now and then (a fifth beside
        four in step) does not make every batch wait for him."""
        recent = sorted(self._recent_batches)
        typical = recent[len(recent) // 2] if recent else 0
        return typical if typical >= GATHER_MIN_BATCH else 0

    async def _gather_concurrent_writers(self) -> None:
        """Wait, at most until ``gather_delay`` after the previous sync started, until as
        many edits are pending as ``gather_target``. Not during a roll or a close
        (the segment lock is held: no edit can follow the END marker), nor once a batch's
        worth of bytes is pending."""
        target = self.gather_target()
        if (
            self.gather_delay <= 0
            or target == 0
            or len(self._pending) >= target
            or self._segment_lock.locked()
            or sum(len(framed) for _, framed in self._pending) >= self.max_batch_bytes
        ):
            return
        remaining = self._last_sync_started + self.gather_delay - self._loop.time()
        if remaining <= 0:
            return
        self._gather_target = target
        self._gathered.clear()
        try:
            async with asyncio.timeout(remaining):
                await self._gathered.wait()
        except TimeoutError:
            pass  # the delay is up: ship what came
        finally:
            self._gather_target = 0

    def _start_sync(self, stream: JournalOutputStream, *, in_task: bool = False) -> Awaitable[None]:
        """Ship the next batch: the sync to await, or with ``in_task`` a task of its own
        (``_in_flight``) that the caller need not await."""
        batch = take_batch(self._pending, self.max_batch_bytes)
        for txid, framed in batch:
            stream.write_framed(txid, framed)
        first, count, framed_batch = stream.take_written()
        self._recent_batches.append(len(batch))
        self._last_sync_started = self._loop.time()
        sync = _Sync(first + count - 1)
        self._in_flight.append(sync)
        shipping = self._sync(sync, stream, first, count, framed_batch)
        if not in_task:
            return shipping
        sync.task = self._loop.create_task(shipping, name=f"edit-log-sync-{sync.end}")
        return sync.task

    async def _sync(
        self, sync: _Sync, stream: JournalOutputStream, first: int, count: int, framed: bytes
    ) -> None:
        started = time.perf_counter()
        try:
            await stream.asend_batch(first, count, framed)
        except Exception as exc:
            self._fail(f"sync of txids {first}-{sync.end} failed: {describe_exception(exc)}")
            return
        elapsed = time.perf_counter() - started
        sync.acknowledged = True
        # The durable txid moves over the oldest acknowledged syncs, in order: a later one
        # acknowledged first waits for those before it (it cannot be, in fact: a quorum for
        # it is a quorum for them), and nothing moves after a failure.
        advanced = False
        while self._in_flight and self._in_flight[0].acknowledged and self._failure is None:
            self._synced_txid = max(self._synced_txid, self._in_flight.popleft().end)
            advanced = True
        if advanced:
            self._release_waiters(None)
        if self._metrics is not None:
            self._metrics.sync_seconds.observe(elapsed)
            self._metrics.syncs.inc()
            self._metrics.txns_synced.inc(count)
            self._metrics.sync_batch_txns.observe(count)

    async def _slot(self) -> None:
        """Return once fewer than ``syncs_in_flight`` syncs are under way."""
        while True:
            running = [s.task for s in self._in_flight if s.task is not None and not s.task.done()]
            self._in_flight = deque(s for s in self._in_flight if not (
                s.task is not None and s.task.done() and not s.acknowledged
            ))
            if len(running) < self.syncs_in_flight:
                return
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)

    def _release_waiters(self, failure: str | None) -> None:
        """Complete every waiter whose txid is durable; with ``failure``, fail the rest."""
        waiters = self._waiters
        while waiters and waiters[0][0] <= self._synced_txid:
            _, _, waiter = heapq.heappop(waiters)
            if not waiter.done():  # a cancelled caller
                waiter.set_result(None)
        if failure is None:
            return
        while waiters:
            target, _, waiter = heapq.heappop(waiters)
            if not waiter.done():
                waiter.set_exception(
                    EditLogError(
                        f"txid {target} is not durable and never will be from this "
                        f"NameNode: {failure}"
                    )
                )

    def _fail(self, reason: str) -> None:
        if self._failure is not None:
            return
        self._failure = reason
        self._release_waiters(reason)
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
