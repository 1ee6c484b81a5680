"""The bound of every request field, and the one check of a request against them.

A request is checked against this table before any servicer acts on it (``conf.guard``),
so a field far out of range costs the daemon the decode and nothing more: no edit, no
retry-cache entry, no file. Every string, bytes and integer field of every request message
of the three NameNode services and of ``QJournalService`` has an entry here (a test checks
that a new field cannot be added without one); booleans and enums are bounded by their type.

The whole message is bounded before decoding by the service's message limit
(``conf.rpc``): the NameNode's services take 1 MiB, the JournalNode's the journal batch
limit. Strings are measured in UTF-8 bytes. The limits::

    client_id            128 bytes (HDFS sends a 16-byte UUID)
    paths                32000 bytes here; then hanamenode.paths: 8000 characters,
                         1000 components, 255 bytes per component
    journal/cluster ids  255 bytes (a directory name; journalnode.file_storage checks more)
    txids, sizes         0 .. 2^63 - 1 (what SQLite and the segment files hold)
    epochs               checked by the JournalNode's epoch rule (docs/protocol.md §3.2)
    batch records        the journal stream's message limit (hanamenode.rpc.max-message.mb)
    num_txns, max_txns   1 .. 1048576 per batch or read
    image chunks         512 KiB

    >>> from proto import namenode_pb2
    >>> header = namenode_pb2.RpcHeader(client_id=b"x" * 200)
    >>> check(namenode_pb2.MkdirsRequest(header=header, path="/a")).message
    'request field header.client_id is 200 bytes, longer than the limit of 128'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message

__all__ = [
    "BOUNDS",
    "CLIENT_ID_MAX_BYTES",
    "IMAGE_CHUNK_MAX_BYTES",
    "MAX_INT64",
    "BoundViolation",
    "Delegated",
    "IntRange",
    "MaxBytes",
    "MessageLimit",
    "check",
]

MAX_INT64 = 2**63 - 1
CLIENT_ID_MAX_BYTES = 128
PATH_MAX_BYTES = 32_000  # 8000 characters (hanamenode.paths) of at most 4 UTF-8 bytes
ID_MAX_BYTES = 255
NAME_MAX_BYTES = 255  # one path component (hanamenode.paths)
ADDRESS_MAX_BYTES = 300  # host (255) : port, maybe bracketed
MD5_HEX_BYTES = 32
MD5_BYTES = 16
TXNS_PER_CALL = 1 << 20
IMAGE_CHUNK_MAX_BYTES = 512 * 1024
CEDE_MAX_MILLIS = 3_600_000


@dataclass(frozen=True, slots=True)
class MaxBytes:
    """A string (UTF-8) or bytes field of at most ``limit`` bytes."""

    limit: int

    def violation(self, value: object) -> str | None:
        size = len(value.encode("utf-8", "surrogatepass")) if isinstance(value, str) else (
            len(value)  # type: ignore[arg-type]
        )
        if size > self.limit:
            return f"is {size} bytes, longer than the limit of {self.limit}"
        return None


@dataclass(frozen=True, slots=True)
class IntRange:
    """An integer field in ``low .. high``."""

    low: int
    high: int

    def violation(self, value: object) -> str | None:
        assert isinstance(value, int)
        if not self.low <= value <= self.high:
            return f"is {value}, outside {self.low} .. {self.high}"
        return None


@dataclass(frozen=True, slots=True)
class MessageLimit:
    """Bounded by the service's message limit alone, checked by gRPC before decoding."""

    def violation(self, value: object) -> str | None:
        return None


@dataclass(frozen=True, slots=True)
class Delegated:
    """Bounded by a rule of the daemon that needs more than the field (named in ``rule``)."""

    rule: str

    def violation(self, value: object) -> str | None:
        return None


Bound = MaxBytes | IntRange | MessageLimit | Delegated

_TXID = IntRange(0, MAX_INT64)
_ID = MaxBytes(ID_MAX_BYTES)
_EPOCH = Delegated("the JournalNode's epoch rule, docs/protocol.md §3.2")
_NN = "hanamenode.namenode."
_JN = "hanamenode.journal."

BOUNDS: Mapping[str, Bound] = MappingProxyType(
    {
        # ClientProtocol.
        _NN + "RpcHeader.client_id": MaxBytes(CLIENT_ID_MAX_BYTES),
        _NN + "RpcHeader.call_id": _TXID,
        _NN + "MkdirsRequest.path": MaxBytes(PATH_MAX_BYTES),
        _NN + "MkdirsRequest.permission": IntRange(0, 0o7777),
        _NN + "CreateRequest.path": MaxBytes(PATH_MAX_BYTES),
        _NN + "CreateRequest.permission": IntRange(0, 0o7777),
        _NN + "CreateRequest.length": _TXID,
        _NN + "CreateRequest.replication": IntRange(0, 512),
        _NN + "DeleteRequest.path": MaxBytes(PATH_MAX_BYTES),
        _NN + "RenameRequest.src": MaxBytes(PATH_MAX_BYTES),
        _NN + "RenameRequest.dst": MaxBytes(PATH_MAX_BYTES),
        _NN + "GetListingRequest.path": MaxBytes(PATH_MAX_BYTES),
        _NN + "GetListingRequest.start_after": MaxBytes(NAME_MAX_BYTES),
        _NN + "GetListingRequest.limit": IntRange(0, 2**32 - 1),
        _NN + "GetFileInfoRequest.path": MaxBytes(PATH_MAX_BYTES),
        # A session's own fields; the calls it carries have their own entries above, and
        # the count of a multi's ops is the NameNode's rule (dfs.namenode.multi.max-ops).
        _NN + "SessionRequest.id": IntRange(0, 2**64 - 1),
        _NN + "SessionRequest.seen_txid": _TXID,
        # HAServiceProtocol.
        _NN + "CedeRequest.millis_to_cede": IntRange(0, CEDE_MAX_MILLIS),
        # NamenodeProtocol.
        _NN + "GetImageRequest.txid": _TXID,
        _NN + "GetEditSegmentsRequest.since_txid": _TXID,
        _NN + "CheckpointInfo.txid": _TXID,
        _NN + "CheckpointInfo.md5": MaxBytes(MD5_HEX_BYTES),
        _NN + "CheckpointInfo.size": _TXID,
        _NN + "ImageUpload.data": MaxBytes(IMAGE_CHUNK_MAX_BYTES),
        _NN + "PurgeRequest.min_txid_to_keep": _TXID,
        # QJournalService.
        _JN + "NamespaceInfo.cluster_id": _ID,
        _JN + "NamespaceInfo.namespace_id": _TXID,
        _JN + "NamespaceInfo.ctime": _TXID,
        _JN + "NamespaceInfo.layout_version": IntRange(0, 2**32 - 1),
        _JN + "RequestInfo.journal_id": _ID,
        _JN + "RequestInfo.cluster_id": _ID,
        _JN + "RequestInfo.epoch": _EPOCH,
        _JN + "RequestInfo.ipc_serial_number": _TXID,
        _JN + "RequestInfo.committed_txid": _TXID,
        _JN + "SegmentState.start_txid": _TXID,
        _JN + "SegmentState.end_txid": _TXID,
        _JN + "SegmentState.md5": MaxBytes(MD5_BYTES),
        _JN + "IsFormattedRequest.journal_id": _ID,
        _JN + "FormatRequest.journal_id": _ID,
        _JN + "GetJournalStateRequest.journal_id": _ID,
        _JN + "GetJournalStateRequest.cluster_id": _ID,
        _JN + "NewEpochRequest.journal_id": _ID,
        _JN + "NewEpochRequest.epoch": _EPOCH,
        _JN + "StartLogSegmentRequest.txid": _TXID,
        _JN + "StartLogSegmentRequest.layout_version": IntRange(0, 2**32 - 1),
        _JN + "JournalRequest.first_txid": _TXID,
        _JN + "JournalRequest.num_txns": IntRange(0, TXNS_PER_CALL),
        _JN + "JournalRequest.records": MessageLimit(),
        _JN + "JournalRequest.segment_txid": _TXID,
        _JN + "FinalizeLogSegmentRequest.start_txid": _TXID,
        _JN + "FinalizeLogSegmentRequest.end_txid": _TXID,
        _JN + "FinalizeLogSegmentRequest.md5": MaxBytes(MD5_BYTES),
        _JN + "PurgeLogsRequest.min_txid_to_keep": _TXID,
        _JN + "GetEditLogManifestRequest.journal_id": _ID,
        _JN + "GetEditLogManifestRequest.cluster_id": _ID,
        _JN + "GetEditLogManifestRequest.since_txid": _TXID,
        _JN + "PrepareRecoveryRequest.segment_txid": _TXID,
        _JN + "AcceptRecoveryRequest.from_url": MaxBytes(ADDRESS_MAX_BYTES),
        _JN + "GetSegmentRequest.journal_id": _ID,
        _JN + "GetSegmentRequest.cluster_id": _ID,
        _JN + "GetSegmentRequest.start_txid": _TXID,
        _JN + "GetSegmentRequest.end_txid": _TXID,
        _JN + "GetSegmentMd5Request.journal_id": _ID,
        _JN + "GetSegmentMd5Request.cluster_id": _ID,
        _JN + "GetSegmentMd5Request.start_txid": _TXID,
        _JN + "GetJournaledEditsRequest.journal_id": _ID,
        _JN + "GetJournaledEditsRequest.cluster_id": _ID,
        _JN + "GetJournaledEditsRequest.since_txid": _TXID,
        _JN + "GetJournaledEditsRequest.max_txns": IntRange(0, TXNS_PER_CALL),
        _JN + "SubscribeEditsRequest.journal_id": _ID,
        _JN + "SubscribeEditsRequest.cluster_id": _ID,
        _JN + "SubscribeEditsRequest.since_txid": _TXID,
    }
)


@dataclass(frozen=True, slots=True)
class BoundViolation:
    """The first field of a request outside its bound: its path in the request and why."""

    field: str
    message: str


def check(request: Message, _prefix: str = "") -> BoundViolation | None:
    """The first field of ``request`` (nested messages included) outside its bound, or None.

    A field without an entry in ``BOUNDS`` is not checked here; the completeness test keeps
    the table whole."""
    for descriptor, value in request.ListFields():
        path = _prefix + descriptor.name
        if descriptor.type == FieldDescriptor.TYPE_MESSAGE:
            items = value if _is_repeated(descriptor) else (value,)
            for item in items:
                found = check(item, path + ".")
                if found is not None:
                    return found
            continue
        bound = BOUNDS.get(descriptor.full_name)
        if bound is None:
            continue
        for item in value if _is_repeated(descriptor) else (value,):
            why = bound.violation(item)
            if why is not None:
                return BoundViolation(path, f"request field {path} {why}")
    return None


def _is_repeated(descriptor: FieldDescriptor) -> bool:
    return bool(descriptor.is_repeated)
