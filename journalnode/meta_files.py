"""The small files a journal keeps beside its segments (docs/protocol.md §7.1, HDFS-3077
§4.1), their names and their encodings, as pure functions of bytes::

    VERSION                clusterID, namespaceID, cTime, ... (``durable.version``)
    last-promised-epoch    "N\\n", replaced atomically
    last-writer-epoch      "N\\n", replaced atomically
    committed-txid         8 bytes big-endian, best effort
    paxos/<segment_txid>   PersistedRecoveryPaxosData
    rejoin-sync-until      "N\\n": a self-formatted JournalNode votes again once it holds
                           finalized segments through txid N (docs/protocol.md §10.3)
    edits_<s>-<e>.md5      "<32 hex digits>\\n": the md5 of a finalized segment's records
                           (docs/protocol.md §8.7)

``FileJournalStorage`` reads and writes them; the parsing and the checks live here so that
a malformed file is a ``StorageError`` naming it, tested without a directory.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path

from durable import version
from journalnode.errors import InvalidRequestError, StorageError
from journalnode.storage import AcceptedRecovery
from proto import journal_pb2
from proto.values import NamespaceInfo, SegmentState

VERSION_FILE = "VERSION"
LAST_PROMISED_EPOCH_FILE = "last-promised-epoch"
LAST_WRITER_EPOCH_FILE = "last-writer-epoch"
COMMITTED_TXID_FILE = "committed-txid"
PAXOS_DIR = "paxos"
SYNC_UNTIL_FILE = "rejoin-sync-until"
STORAGE_TYPE = version.JOURNAL_NODE

_EPOCH = re.compile(rb"\d{1,20}\n?")
_COMMITTED = struct.Struct(">Q")


# --------------------------------------------------------------------- VERSION


def version_bytes(ns: NamespaceInfo) -> bytes:
    """VERSION for ``ns``; InvalidRequestError when ``ns`` could not be read back as it is."""
    try:
        return version.format_version(ns, STORAGE_TYPE, title="hanamenode JournalNode storage")
    except version.VersionFileError as exc:
        raise InvalidRequestError(str(exc)) from None


def parse_version(path: Path, data: bytes) -> NamespaceInfo:
    try:
        return version.parse_version(data, str(path), STORAGE_TYPE)
    except version.VersionFileError as exc:
        raise StorageError(str(exc)) from None


# --------------------------------------------------------------------- epochs


def epoch_bytes(epoch: int) -> bytes:
    return f"{int(epoch)}\n".encode()


def parse_epoch(path: Path, data: bytes | None) -> int:
    """An epoch file's value; 0 when the file does not exist (``data`` None)."""
    if data is None:
        return 0
    if not _EPOCH.fullmatch(data):
        raise StorageError(f"malformed epoch file {path}: {data[:40]!r}")
    return int(data)


# --------------------------------------------------------------------- committed txid


def committed_bytes(txid: int) -> bytes:
    return _COMMITTED.pack(txid)


def parse_committed(data: bytes | None) -> int:
    """Best effort (a torn write reads as 0): the value only feeds lag metrics."""
    if data is None or len(data) < _COMMITTED.size:
        return 0
    return int(_COMMITTED.unpack_from(data)[0])


# --------------------------------------------------------------------- accepted recoveries


def accepted_bytes(accepted: AcceptedRecovery) -> bytes:
    return journal_pb2.PersistedRecoveryPaxosData(
        segment_state=accepted.segment_state.to_pb(),
        accepted_in_epoch=accepted.accepted_in_epoch,
    ).SerializeToString()


def parse_accepted(path: Path, data: bytes) -> AcceptedRecovery:
    try:
        pb = journal_pb2.PersistedRecoveryPaxosData.FromString(data)
    except Exception as exc:  # protobuf's DecodeError is a plain Exception subclass
        raise StorageError(f"malformed accepted recovery {path}: {exc}") from exc
    if not pb.HasField("segment_state"):
        raise StorageError(f"malformed accepted recovery {path}: no segment state")
    return AcceptedRecovery(SegmentState.from_pb(pb.segment_state), pb.accepted_in_epoch)


# --------------------------------------------------------------------- segment digests

_DIGEST = re.compile(rb"([0-9a-f]{32})\n")


def digest_bytes(md5: bytes) -> bytes:
    """The content of a segment's digest file: the md5 of its records, in hex."""
    if len(md5) != 16:
        raise InvalidRequestError(f"a segment digest is 16 bytes of md5, got {len(md5)}")
    return md5.hex().encode() + b"\n"


def parse_digest(path: Path, data: bytes) -> bytes:
    """The md5 a digest file holds; StorageError naming the file when it is malformed."""
    m = _DIGEST.fullmatch(data)
    if m is None:
        raise StorageError(f"{path}: not a segment digest (expected 32 hex digits): {data[:64]!r}")
    return bytes.fromhex(m.group(1).decode())
