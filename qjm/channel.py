"""How the QJM talks to one JournalNode: the ``JournalChannel`` interface and its gRPC form.

Every call is synchronous and raises the JournalNode's own exception classes
(``journalnode.errors``), so ``AsyncLogger`` (which adds ordering, queueing and futures) works
the same over ``GrpcJournalChannel`` and over the simulator's in-process channel. The gRPC
channel can also pipeline Journal batches on one ``JournalStream`` (``send_journal``): the
1-edit sync path then costs no per-call RPC set-up and no hop through the logger's worker.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

import grpc

from conf import TLSSettings
from conf.rpc import make_channel
from journalnode.edits_cache import CachedEdits
from journalnode.errors import (
    JournalUnavailableError,
    from_rpc_error,
    from_status,
    status_code,
)
from proto import journal_pb2, journal_pb2_grpc
from proto.values import (
    NamespaceInfo,
    PrepareRecoveryResult,
    RemoteEditLog,
    RequestInfo,
    SegmentState,
)


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
                if response.code == 0:
                    future.set_result(None)
                else:
                    code = status_code(response.code)
                    future.set_exception(
                        from_status(code, response.details, response.error_class or None)
                    )
            self._fail(JournalUnavailableError(f"journal stream to {self.address} ended"))
        except grpc.RpcError as err:
            self._fail(from_rpc_error(err))
        except _StreamProtocolError as exc:
            self._fail(JournalUnavailableError(f"journal stream to {self.address}: {exc}"))

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


class _StreamProtocolError(Exception):
    """The JournalNode answered a JournalStream out of step with the requests."""


class GrpcJournalChannel:
    """A JournalChannel over gRPC, made through conf.rpc (mutual TLS when configured).

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

    def _call(self, method: Any, request: Any, timeout: float) -> Any:
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None

    def is_formatted(self, journal_id: str, timeout: float) -> tuple[bool, NamespaceInfo | None]:
        r = self._call(
            self._stub.IsFormatted, journal_pb2.IsFormattedRequest(journal_id=journal_id), timeout
        )
        return r.is_formatted, NamespaceInfo.from_pb(r.namespace_info) if r.is_formatted else None

    def format(self, journal_id: str, ns: NamespaceInfo, force: bool, timeout: float) -> None:
        request = journal_pb2.FormatRequest(
            journal_id=journal_id, namespace_info=ns.to_pb(), force=force
        )
        self._call(self._stub.Format, request, timeout)

    def get_journal_state(
        self, journal_id: str, cluster_id: str, timeout: float
    ) -> tuple[int, str]:
        request = journal_pb2.GetJournalStateRequest(journal_id=journal_id, cluster_id=cluster_id)
        r = self._call(self._stub.GetJournalState, request, timeout)
        return r.last_promised_epoch, r.from_url

    def new_epoch(
        self, journal_id: str, ns: NamespaceInfo, epoch: int, timeout: float
    ) -> int | None:
        request = journal_pb2.NewEpochRequest(
            journal_id=journal_id, namespace_info=ns.to_pb(), epoch=epoch
        )
        r = self._call(self._stub.NewEpoch, request, timeout)
        return r.last_segment_txid if r.HasField("last_segment_txid") else None

    def start_log_segment(self, req: RequestInfo, txid: int, timeout: float) -> None:
        request = journal_pb2.StartLogSegmentRequest(
            req_info=req.to_pb(), txid=txid, layout_version=1
        )
        self._call(self._stub.StartLogSegment, request, timeout)

    def journal(
        self,
        req: RequestInfo,
        segment_txid: int,
        first_txid: int,
        num_txns: int,
        framed: bytes,
        timeout: float,
    ) -> None:
        request = _journal_request(req, segment_txid, first_txid, num_txns, framed)
        self._call(self._stub.Journal, request, timeout)

    def send_journal(
        self,
        req: RequestInfo,
        segment_txid: int,
        first_txid: int,
        num_txns: int,
        framed: bytes,
        timeout: float,
    ) -> Future[None]:
        """The batch of ``journal`` on this channel's JournalStream; a Future of its answer.

        Batches reach the JournalNode in the order of the calls (callers serialize them).
        """
        request = _journal_request(req, segment_txid, first_txid, num_txns, framed)
        with self._stream_lock:
            if self._closed:
                failed: Future[None] = Future()
                failed.set_exception(JournalUnavailableError(f"channel to {self.address} closed"))
                return failed
            if self._stream is None or self._stream.broken:
                self._stream = JournalStream(self._channel, self.address)
            return self._stream.send(request, timeout)

    def heartbeat(self, req: RequestInfo, timeout: float) -> None:
        self._call(
            self._stub.Heartbeat, journal_pb2.HeartbeatRequest(req_info=req.to_pb()), timeout
        )

    def finalize_log_segment(
        self, req: RequestInfo, start: int, end: int, timeout: float, md5: bytes = b""
    ) -> None:
        request = journal_pb2.FinalizeLogSegmentRequest(
            req_info=req.to_pb(), start_txid=start, end_txid=end, md5=md5
        )
        self._call(self._stub.FinalizeLogSegment, request, timeout)

    def purge_logs(self, req: RequestInfo, min_txid_to_keep: int, timeout: float) -> None:
        request = journal_pb2.PurgeLogsRequest(
            req_info=req.to_pb(), min_txid_to_keep=min_txid_to_keep
        )
        self._call(self._stub.PurgeLogs, request, timeout)

    def get_edit_log_manifest(
        self,
        journal_id: str,
        cluster_id: str,
        since_txid: int,
        in_progress_ok: bool,
        timeout: float,
    ) -> tuple[list[RemoteEditLog], int]:
        request = journal_pb2.GetEditLogManifestRequest(
            journal_id=journal_id,
            cluster_id=cluster_id,
            since_txid=since_txid,
            in_progress_ok=in_progress_ok,
        )
        r = self._call(self._stub.GetEditLogManifest, request, timeout)
        return [RemoteEditLog.from_pb(entry) for entry in r.logs], r.committed_txid

    def get_journaled_edits(
        self, journal_id: str, cluster_id: str, since_txid: int, max_txns: int, timeout: float
    ) -> CachedEdits:
        request = journal_pb2.GetJournaledEditsRequest(
            journal_id=journal_id, cluster_id=cluster_id, since_txid=since_txid, max_txns=max_txns
        )
        r = self._call(self._stub.GetJournaledEdits, request, timeout)
        return CachedEdits(r.writer_epoch, r.txn_count, r.records)

    def prepare_recovery(
        self, req: RequestInfo, segment_txid: int, timeout: float
    ) -> PrepareRecoveryResult:
        request = journal_pb2.PrepareRecoveryRequest(
            req_info=req.to_pb(), segment_txid=segment_txid
        )
        return PrepareRecoveryResult.from_pb(
            self._call(self._stub.PrepareRecovery, request, timeout)
        )

    def accept_recovery(
        self, req: RequestInfo, state: SegmentState, from_url: str, timeout: float
    ) -> None:
        request = journal_pb2.AcceptRecoveryRequest(
            req_info=req.to_pb(), state_to_accept=state.to_pb(), from_url=from_url
        )
        self._call(self._stub.AcceptRecovery, request, timeout)

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
