"""Framing of edit-log records, shared by the writer (qjm) and the JournalNode.

docs/protocol.md §7.2: a segment file is a header followed by records
``[u32 length][u32 crc32c][EditOp bytes]`` (big-endian). The writer frames a batch once;
the JournalNode checks it and appends the bytes verbatim, so the same bytes travel the
wire, land on every JN's disk and are streamed back to readers.

Everything here is pure: bytes in, values out.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import cast

import crc32c

from proto import edits_pb2

SEGMENT_MAGIC = b"HNEDITS\x00"
LAYOUT_VERSION = 1
SEGMENT_HEADER = SEGMENT_MAGIC + struct.pack(">I", LAYOUT_VERSION)
HEADER_LEN = len(SEGMENT_HEADER)

_FRAME = struct.Struct(">II")
FRAME_LEN = _FRAME.size
# A single edit is small; anything larger is corruption, not data.
MAX_RECORD_LEN = 16 * 1024 * 1024


class RecordError(ValueError):
    """A framed record is malformed. ``offset`` is relative to the start of the buffer."""

    def __init__(self, message: str, offset: int) -> None:
        super().__init__(f"{message} at offset {offset}")
        self.offset = offset


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a scan of framed records found.

    ``valid_len`` is the length of the longest prefix made of whole, valid records;
    ``first_txid``/``last_txid`` are 0 when no record was valid; ``error`` describes why the
    scan stopped before the end of the buffer (None when every byte was consumed).
    """

    count: int
    first_txid: int
    last_txid: int
    valid_len: int
    error: RecordError | None


def frame(op_bytes: bytes) -> bytes:
    """Frame one serialized EditOp."""
    return _FRAME.pack(len(op_bytes), crc32c.crc32c(op_bytes)) + op_bytes


def frame_ops(ops: Iterable[edits_pb2.EditOp]) -> bytes:
    """Serialize and frame a batch of EditOps into one buffer."""
    return b"".join(frame(op.SerializeToString()) for op in ops)


def record_offsets(buf: bytes | memoryview) -> list[int]:
    """Start offset of each record, then the end: for a buffer already checked (``scan``), so
    only the lengths in the frame headers are read, no checksums."""
    offsets = []
    pos, end = 0, len(buf)
    while pos < end:
        offsets.append(pos)
        length, _ = _FRAME.unpack_from(buf, pos)
        pos += FRAME_LEN + length
    offsets.append(end)
    return offsets


def iter_records(buf: bytes | memoryview, base: int = 0) -> Iterator[tuple[int, bytes]]:
    """Yield ``(offset, op_bytes)`` for each record; raise RecordError on the first bad one."""
    view = memoryview(buf)
    pos = 0
    end = len(view)
    while pos < end:
        if end - pos < FRAME_LEN:
            raise RecordError("truncated record header", base + pos)
        length, crc = _FRAME.unpack_from(view, pos)
        if length == 0 or length > MAX_RECORD_LEN:
            raise RecordError(f"implausible record length {length}", base + pos)
        body_start = pos + FRAME_LEN
        body_end = body_start + length
        if body_end > end:
            raise RecordError("truncated record body", base + pos)
        body = bytes(view[body_start:body_end])
        if crc32c.crc32c(body) != crc:
            raise RecordError("record checksum mismatch", base + pos)
        yield base + pos, body
        pos = body_end


def scan(
    buf: bytes | memoryview, expected_first_txid: int | None = None, base: int = 0
) -> ScanResult:
    """Validate framed records and their txids, stopping at the first bad or out-of-order one.

    Txids must be contiguous; when ``expected_first_txid`` is given the first record must
    carry it. The result says how much of the buffer is whole and valid.

    This is the JournalNode's hot path (every Journal RPC scans its batch), so it checks
    exactly what ``iter_records`` checks, record by record and with the same messages, in one
    loop without a generator or copies of the record bodies.
    """
    count = 0
    first = last = 0
    valid_len = 0
    expect = expected_first_txid
    view = buf if isinstance(buf, memoryview) else memoryview(buf)
    end = len(view)
    unpack_frame = _FRAME.unpack_from
    checksum = crc32c.crc32c
    # protobuf parses any buffer (a memoryview slice: no copy of the body); its stub says bytes.
    parse = cast(Callable[[memoryview], edits_pb2.EditOp], edits_pb2.EditOp.FromString)
    pos = 0

    def stop(message: str) -> ScanResult:
        return ScanResult(count, first, last, valid_len, RecordError(message, base + pos))

    while pos < end:
        if end - pos < FRAME_LEN:
            return stop("truncated record header")
        length, crc = unpack_frame(view, pos)
        if length == 0 or length > MAX_RECORD_LEN:
            return stop(f"implausible record length {length}")
        body_end = pos + FRAME_LEN + length
        if body_end > end:
            return stop("truncated record body")
        body = view[pos + FRAME_LEN : body_end]
        if checksum(body) != crc:
            return stop("record checksum mismatch")
        try:
            txid = parse(body).txid
        except Exception as exc:  # protobuf raises DecodeError (a plain Exception subclass)
            return stop(f"undecodable EditOp ({exc})")
        if expect is not None and txid != expect:
            return stop(f"txid {txid} where {expect} was expected")
        if count == 0:
            first = txid
        last = txid
        count += 1
        expect = txid + 1
        pos = valid_len = body_end
    return ScanResult(count, first, last, valid_len, None)


def decode_ops(buf: bytes | memoryview) -> list[edits_pb2.EditOp]:
    """Decode every record of a buffer into EditOps; raise RecordError on a bad record."""
    return [edits_pb2.EditOp.FromString(body) for _, body in iter_records(buf)]
