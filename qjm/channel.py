"""How the QJM talks to one JournalNode: the ``JournalChannel`` interface and its gRPC form.

Every call is synchronous and raises the JournalNode's own exception classes
(``journalnode.errors``), so ``AsyncLogger`` (which adds ordering, queueing and futures) works
the same over ``GrpcJournalChannel`` and over the simulator's in-process channel.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

import grpc

from conf import TLSSettings
from conf.rpc import make_channel
from journalnode.errors import from_rpc_error
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
        self, req: RequestInfo, start: int, end: int, timeout: float
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


class GrpcJournalChannel:
    """A JournalChannel over gRPC, made through conf.rpc (mutual TLS when configured)."""

    def __init__(self, address: str, tls: TLSSettings | None = None) -> None:
        self.address = address
        self._channel = make_channel(address, tls)
        self._stub = journal_pb2_grpc.QJournalServiceStub(self._channel)

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
        request = journal_pb2.JournalRequest(
            req_info=req.to_pb(),
            segment_txid=segment_txid,
            first_txid=first_txid,
            num_txns=num_txns,
            records=framed,
        )
        self._call(self._stub.Journal, request, timeout)

    def heartbeat(self, req: RequestInfo, timeout: float) -> None:
        self._call(
            self._stub.Heartbeat, journal_pb2.HeartbeatRequest(req_info=req.to_pb()), timeout
        )

    def finalize_log_segment(self, req: RequestInfo, start: int, end: int, timeout: float) -> None:
        request = journal_pb2.FinalizeLogSegmentRequest(
            req_info=req.to_pb(), start_txid=start, end_txid=end
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
        self._channel.close()
