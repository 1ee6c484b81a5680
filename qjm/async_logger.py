"""AsyncLogger and AsyncLoggerSet (HDFS-3077 §5.1.1, §5.1.3).

An ``AsyncLogger`` wraps one ``JournalChannel`` with a single worker (so calls reach its
JournalNode in order), stamps each call with the writer's epoch, IPC serial and committed
txid, and bounds how many bytes of edits may wait for that JournalNode. A logger whose
JournalNode errors on a write, or falls further behind than the bound, is *out of sync*: it
refuses edits until the next segment starts (HDFS-3077 §2.2), so one slow or dead JournalNode
costs the writer nothing while a quorum keeps up.

Over gRPC, edits do not take the worker: ``send_edits`` pipelines them on the channel's
long-lived ``JournalStream`` straight from the writer's thread (the 1-edit sync path then
costs no thread hop and no per-call RPC set-up), unless calls are waiting in the worker, in
which case the batch queues behind them. Every worker call first waits until the batches
sent before it are answered. Either way the JournalNode sees one logger's calls in the order
they were made, with the same checks and the same errors as unary Journal calls.

An ``AsyncLoggerSet`` sends one call to every logger and returns a ``QuorumCall``.

The executor is injectable: real loggers use one named thread each; the deterministic
simulator passes ``DirectExecutor``, which runs every call at once in the caller's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import structlog

from journalnode.edits_cache import CachedEdits
from journalnode.errors import EpochError, JournalError, JournalUnavailableError
from proto.values import (
    NamespaceInfo,
    PrepareRecoveryResult,
    RemoteEditLog,
    RequestInfo,
    SegmentState,
)
from qjm.channel import JournalChannel, StreamingJournalChannel
from qjm.errors import QJMError
from qjm.metrics import LOGGER_METRICS
from qjm.quorum import QuorumCall, majority, wait_for_write_quorum

log = structlog.get_logger(__name__)

T = TypeVar("T")


class LoggerOutOfSyncError(QJMError):
    """This logger missed edits of the current segment; it rejoins at the next segment."""


class LoggerTooFarBehindError(LoggerOutOfSyncError):
    """More bytes are queued for this JournalNode than dfs.qjournal.queued-edits.limit.mb."""


class DirectExecutor(Executor):
    """Runs each submitted call immediately in the submitting thread (the simulator's executor)."""

    def submit(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> Future[T]:
        future: Future[T] = Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as exc:
            future.set_exception(exc)
        return future


class AsyncLogger:
    """One JournalNode seen by the writer; every method returns a Future."""

    def __init__(
        self,
        channel: JournalChannel,
        journal_id: str,
        namespace_info: NamespaceInfo,
        *,
        queue_limit_bytes: int = 10 * 1024 * 1024,
        timeouts: Any = None,
        executor: Executor | None = None,
    ) -> None:
        self.channel = channel
        self.address = channel.address
        self.journal_id = journal_id
        self.namespace_info = namespace_info
        self.queue_limit_bytes = queue_limit_bytes
        self.timeouts = timeouts
        self._own_executor = executor is None
        self._executor = executor or ThreadPoolExecutor(
            max_workers=1, thread_name_prefix=f"logger-{channel.address}"
        )
        # Re-entrant: with DirectExecutor a call runs inside ``_enqueue`` under this lock.
        self._lock = threading.RLock()
        self._stream_drained = threading.Condition(self._lock)
        # gRPC channels pipeline edits on a JournalStream; other channels use the worker.
        # Tested by its one extra method: isinstance() of a Protocol inspects every member,
        # a tenth of a simulation's time (it builds thousands of loggers).
        streaming = callable(getattr(channel, "send_journal", None))
        self._stream: StreamingJournalChannel | None = (
            cast(StreamingJournalChannel, channel) if streaming else None
        )
        self._backlog = 0  # calls queued on or running in the worker (streaming channels)
        self._stream_unanswered = 0  # batches sent on the stream, not yet answered
        self._segments_starting = 0  # start_log_segment calls queued or running
        self.epoch = 0
        self._ipc_serial = 0
        self.committed_txid = 0
        self.out_of_sync = False
        # Why this logger fell out of sync (the JournalNode's error, "disk full" included),
        # until a new segment clears it: the NameNode's journal status shows it.
        self.out_of_sync_cause = ""
        self.queued_bytes = 0
        self.highest_acked_txid = 0
        self.last_ack_time = time.monotonic()
        self.last_call_time = 0.0
        # The last answer of any kind (an acknowledged batch or heartbeat): the status page's
        # "last contact", monotonic for ages and wall-clock for display (None: never).
        self.last_contact: float | None = None
        self.last_contact_wall: float | None = None
        self.from_url = ""
        self.on_epoch_error: Callable[[AsyncLogger, str, EpochError], None] | None = None
        """Called (from any thread) when this JournalNode refuses a call stamped with the
        writer's epoch because it promised a higher one: the writer is fenced. The second
        argument names the call ("heartbeat", "sendEdits", ...)."""
        self._metrics = LOGGER_METRICS.for_logger(journal_id, channel.address)

    def __repr__(self) -> str:
        return f"AsyncLogger({self.address})"

    # ------------------------------------------------------------------ plumbing

    def _timeout(self, name: str, default: float) -> float:
        return (
            float(getattr(self.timeouts, name, default)) if self.timeouts is not None else default
        )

    def _req_locked(self) -> RequestInfo:
        serial = self._ipc_serial
        self._ipc_serial += 1
        return RequestInfo(
            self.journal_id,
            self.namespace_info.cluster_id,
            self.epoch,
            serial,
            self.committed_txid,
        )

    def _submit(self, fn: Callable[..., T], *args: Any) -> Future[T]:
        with self._lock:
            return self._enqueue(fn, args)

    def _submit_req(self, name: str, fn: Callable[..., T], *args: Any) -> Future[T]:
        """Queue ``fn(req, *args)`` with a freshly stamped RequestInfo. Stamping and queueing
        are one step under the lock, so the IPC serials reach the JournalNode strictly
        increasing even when two threads (the writer, the heartbeat thread) call at once."""
        with self._lock:
            future = self._enqueue(fn, (self._req_locked(), *args))
        return self._watch_epoch(name, future)

    def _watch_epoch(self, name: str, future: Future[T]) -> Future[T]:
        """Report an EpochError of a call stamped with our epoch to ``on_epoch_error``. Added
        outside the lock: with DirectExecutor the callback runs at once, in this thread."""

        def done(f: Future[T]) -> None:
            exc = None if f.cancelled() else f.exception()
            if isinstance(exc, EpochError) and self.on_epoch_error is not None:
                self.on_epoch_error(self, name, exc)

        future.add_done_callback(done)
        return future

    def _enqueue(self, fn: Callable[..., T], args: tuple[Any, ...]) -> Future[T]:
        """Queue a call on the single worker (the caller holds the lock)."""
        self.last_call_time = time.monotonic()
        if self._stream is None:
            return self._executor.submit(fn, *args)
        self._backlog += 1
        try:
            return self._executor.submit(self._after_stream, fn, args)
        except BaseException:
            self._backlog -= 1
            raise

    def _after_stream(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        """Worker: run ``fn`` once every batch sent earlier on the journal stream has been
        answered, so the JournalNode sees this logger's calls in the order they were made,
        as when every call went through the one worker."""
        try:
            self._wait_stream_drained()
            return fn(*args)
        finally:
            with self._lock:
                self._backlog -= 1

    def _wait_stream_drained(self) -> None:
        # Each batch is answered or failed by its own deadline; this bound is a safety net.
        limit = self._timeout("write_txns_timeout", 20) + 5.0
        deadline = time.monotonic() + limit
        with self._stream_drained:
            while self._stream_unanswered:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise JournalUnavailableError(
                        f"{self.address}: {self._stream_unanswered} journal batches sent before "
                        f"this call are still unanswered after {limit:.0f}s"
                    )
                self._stream_drained.wait(left)

    def set_epoch(self, epoch: int) -> None:
        with self._lock:
            self.epoch = epoch
            self._ipc_serial = 0

    def set_committed_txid(self, txid: int) -> None:
        with self._lock:
            if txid < self.committed_txid:
                raise QJMError(f"committed txid would go backward: {self.committed_txid} -> {txid}")
            self.committed_txid = txid

    def close(self) -> None:
        if self._own_executor:
            self._executor.shutdown(wait=False, cancel_futures=True)
        self.channel.close()

    # ------------------------------------------------------------------ calls

    def is_formatted(self) -> Future[tuple[bool, NamespaceInfo | None]]:
        return self._submit(
            self.channel.is_formatted, self.journal_id, self._timeout("format_timeout", 60)
        )

    def format(self, ns: NamespaceInfo, force: bool) -> Future[None]:
        return self._submit(
            self.channel.format, self.journal_id, ns, force, self._timeout("format_timeout", 60)
        )

    def get_journal_state(self) -> Future[tuple[int, str]]:
        def call() -> tuple[int, str]:
            epoch, url = self.channel.get_journal_state(
                self.journal_id,
                self.namespace_info.cluster_id,
                self._timeout("get_journal_state_timeout", 120),
            )
            self.from_url = url
            return epoch, url

        return self._submit(call)

    def new_epoch(self, epoch: int) -> Future[int | None]:
        return self._submit(
            self.channel.new_epoch,
            self.journal_id,
            self.namespace_info,
            epoch,
            self._timeout("new_epoch_timeout", 120),
        )

    def start_log_segment(self, txid: int) -> Future[None]:
        def call(req: RequestInfo) -> None:
            try:
                self.channel.start_log_segment(
                    req, txid, self._timeout("start_segment_timeout", 20)
                )
            except BaseException:
                with self._lock:
                    self._segments_starting -= 1
                raise
            # A new segment is a fresh start for a logger that fell out of sync.
            with self._lock:
                self._segments_starting -= 1
                self.out_of_sync = False
                self.out_of_sync_cause = ""
            self._metrics.out_of_sync.set(0)

        with self._lock:
            self._segments_starting += 1
            try:
                future = self._enqueue(call, (self._req_locked(),))
            except BaseException:
                self._segments_starting -= 1
                raise
        return self._watch_epoch("startLogSegment", future)

    def send_edits(
        self, segment_txid: int, first_txid: int, num_txns: int, framed: bytes
    ) -> Future[None]:
        """Queue a batch for this JournalNode; fails at once when out of sync (and no new
        segment is starting) or over the bound.

        Over a streaming channel the batch goes on the JournalStream straight from the
        caller's thread when the worker is idle (the 1-edit sync path: no thread hop), else
        behind the calls queued before it. Either way this logger's calls reach the
        JournalNode in order, and the Future completes after the bookkeeping (out of sync on
        failure, acked txid on success).
        """
        size = len(framed)
        with self._lock:
            # Out of sync, a logger refuses edits until a new segment starts; edits sent once
            # that start is queued belong to the new segment and wait behind it instead.
            rejoining = self._stream is not None and self._segments_starting > 0
            if self.out_of_sync and not rejoining:
                return _failed(
                    LoggerOutOfSyncError(
                        f"{self.address} is out of sync until the next segment; "
                        f"batch {first_txid} not sent"
                    )
                )
            if self.queued_bytes + size > self.queue_limit_bytes:
                behind = LoggerTooFarBehindError(
                    f"{self.address} has {self.queued_bytes} bytes queued and batch "
                    f"{first_txid} adds {size}, limit {self.queue_limit_bytes}; marking it "
                    "out of sync"
                )
                self._mark_out_of_sync_locked(behind)
                return _failed(behind)
            self.queued_bytes += size
            self.last_call_time = time.monotonic()
            batch = _Batch(
                args=(
                    self._req_locked(),
                    segment_txid,
                    first_txid,
                    num_txns,
                    framed,
                    self._timeout("write_txns_timeout", 20),
                ),
                size=size,
                last_txid=first_txid + num_txns - 1,
                submitted=time.perf_counter(),
            )
            if self._stream is None:
                unary = self._executor.submit(self.channel.journal, *batch.args)
                self._complete_after(unary, batch)
            elif self._backlog == 0:
                self._send_on_stream(batch)
            else:
                self._backlog += 1
                try:
                    self._executor.submit(self._send_queued, batch)
                except BaseException:
                    self._backlog -= 1
                    raise
        self._metrics.queued_bytes.set(self.queued_bytes)
        return self._watch_epoch("sendEdits", batch.result)

    def _send_on_stream(self, batch: _Batch) -> None:
        """Send on the journal stream now; the caller holds the lock, so batches go out in the
        order their serials were stamped."""
        assert self._stream is not None
        self._stream_unanswered += 1
        started = time.perf_counter()
        try:
            sent = self._stream.send_journal(*batch.args)
        except Exception as exc:  # send_journal reports failures in its Future; be safe
            sent = _failed(exc)
        self._complete_after(sent, batch, started, on_stream=True)

    def _send_queued(self, batch: _Batch) -> None:
        """Worker: send a batch that was queued behind other calls, unless one of them left
        this logger out of sync (a failed batch, a failed segment start)."""
        try:
            with self._lock:
                if self.out_of_sync:
                    first = batch.args[2]
                    error = LoggerOutOfSyncError(
                        f"{self.address} is out of sync until the next segment; "
                        f"batch {first} not sent"
                    )
                    self._complete_after(_failed(error), batch)
                else:
                    self._send_on_stream(batch)
        finally:
            with self._lock:
                self._backlog -= 1

    def _complete_after(
        self,
        sent: Future[None],
        batch: _Batch,
        started: float | None = None,
        *,
        on_stream: bool = False,
    ) -> None:
        """When ``sent`` completes: update queue, lag and out-of-sync state, then complete
        ``batch.result`` the same way."""

        def done(future: Future[None]) -> None:
            exc = CancelledError() if future.cancelled() else future.exception()
            now = time.perf_counter()
            with self._lock:
                self.queued_bytes -= batch.size
                queued = self.queued_bytes
                if on_stream:
                    self._stream_unanswered -= 1
                    if not self._stream_unanswered:
                        self._stream_drained.notify_all()
                if exc is not None:
                    self._mark_out_of_sync_locked(exc, batch.args[2])
            self._metrics.queued_bytes.set(queued)
            if exc is not None:
                batch.result.set_exception(exc)
                return
            self._metrics.rpc_seconds.observe(now - (started or batch.submitted))
            self._metrics.write_seconds.observe(now - batch.submitted)
            self.highest_acked_txid = batch.last_txid
            self.last_ack_time = time.monotonic()
            self._contacted()
            batch.result.set_result(None)

        sent.add_done_callback(done)

    def _mark_out_of_sync_locked(self, cause: BaseException, first_txid: int | None = None) -> None:
        """Refuse edits until the next segment; say once which JournalNode and why. (The key
        is ``journalnode``: structlog's ``logger`` key is the logger's own name.)"""
        if not self.out_of_sync:
            log.warning(
                "JournalNode out of sync until the next segment",
                journalnode=self.address,
                journal=self.journal_id,
                epoch=self.epoch,
                batch_first_txid=first_txid,
                cause=f"{type(cause).__name__}: {cause}",
            )
            self.out_of_sync_cause = f"{type(cause).__name__}: {cause}"
        self.out_of_sync = True
        self._metrics.out_of_sync.set(1)

    def _contacted(self) -> None:
        self.last_contact = time.monotonic()
        self.last_contact_wall = time.time()

    def heartbeat(self) -> Future[None]:
        future = self._submit_req(
            "heartbeat", self.channel.heartbeat, self._timeout("write_txns_timeout", 20)
        )
        future.add_done_callback(
            lambda f: None if f.cancelled() or f.exception() is not None else self._contacted()
        )
        return future

    def finalize_log_segment(self, start: int, end: int, md5: bytes = b"") -> Future[None]:
        return self._submit_req(
            "finalizeLogSegment",
            self.channel.finalize_log_segment,
            start,
            end,
            self._timeout("finalize_segment_timeout", 120),
            md5,
        )

    def purge_logs(self, min_txid_to_keep: int) -> Future[None]:
        return self._submit_req(
            "purgeLogs",
            self.channel.purge_logs,
            min_txid_to_keep,
            self._timeout("finalize_segment_timeout", 120),
        )

    def get_edit_log_manifest(
        self, since_txid: int, in_progress_ok: bool
    ) -> Future[tuple[list[RemoteEditLog], int]]:
        return self._submit(
            self.channel.get_edit_log_manifest,
            self.journal_id,
            self.namespace_info.cluster_id,
            since_txid,
            in_progress_ok,
            self._timeout("select_input_streams_timeout", 20),
        )

    def get_journaled_edits(self, since_txid: int, max_txns: int) -> Future[CachedEdits]:
        return self._submit(
            self.channel.get_journaled_edits,
            self.journal_id,
            self.namespace_info.cluster_id,
            since_txid,
            max_txns,
            self._timeout("select_input_streams_timeout", 20),
        )

    def prepare_recovery(self, segment_txid: int) -> Future[PrepareRecoveryResult]:
        return self._submit_req(
            "prepareRecovery",
            self.channel.prepare_recovery,
            segment_txid,
            self._timeout("prepare_recovery_timeout", 120),
        )

    def accept_recovery(self, state: SegmentState, from_url: str) -> Future[None]:
        return self._submit_req(
            "acceptRecovery",
            self.channel.accept_recovery,
            state,
            from_url,
            self._timeout("accept_recovery_timeout", 120),
        )

    def get_segment(self, start: int, end: int | None) -> Iterator[bytes]:
        """Stream a segment (synchronous: readers iterate it in their own thread)."""
        return self.channel.get_segment(
            self.journal_id,
            self.namespace_info.cluster_id,
            start,
            end,
            self._timeout("select_input_streams_timeout", 20) * 6,
        )

    def update_lag(self, quorum_txid: int) -> None:
        lag = max(0, quorum_txid - self.highest_acked_txid)
        self._metrics.lag_txns.set(lag)
        self._metrics.lag_seconds.set(0.0 if lag == 0 else time.monotonic() - self.last_ack_time)


@dataclass
class _Batch:
    """One send_edits call on its way: the channel arguments and what completes it."""

    args: tuple[RequestInfo, int, int, int, bytes, float]
    size: int
    last_txid: int
    submitted: float
    result: Future[None] = field(default_factory=Future)


def _failed(exc: BaseException) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(exc)
    return future


class AsyncLoggerSet:
    """Every logger of one journal; each method returns a QuorumCall keyed by logger."""

    def __init__(self, loggers: Iterable[AsyncLogger]) -> None:
        self.loggers = list(loggers)
        if not self.loggers:
            raise QJMError("a quorum journal needs at least one JournalNode")
        addresses = [lg.address for lg in self.loggers]
        if len(set(addresses)) != len(addresses):
            raise QJMError(f"JournalNode addresses are not unique: {addresses}")
        self.epoch = 0

    def __len__(self) -> int:
        return len(self.loggers)

    @property
    def majority(self) -> int:
        return majority(len(self.loggers))

    def set_epoch(self, epoch: int) -> None:
        self.epoch = epoch
        for lg in self.loggers:
            lg.set_epoch(epoch)

    def set_committed_txid(self, txid: int) -> None:
        for lg in self.loggers:
            lg.set_committed_txid(txid)

    def wait_for_write_quorum(
        self, call: QuorumCall[AsyncLogger, T], timeout: float, name: str
    ) -> dict[AsyncLogger, T]:
        return wait_for_write_quorum(call, len(self.loggers), timeout, name)

    def _each(self, fn: Callable[[AsyncLogger], Future[T]]) -> QuorumCall[AsyncLogger, T]:
        return QuorumCall({lg: fn(lg) for lg in self.loggers})

    def is_formatted(self) -> QuorumCall[AsyncLogger, tuple[bool, NamespaceInfo | None]]:
        return self._each(lambda lg: lg.is_formatted())

    def format(self, ns: NamespaceInfo, force: bool) -> QuorumCall[AsyncLogger, None]:
        return self._each(lambda lg: lg.format(ns, force))

    def get_journal_state(self) -> QuorumCall[AsyncLogger, tuple[int, str]]:
        return self._each(lambda lg: lg.get_journal_state())

    def new_epoch(self, epoch: int) -> QuorumCall[AsyncLogger, int | None]:
        return self._each(lambda lg: lg.new_epoch(epoch))

    def start_log_segment(self, txid: int) -> QuorumCall[AsyncLogger, None]:
        return self._each(lambda lg: lg.start_log_segment(txid))

    def send_edits(
        self, segment_txid: int, first_txid: int, num_txns: int, framed: bytes
    ) -> QuorumCall[AsyncLogger, None]:
        return self._each(lambda lg: lg.send_edits(segment_txid, first_txid, num_txns, framed))

    def heartbeat(self) -> QuorumCall[AsyncLogger, None]:
        return self._each(lambda lg: lg.heartbeat())

    def finalize_log_segment(
        self, start: int, end: int, md5: bytes = b""
    ) -> QuorumCall[AsyncLogger, None]:
        return self._each(lambda lg: lg.finalize_log_segment(start, end, md5))

    def purge_logs(self, min_txid_to_keep: int) -> QuorumCall[AsyncLogger, None]:
        return self._each(lambda lg: lg.purge_logs(min_txid_to_keep))

    def get_edit_log_manifest(
        self, since_txid: int, in_progress_ok: bool
    ) -> QuorumCall[AsyncLogger, tuple[list[RemoteEditLog], int]]:
        return self._each(lambda lg: lg.get_edit_log_manifest(since_txid, in_progress_ok))

    def get_journaled_edits(
        self, since_txid: int, max_txns: int
    ) -> QuorumCall[AsyncLogger, CachedEdits]:
        return self._each(lambda lg: lg.get_journaled_edits(since_txid, max_txns))

    def prepare_recovery(self, segment_txid: int) -> QuorumCall[AsyncLogger, PrepareRecoveryResult]:
        return self._each(lambda lg: lg.prepare_recovery(segment_txid))

    def accept_recovery(self, state: SegmentState, from_url: str) -> QuorumCall[AsyncLogger, None]:
        return self._each(lambda lg: lg.accept_recovery(state, from_url))

    def close(self) -> None:
        for lg in self.loggers:
            lg.close()


__all__ = [
    "AsyncLogger",
    "AsyncLoggerSet",
    "DirectExecutor",
    "JournalError",
    "LoggerOutOfSyncError",
    "LoggerTooFarBehindError",
]
