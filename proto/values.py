"""Plain protocol values shared by the JournalNode, the QJM and the simulator.

The protocol logic (``journalnode.journal.Journal``, ``qjm.recovery``) works on these frozen
dataclasses rather than on protobuf messages, so that it can be tested and simulated without
gRPC; the shells convert at the edge with ``to_pb``/``from_pb``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from proto import journal_pb2


@dataclass(frozen=True, slots=True)
class NamespaceInfo:
    """Cluster identity, written to VERSION by format and checked on every call."""

    cluster_id: str
    namespace_id: int
    ctime: int = 0
    layout_version: int = 1

    def to_pb(self) -> journal_pb2.NamespaceInfo:
        return journal_pb2.NamespaceInfo(
            cluster_id=self.cluster_id,
            namespace_id=self.namespace_id,
            ctime=self.ctime,
            layout_version=self.layout_version,
        )

    @classmethod
    def from_pb(cls, pb: journal_pb2.NamespaceInfo) -> NamespaceInfo:
        return cls(pb.cluster_id, pb.namespace_id, pb.ctime, pb.layout_version)


@dataclass(frozen=True, slots=True)
class SegmentState:
    """A segment as one JournalNode holds it: ``end_txid == start_txid - 1`` when empty."""

    start_txid: int
    end_txid: int
    is_in_progress: bool
    # md5 of the records through end_txid, when known (prepareRecovery computes it). It is not
    # part of equality: a state read from a file name has no digest and is still that segment.
    md5: bytes = field(default=b"", compare=False)

    @property
    def num_txns(self) -> int:
        return self.end_txid - self.start_txid + 1

    def with_md5(self, md5: bytes) -> SegmentState:
        return SegmentState(self.start_txid, self.end_txid, self.is_in_progress, md5)

    def to_pb(self) -> journal_pb2.SegmentState:
        return journal_pb2.SegmentState(
            start_txid=self.start_txid,
            end_txid=self.end_txid,
            is_in_progress=self.is_in_progress,
            md5=self.md5,
        )

    @classmethod
    def from_pb(cls, pb: journal_pb2.SegmentState) -> SegmentState:
        return cls(pb.start_txid, pb.end_txid, pb.is_in_progress, pb.md5)

    def __str__(self) -> str:
        kind = "inprogress" if self.is_in_progress else "finalized"
        return f"[{self.start_txid}-{self.end_txid} {kind}]"


@dataclass(frozen=True, slots=True)
class RequestInfo:
    """What every writer call carries (docs/protocol.md §2.1)."""

    journal_id: str
    cluster_id: str
    epoch: int
    ipc_serial_number: int
    committed_txid: int = 0

    def to_pb(self) -> journal_pb2.RequestInfo:
        return journal_pb2.RequestInfo(
            journal_id=self.journal_id,
            cluster_id=self.cluster_id,
            epoch=self.epoch,
            ipc_serial_number=self.ipc_serial_number,
            committed_txid=self.committed_txid,
        )

    @classmethod
    def from_pb(cls, pb: journal_pb2.RequestInfo) -> RequestInfo:
        return cls(pb.journal_id, pb.cluster_id, pb.epoch, pb.ipc_serial_number, pb.committed_txid)


@dataclass(frozen=True, slots=True)
class PrepareRecoveryResult:
    """A JournalNode's answer to prepareRecovery (Paxos phase 1b)."""

    segment_state: SegmentState | None
    accepted_in_epoch: int | None
    last_writer_epoch: int
    last_committed_txid: int

    def to_pb(self) -> journal_pb2.PrepareRecoveryResponse:
        pb = journal_pb2.PrepareRecoveryResponse(
            last_writer_epoch=self.last_writer_epoch, last_committed_txid=self.last_committed_txid
        )
        if self.segment_state is not None:
            pb.segment_state.CopyFrom(self.segment_state.to_pb())
        if self.accepted_in_epoch is not None:
            pb.accepted_in_epoch = self.accepted_in_epoch
        return pb

    @classmethod
    def from_pb(cls, pb: journal_pb2.PrepareRecoveryResponse) -> PrepareRecoveryResult:
        return cls(
            SegmentState.from_pb(pb.segment_state) if pb.HasField("segment_state") else None,
            pb.accepted_in_epoch if pb.HasField("accepted_in_epoch") else None,
            pb.last_writer_epoch,
            pb.last_committed_txid,
        )


@dataclass(frozen=True, slots=True)
class RemoteEditLog:
    """One entry of a JournalNode's edit-log manifest."""

    start_txid: int
    end_txid: int
    is_in_progress: bool
    # A finalized segment's recorded md5 of its records (docs/protocol.md §8.7); b"" for an
    # in-progress one or from an older JournalNode. Not part of equality, as in SegmentState:
    # readers compare digests explicitly (qjm.reader.chain_segments).
    md5: bytes = field(default=b"", compare=False)

    def to_pb(self) -> journal_pb2.RemoteEditLog:
        return journal_pb2.RemoteEditLog(
            start_txid=self.start_txid,
            end_txid=self.end_txid,
            is_in_progress=self.is_in_progress,
            md5=self.md5,
        )

    @classmethod
    def from_pb(cls, pb: journal_pb2.RemoteEditLog) -> RemoteEditLog:
        return cls(pb.start_txid, pb.end_txid, pb.is_in_progress, pb.md5)
