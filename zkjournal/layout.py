"""The ZooKeeper journal's znodes and what each holds (docs/protocol.md §15): pure values and
encodings, no client.

Under the path of ``zookeeper://<hosts>/<path>``::

    <path>               the namespace info (JSON): written by format, checked by everyone
    <path>/epoch         the writer epoch (JSON); its znode version fences every append
    <path>/tail          the last txid appended (JSON); its version orders the appends
    <path>/log/b-<first txid, 20 digits>-<sequence, 10 digits>
                         one batch of framed edits each: a header, then the records exactly
                         as the QJM sends them (proto.records)
    <path>/persisted     what the active's publisher deleted through (JSON)
    <path>/persisted/<nn>  the last txid NameNode <nn> packed on its disk (JSON)
    <path>/purge-bound   the checkpoints' purge bound, below which packed segments go (JSON)

    paths = JournalPaths("/hanamenode/journal/ns1")
    data = encode_batch(BatchHeader(epoch=3, first_txid=41, count=2), framed)
    header, framed = decode_batch(data, "b-...")
"""

from __future__ import annotations

import json
import re
import struct
from dataclasses import dataclass
from typing import Any

from proto import records
from proto.values import NamespaceInfo
from zkjournal.errors import ZKJournalError

__all__ = [
    "BATCH_HEADER_LEN",
    "BatchHeader",
    "JournalPaths",
    "Tail",
    "batch_first_txid",
    "batch_sequence",
    "decode_batch",
    "decode_epoch",
    "decode_namespace",
    "encode_batch",
    "encode_epoch",
    "encode_namespace",
    "split_framed",
]

BATCH_MAGIC = b"ZKJ1"
_HEADER = struct.Struct(">4sQQI")  # magic, epoch, first txid, count
BATCH_HEADER_LEN = _HEADER.size
_BATCH_NAME = re.compile(r"b-(\d{20})-(\d{10})")
BATCH_PREFIX = "b-"


def join(parent: str, *names: str) -> str:
    return "/".join((parent.rstrip("/"), *names))


@dataclass(frozen=True, slots=True)
class JournalPaths:
    """The znodes of one ZooKeeper journal under ``root``."""

    root: str

    @property
    def epoch(self) -> str:
        return join(self.root, "epoch")

    @property
    def tail(self) -> str:
        return join(self.root, "tail")

    @property
    def log(self) -> str:
        return join(self.root, "log")

    @property
    def persisted(self) -> str:
        """Its data: what the publisher deleted through; its children: what each NameNode
        packed (``persisted/<nn>``)."""
        return join(self.root, "persisted")

    @property
    def purge_bound(self) -> str:
        """The checkpoints' purge bound the active last recorded: every NameNode purges its
        packed segments below it."""
        return join(self.root, "purge-bound")

    def persisted_by(self, nn_id: str) -> str:
        return join(self.persisted, nn_id)

    def batch_prefix(self, first_txid: int) -> str:
        """What a batch starting at ``first_txid`` is created as (ZooKeeper appends the
        sequence number)."""
        return join(self.log, f"{BATCH_PREFIX}{first_txid:020d}-")


def batch_first_txid(name: str) -> int:
    """The first txid of batch znode ``name`` (from its name alone)."""
    return int(_parse_name(name).group(1))


def batch_sequence(name: str) -> int:
    """ZooKeeper's sequence number of batch znode ``name``: the order of the appends."""
    return int(_parse_name(name).group(2))


def _parse_name(name: str) -> re.Match[str]:
    found = _BATCH_NAME.fullmatch(name)
    if found is None:
        raise ZKJournalError(f"not a batch znode of the live log: {name!r}")
    return found


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """Who wrote a batch (its writer epoch) and which txids it holds."""

    epoch: int
    first_txid: int
    count: int

    @property
    def last_txid(self) -> int:
        return self.first_txid + self.count - 1


def encode_batch(header: BatchHeader, framed: bytes) -> bytes:
    return _HEADER.pack(BATCH_MAGIC, header.epoch, header.first_txid, header.count) + framed


def decode_batch(data: bytes, name: str) -> tuple[BatchHeader, bytes]:
    """The header and the framed records of batch znode ``name``; ZKJournalError naming the
    znode when it is not a well-formed batch (records checked as a JournalNode checks them)."""
    if len(data) < BATCH_HEADER_LEN:
        raise ZKJournalError(f"batch znode {name}: {len(data)} bytes, shorter than its header")
    magic, epoch, first, count = _HEADER.unpack_from(data)
    if magic != BATCH_MAGIC:
        raise ZKJournalError(f"batch znode {name}: bad magic {magic!r}")
    framed = data[BATCH_HEADER_LEN:]
    scan = records.scan(framed, expected_first_txid=first)
    if scan.error is not None or scan.count != count:
        raise ZKJournalError(
            f"batch znode {name}: header says {count} records from txid {first}, the records "
            f"say {scan.count} ({scan.error or 'no error'})"
        )
    return BatchHeader(epoch, first, count), framed


def split_framed(first_txid: int, framed: bytes, max_bytes: int) -> list[tuple[int, int, bytes]]:
    """``framed`` (records from ``first_txid`` on) cut at record boundaries into pieces of at
    most ``max_bytes`` each: ``(first, count, bytes)`` in order. A single record larger than
    ``max_bytes`` is a ZKJournalError naming its txid (it could never be stored).

    >>> from proto import records
    >>> framed = records.frame(b"a" * 10) * 3
    >>> [(f, c, len(b)) for f, c, b in split_framed(5, framed, 40)]
    [(5, 2, 36), (7, 1, 18)]
    """
    offsets = records.record_offsets(framed)
    pieces: list[tuple[int, int, bytes]] = []
    start_index = 0
    for index in range(1, len(offsets)):
        size = offsets[index] - offsets[index - 1]
        if size > max_bytes:
            raise ZKJournalError(
                f"edit txid {first_txid + index - 1} takes {size} bytes framed, more than a "
                f"znode of the live log may hold ({max_bytes} bytes, "
                "dfs.namenode.zookeeper-journal.max-znode-bytes)"
            )
        if offsets[index] - offsets[start_index] > max_bytes:
            end = index - 1
            pieces.append(
                (first_txid + start_index, end - start_index,
                 framed[offsets[start_index] : offsets[end]])
            )
            start_index = end
    if start_index < len(offsets) - 1:
        pieces.append(
            (first_txid + start_index, len(offsets) - 1 - start_index,
             framed[offsets[start_index] :])
        )
    return pieces


@dataclass(frozen=True, slots=True)
class Tail:
    """What ``<path>/tail`` says: the last txid appended, by which epoch."""

    last_txid: int
    epoch: int

    def to_bytes(self) -> bytes:
        return json.dumps({"last_txid": self.last_txid, "epoch": self.epoch}).encode()

    @classmethod
    def from_bytes(cls, data: bytes, path: str) -> Tail:
        fields = _json(data, path)
        try:
            return cls(int(fields["last_txid"]), int(fields["epoch"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise ZKJournalError(f"znode {path}: not a tail ({exc!r}): {data[:100]!r}") from None


def encode_epoch(epoch: int, writer: str) -> bytes:
    return json.dumps({"epoch": epoch, "writer": writer}).encode()


def decode_epoch(data: bytes, path: str) -> int:
    try:
        return int(_json(data, path)["epoch"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ZKJournalError(f"znode {path}: not an epoch ({exc!r}): {data[:100]!r}") from None


def encode_namespace(ns: NamespaceInfo) -> bytes:
    return json.dumps(
        {
            "cluster_id": ns.cluster_id,
            "namespace_id": ns.namespace_id,
            "ctime": ns.ctime,
            "layout_version": ns.layout_version,
        },
        sort_keys=True,
    ).encode()


def decode_namespace(data: bytes, path: str) -> NamespaceInfo:
    fields = _json(data, path)
    try:
        return NamespaceInfo(
            str(fields["cluster_id"]),
            int(fields["namespace_id"]),
            int(fields["ctime"]),
            int(fields["layout_version"]),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise ZKJournalError(
            f"znode {path}: not a formatted journal's namespace info ({exc!r}): {data[:100]!r}"
        ) from None


def _json(data: bytes, path: str) -> dict[str, Any]:
    try:
        fields = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ZKJournalError(f"znode {path}: not JSON ({exc}): {data[:100]!r}") from None
    if not isinstance(fields, dict):
        raise ZKJournalError(f"znode {path}: not a JSON object: {data[:100]!r}")
    return fields
