"""The JournalNode daemon: QJournalService over gRPC for any number of journal ids, plus metrics.

docs/architecture.md §1, §4.1 and docs/protocol.md §2. ``JournalNodeServer`` owns one storage
root; each journal id gets a ``Journal`` over a ``FileJournalStorage`` in
``<root>/<journal_id>``, created on first use (a journal that was never formatted answers every
call but format with "not formatted"). The servicer only converts messages and errors; the
rules live in ``journalnode.journal``.

The gRPC server is grpc.aio, on an event loop in the thread ``journalnode-loop`` (issue 12).
Each call's ``Journal`` work (the record checks, the append, the ``fdatasync``) runs in the
``journal-io`` thread pool, so while one call waits on the disk or a journal's lock, other
streams and other journals are read, answered and written meanwhile; a ``Journal``'s own
lock serializes the calls of one journal id. One exception: a ``JournalStream`` batch is
written on the loop itself when only its own fast disk can hold it up (``JournalStream``).
``start``/``stop``/``wait`` stay blocking.

    with JournalNodeServer(root, "127.0.0.1:0", metrics_address="127.0.0.1:0") as jn:
        print(jn.address, jn.metrics_port)
"""

from __future__ import annotations

import asyncio
import os
import re
import threading
import time
from collections.abc import (
    AsyncGenerator,
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
)
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import grpc
import grpc.aio
import structlog
from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from conf import RPCSettings, TLSSettings
from conf.connections import watch as watch_connections
from conf.gcpauses import GcPauseCollector, install_pause_metrics
from conf.guard import AioRequestGuard, MethodRule, Role
from conf.mutants import announce as announce_mutants
from conf.process_metrics import install_process_metrics
from conf.rpc import bind, make_aio_server, make_channel, new_event_loop
from conf.web import WebServer
from conf.wire import server_ssl_context
from journalnode import fsutil, status
from journalnode.errors import (
    ERROR_CLASS_KEY,
    AccessDeniedError,
    CorruptSegmentError,
    InvalidRequestError,
    JournalError,
    JournalNotFormattedError,
    StorageError,
    from_rpc_error,
    to_status,
)
from journalnode.file_storage import FileJournalStorage, validate_journal_id
from journalnode.journal import (
    DEFAULT_EDIT_CACHE_BYTES,
    DEFAULT_WRITER_HOLD_SECONDS,
    Journal,
    check_format_request,
)
from journalnode.log_throttle import LogThrottle
from journalnode.subscriptions import (
    DEFAULT_MAX_SUBSCRIBERS,
    DEFAULT_SUBSCRIBER_QUEUE_BYTES,
    SUBSCRIBED_KEY,
    EditSubscription,
    EndReason,
)
from journalnode.syncer import JournalSyncer, SyncConfig
from journalnode.wire import NAMES as WIRE_METHODS
from journalnode.wire import EditsWire, SubscriptionRefused
from proto import journal_pb2, journal_pb2_grpc
from proto.values import NamespaceInfo, RequestInfo, SegmentState

log = structlog.get_logger(__name__)

T = TypeVar("T")

EMPTY = journal_pb2.Empty()

DEFAULT_MAX_JOURNALS = 100
"""dfs.journalnode.max-journals: journal ids one JournalNode stores at most; a Format of one
more is refused (each journal is a directory and, while a writer uses it, open files)."""


SERVICE = "/hanamenode.journal.QJournalService/"


def _rules() -> dict[str, MethodRule]:
    service = SERVICE
    writer = MethodRule(frozenset({Role.NAMENODE}))
    reader = MethodRule(frozenset({Role.NAMENODE, Role.ADMIN}))
    rules = {
        service + method: writer
        for method in (
            "NewEpoch",
            "StartLogSegment",
            "Journal",
            "JournalStream",
            "Heartbeat",
            "FinalizeLogSegment",
            "PurgeLogs",
            "PrepareRecovery",
            "AcceptRecovery",
        )
    }
    rules[service + "GetJournaledEdits"] = reader
    rules[service + "SubscribeEdits"] = reader
    rules[service + "Format"] = MethodRule(frozenset({Role.ADMIN}))
    # A JournalNode accepting a recovery downloads the segment from another one; a syncing
    # JournalNode reads its peers' manifests, promises and segments (docs/protocol.md §10).
    peer = MethodRule(frozenset({Role.NAMENODE, Role.JOURNALNODE, Role.ADMIN}))
    for method in ("IsFormatted", "GetEditLogManifest", "GetSegment", "GetSegmentMd5"):
        rules[service + method] = peer
    rules[service + "GetJournalState"] = MethodRule(frozenset({Role.NAMENODE, Role.JOURNALNODE}))
    return rules


RULES = _rules()
"""Which role may call each method of the JournalNode (docs/operations.md §9)."""


class JournalMetricsCollector(Collector):
    """Exports every journal's counters at scrape time, after Hadoop's JournalMetrics."""

    def __init__(self, server: JournalNodeServer) -> None:
        self._server = server

    def collect(self) -> Iterator[Any]:
        specs: list[tuple[str, str, type, Callable[[Journal], float]]] = [
            (
                "journalnode_batches_written",
                "Journal RPC batches written",
                CounterMetricFamily,
                lambda j: j.stats.batches_written,
            ),
            (
                "journalnode_txns_written",
                "Transactions written",
                CounterMetricFamily,
                lambda j: j.stats.txns_written,
            ),
            (
                "journalnode_bytes_written",
                "Record bytes written",
                CounterMetricFamily,
                lambda j: j.stats.bytes_written,
            ),
            (
                "journalnode_batches_written_while_lagging",
                "Batches whose last txid was already committed when written",
                CounterMetricFamily,
                lambda j: j.stats.batches_written_while_lagging,
            ),
            (
                "journalnode_journaled_edits_served_txns",
                "Transactions answered from the edit cache for in-progress tailing",
                CounterMetricFamily,
                lambda j: j.stats.journaled_edits_served,
            ),
            (
                "journalnode_journaled_edits_cache_misses",
                "In-progress reads of written txids the edit cache no longer holds",
                CounterMetricFamily,
                lambda j: j.stats.journaled_edits_misses,
            ),
            (
                "journalnode_edits_pushed_txns",
                "Transactions pushed to edit subscribers (SubscribeEdits)",
                CounterMetricFamily,
                lambda j: j.stats.edits_pushed,
            ),
            (
                "journalnode_edit_subscriptions",
                "Edit subscriptions open now (SubscribeEdits)",
                GaugeMetricFamily,
                lambda j: len(j.subscribers),
            ),
            (
                "journalnode_edit_cache_bytes",
                "Bytes of recent edits held for in-progress tailing",
                GaugeMetricFamily,
                lambda j: j.edits_cache.size_bytes,
            ),
            (
                "journalnode_last_written_txid",
                "Last txid written",
                GaugeMetricFamily,
                lambda j: j.stats.last_written_txid,
            ),
            (
                "journalnode_current_lag_txns",
                "Committed txid minus last written txid",
                GaugeMetricFamily,
                lambda j: j.current_lag_txns,
            ),
            (
                "journalnode_last_promised_epoch",
                "lastPromisedEpoch",
                GaugeMetricFamily,
                lambda j: j.last_promised_epoch,
            ),
            (
                "journalnode_last_writer_epoch",
                "lastWriterEpoch",
                GaugeMetricFamily,
                lambda j: j.last_writer_epoch,
            ),
            (
                "journalnode_committed_txid",
                "Highest txid known committed",
                GaugeMetricFamily,
                lambda j: j.committed_txid,
            ),
            (
                "journalnode_disk_full",
                "1 while the journal's last write failed for lack of space (ENOSPC/EDQUOT)",
                GaugeMetricFamily,
                lambda j: int(j.stats.disk_full),
            ),
            (
                "journalnode_storage_errors",
                "Segment writes or syncs that failed",
                CounterMetricFamily,
                lambda j: j.stats.storage_errors,
            ),
            (
                "journalnode_sync_segments",
                "Finalized segments fetched from peers and installed (HDFS-4025)",
                CounterMetricFamily,
                lambda j: j.stats.segments_synced,
            ),
            (
                "journalnode_sync_bytes",
                "Bytes of finalized segments fetched from peers and installed",
                CounterMetricFamily,
                lambda j: j.stats.bytes_synced,
            ),
            (
                "journalnode_sync_failures",
                "Segments a sync round refused (md5, content, conflict) or failed to fetch",
                CounterMetricFamily,
                lambda j: j.stats.sync_failures,
            ),
            (
                "journalnode_corrupt_segments",
                "Finalized segments a read found corrupt here, moved aside to be synced",
                CounterMetricFamily,
                lambda j: j.stats.corrupt_segments,
            ),
            (
                "journalnode_segment_digest_mismatches",
                "Finalized copies moved aside: their records lost their recorded md5, or a "
                "majority of JournalNodes hold another md5 (docs/protocol.md §8.7)",
                CounterMetricFamily,
                lambda j: j.stats.digest_mismatches,
            ),
            (
                "journalnode_segment_digest_repairs",
                "Finalized copies moved aside for a digest mismatch and fetched again from peers",
                CounterMetricFamily,
                lambda j: j.stats.digest_repairs,
            ),
            (
                "journalnode_sync_lacking_segments",
                "Finalized segments peers hold that this node lacked at the last sync round",
                GaugeMetricFamily,
                lambda j: j.stats.segments_lacking,
            ),
            (
                "journalnode_rejoining",
                "1 while a self-formatted journal does not vote (lacks segments, HDFS-16690)",
                GaugeMetricFamily,
                # As the status page: the durable mark itself waits for the next vote.
                lambda j: int(j.rejoin_pending),
            ),
        ]
        journals = self._server.journals()
        for name, doc, family, value in specs:
            metric = family(name, doc, labels=["journal"])
            for jid, journal in journals.items():
                metric.add_metric([jid], value(journal))
            yield metric
        wire = self._server.edits_wire
        if wire is not None:
            yield GaugeMetricFamily(
                "journalnode_edits_wire_connections",
                "Writers' connections open on the edits wire (docs/protocol.md §13.8)",
                value=len(wire.connections),
            )
            yield CounterMetricFamily(
                "journalnode_edits_wire_refused",
                "Edits-wire connections closed for their caller's role, their bytes or their "
                "number",
                value=wire.refused,
            )


def _status(exc: Exception) -> tuple[grpc.StatusCode, str, tuple[tuple[str, str], ...]]:
    """The status a failed call answers with: a JournalError's own (``to_status``), or
    INTERNAL for anything else, which is a bug (``CallLog`` logs it with its traceback)."""
    if isinstance(exc, JournalError):
        return to_status(exc)
    return grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}", ()


def _describe(request: Any) -> tuple[str, int | None]:
    """The journal id and epoch a request names (for the log), whatever its type."""
    info = getattr(request, "req_info", None)
    if info is not None:
        return info.journal_id, info.epoch
    return str(getattr(request, "journal_id", "")), getattr(request, "epoch", None)


class CallLog:
    """Logs every refused or failed call with its rpc, journal, epoch and cause, through a
    ``LogThrottle`` keyed by (rpc, journal, error class), so that a flood of bad requests
    costs a few lines per window, each repeat counted (issue 10)."""

    def __init__(self, registry: CollectorRegistry, window_seconds: float = 10.0) -> None:
        self._throttle: LogThrottle[tuple[str, str, str]] = LogThrottle(window_seconds)
        self._lock = threading.Lock()
        self.refused = Counter(
            "journalnode_refused_calls",
            "Calls answered with an error, by rpc and error class",
            ["rpc", "error"],
            registry=registry,
        )

    def failed(self, rpc: str, request: Any, exc: Exception) -> None:
        journal, epoch = _describe(request)
        if not _SAFE_ID.fullmatch(journal):
            journal = repr(journal[:80])  # from the network: never print it raw
        error = type(exc).__name__
        self.refused.labels(rpc, error).inc()
        with self._lock:
            lines = self._throttle.offer((rpc, journal, error), time.monotonic())
        for line in lines:
            if not line.first:
                key = line.key
                fields = (
                    {"rpc": key[0], "journal": key[1], "error": key[2]}
                    if len(key) == 3
                    else {"keys": "more than the window's lines"}
                )
                log.warning(
                    "calls refused or failed again",
                    repeated=line.count,
                    window_seconds=self._throttle.window_seconds,
                    **fields,
                )
            else:
                # A JournalError is a refusal; anything else is a bug, logged with its
                # traceback; a StorageError (disk full, I/O error) is the operator's business.
                bug = not isinstance(exc, JournalError)
                level = log.error if bug or isinstance(exc, StorageError) else log.warning
                level(
                    "journal RPC failed" if bug else "journal RPC refused",
                    rpc=rpc,
                    journal=journal,
                    epoch=epoch,
                    error=error,
                    cause=str(exc),
                    **({"exc_info": exc} if bug else {}),
                )


_SAFE_ID = re.compile(r"[A-Za-z0-9._-]{0,200}")


def _unary(method: Callable[..., T]) -> Callable[..., Awaitable[T]]:
    """A servicer coroutine that runs the blocking ``method`` (the Journal's work) in the
    ``journal-io`` pool, turning exceptions into their status, each one logged."""

    async def wrapper(self: QJournalServicer, request: Any, context: grpc.aio.ServicerContext) -> T:
        try:
            return await self._offload(method, self, request, context)
        except Exception as exc:
            await self._abort(context, request, exc, method.__name__)
            raise AssertionError("unreachable: context.abort raises") from exc

    wrapper.__name__ = method.__name__
    return wrapper


JOURNAL_STREAM_OK = journal_pb2.JournalStreamResponse()

IO_STOP_SECONDS = 5.0
"""How long ``stop`` waits for Journal work already running in the pool (a batch's write and
sync) before it closes the storage anyway; a call stuck longer (a recovery's download from a
stopped peer) is logged, not waited for."""

SUBSCRIPTION_END_SECONDS = 0.5
"""How long a stopping JournalNode lets its subscriptions push their SHUTTING_DOWN end."""


class _InFlight:
    """Counts the Journal calls running in the ``journal-io`` pool, so ``stop`` can let them
    end before it closes the storage."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self.count = 0

    def run(self, fn: Callable[..., T], *args: Any) -> T:
        with self._cond:
            self.count += 1
        try:
            return fn(*args)
        finally:
            with self._cond:
                self.count -= 1
                if not self.count:
                    self._cond.notify_all()

    def wait_idle(self, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: not self.count, timeout)


def _req(pb: journal_pb2.RequestInfo) -> RequestInfo:
    return RequestInfo.from_pb(pb)


class QJournalServicer(journal_pb2_grpc.QJournalServiceServicer):
    """QJournalService: messages to Journal calls, nothing more."""

    def __init__(
        self, server: JournalNodeServer, io: ThreadPoolExecutor, in_flight: _InFlight
    ) -> None:
        self._server = server
        self._io = io
        self._in_flight = in_flight

    async def _offload(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` in the ``journal-io`` pool: disk and the Journal's lock stay off the
        event loop."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._io, self._in_flight.run, fn, *args)

    async def _abort(
        self, context: grpc.aio.ServicerContext, request: Any, exc: Exception, rpc: str
    ) -> NoReturn:
        self._server.call_log.failed(rpc, request, exc)
        code, details, trailers = _status(exc)
        context.set_trailing_metadata(trailers)
        await context.abort(code, details)
        raise AssertionError("unreachable: context.abort raises")

    def _journal(self, journal_id: str) -> Journal:
        """A stored journal; every call but Format answers "not formatted" for any other id,
        and creates nothing."""
        journal = self._server.existing_journal(journal_id)
        if journal is None:
            raise JournalNotFormattedError(f"journal {journal_id!r} is not formatted")
        return journal

    @_unary
    def IsFormatted(self, request: Any, context: grpc.ServicerContext) -> Any:
        # A question about a journal this node has never stored must not create it: a
        # mistyped journal id (hapipe verify, hanamenode format's check) leaves nothing behind.
        journal = self._server.existing_journal(request.journal_id)
        ns = journal.namespace_info if journal is not None else None
        response = journal_pb2.IsFormattedResponse(is_formatted=ns is not None)
        if ns is not None:
            response.namespace_info.CopyFrom(ns.to_pb())
        return response

    @_unary
    def Format(self, request: Any, context: grpc.ServicerContext) -> Any:
        ns = NamespaceInfo.from_pb(request.namespace_info)
        check_format_request(ns)  # before the journal's directory is made
        self._server.journal(request.journal_id).format(ns, force=request.force)
        return EMPTY

    async def GetJournalState(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """Answered on the event loop when the journal is loaded (the read-index question of
        every linearizable read: no thread hop, no wait behind a sync holding the Journal's
        lock); in the pool otherwise (loading a journal reads its directory)."""
        try:
            return await self.journal_state(request)
        except Exception as exc:
            await self._abort(context, request, exc, "GetJournalState")

    def journal_state_if_loaded(self, request: Any) -> Any:
        """GetJournalState's answer from the event loop, or None when the journal is not
        loaded yet (``journal_state`` then reads it in the pool)."""
        journal = self._server.loaded_journal(request.journal_id)
        if journal is None:
            return None
        return self._state_answer(journal.promised_epoch_now(request.cluster_id))

    async def journal_state(self, request: Any) -> Any:
        answer = self.journal_state_if_loaded(request)
        if answer is None:
            answer = self._state_answer(await self._offload(self._journal_state, request))
        return answer

    def _state_answer(self, epoch: int) -> Any:
        return journal_pb2.GetJournalStateResponse(
            last_promised_epoch=epoch,
            from_url=self._server.address,
            edits_port=self._server.edits_port,
        )

    def _journal_state(self, request: Any) -> int:
        return self._journal(request.journal_id).get_journal_state(request.cluster_id)[0]

    @_unary
    def NewEpoch(self, request: Any, context: grpc.ServicerContext) -> Any:
        last = self._journal(request.journal_id).new_epoch(
            NamespaceInfo.from_pb(request.namespace_info), request.epoch
        )
        response = journal_pb2.NewEpochResponse()
        if last is not None:
            response.last_segment_txid = last
        return response

    @_unary
    def StartLogSegment(self, request: Any, context: grpc.ServicerContext) -> Any:
        req = _req(request.req_info)
        self._journal(req.journal_id).start_log_segment(req, request.txid)
        return EMPTY

    def _write_batch(self, request: Any) -> None:
        req = _req(request.req_info)
        self._journal(req.journal_id).journal(
            req,
            segment_txid=request.segment_txid,
            first_txid=request.first_txid,
            num_txns=request.num_txns,
            framed=request.records,
        )

    def write_batch_if_quick(self, request: Any) -> bool:
        """The batch written here, on the event loop, when that cannot wait on anything but
        its own write and sync (``Journal.journal_if_quick``); False, nothing done, when the
        journal is busy, the disk was slow last time or the journal is not loaded yet."""
        req = _req(request.req_info)
        journal = self._server.loaded_journal(req.journal_id)
        if journal is None:
            return False
        return self._in_flight.run(
            lambda: journal.journal_if_quick(
                req,
                segment_txid=request.segment_txid,
                first_txid=request.first_txid,
                num_txns=request.num_txns,
                framed=request.records,
            )
        )

    async def write_batch(self, request: Any) -> None:
        """The batch written in the ``journal-io`` pool (a JournalStream's or the edits
        wire's, when ``write_batch_if_quick`` could not)."""
        await self._offload(self._write_batch, request)

    def refusal(self, rpc: str, request: Any, exc: Exception) -> Any:
        """The JournalStreamResponse a failed batch is answered with, the failure logged."""
        self._server.call_log.failed(rpc, request, exc)
        code, details, trailers = _status(exc)
        return journal_pb2.JournalStreamResponse(
            code=code.value[0],
            details=details,
            error_class=dict(trailers).get(ERROR_CLASS_KEY, ""),
        )

    @_unary
    def Journal(self, request: Any, context: grpc.ServicerContext) -> Any:
        self._write_batch(request)
        return EMPTY

    async def JournalStream(
        self, request_iterator: AsyncIterator[Any], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """Each batch of the stream exactly as a Journal call, answered in order; a failed
        batch is answered with the status the unary call would have failed with, and the
        stream goes on (the writer decides what a failure means, as for unary calls). A
        message out of bounds (``conf.guard`` raises while the stream is read) ends the
        stream with its status.

        A batch is written on the event loop when nothing but its own disk can hold it up
        (``write_batch_if_quick``): the hop to the ``journal-io`` pool and back costs more
        CPU than a fast fdatasync (docs/protocol.md §13.7). A slow disk or a busy journal
        (finalize, recovery, sync) sends the batch to the pool, so heartbeats, read-index
        questions and status pages never wait on it."""
        try:
            async for request in request_iterator:
                try:
                    if not self.write_batch_if_quick(request):
                        await self.write_batch(request)
                except Exception as exc:
                    yield self.refusal("JournalStream", request, exc)
                    continue
                yield JOURNAL_STREAM_OK
        except InvalidRequestError as exc:
            await self._abort(context, None, exc, "JournalStream")

    @_unary
    def Heartbeat(self, request: Any, context: grpc.ServicerContext) -> Any:
        req = _req(request.req_info)
        self._journal(req.journal_id).heartbeat(req)
        return EMPTY

    @_unary
    def FinalizeLogSegment(self, request: Any, context: grpc.ServicerContext) -> Any:
        req = _req(request.req_info)
        self._journal(req.journal_id).finalize_log_segment(
            req, request.start_txid, request.end_txid, request.md5
        )
        return EMPTY

    @_unary
    def PurgeLogs(self, request: Any, context: grpc.ServicerContext) -> Any:
        req = _req(request.req_info)
        self._journal(req.journal_id).purge_logs(req, request.min_txid_to_keep)
        return EMPTY

    @_unary
    def GetEditLogManifest(self, request: Any, context: grpc.ServicerContext) -> Any:
        journal = self._journal(request.journal_id)
        logs = journal.get_edit_log_manifest(
            request.cluster_id, request.since_txid, in_progress_ok=request.in_progress_ok
        )
        return journal_pb2.GetEditLogManifestResponse(
            logs=[entry.to_pb() for entry in logs],
            from_url=self._server.address,
            committed_txid=journal.committed_txid,
        )

    @_unary
    def PrepareRecovery(self, request: Any, context: grpc.ServicerContext) -> Any:
        req = _req(request.req_info)
        return self._journal(req.journal_id).prepare_recovery(req, request.segment_txid).to_pb()

    @_unary
    def AcceptRecovery(self, request: Any, context: grpc.ServicerContext) -> Any:
        req = _req(request.req_info)
        self._journal(req.journal_id).accept_recovery(
            req,
            SegmentState.from_pb(request.state_to_accept),
            request.from_url,
            self._server.fetch_segment_for(req.cluster_id),
        )
        return EMPTY

    def _open_segment(self, request: Any) -> Iterator[bytes]:
        journal = self._journal(request.journal_id)
        end = request.end_txid if request.in_progress_ok or request.end_txid else None
        state = journal.segment_for_reading(request.cluster_id, request.start_txid, end)
        if not state.is_in_progress:
            # Served only if its records still have the md5 recorded at finalize (§8.7).
            journal.verified_finalized_md5(
                request.cluster_id, request.start_txid, check_records=False
            )
        return iter(journal.storage.read_segment(request.start_txid, end))

    async def GetSegment(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """The segment's bytes, each chunk read in the ``journal-io`` pool."""
        try:
            chunks = await self._offload(self._open_segment, request)
            while (chunk := await self._offload(next, chunks, None)) is not None:
                yield journal_pb2.SegmentChunk(data=chunk)
        except Exception as exc:
            if isinstance(exc, CorruptSegmentError):
                # This node's copy is bad: stop serving it; the sync thread replaces it.
                journal = self._server.existing_journal(request.journal_id)
                if journal is not None:
                    await self._offload(journal.quarantine_corrupt, request.start_txid, exc)
            await self._abort(context, request, exc, "GetSegment")

    @_unary
    def GetSegmentMd5(self, request: Any, context: grpc.ServicerContext) -> Any:
        end, md5 = self._journal(request.journal_id).finalized_md5(
            request.cluster_id, request.start_txid
        )
        return journal_pb2.GetSegmentMd5Response(end_txid=end, md5=md5)

    async def SubscribeEdits(
        self, request: Any, context: grpc.aio.ServicerContext
    ) -> AsyncIterator[Any]:
        """Each batch this node writes from ``since_txid`` on, once synced, then one last
        message saying why the subscription ended (docs/protocol.md §11)."""

        async def subscribed() -> None:
            await context.send_initial_metadata(((SUBSCRIBED_KEY, str(request.since_txid)),))

        try:
            async for message in self.subscription(request, subscribed):
                yield message
        except SubscriptionRefused as refused:
            await self._abort(context, request, refused.cause, "SubscribeEdits")

    async def subscription(
        self, request: Any, subscribed: Callable[[], Awaitable[None]]
    ) -> AsyncGenerator[Any, None]:
        """The messages of one subscription, for ``SubscribeEdits`` and the edits wire: raises
        ``SubscriptionRefused`` when it cannot be opened, awaits ``subscribed()`` once the
        node holds it, then yields each batch and the last message (``end`` set). The queue
        between the Journal's thread and the subscriber is bounded (``EditSubscription``)."""
        loop = asyncio.get_running_loop()
        ready = asyncio.Event()

        def wake() -> None:
            loop.call_soon_threadsafe(ready.set)

        try:
            journal = await self._offload(self._journal, request.journal_id)
            sub = await self._offload(
                journal.subscribe_edits, request.cluster_id, request.since_txid, wake
            )
        except Exception as exc:
            raise SubscriptionRefused(exc) from exc
        self._server.subscription_opened(sub)
        if self._server.stopping:
            sub.end(EndReason.SHUTTING_DOWN, "the JournalNode is stopping")
        try:
            # The reader counts the subscription as open from here: the node holds it, and a
            # stop ends it with SHUTTING_DOWN rather than cancelling a call still being set up.
            await subscribed()
            while True:
                await ready.wait()
                ready.clear()
                batches, ended = sub.take()
                for batch in batches:
                    yield journal_pb2.SubscribedEdits(
                        writer_epoch=batch.epoch,
                        segment_txid=batch.segment_txid,
                        first_txid=batch.first_txid,
                        txn_count=batch.count,
                        records=batch.framed,
                    )
                    journal.stats.edits_pushed += batch.count
                if ended is not None:
                    reason, details = ended
                    self._server.subscription_ended(request.journal_id, reason, details)
                    yield journal_pb2.SubscribedEdits(
                        end=journal_pb2.SubscriptionEnd.Name(reason.value), end_details=details
                    )
                    return
        finally:
            self._server.subscription_closed(sub)
            journal.subscribers.remove(sub)

    @_unary
    def GetJournaledEdits(self, request: Any, context: grpc.ServicerContext) -> Any:
        # Like IsFormatted: a journal this node never stored has nothing cached, and asking
        # must not create it.
        cached = self._journal(request.journal_id).get_journaled_edits(
            request.cluster_id, request.since_txid, request.max_txns
        )
        return journal_pb2.GetJournaledEditsResponse(
            txn_count=cached.count, records=cached.framed, writer_epoch=cached.epoch
        )


class JournalNodeServer:
    """One JournalNode: storage root, gRPC server, metrics endpoint. A context manager."""

    def __init__(
        self,
        root: Path,
        rpc_address: str,
        *,
        metrics_address: str | None = None,
        tls: TLSSettings | None = None,
        handler_count: int = 16,
        max_message_bytes: int = 16 * 1024 * 1024,
        advertised_host: str | None = None,
        edit_cache_bytes: int = DEFAULT_EDIT_CACHE_BYTES,
        max_journals: int = DEFAULT_MAX_JOURNALS,
        writer_hold_seconds: float = DEFAULT_WRITER_HOLD_SECONDS,
        sync: SyncConfig | None = None,
        subscriber_queue_bytes: int = DEFAULT_SUBSCRIBER_QUEUE_BYTES,
        max_subscribers: int = DEFAULT_MAX_SUBSCRIBERS,
        connection_bounds: RPCSettings | None = None,
        node_id: str = "",
        edits_address: str | None = "",
    ) -> None:
        self.node_id = node_id
        self._edits_address = edits_address
        """Where the edits wire listens (docs/protocol.md §13.8): "" for the host of
        ``rpc_address`` on any free port, None for no edits wire."""
        self._edits_wire: EditsWire | None = None
        """Its configured id (``jn1``; "" when started without one): pages and logs."""
        self._connection_bounds = connection_bounds
        """Handshake timeout and idle limit of its connections (None: the defaults)."""
        self._subscriber_queue_bytes = subscriber_queue_bytes
        self._max_subscribers = max_subscribers
        self.root = Path(root)
        self._sync_config = sync
        self._syncer: JournalSyncer | None = None
        self._rpc_address = rpc_address
        self._metrics_address = metrics_address
        self._tls = tls
        self._handler_count = handler_count
        self._max_message_bytes = max_message_bytes
        self._advertised_host = advertised_host
        self._edit_cache_bytes = edit_cache_bytes
        self._max_journals = max_journals
        self._writer_hold_seconds = writer_hold_seconds
        self._journals: dict[str, Journal] = {}
        self._journals_lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._root_lock_fd: int | None = None
        self._server: grpc.aio.Server | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_thread: threading.Thread | None = None
        self._io: ThreadPoolExecutor | None = None
        self._in_flight = _InFlight()
        self._metrics_server: Any = None
        self.registry = CollectorRegistry()
        self.sync_latency = Histogram(
            "journalnode_sync_seconds",
            "fdatasync latency of Journal batches",
            ["journal"],
            registry=self.registry,
            buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.5, 1),
        )
        self.registry.register(JournalMetricsCollector(self))
        install_pause_metrics()
        self.registry.register(GcPauseCollector())
        install_process_metrics(self.registry, "journalnode")  # process_*, build_info
        self.call_log = CallLog(self.registry)
        self.subscriptions_ended = Counter(
            "journalnode_edit_subscriptions_ended",
            "Edit subscriptions ended, by reason (SubscribeEdits)",
            ["journal", "reason"],
            registry=self.registry,
        )
        self._subscriptions: set[EditSubscription] = set()
        self.stopping = False
        self.port = 0
        self.metrics_port = 0

    # ------------------------------------------------------------------ lifecycle

    @property
    def address(self) -> str:
        host = self._advertised_host or self._rpc_address.rsplit(":", 1)[0]
        if host in ("0.0.0.0", "", "::"):
            host = "127.0.0.1"
        return f"{host}:{self.port}"

    def start(self) -> JournalNodeServer:
        self.stopping = False
        # Durably (each new directory's parent fsynced): a journal made under a root that a
        # power cut takes away is lost whole, Format and promises included (issue 26).
        fsutil.ensure_dir(self.root)
        self._lock_root()
        try:
            for child in sorted(self.root.iterdir()):
                if child.is_dir() and (child / "current").is_dir():
                    self._load_journal(child.name)
            self._io = ThreadPoolExecutor(
                max_workers=self._handler_count, thread_name_prefix="journal-io"
            )
            self._loop = new_event_loop()  # uvloop with HANAMENODE_UVLOOP=1
            self._loop_thread = threading.Thread(
                target=self._loop.run_forever, name="journalnode-loop", daemon=True
            )
            self._loop_thread.start()
            self._on_loop(self._astart())
            if self._metrics_address is not None:
                self._start_metrics_server(self._metrics_address)
            if self._sync_config is not None:
                self._syncer = JournalSyncer(self._sync_config, self).start()
        except BaseException:
            self.stop()
            raise
        announce_mutants("journalnode", self.registry, log)
        watch_connections("journalnode", self.registry)
        log.info(
            "journalnode started",
            rpc=self.address,
            metrics_port=self.metrics_port,
            root=str(self.root),
        )
        return self

    def _on_loop(self, coro: Any, timeout: float | None = 30.0) -> Any:
        """Run a coroutine on the server's event loop and wait for it."""
        assert self._loop is not None
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout)

    async def _astart(self) -> None:
        """Make, bind and start the grpc.aio server (on its loop, which it belongs to)."""
        tls = self._tls or TLSSettings()
        guard = AioRequestGuard(
            RULES,
            check_roles=tls.enabled,
            invalid=InvalidRequestError,
            denied=AccessDeniedError,
            to_status=to_status,
        )
        self._server = make_aio_server(
            tls=tls,
            max_message_bytes=self._max_message_bytes,
            interceptors=[guard],
            rpc=self._connection_bounds,
        )
        assert self._io is not None
        journal_pb2_grpc.add_QJournalServiceServicer_to_server(
            QJournalServicer(self, self._io, self._in_flight), self._server
        )
        self.port = bind(self._server, self._rpc_address, self._tls)
        await self._server.start()
        if self._edits_address is not None:
            self._edits_wire = EditsWire(
                QJournalServicer(self, self._io, self._in_flight),
                max_message_bytes=self._max_message_bytes,
                ssl_context=server_ssl_context(tls),
                bounds_=self._connection_bounds or RPCSettings(),
                node=self.node_id,
                roles={
                    kind: frozenset(str(role) for role in RULES[SERVICE + method].roles)
                    for kind, method in WIRE_METHODS.items()
                },
            )
            address = self._edits_address or self._rpc_address.rsplit(":", 1)[0] + ":0"
            host, _, port = address.rpartition(":")
            await self._edits_wire.start(host.strip("[]"), int(port))

    @property
    def edits_wire(self) -> EditsWire | None:
        return self._edits_wire

    @property
    def edits_port(self) -> int:
        """The edits wire's port, 0 when it has none."""
        return self._edits_wire.port if self._edits_wire is not None else 0

    async def _astop(self, server: grpc.aio.Server, grace: float | None) -> None:
        """Stop the server, then end every call still running on the loop (a stream whose
        writer never closed it), so that no call is left half-run when the loop stops.

        Subscriptions were told to end (SHUTTING_DOWN) before this runs; they get up to
        ``SUBSCRIPTION_END_SECONDS`` to push that last message, whatever ``grace`` says, so
        that a reader learns why its stream ended rather than seeing it cancelled."""
        deadline = time.monotonic() + SUBSCRIPTION_END_SECONDS
        while self._subscriptions and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        if self._edits_wire is not None:
            await self._edits_wire.stop()
            self._edits_wire = None
        await server.stop(grace)
        calls = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)

    def subscription_opened(self, sub: EditSubscription) -> None:
        self._subscriptions.add(sub)

    def subscription_closed(self, sub: EditSubscription) -> None:
        self._subscriptions.discard(sub)

    def subscription_ended(self, journal_id: str, reason: EndReason, details: str) -> None:
        self.subscriptions_ended.labels(journal_id, reason.label).inc()
        # Every roll ends every subscription: worth a line only when it is something else.
        level = log.debug if reason is EndReason.SEGMENT_FINALIZED else log.info
        level("edit subscription ended", journal=journal_id, reason=reason.label, why=details)

    def _start_metrics_server(self, address: str) -> None:
        """Serve /metrics and the status page (docs/operations.md §13) on ``address``; a busy
        port is a PortInUseError naming it, as for RPC."""
        self._metrics_server = WebServer(
            address,
            self.registry,
            status=lambda: status.collect(self),
            render=status.render,
            title=f"JournalNode {self.node_id or self.address}",
        ).start()
        self.metrics_port = self._metrics_server.port

    def _lock_root(self) -> None:
        """One JournalNode per storage root: ``in_use.lock`` there covers every journal."""
        self._root_lock_fd = fsutil.lock_directory(self.root)

    def stop(self, grace: float | None = 1.0) -> None:
        if self._syncer is not None:
            self._syncer.stop()
            self._syncer = None
        self.stopping = True
        for sub in list(self._subscriptions):
            sub.end(EndReason.SHUTTING_DOWN, "the JournalNode is stopping")
        if self._server is not None:
            self._on_loop(self._astop(self._server, grace), timeout=None)
            self._server = None
        if self._loop is not None:
            loop = self._loop
            loop.call_soon_threadsafe(loop.stop)
            if self._loop_thread is not None:
                self._loop_thread.join(10)
            if not loop.is_running():
                loop.run_until_complete(loop.shutdown_asyncgens())
                loop.close()
            self._loop = self._loop_thread = None
        if self._io is not None:
            # A batch already in the pool finishes its write and sync before storage closes.
            self._io.shutdown(wait=False, cancel_futures=True)
            if not self._in_flight.wait_idle(IO_STOP_SECONDS):
                log.warning(
                    "journal calls still running at stop; closing storage anyway",
                    running=self._in_flight.count,
                    waited_seconds=IO_STOP_SECONDS,
                )
            self._io = None
        if self._metrics_server is not None:
            self._metrics_server.stop()
            self._metrics_server = None
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        with self._journals_lock:
            for journal in self._journals.values():
                storage = journal.storage
                if isinstance(storage, FileJournalStorage):
                    storage.close()
            self._journals.clear()
        if self._root_lock_fd is not None:
            os.close(self._root_lock_fd)
            self._root_lock_fd = None

    def wait(self) -> None:
        server = self._server
        if server is not None:
            self._on_loop(server.wait_for_termination(), timeout=None)

    def __enter__(self) -> JournalNodeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ journals

    def journal(self, journal_id: str) -> Journal:
        """The Journal for journal_id, created on first use (Format); a new id past
        ``max_journals`` is refused."""
        journal = self._journals.get(journal_id)
        if journal is not None:
            return journal
        validate_journal_id(journal_id)
        with self._journals_lock:
            if journal_id not in self._journals and len(self._journals) >= self._max_journals:
                raise InvalidRequestError(
                    f"cannot create journal {journal_id!r}: this JournalNode already stores "
                    f"{len(self._journals)} journals, the most dfs.journalnode.max-journals "
                    f"({self._max_journals}) allows"
                )
        return self._load_journal(journal_id)

    def _load_journal(self, journal_id: str) -> Journal:
        """Load (or create) a journal's directory. Its storage takes no lock of its own: this
        server's lock on the whole root keeps other JournalNodes out, and so a journal
        nobody writes costs no file descriptor."""
        with self._journals_lock:
            journal = self._journals.get(journal_id)
            if journal is None:
                histogram = self.sync_latency.labels(journal_id)
                storage = FileJournalStorage(
                    self.root, journal_id, sync_observer=histogram.observe, lock=False
                )
                try:
                    journal = Journal(
                        journal_id,
                        storage,
                        edit_cache_bytes=self._edit_cache_bytes,
                        writer_hold_seconds=self._writer_hold_seconds,
                        subscriber_queue_bytes=self._subscriber_queue_bytes,
                        max_subscribers=self._max_subscribers,
                    )
                except BaseException:
                    storage.close()
                    raise
                self._journals[journal_id] = journal
            return journal

    def loaded_journal(self, journal_id: str) -> Journal | None:
        """The Journal for journal_id if it is loaded already (no disk access), else None."""
        return self._journals.get(journal_id)

    @property
    def syncer(self) -> JournalSyncer | None:
        """The sync thread (None when sync is off: docs/protocol.md §10)."""
        return self._syncer

    def existing_journal(self, journal_id: str) -> Journal | None:
        """The Journal for journal_id when it is loaded or its directory exists; None for a
        journal this node has never stored (nothing is created)."""
        journal = self._journals.get(journal_id)
        if journal is not None:
            return journal
        validate_journal_id(journal_id)
        if not (self.root / journal_id / "current").is_dir():
            return None
        return self._load_journal(journal_id)

    def journals(self) -> dict[str, Journal]:
        with self._journals_lock:
            return dict(self._journals)

    # ------------------------------------------------------------------ recovery downloads

    def fetch_segment_for(self, cluster_id: str) -> Callable[[str, str, int, int], Iterable[bytes]]:
        """A SegmentFetcher that streams a segment from another JournalNode's GetSegment."""

        def fetch(from_url: str, journal_id: str, start: int, end: int) -> Iterator[bytes]:
            channel = self._channel(from_url)
            stub = journal_pb2_grpc.QJournalServiceStub(channel)
            request = journal_pb2.GetSegmentRequest(
                journal_id=journal_id,
                cluster_id=cluster_id,
                start_txid=start,
                end_txid=end,
                in_progress_ok=True,
            )
            started = time.monotonic()
            try:
                for chunk in stub.GetSegment(request, timeout=120):
                    yield chunk.data
            except grpc.RpcError as err:
                # Say it was the recovery source that failed, not this JournalNode.
                cause = from_rpc_error(err)
                raise type(cause)(
                    f"downloading segment {start}-{end} of journal {journal_id!r} from "
                    f"{from_url} failed: {cause}"
                ) from err
            log.info(
                "downloaded segment",
                source=from_url,
                journal=journal_id,
                start=start,
                end=end,
                seconds=round(time.monotonic() - started, 3),
            )

        return fetch

    def peer_channel(self, target: str) -> grpc.Channel:
        """A channel to another JournalNode (recovery downloads, the sync thread)."""
        return self._channel(target)

    def _channel(self, target: str) -> grpc.Channel:
        with self._journals_lock:
            channel = self._channels.get(target)
            if channel is None:
                channel = make_channel(target, self._tls)
                self._channels[target] = channel
            return channel
