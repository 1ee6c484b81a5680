"""AsyncLogger and AsyncLoggerSet (HDFS-3077 §5.1.1, §5.1.3).

An ``AsyncLogger`` is one JournalNode seen by the writer: a task on the writer's event loop
with its own queue (so calls reach its JournalNode in order), which stamps each call with the
writer's epoch, IPC serial and committed txid, and bounds how many bytes of edits may wait for
that JournalNode. A logger whose JournalNode errors on a write, or falls further behind than
the bound, is *out of sync*: it refuses edits until the next segment starts (HDFS-3077 §2.2),
so one slow or dead JournalNode costs the writer nothing while a quorum keeps up.

Edits do not wait for the task when nothing is queued: ``send_edits`` puts the batch on the
channel's long-lived ``JournalStream`` at once (no per-call RPC set-up, no task switch), and
answers come back in order while more batches go out. Otherwise a batch queues behind the
calls before it, and every queued call first waits until the batches sent before it are
answered. Either way the JournalNode sees one logger's calls in the order they were made, with
the same checks and the same errors as unary Journal calls.

Every method may be called from any thread and returns a ``concurrent.futures.Future``
(thread-safe; ``asyncio.wrap_future`` or a ``QuorumCall`` awaits it on the loop). The request
is stamped when the call reaches the loop, so IPC serials follow queue order. The loop is the
one the logger is bound to (``bind``; by default the loop of its first call, or
``qjm.bridge.shared_loop()`` for a call from a thread without one). The channel is a coroutine
channel (``AioJournalChannel``: awaited on the loop) or a blocking one (its calls run on the
logger's own thread, ``logger-<address>``).

An ``AsyncLoggerSet`` sends one call to every logger and returns a ``QuorumCall``.

The deterministic simulator passes ``executor=DirectExecutor()``: every call then runs at once
in the caller's thread, over its in-memory channel, and returns a completed Future (``direct``
loggers need no event loop; ``qjm.bridge`` drives the QJM's coroutines inline over them).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import CancelledError, Executor, Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

import structlog

from conf import clock
from journalnode.edits_cache import CachedEdits
from journalnode.errors import EpochError, JournalError, JournalUnavailableError
from proto.values import (
    NamespaceInfo,
    PrepareRecoveryResult,
    RemoteEditLog,
    RequestInfo,
    SegmentState,
)
from qjm.bridge import on_loop_thread, shared_loop
from qjm.channel import AnyJournalChannel
from qjm.errors import QJMError
from qjm.metrics import LOGGER_METRICS, contact_threshold
from qjm.quorum import QuorumCall, await_write_quorum, majority, wait_for_write_quorum

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


@dataclass
class _Call:
    """One queued call: the channel method's name, its arguments (after the RequestInfo when
    ``stamped``), what to do with its outcome, and the Future the caller holds."""

    method: str
    args: tuple[Any, ...]
    stamped: bool
    on_success: Callable[[Any], Any] | None = None
    on_failure: Callable[[BaseException], None] | None = None
    future: Future[Any] = field(default_factory=Future)


@dataclass
class _Bypass:
    """A call that runs at once, beside the queue (the read-index round): it carries no IPC
    serial, so it need not wait for the calls queued before it."""

    call: _Call


_STOP = object()

class AsyncLogger:
    """One JournalNode seen by the writer; every method returns a Future."""

    def __init__(
        self,
        channel: AnyJournalChannel,
        journal_id: str,
        namespace_info: NamespaceInfo,
        *,
        queue_limit_bytes: int = 10 * 1024 * 1024,
        timeouts: Any = None,
        executor: Executor | None = None,
        node_id: str = "",
    ) -> None:
        self.channel = channel
        self.address = channel.address
        self.node_id = node_id or channel.address
        """The JournalNode's configured id (``jn1``), or its address when none is known."""
        self.journal_id = journal_id
        self.namespace_info = namespace_info
        self.queue_limit_bytes = queue_limit_bytes
        self.timeouts = timeouts
        self.direct = executor is not None
        """Calls run at once in the caller's thread through ``executor`` (the simulator)."""
        self._direct_executor = executor
        self._aio = bool(getattr(channel, "is_aio", False))
        # A blocking channel's calls run on this logger's own thread, off the event loop.
        self._blocking_executor: ThreadPoolExecutor | None = None
        # Re-entrant: with DirectExecutor a call runs inside the enqueueing method's lock.
        self._lock = threading.RLock()
        # Channels with a JournalStream pipeline edits on it. Tested by its one extra method:
        # isinstance() of a Protocol inspects every member, a tenth of a simulation's time.
        self._streaming = callable(getattr(channel, "send_journal", None)) and not self.direct
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._queue: collections.deque[Any] = collections.deque()
        self._wakeup: asyncio.Event | None = None
        self._busy = False  # the task is running a queued call
        self._drain_waiters: list[asyncio.Future[None]] = []
        self._stream_unanswered = 0  # batches sent on the stream, not yet answered
        self._segments_starting = 0  # start_log_segment calls queued or running
        self._closed = False
        self.epoch = 0
        self._ipc_serial = 0
        self.committed_txid = 0
        self.out_of_sync = False
        # Why this logger fell out of sync (the JournalNode's error, "disk full" included),
        # until a new segment clears it: the NameNode's journal status shows it.
        self.out_of_sync_cause = ""
        # Why this segment's startLogSegment failed here, if it did: the cause behind the
        # refusal of its batches.
        self._start_failure = ""
        self.queued_bytes = 0
        self.highest_acked_txid = 0
        self.last_ack_time = clock.monotonic()
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
        self._started = clock.monotonic()
        self._metrics = LOGGER_METRICS.for_logger(journal_id, self.node_id, channel.address)
        # Read at each scrape: a stalled JournalNode (SIGSTOP) answers nothing, so no event
        # would ever set them (issue 28 item 7). The newest logger of a label set reports.
        self._metrics.out_of_sync.set_function(self._out_of_sync_metric)
        self._metrics.since_contact.set_function(self._since_contact_metric)

    def __repr__(self) -> str:
        return f"AsyncLogger({self.address})"

    # ------------------------------------------------------------------ the loop and the task

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The event loop this logger's task runs on (None: not bound yet, or direct)."""
        return self._loop

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Run this logger's task on ``loop``; refused once bound to another one."""
        with self._lock:
            if self.direct:
                return
            if self._loop is None:
                self._loop = loop
            elif self._loop is not loop:
                raise QJMError(
                    f"logger {self.address} runs on another event loop; a QJM is used from "
                    "one loop (its awaitable methods) or from threads (its blocking ones)"
                )

    def _bound_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                loop = shared_loop()
            self.bind(loop)
        assert self._loop is not None
        return self._loop

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

    def _submit(self, call: _Call, name: str | None = None, *, bypass: bool = False) -> Future[Any]:
        """Queue ``call`` (stamped, when it needs a RequestInfo, as it reaches the queue, so
        the IPC serials reach the JournalNode strictly increasing whichever threads call);
        with ``bypass``, run it at once beside the queue (a call without a RequestInfo, which
        also does not count as contact for the idle heartbeats: it tells the JournalNode
        neither our epoch nor the committed txid)."""
        if not bypass:
            self.last_call_time = clock.monotonic()
        if self._closed:
            call.future.set_exception(JournalUnavailableError(f"logger {self.address} closed"))
        elif self.direct:
            with self._lock:
                self._run_direct(call)
        else:
            self._put_from_any_thread(_Bypass(call) if bypass else call)
        if name is not None:
            self._watch_epoch(name, call.future)
        return call.future

    def _put_from_any_thread(self, item: Any) -> None:
        loop = self._bound_loop()
        if on_loop_thread(loop):
            self._put(item)
        else:
            loop.call_soon_threadsafe(self._put, item)

    def _run_direct(self, call: _Call) -> None:
        """The simulator's path: run the blocking channel call now, in this thread."""
        assert self._direct_executor is not None
        args = (self._req_locked(), *call.args) if call.stamped else call.args
        done = self._direct_executor.submit(getattr(self.channel, call.method), *args)
        exc = done.exception()
        self._finish(call, None if exc is not None else done.result(), exc)

    def _finish(self, call: _Call, result: Any, exc: BaseException | None) -> None:
        if exc is None and call.on_success is not None:
            try:
                call.on_success(result)
            except BaseException as hook_error:
                exc = hook_error
        if exc is not None:
            if call.on_failure is not None:
                call.on_failure(exc)
            call.future.set_exception(exc)
        else:
            call.future.set_result(result)

    def _put(self, item: Any) -> None:
        """On the loop: stamp the call and queue it, or send a batch at once when nothing is
        queued before it."""
        if self._closed:  # closed after another thread handed this to the loop
            self._refuse_closed(item)
            return
        if self._task is None:
            self._wakeup = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"logger-{self.address}"
            )
        if isinstance(item, _Bypass):
            asyncio.get_running_loop().create_task(
                self._run_bypass(item.call), name=f"logger-{self.address}-confirm"
            )
            return
        if isinstance(item, _Batch):
            with self._lock:
                item.args = (self._req_locked(), *item.args)
            if self._streaming and not self._queue and not self._busy:
                self._send_on_stream(item)
                return
        elif isinstance(item, _Call) and item.stamped:
            with self._lock:
                item.args = (self._req_locked(), *item.args)
        self._queue.append(item)
        assert self._wakeup is not None
        self._wakeup.set()

    async def _run(self) -> None:
        """The logger's task: one queued call after another, in order, until the logger is
        closed. It checks ``_closed`` itself: a cancellation alone may be lost (Python
        3.11's ``wait_for`` drops one that lands in the turn its future completes)."""
        assert self._wakeup is not None
        while not self._closed:
            while not self._queue:
                self._wakeup.clear()
                if self._closed:
                    return
                await self._wakeup.wait()
            item = self._queue.popleft()
            if item is _STOP:
                return
            self._busy = True
            try:
                if isinstance(item, _Batch):
                    await self._send_queued(item)
                else:
                    await self._run_call(item)
            except asyncio.CancelledError:
                raise
            except BaseException:  # _run_call completes the Future; never end the task
                log.exception("logger task error", journalnode=self.address)
            finally:
                self._busy = False

    async def _run_call(self, call: _Call) -> None:
        if call.future.cancelled():
            return
        result: Any = None
        exc: BaseException | None = None
        try:
            await self._wait_stream_drained()
            result = await self._invoke(call.method, call.args)
        except asyncio.CancelledError:
            exc = CancelledError()
            self._finish(call, None, exc)
            raise
        except BaseException as error:
            exc = error
        self._finish(call, result, exc)

    async def _run_bypass(self, call: _Call) -> None:
        """A call beside the queue: over a blocking channel in the loop's default pool, not
        the logger's own thread (which may be busy with the calls queued before it)."""
        result: Any = None
        exc: BaseException | None = None
        try:
            fn = getattr(self.channel, call.method)
            if self._aio:
                result = await fn(*call.args)
            else:
                result = await asyncio.get_running_loop().run_in_executor(
                    None, lambda: fn(*call.args)
                )
        except BaseException as error:
            exc = CancelledError() if isinstance(error, asyncio.CancelledError) else error
        self._finish(call, result, exc)

    async def _invoke(self, method: str, args: tuple[Any, ...]) -> Any:
        fn = getattr(self.channel, method)
        if self._aio:
            return await fn(*args)
        if self._blocking_executor is None:
            self._blocking_executor = ThreadPoolExecutor(
                max_workers=1, thread_name_prefix=f"logger-{self.address}"
            )
        return await asyncio.get_running_loop().run_in_executor(
            self._blocking_executor, lambda: fn(*args)
        )

    async def _wait_stream_drained(self) -> None:
        """Until every batch sent earlier on the journal stream has been answered, so the
        JournalNode sees this logger's calls in the order they were made. Each batch is
        answered or failed by its own deadline; this bound is a safety net."""
        if not self._stream_unanswered:
            return
        limit = self._timeout("write_txns_timeout", 20) + 5.0
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while self._stream_unanswered:
            if self._closed:
                raise JournalUnavailableError(f"logger {self.address} closed")
            left = deadline - loop.time()
            if left <= 0:
                raise JournalUnavailableError(
                    f"{self.address}: {self._stream_unanswered} journal batches sent before "
                    f"this call are still unanswered after {limit:.0f}s"
                )
            waiter = loop.create_future()
            self._drain_waiters.append(waiter)
            # asyncio.timeout, not wait_for: in 3.11 wait_for returns a future that completed
            # in the turn the task was cancelled, and the cancellation is lost.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(left):
                    await waiter

    def _drained(self) -> None:
        """The last batch on the stream was answered: wake the queued call waiting for it
        (the answer may complete on a blocking channel's reader thread)."""
        waiters, self._drain_waiters = self._drain_waiters, []
        loop = self._loop
        for waiter in waiters:
            if loop is None or on_loop_thread(loop):
                if not waiter.done():
                    waiter.set_result(None)
            elif not loop.is_closed():
                loop.call_soon_threadsafe(_set_if_pending, waiter)

    def set_epoch(self, epoch: int) -> None:
        with self._lock:
            self.epoch = epoch
            self._ipc_serial = 0

    def set_committed_txid(self, txid: int) -> None:
        with self._lock:
            if txid < self.committed_txid:
                raise QJMError(f"committed txid would go backward: {self.committed_txid} -> {txid}")
            self.committed_txid = txid

    async def aclose(self) -> None:
        """Stop the task (calls still queued fail) and close the channel; on the loop."""
        self._closed = True
        task, self._task = self._task, None
        if task is not None:
            # A task that loses this cancellation stops at its next check of _closed.
            task.cancel()
            with contextlib.suppress(BaseException):  # cancelled on purpose
                await task
        while self._queue:
            self._refuse_closed(self._queue.popleft())
        if hasattr(self.channel, "aclose"):
            await self.channel.aclose()
        else:
            await asyncio.get_running_loop().run_in_executor(None, self.channel.close)
        if self._blocking_executor is not None:
            self._blocking_executor.shutdown(wait=False, cancel_futures=True)

    def _refuse_closed(self, item: Any) -> None:
        """Fail a queued call or batch of a closed logger."""
        if isinstance(item, _Bypass):
            item = item.call
        if isinstance(item, _Batch | _Call) and not item.future.done():
            error = JournalUnavailableError(f"logger {self.address} closed")
            if isinstance(item, _Batch):
                self._finish_batch(item, error)
            else:
                item.future.set_exception(error)

    def close(self) -> None:
        """``aclose`` from a thread (waits for it); on the loop's own thread it is scheduled."""
        loop = self._loop
        if self.direct or loop is None or loop.is_closed():
            self._closed = True
            if hasattr(self.channel, "close_blocking"):
                self.channel.close_blocking()  # never opened an aio channel without a loop
            elif not hasattr(self.channel, "aclose"):
                self.channel.close()
            return
        if on_loop_thread(loop):
            loop.create_task(self.aclose())
            return
        asyncio.run_coroutine_threadsafe(self.aclose(), loop).result(10)

    def _watch_epoch(self, name: str, future: Future[T]) -> Future[T]:
        """Report an EpochError of a call stamped with our epoch to ``on_epoch_error``."""

        def done(f: Future[T]) -> None:
            exc = None if f.cancelled() else f.exception()
            if isinstance(exc, EpochError) and self.on_epoch_error is not None:
                self.on_epoch_error(self, name, exc)

        future.add_done_callback(done)
        return future

    # ------------------------------------------------------------------ calls

    def is_formatted(self) -> Future[tuple[bool, NamespaceInfo | None]]:
        return self._submit(
            _Call("is_formatted", (self.journal_id, self._timeout("format_timeout", 60)), False)
        )

    def format(self, ns: NamespaceInfo, force: bool) -> Future[None]:
        args = (self.journal_id, ns, force, self._timeout("format_timeout", 60))
        return self._submit(_Call("format", args, False))

    def get_journal_state(self) -> Future[tuple[int, str]]:
        def keep_url(answer: tuple[int, str]) -> tuple[int, str]:
            self.from_url = answer[1]
            return answer

        args = (
            self.journal_id,
            self.namespace_info.cluster_id,
            self._timeout("get_journal_state_timeout", 120),
        )
        return self._submit(_Call("get_journal_state", args, False, on_success=keep_url))

    def new_epoch(self, epoch: int) -> Future[int | None]:
        timeout = self._timeout("new_epoch_timeout", 120)
        args = (self.journal_id, self.namespace_info, epoch, timeout)
        return self._submit(_Call("new_epoch", args, False))

    def start_log_segment(self, txid: int) -> Future[None]:
        def started(_: None) -> None:
            # A new segment is a fresh start for a logger that fell out of sync.
            with self._lock:
                self._segments_starting -= 1
                self.out_of_sync = False
                self.out_of_sync_cause = ""
                self._start_failure = ""

        def failed(exc: BaseException) -> None:
            # As in Hadoop, the batches of this segment are still sent (the start may have
            # reached the JournalNode, only its answer lost); the JournalNode refuses them if
            # it holds no open segment, and that refusal names this failure (a full disk,
            # say) as its cause.
            with self._lock:
                self._segments_starting -= 1
                self._start_failure = f"{type(exc).__name__}: {exc}"

        with self._lock:
            self._segments_starting += 1
        call = _Call(
            "start_log_segment",
            (txid, self._timeout("start_segment_timeout", 20)),
            True,
            on_success=started,
            on_failure=failed,
        )
        return self._submit(call, "startLogSegment")

    def send_edits(
        self, segment_txid: int, first_txid: int, num_txns: int, framed: bytes
    ) -> Future[None]:
        """Queue a batch for this JournalNode; fails at once when out of sync (and no new
        segment is starting) or over the bound.

        Over a streaming channel the batch goes on the JournalStream as soon as it reaches
        the loop when nothing is queued (the 1-edit sync path: no task switch), else behind
        the calls queued before it. Either way this logger's calls reach the JournalNode in
        order, and the Future completes after the bookkeeping (out of sync on failure, acked
        txid on success).
        """
        size = len(framed)
        with self._lock:
            # Out of sync, a logger refuses edits until a new segment starts; edits sent once
            # that start is queued belong to the new segment and wait behind it instead.
            rejoining = not self.direct and self._segments_starting > 0
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
            self.last_call_time = clock.monotonic()
            batch = _Batch(
                args=(
                    segment_txid,
                    first_txid,
                    num_txns,
                    framed,
                    self._timeout("write_txns_timeout", 20),
                ),
                size=size,
                first_txid=first_txid,
                last_txid=first_txid + num_txns - 1,
                submitted=time.perf_counter(),
            )
            if self.direct:
                batch.args = (self._req_locked(), *batch.args)
                assert self._direct_executor is not None
                unary = self._direct_executor.submit(self.channel.journal, *batch.args)
                self._complete_after(unary, batch)
        self._metrics.queued_bytes.set(self.queued_bytes)
        if not self.direct:
            if self._closed:
                self._finish_batch(batch, JournalUnavailableError(f"logger {self.address} closed"))
            else:
                self._put_from_any_thread(batch)
        return self._watch_epoch("sendEdits", batch.future)

    def _send_on_stream(self, batch: _Batch) -> None:
        """On the loop: send on the journal stream now; batches go out in serial order."""
        self._stream_unanswered += 1
        started = time.perf_counter()
        try:
            sent = self.channel.send_journal(*batch.args)  # type: ignore[union-attr]
        except Exception as exc:  # send_journal reports failures in its Future; be safe
            sent = _failed(exc)
        self._complete_after(sent, batch, started, on_stream=True)

    async def _send_queued(self, batch: _Batch) -> None:
        """Task: send a batch that was queued behind other calls, unless one of them left
        this logger out of sync (a failed batch, a failed segment start)."""
        if self.out_of_sync:
            error = LoggerOutOfSyncError(
                f"{self.address} is out of sync until the next segment; "
                f"batch {batch.first_txid} not sent"
            )
            self._finish_batch(batch, error)
        elif self._streaming:
            self._send_on_stream(batch)
        else:
            started = time.perf_counter()
            try:
                await self._wait_stream_drained()
                await self._invoke("journal", batch.args)
            except BaseException as exc:
                self._finish_batch(batch, exc, started)
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return
            self._finish_batch(batch, None, started)

    def _complete_after(
        self,
        sent: Any,
        batch: _Batch,
        started: float | None = None,
        *,
        on_stream: bool = False,
    ) -> None:
        """When ``sent`` (a concurrent or an asyncio Future) completes: update queue, lag and
        out-of-sync state, then complete ``batch.future`` the same way."""

        def done(future: Any) -> None:
            exc = CancelledError() if future.cancelled() else future.exception()
            self._finish_batch(batch, exc, started, on_stream=on_stream)

        sent.add_done_callback(done)

    def _finish_batch(
        self,
        batch: _Batch,
        exc: BaseException | None,
        started: float | None = None,
        *,
        on_stream: bool = False,
    ) -> None:
        now = time.perf_counter()
        drained = False
        with self._lock:
            self.queued_bytes -= batch.size
            queued = self.queued_bytes
            if on_stream:
                self._stream_unanswered -= 1
                drained = not self._stream_unanswered
            if exc is not None:
                self._mark_out_of_sync_locked(exc, batch.first_txid)
        if drained:
            self._drained()
        self._metrics.queued_bytes.set(queued)
        if exc is not None:
            batch.future.set_exception(exc)
            return
        self._metrics.rpc_seconds.observe(now - (started or batch.submitted))
        self._metrics.write_seconds.observe(now - batch.submitted)
        self.highest_acked_txid = batch.last_txid
        self.last_ack_time = clock.monotonic()
        self._contacted()
        batch.future.set_result(None)

    def _mark_out_of_sync_locked(self, cause: BaseException, first_txid: int | None = None) -> None:
        """Refuse edits until the next segment; say once which JournalNode and why. (The key
        is ``journalnode``: structlog's ``logger`` key is the logger's own name.)"""
        if not self.out_of_sync:
            why = f"{type(cause).__name__}: {cause}"
            if self._start_failure:
                why += f" (its startLogSegment had failed: {self._start_failure})"
            log.warning(
                "JournalNode out of sync until the next segment",
                journalnode=self.address,
                journal=self.journal_id,
                epoch=self.epoch,
                batch_first_txid=first_txid,
                cause=why,
            )
            self.out_of_sync_cause = why
        self.out_of_sync = True

    def seconds_since_contact(self) -> float:
        """Seconds since this JournalNode last answered (since this logger started, when it
        never has)."""
        last = self.last_contact if self.last_contact is not None else self._started
        return max(0.0, clock.monotonic() - last)

    @property
    def out_of_contact(self) -> bool:
        """No answer for ``contact_threshold`` of the heartbeat interval."""
        interval = self._timeout("heartbeat_interval", 1.0)
        return self.seconds_since_contact() > contact_threshold(interval)

    def _out_of_sync_metric(self) -> float:
        """``qjm_logger_out_of_sync``: out of sync or out of contact; 0 once closed (this
        writer no longer sends it anything)."""
        if self._closed:
            return 0.0
        return 1.0 if self.out_of_sync or self.out_of_contact else 0.0

    def _since_contact_metric(self) -> float:
        return float("nan") if self._closed else self.seconds_since_contact()

    def _contacted(self) -> None:
        self.last_contact = clock.monotonic()
        self.last_contact_wall = clock.time()

    def heartbeat(self) -> Future[None]:
        call = _Call(
            "heartbeat",
            (self._timeout("write_txns_timeout", 20),),
            True,
            on_success=lambda _: self._contacted(),
        )
        return self._submit(call, "heartbeat")

    def confirm_epoch(self) -> Future[None]:
        """The read-index question (``qjm.read_index``): has this JournalNode promised an
        epoch above the writer's? Succeeds when its promise is at most ours (no newer writer
        can have a quorum without it); an EpochError (and ``on_epoch_error``, as
        "confirmEpoch") when above. A ``GetJournalState``, which carries no IPC serial, so it
        runs at once beside this logger's queue instead of behind the edits queued there."""
        epoch = self.epoch

        def check(answer: tuple[int, str]) -> None:
            promised = answer[0]
            if promised > epoch:
                raise EpochError(
                    f"{self.address} promised epoch {promised}, above this writer's epoch {epoch}"
                )
            self._contacted()

        args = (
            self.journal_id,
            self.namespace_info.cluster_id,
            self._timeout("write_txns_timeout", 20),
        )
        call = _Call("get_journal_state", args, False, on_success=check)
        return self._submit(call, "confirmEpoch", bypass=True)

    def finalize_log_segment(self, start: int, end: int, md5: bytes = b"") -> Future[None]:
        args = (start, end, self._timeout("finalize_segment_timeout", 120), md5)
        return self._submit(_Call("finalize_log_segment", args, True), "finalizeLogSegment")

    def purge_logs(self, min_txid_to_keep: int) -> Future[None]:
        args = (min_txid_to_keep, self._timeout("finalize_segment_timeout", 120))
        return self._submit(_Call("purge_logs", args, True), "purgeLogs")

    def get_edit_log_manifest(
        self, since_txid: int, in_progress_ok: bool
    ) -> Future[tuple[list[RemoteEditLog], int]]:
        args = (
            self.journal_id,
            self.namespace_info.cluster_id,
            since_txid,
            in_progress_ok,
            self._timeout("select_input_streams_timeout", 20),
        )
        return self._submit(_Call("get_edit_log_manifest", args, False))

    def get_journaled_edits(self, since_txid: int, max_txns: int) -> Future[CachedEdits]:
        args = (
            self.journal_id,
            self.namespace_info.cluster_id,
            since_txid,
            max_txns,
            self._timeout("select_input_streams_timeout", 20),
        )
        return self._submit(_Call("get_journaled_edits", args, False))

    def prepare_recovery(self, segment_txid: int) -> Future[PrepareRecoveryResult]:
        args = (segment_txid, self._timeout("prepare_recovery_timeout", 120))
        return self._submit(_Call("prepare_recovery", args, True), "prepareRecovery")

    def accept_recovery(self, state: SegmentState, from_url: str) -> Future[None]:
        args = (state, from_url, self._timeout("accept_recovery_timeout", 120))
        return self._submit(_Call("accept_recovery", args, True), "acceptRecovery")

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
        self._metrics.lag_seconds.set(0.0 if lag == 0 else clock.monotonic() - self.last_ack_time)


@dataclass
class _Batch:
    """One send_edits call on its way: the channel arguments (the RequestInfo first, once
    stamped) and what completes it."""

    args: tuple[Any, ...]
    size: int
    first_txid: int
    last_txid: int
    submitted: float
    future: Future[None] = field(default_factory=Future)


def _failed(exc: BaseException) -> Future[Any]:
    future: Future[Any] = Future()
    future.set_exception(exc)
    return future


def _set_if_pending(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


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

    async def await_write_quorum(
        self, call: QuorumCall[AsyncLogger, T], timeout: float, name: str
    ) -> dict[AsyncLogger, T]:
        return await await_write_quorum(call, len(self.loggers), timeout, name)

    @property
    def direct(self) -> bool:
        """Every logger runs its calls at once in the caller's thread (the simulator)."""
        return all(lg.direct for lg in self.loggers)

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        for lg in self.loggers:
            lg.bind(loop)

    async def aclose(self) -> None:
        for lg in self.loggers:
            await lg.aclose()

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

    def confirm_epoch(self) -> QuorumCall[AsyncLogger, None]:
        return self._each(lambda lg: lg.confirm_epoch())

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
