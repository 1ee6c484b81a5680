"""How the QJM talks to one JournalNode: the ``JournalChannel`` interface and its gRPC form.

Every call is synchronous and raises the JournalNode's own exception classes
(``journalnode.errors``), so ``AsyncLogger`` (which adds ordering, queueing and futures) works
the same over ``GrpcJournalChannel`` and over the simulator's in-process channel. The gRPC
channel can also pipeline Journal batches on one ``JournalStream`` (``send_journal``): the
1-edit sync path then costs no per-call RPC set-up and no hop through the logger's worker.

``AioJournalChannel`` is the same set of calls as coroutines over grpc.aio, for the
``AsyncLogger`` tasks of the asyncio QJM (issue 12); ``GrpcJournalChannel`` stays for blocking
tools (``pipeline.verify``, the benchmarks) and for segment downloads. Both are one
implementation of the calls (``_JournalCalls``: each request built once) over two ways of
making a unary call and two streams (threads, or tasks of the loop).
"""

from __future__ import annotations

import asyncio
import collections
import queue
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import Future
from typing import Any, NamedTuple, Protocol, runtime_checkable

import grpc
import grpc.aio

from conf import TLSSettings
from conf.rpc import make_aio_channel, make_channel
from journalnode.edits_cache import CachedEdits
from journalnode.errors import JournalUnavailableError, from_rpc_error
from proto import journal_pb2, journal_pb2_grpc
from proto.values import (
    NamespaceInfo,
    PrepareRecoveryResult,
    RemoteEditLog,
    RequestInfo,
    SegmentState,
)
from qjm.wire import WireJournalStream, WireStateCalls, complete_from_answer


class JournalChannel(Protocol):
    """The QJournalService calls, one JournalNode, synchronous."""

    address: str

    def is_formatted(
        self, journal_id: str, timeout: float
    ) -> tuple[bool, NamespaceInfo | None]: ...

    def format(self, journal_id: str, ns: NamespaceInfo, force: bool, timeout: float) -> None: ...

    def get_journal_state(
        self, journal_id: str, cluster_id: str, timeout: float
    ) -> tuple[int, str]: ...

    def new_epoch(
        self, journal_id: str, ns: NamespaceInfo, epoch: int, timeout: float
    ) -> int | None: ...

    def start_log_segment(self, req: RequestInfo, txid: int, timeout: float) -> None: ...

    def journal(
        self,
        req: RequestInfo,
        segment_txid: int,
        first_txid: int,
        num_txns: int,
        framed: bytes,
        timeout: float,
    ) -> None: ...

    def heartbeat(self, req: RequestInfo, timeout: float) -> None: ...

    def finalize_log_segment(
        self, req: RequestInfo, start: int, end: int, timeout: float, md5: bytes = b""
    ) -> None: ...

    def purge_logs(self, req: RequestInfo, min_txid_to_keep: int, timeout: float) -> None: ...

    def get_edit_log_manifest(
        self,
        journal_id: str,
        cluster_id: str,
        since_txid: int,
        in_progress_ok: bool,
        timeout: float,
    ) -> tuple[list[RemoteEditLog], int]: ...

    def get_journaled_edits(
        self, journal_id: str, cluster_id: str, since_txid: int, max_txns: int, timeout: float
    ) -> CachedEdits: ...

    def prepare_recovery(
        self, req: RequestInfo, segment_txid: int, timeout: float
    ) -> PrepareRecoveryResult: ...

    def accept_recovery(
        self, req: RequestInfo, state: SegmentState, from_url: str, timeout: float
    ) -> None: ...

    def get_segment(
        self, journal_id: str, cluster_id: str, start: int, end: int | None, timeout: float
    ) -> Iterator[bytes]: ...

    def close(self) -> None: ...


JOURNAL_RPCS: frozenset[str] = frozenset(
    name
    for name, member in vars(JournalChannel).items()
    if callable(member) and not name.startswith("_") and name != "close"
)
"""The calls of ``JournalChannel`` that reach a JournalNode (every method but ``close``):
what wrappers that forward, fault or simulate them (nnsim, the cluster tests) cover."""


@runtime_checkable
class StreamingJournalChannel(JournalChannel, Protocol):
    """A JournalChannel that can also pipeline Journal batches on a long-lived stream.

    ``AsyncLogger`` sends edits with ``send_journal`` when its channel has it (gRPC), and
    with ``journal`` through its worker otherwise (the simulator's in-process channel).
    """

    def send_journal(
        self,
        req: RequestInfo,
        segment_txid: int,
        first_txid: int,
        num_txns: int,
        framed: bytes,
        timeout: float,
    ) -> Future[None]: ...


class JournalStream:
    """One JournalStream call: batches go out in the order sent, answers come back in order.

    ``send`` queues a request and returns a Future that the answer completes: None for a
    written batch, or the exception the unary Journal call would have raised
    (``journalnode.errors.from_status``). A batch unanswered ``timeout`` seconds after it was
    sent, a broken connection or ``close`` fail every unanswered batch with
    ``JournalUnavailableError`` (whether the JournalNode wrote them is then unknown, as for a
    unary call that timed out) and end the stream for good: the channel opens a new one for
    the next batch. Threads: gRPC's own request sender, a reader of the answers, and a
    watchdog for the deadlines; all end with the stream.
    """

    WATCHDOG_INTERVAL = 0.5

    def __init__(self, channel: grpc.Channel, address: str) -> None:
        self.address = address
        self._requests: queue.SimpleQueue[journal_pb2.JournalRequest | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._unanswered: collections.deque[tuple[Future[None], float]] = collections.deque()
        self._error: Exception | None = None
        self._ended = threading.Event()
        stub = journal_pb2_grpc.QJournalServiceStub(channel)
        self._call = stub.JournalStream(iter(self._requests.get, None))
        self._reader = threading.Thread(
            target=self._read, name=f"journal-stream-{address}", daemon=True
        )
        self._watchdog = threading.Thread(
            target=self._watch, name=f"journal-stream-deadlines-{address}", daemon=True
        )
        self._reader.start()
        self._watchdog.start()

    @property
    def broken(self) -> bool:
        """The stream ended (an error, a deadline, ``close``); it accepts nothing more."""
        return self._error is not None

    def send(self, request: journal_pb2.JournalRequest, timeout: float) -> Future[None]:
        future: Future[None] = Future()
        with self._lock:
            if self._error is not None:
                future.set_exception(JournalUnavailableError(f"not sent: {self._error}"))
                return future
            self._unanswered.append((future, time.monotonic() + timeout))
            self._requests.put(request)
        return future

    def close(self) -> None:
        """End the stream (half-close, then cancel); unanswered batches fail."""
        self._fail(JournalUnavailableError(f"journal stream to {self.address} closed"))

    def _read(self) -> None:
        try:
            for response in self._call:
                with self._lock:
                    if not self._unanswered:
                        raise _StreamProtocolError("an answer to a batch that was never sent")
                    future, _ = self._unanswered.popleft()
                complete_from_answer(future, response)
            self._fail(JournalUnavailableError(f"journal stream to {self.address} ended"))
        except (grpc.RpcError, _StreamProtocolError) as exc:
            self._fail(_stream_error(self.address, exc))

    def _watch(self) -> None:
        while not self._ended.wait(self._until_next_deadline()):
            with self._lock:
                expired = bool(self._unanswered) and self._unanswered[0][1] <= time.monotonic()
            if expired:
                self._fail(
                    JournalUnavailableError(
                        f"DEADLINE_EXCEEDED: {self.address} did not answer a journal batch in time"
                    )
                )

    def _until_next_deadline(self) -> float:
        with self._lock:
            if not self._unanswered:
                return self.WATCHDOG_INTERVAL
            left = self._unanswered[0][1] - time.monotonic()
        return min(self.WATCHDOG_INTERVAL, max(0.001, left))

    def _fail(self, error: Exception) -> None:
        """End the stream once: every unanswered batch fails with ``error`` (its class, a
        fresh instance each)."""
        with self._lock:
            if self._error is None:
                self._error = error
            unanswered = list(self._unanswered)
            self._unanswered.clear()
        self._requests.put(None)  # ends the request iterator: gRPC half-closes the call
        self._ended.set()
        self._call.cancel()
        for future, _ in unanswered:
            future.set_exception(type(error)(str(error)))


def _journal_request(
    req: RequestInfo, segment_txid: int, first_txid: int, num_txns: int, framed: bytes
) -> journal_pb2.JournalRequest:
    """One batch as Journal and JournalStream both carry it."""
    return journal_pb2.JournalRequest(
        req_info=req.to_pb(),
        segment_txid=segment_txid,
        first_txid=first_txid,
        num_txns=num_txns,
        records=framed,
    )


class _Rpc(NamedTuple):
    """One unary call as both channels make it: the method's name, the request, and how to
    turn the answer into the JournalChannel's return value."""

    method: str
    request: Any
    parse: Callable[[Any], Any] = lambda _: None


def _is_formatted_answer(r: Any) -> tuple[bool, NamespaceInfo | None]:
    return r.is_formatted, NamespaceInfo.from_pb(r.namespace_info) if r.is_formatted else None


class _JournalCalls:
    """Every call of ``JournalChannel``, written once for both gRPC channels.

    Each method builds its request and hands it to ``_do``: ``GrpcJournalChannel``'s makes
    the call and returns the answer, ``AioJournalChannel``'s is a coroutine (so there a call
    is awaited: ``await channel.heartbeat(req, timeout)``). ``send_journal`` puts the batch on
    the channel's stream, opened by ``_open_stream`` on first use and again after it broke;
    a closed channel answers with ``_refused``. The bytes on the wire are the same either
    way.
    """

    address: str
    _closed: bool
    _stream: JournalStream | AioJournalStream | WireJournalStream | None
    _stream_lock: threading.Lock
    edits_port: int = 0
    """The JournalNode's edits wire port, from its last GetJournalState answer (0: none)."""

    def _do(self, rpc: _Rpc, timeout: float) -> Any:
        raise NotImplementedError

    def _open_stream(self) -> JournalStream | AioJournalStream | WireJournalStream:
        raise NotImplementedError

    def _refused(self, error: Exception) -> Any:
        """A Future of the channel's kind, failed with ``error``."""
        raise NotImplementedError

    def is_formatted(self, journal_id: str, timeout: float) -> Any:
        request = journal_pb2.IsFormattedRequest(journal_id=journal_id)
        return self._do(_Rpc("IsFormatted", request, _is_formatted_answer), timeout)

    def format(self, journal_id: str, ns: NamespaceInfo, force: bool, timeout: float) -> Any:
        request = journal_pb2.FormatRequest(
            journal_id=journal_id, namespace_info=ns.to_pb(), force=force
        )
        return self._do(_Rpc("Format", request), timeout)

    def get_journal_state(self, journal_id: str, cluster_id: str, timeout: float) -> Any:
        request = journal_pb2.GetJournalStateRequest(journal_id=journal_id, cluster_id=cluster_id)
        return self._do(_Rpc("GetJournalState", request, self._journal_state_answer), timeout)

    def _journal_state_answer(self, r: Any) -> tuple[int, str]:
        self.edits_port = r.edits_port
        return r.last_promised_epoch, r.from_url

    def new_epoch(self, journal_id: str, ns: NamespaceInfo, epoch: int, timeout: float) -> Any:
        request = journal_pb2.NewEpochRequest(
            journal_id=journal_id, namespace_info=ns.to_pb(), epoch=epoch
        )
        return self._do(
            _Rpc(
                "NewEpoch",
                request,
                lambda r: r.last_segment_txid if r.HasField("last_segment_txid") else None,
            ),
            timeout,
        )

    def start_log_segment(self, req: RequestInfo, txid: int, timeout: float) -> Any:
        request = journal_pb2.StartLogSegmentRequest(
            req_info=req.to_pb(), txid=txid, layout_version=1
        )
        return self._do(_Rpc("StartLogSegment", request), timeout)

    def journal(
        self,
        req: RequestInfo,
        segment_txid: int,
        first_txid: int,
        num_txns: int,
        framed: bytes,
        timeout: float,
    ) -> Any:
        request = _journal_request(req, segment_txid, first_txid, num_txns, framed)
        return self._do(_Rpc("Journal", request), timeout)

    def send_journal(
        self,
        req: RequestInfo,
        segment_txid: int,
        first_txid: int,
        num_txns: int,
        framed: bytes,
        timeout: float,
    ) -> Any:
        """The batch of ``journal`` on this channel's stream; a Future of its answer (on an
        ``AioJournalChannel``, call on the event loop's thread). Batches reach the
        JournalNode in the order of the calls (callers serialize them)."""
        request = _journal_request(req, segment_txid, first_txid, num_txns, framed)
        with self._stream_lock:
            if self._closed:
                return self._refused(
                    JournalUnavailableError(f"channel to {self.address} closed")
                )
            if self._stream is None or self._stream.broken:
                self._stream = self._open_stream()
            return self._stream.send(request, timeout)

    def heartbeat(self, req: RequestInfo, timeout: float) -> Any:
        request = journal_pb2.HeartbeatRequest(req_info=req.to_pb())
        return self._do(_Rpc("Heartbeat", request), timeout)

    def finalize_log_segment(
        self, req: RequestInfo, start: int, end: int, timeout: float, md5: bytes = b""
    ) -> Any:
        request = journal_pb2.FinalizeLogSegmentRequest(
            req_info=req.to_pb(), start_txid=start, end_txid=end, md5=md5
        )
        return self._do(_Rpc("FinalizeLogSegment", request), timeout)

    def purge_logs(self, req: RequestInfo, min_txid_to_keep: int, timeout: float) -> Any:
        request = journal_pb2.PurgeLogsRequest(
            req_info=req.to_pb(), min_txid_to_keep=min_txid_to_keep
        )
        return self._do(_Rpc("PurgeLogs", request), timeout)

    def get_edit_log_manifest(
        self,
        journal_id: str,
        cluster_id: str,
        since_txid: int,
        in_progress_ok: bool,
        timeout: float,
    ) -> Any:
        request = journal_pb2.GetEditLogManifestRequest(
            journal_id=journal_id,
            cluster_id=cluster_id,
            since_txid=since_txid,
            in_progress_ok=in_progress_ok,
        )
        return self._do(
            _Rpc(
                "GetEditLogManifest",
                request,
                lambda r: ([RemoteEditLog.from_pb(entry) for entry in r.logs], r.committed_txid),
            ),
            timeout,
        )

    def get_journaled_edits(
        self, journal_id: str, cluster_id: str, since_txid: int, max_txns: int, timeout: float
    ) -> Any:
        request = journal_pb2.GetJournaledEditsRequest(
            journal_id=journal_id, cluster_id=cluster_id, since_txid=since_txid, max_txns=max_txns
        )
        return self._do(
            _Rpc(
                "GetJournaledEdits",
                request,
                lambda r: CachedEdits(r.writer_epoch, r.txn_count, r.records),
            ),
            timeout,
        )

    def prepare_recovery(self, req: RequestInfo, segment_txid: int, timeout: float) -> Any:
        request = journal_pb2.PrepareRecoveryRequest(
            req_info=req.to_pb(), segment_txid=segment_txid
        )
        return self._do(
            _Rpc("PrepareRecovery", request, PrepareRecoveryResult.from_pb), timeout
        )

    def accept_recovery(
        self, req: RequestInfo, state: SegmentState, from_url: str, timeout: float
    ) -> Any:
        request = journal_pb2.AcceptRecoveryRequest(
            req_info=req.to_pb(), state_to_accept=state.to_pb(), from_url=from_url
        )
        return self._do(_Rpc("AcceptRecovery", request), timeout)


class _StreamProtocolError(Exception):
    """The JournalNode answered a JournalStream out of step with the requests."""


def _stream_error(address: str, exc: Exception) -> Exception:
    """What every unanswered batch fails with when a stream breaks on ``exc``."""
    if isinstance(exc, grpc.RpcError):
        return from_rpc_error(exc)
    return JournalUnavailableError(f"journal stream to {address}: {exc}")


class GrpcJournalChannel(_JournalCalls):
    """A JournalChannel over gRPC, made through conf.rpc (mutual TLS when configured): the
    calls of ``_JournalCalls``, each made at once and answered.

    Journal batches go either one unary call each (``journal``) or pipelined on one
    ``JournalStream`` (``send_journal``), opened on first use and again after it broke.
    """

    def __init__(self, address: str, tls: TLSSettings | None = None) -> None:
        self.address = address
        self._channel = make_channel(address, tls)
        self._stub = journal_pb2_grpc.QJournalServiceStub(self._channel)
        self._stream_lock = threading.Lock()
        self._stream: JournalStream | None = None
        self._closed = False

    def _do(self, rpc: _Rpc, timeout: float) -> Any:
        try:
            answer = getattr(self._stub, rpc.method)(rpc.request, timeout=timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        return rpc.parse(answer)

    def _open_stream(self) -> JournalStream:
        return JournalStream(self._channel, self.address)

    def _refused(self, error: Exception) -> Future[None]:
        failed: Future[None] = Future()
        failed.set_exception(error)
        return failed

    def get_segment(
        self, journal_id: str, cluster_id: str, start: int, end: int | None, timeout: float
    ) -> Iterator[bytes]:
        request = journal_pb2.GetSegmentRequest(
            journal_id=journal_id,
            cluster_id=cluster_id,
            start_txid=start,
            end_txid=end or 0,
            in_progress_ok=end is not None,
        )
        try:
            for chunk in self._stub.GetSegment(request, timeout=timeout):
                yield chunk.data
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def close(self) -> None:
        with self._stream_lock:
            self._closed = True
            stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        self._channel.close()


class AioJournalStream:
    """``JournalStream`` on an event loop: one grpc.aio JournalStream call, batches out in the
    order sent, answers back in order.

    ``send`` (on the loop's thread, no await) queues a request and returns an asyncio Future
    that the answer completes, with the same outcomes as ``JournalStream.send``: None, the
    exception the unary call would have raised, or ``JournalUnavailableError`` for every
    unanswered batch once the stream broke, missed a deadline or was closed. A reader task
    takes the answers; one timer watches the oldest batch's deadline.
    """

    def __init__(self, channel: grpc.aio.Channel, address: str) -> None:
        self.address = address
        self._loop = asyncio.get_running_loop()
        self._requests: asyncio.Queue[journal_pb2.JournalRequest | None] = asyncio.Queue()
        self._unanswered: collections.deque[tuple[asyncio.Future[None], float]] = (
            collections.deque()
        )
        self._error: Exception | None = None
        self._timer: asyncio.TimerHandle | None = None
        stub = journal_pb2_grpc.QJournalServiceStub(channel)
        self._call = stub.JournalStream(self._outgoing())
        self._reader = self._loop.create_task(self._read(), name=f"journal-stream-{address}")

    @property
    def broken(self) -> bool:
        return self._error is not None

    async def _outgoing(self) -> AsyncIterator[journal_pb2.JournalRequest]:
        while (request := await self._requests.get()) is not None:
            yield request

    def send(self, request: journal_pb2.JournalRequest, timeout: float) -> asyncio.Future[None]:
        future: asyncio.Future[None] = self._loop.create_future()
        if self._error is not None:
            future.set_exception(JournalUnavailableError(f"not sent: {self._error}"))
            return future
        self._unanswered.append((future, self._loop.time() + timeout))
        self._requests.put_nowait(request)
        if self._timer is None:
            self._arm()
        return future

    def close(self) -> None:
        self._fail(JournalUnavailableError(f"journal stream to {self.address} closed"))

    def _arm(self) -> None:
        self._timer = None
        if self._unanswered and self._error is None:
            self._timer = self._loop.call_at(self._unanswered[0][1], self._check_deadline)

    def _check_deadline(self) -> None:
        self._timer = None
        if self._unanswered and self._unanswered[0][1] <= self._loop.time():
            self._fail(
                JournalUnavailableError(
                    f"DEADLINE_EXCEEDED: {self.address} did not answer a journal batch in time"
                )
            )
        else:
            self._arm()

    async def _read(self) -> None:
        try:
            async for response in self._call:
                if not self._unanswered:
                    raise _StreamProtocolError("an answer to a batch that was never sent")
                future, _ = self._unanswered.popleft()
                if future.done():
                    continue
                complete_from_answer(future, response)
            self._fail(JournalUnavailableError(f"journal stream to {self.address} ended"))
        except (grpc.RpcError, _StreamProtocolError) as exc:
            self._fail(_stream_error(self.address, exc))
        except asyncio.CancelledError:
            self._fail(JournalUnavailableError(f"journal stream to {self.address} closed"))

    def _fail(self, error: Exception) -> None:
        """End the stream once: every unanswered batch fails with ``error`` (its class, a
        fresh instance each)."""
        if self._error is None:
            self._error = error
        unanswered = list(self._unanswered)
        self._unanswered.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._requests.put_nowait(None)  # ends the request iterator: gRPC half-closes
        self._call.cancel()
        for future, _ in unanswered:
            if not future.done():
                future.set_exception(type(error)(str(error)))


class AioJournalChannel(_JournalCalls):
    """The calls of ``_JournalCalls`` as coroutines over grpc.aio (``is_aio``), for an
    ``AsyncLogger`` on an event loop; made through conf.rpc (mutual TLS when configured).

    The grpc.aio channel is opened on the event loop at the first call. ``send_journal``
    pipelines batches on one ``AioJournalStream`` (opened on first use, again after it
    broke). ``get_segment`` stays a blocking iterator, as readers iterate segments in their
    own thread: it goes over a second, blocking ``GrpcJournalChannel``, opened on first use.
    """

    is_aio = True

    def __init__(self, address: str, tls: TLSSettings | None = None) -> None:
        self.address = address
        self._tls = tls
        self._channel: grpc.aio.Channel | None = None
        self._stub_: journal_pb2_grpc.QJournalServiceStub | None = None
        # Taken on the loop's thread only, never contended: _JournalCalls.send_journal's.
        self._stream_lock = threading.Lock()
        self._stream: AioJournalStream | WireJournalStream | None = None
        self._state_wire: WireStateCalls | None = None
        self._blocking: GrpcJournalChannel | None = None
        self._blocking_lock = threading.Lock()
        self._closed = False

    @property
    def _stub(self) -> journal_pb2_grpc.QJournalServiceStub:
        if self._stub_ is None:
            self._channel = make_aio_channel(self.address, self._tls)
            self._stub_ = journal_pb2_grpc.QJournalServiceStub(self._channel)
        return self._stub_

    @property
    def tls(self) -> TLSSettings | None:
        """The TLS settings this channel connects with (an edit subscription uses them too)."""
        return self._tls

    async def _do(self, rpc: _Rpc, timeout: float) -> Any:
        try:
            answer = await getattr(self._stub, rpc.method)(rpc.request, timeout=timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        return rpc.parse(answer)

    def _open_stream(self) -> AioJournalStream | WireJournalStream:
        """The JournalNode's edits wire when it announced one (docs/protocol.md §13.8), with
        a JournalStream to fall back on; the JournalStream otherwise."""
        if self.edits_port:
            return WireJournalStream(self._host, self.edits_port, self._tls, self._grpc_stream)
        return self._grpc_stream()

    @property
    def _host(self) -> str:
        return self.address.rsplit(":", 1)[0].strip("[]")

    def _grpc_stream(self) -> AioJournalStream:
        self.edits_port = 0  # unreachable: asked again with the next GetJournalState on gRPC
        self._stub  # noqa: B018 (opens the channel)
        assert self._channel is not None
        return AioJournalStream(self._channel, self.address)

    def get_journal_state(self, journal_id: str, cluster_id: str, timeout: float) -> Any:
        """``GetJournalState`` on the edits wire once the JournalNode announced one (the
        read-index round of every linearizable read), on gRPC otherwise; a coroutine."""
        request = journal_pb2.GetJournalStateRequest(journal_id=journal_id, cluster_id=cluster_id)
        wire = self._state_wire
        if (wire is None or wire.broken) and self.edits_port and not self._closed:
            wire = self._state_wire = WireStateCalls(
                self._host, self.edits_port, self._tls, self._grpc_state_calls
            )
        if wire is None or wire.broken:
            return self._do(_Rpc("GetJournalState", request, self._journal_state_answer), timeout)
        return self._state_on_wire(wire, request, timeout)

    async def _state_on_wire(self, wire: WireStateCalls, request: Any, timeout: float) -> Any:
        return self._journal_state_answer(await wire.send(request, timeout))

    def _grpc_state_calls(self) -> _UnaryCalls:
        self.edits_port = 0
        return _UnaryCalls(self, "GetJournalState")

    def _refused(self, error: Exception) -> asyncio.Future[None]:
        failed: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        failed.set_exception(error)
        return failed

    def get_segment(
        self, journal_id: str, cluster_id: str, start: int, end: int | None, timeout: float
    ) -> Iterator[bytes]:
        with self._blocking_lock:
            if self._blocking is None:
                self._blocking = GrpcJournalChannel(self.address, self._tls)
            blocking = self._blocking
        return blocking.get_segment(journal_id, cluster_id, start, end, timeout)

    async def aclose(self) -> None:
        """Fail unanswered batches and close both channels (on the event loop)."""
        self._closed = True
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.close()
        state_wire, self._state_wire = self._state_wire, None
        if state_wire is not None:
            state_wire.close()
        self.close_blocking()
        if self._channel is not None:
            await self._channel.close()

    def close_blocking(self) -> None:
        with self._blocking_lock:
            blocking, self._blocking = self._blocking, None
        if blocking is not None:
            blocking.close()

    def close(self) -> None:
        raise TypeError("AioJournalChannel is closed with 'await channel.aclose()'")


class _UnaryCalls:
    """Unary calls of one method made like a wire's calls (``send`` returns a Future), for a
    wire that could not be opened to fall back on."""

    def __init__(self, channel: AioJournalChannel, method: str) -> None:
        self._channel = channel
        self._method = method
        self.broken = False

    def send(self, request: Any, timeout: float) -> asyncio.Future[Any]:
        return asyncio.ensure_future(
            self._channel._do(_Rpc(self._method, request, lambda answer: answer), timeout)
        )

    def close(self) -> None:
        self.broken = True


AnyJournalChannel = JournalChannel | AioJournalChannel
"""What an ``AsyncLogger`` talks through: blocking calls, or coroutines on its loop."""
