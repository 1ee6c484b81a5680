"""AsyncLogger and AsyncLoggerSet (design doc 5.1.1, 5.1.3).

An ``AsyncLogger`` wraps one ``JournalChannel`` with a single worker (so calls reach its
JournalNode in order), stamps each call with the writer's epoch, IPC serial and committed
txid, and bounds how many bytes of edits may wait for that JournalNode. A logger whose
JournalNode errors on a write, or falls further behind than the bound, is *out of sync*: it
refuses edits until the next segment starts (design doc 2.2), so one slow or dead JournalNode
costs the writer nothing while a quorum keeps up.

An ``AsyncLoggerSet`` sends one call to every logger and returns a ``QuorumCall``.

The executor is injectable: real loggers use one named thread each; the deterministic
simulator passes ``DirectExecutor``, which runs every call at once in the caller's thread.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Executor, Future, ThreadPoolExecutor
from typing import Any, TypeVar

import structlog

from journalnode.errors import JournalError
from proto.values import (
    NamespaceInfo,
    PrepareRecoveryResult,
    RemoteEditLog,
    RequestInfo,
    SegmentState,
)
from qjm.channel import JournalChannel
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
        self._lock = threading.Lock()
        self.epoch = 0
        self._ipc_serial = 0
        self.committed_txid = 0
        self.out_of_sync = False
        self.queued_bytes = 0
        self.highest_acked_txid = 0
        self.last_ack_time = time.monotonic()
        self.last_call_time = 0.0
        self.from_url = ""
        self._metrics = LOGGER_METRICS.for_logger(journal_id, channel.address)

    def __repr__(self) -> str:
        return f"AsyncLogger({self.address})"

    # ------------------------------------------------------------------ plumbing

    def _timeout(self, name: str, default: float) -> float:
        return (
            float(getattr(self.timeouts, name, default)) if self.timeouts is not None else default
        )

    def _req(self) -> RequestInfo:
        # Stamped at submission: the single worker runs calls in submission order, so the
        # serials reach the JournalNode strictly increasing.
        with self._lock:
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
        self.last_call_time = time.monotonic()
        return self._executor.submit(fn, *args)

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
        req = self._req()

        def call() -> None:
            self.channel.start_log_segment(req, txid, self._timeout("start_segment_timeout", 20))
            # A new segment is a fresh start for a logger that fell out of sync.
            with self._lock:
                self.out_of_sync = False
                self.queued_bytes = 0
            self._metrics.out_of_sync.set(0)

        return self._submit(call)

    def send_edits(
        self, segment_txid: int, first_txid: int, num_txns: int, framed: bytes
    ) -> Future[None]:
        """Queue a batch for this JournalNode; fails at once when out of sync or over the bound."""
        size = len(framed)
        with self._lock:
            if self.out_of_sync:
                return _failed(
                    LoggerOutOfSyncError(
                        f"{self.address} is out of sync until the next segment; "
                        f"batch {first_txid} not sent"
                    )
                )
            if self.queued_bytes + size > self.queue_limit_bytes:
                self._mark_out_of_sync_locked()
                return _failed(
                    LoggerTooFarBehindError(
                        f"{self.address} has {self.queued_bytes} bytes queued, limit "
                        f"{self.queue_limit_bytes}; marking it out of sync"
                    )
                )
            self.queued_bytes += size
        self._metrics.queued_bytes.set(self.queued_bytes)
        req = self._req()
        submitted = time.perf_counter()
        last = first_txid + num_txns - 1

        def call() -> None:
            started = time.perf_counter()
            try:
                self.channel.journal(
                    req,
                    segment_txid,
                    first_txid,
                    num_txns,
                    framed,
                    self._timeout("write_txns_timeout", 20),
                )
            except BaseException:
                with self._lock:
                    self._mark_out_of_sync_locked()
                raise
            finally:
                with self._lock:
                    self.queued_bytes -= size
                self._metrics.queued_bytes.set(self.queued_bytes)
            done = time.perf_counter()
            self._metrics.rpc_seconds.observe(done - started)
            self._metrics.write_seconds.observe(done - submitted)
            self.highest_acked_txid = last
            self.last_ack_time = time.monotonic()

        return self._submit(call)

    def _mark_out_of_sync_locked(self) -> None:
        if not self.out_of_sync:
            log.warning("logger out of sync until the next segment", logger=self.address)
        self.out_of_sync = True
        self._metrics.out_of_sync.set(1)

    def heartbeat(self) -> Future[None]:
        req = self._req()
        return self._submit(self.channel.heartbeat, req, self._timeout("write_txns_timeout", 20))

    def finalize_log_segment(self, start: int, end: int) -> Future[None]:
        req = self._req()
        return self._submit(
            self.channel.finalize_log_segment,
            req,
            start,
            end,
            self._timeout("finalize_segment_timeout", 120),
        )

    def purge_logs(self, min_txid_to_keep: int) -> Future[None]:
        req = self._req()
        return self._submit(
            self.channel.purge_logs,
            req,
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

    def prepare_recovery(self, segment_txid: int) -> Future[PrepareRecoveryResult]:
        req = self._req()
        return self._submit(
            self.channel.prepare_recovery,
            req,
            segment_txid,
            self._timeout("prepare_recovery_timeout", 120),
        )

    def accept_recovery(self, state: SegmentState, from_url: str) -> Future[None]:
        req = self._req()
        return self._submit(
            self.channel.accept_recovery,
            req,
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

    def finalize_log_segment(self, start: int, end: int) -> QuorumCall[AsyncLogger, None]:
        return self._each(lambda lg: lg.finalize_log_segment(start, end))

    def purge_logs(self, min_txid_to_keep: int) -> QuorumCall[AsyncLogger, None]:
        return self._each(lambda lg: lg.purge_logs(min_txid_to_keep))

    def get_edit_log_manifest(
        self, since_txid: int, in_progress_ok: bool
    ) -> QuorumCall[AsyncLogger, tuple[list[RemoteEditLog], int]]:
        return self._each(lambda lg: lg.get_edit_log_manifest(since_txid, in_progress_ok))

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
