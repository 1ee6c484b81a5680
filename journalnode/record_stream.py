"""A segment's validated record stream (docs/protocol.md §7.2, HDFS-3077 §4.1), over any
binary file object: a real segment file, or ``io.BytesIO`` in tests.

A segment is ``proto.records.SEGMENT_HEADER`` then framed records. ``stream_records``
validates records chunk by chunk and yields only whole, checked records, so a reader never
passes on part of a bad one; it reports how far the stream was valid, and whether the error
is a record cut short by the end of the file (the usual crash leftover, a torn tail) or
corruption. ``read_validated`` is what ``FileJournalStorage.read_segment`` streams to a
reader; ``drain`` runs a stream for its verdict only (start-up scans, downloads).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Generator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from journalnode.errors import CorruptSegmentError, JournalStateError, StorageError
from journalnode.fsutil import storage_errors
from proto import records

CHUNK_SIZE = 1024 * 1024

_LENGTH = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Progress:
    """How far a stream of records validated: ``valid_end`` is a file offset.

    ``torn`` says the error is a record cut short by the end of the file (the usual crash
    leftover), as opposed to a checksum, framing or txid error.
    """

    count: int
    last_txid: int
    valid_end: int
    error: records.RecordError | None
    torn: bool


def header_status(header: bytes, path: Path | str) -> str:
    """'ok', 'short' (creation torn by a crash) or 'bad-magic'; a segment written by another
    layout version is not ours to judge or repair."""
    if len(header) < records.HEADER_LEN:
        return "short"
    if not header.startswith(records.SEGMENT_MAGIC):
        return "bad-magic"
    if header != records.SEGMENT_HEADER:
        version = struct.unpack_from(">I", header, len(records.SEGMENT_MAGIC))[0]
        raise StorageError(
            f"{path} has segment layout version {version}; this JournalNode reads"
            f" version {records.LAYOUT_VERSION}"
        )
    return "ok"


def read_exact(f: BinaryIO, n: int) -> bytes:
    parts: list[bytes] = []
    while n > 0:
        chunk = f.read(n)
        if not chunk:
            break
        parts.append(chunk)
        n -= len(chunk)
    return b"".join(parts)


def stream_records(
    f: BinaryIO, start_txid: int, stop_after: int | None
) -> Generator[bytes, None, Progress]:
    """Validate the records of ``f`` (positioned just after the header) chunk by chunk.

    Yields validated bytes only, so a reader never passes on part of a bad record; stops
    after the record with txid ``stop_after`` when given, at the first bad record, or at the
    end of the file, and returns how far it got. Memory stays around one chunk plus one
    record, whatever the segment's size. Validation itself is ``records.scan``; this only
    finds where whole records end so that each scan sees complete records.
    """
    offset = records.HEADER_LEN  # file offset of buf[0]
    expect = start_txid
    count, last = 0, start_txid - 1
    if stop_after is not None and stop_after < start_txid:
        return Progress(0, last, offset, None, False)
    buf = b""
    while True:
        chunk = f.read(CHUNK_SIZE)
        eof = not chunk
        buf = buf + chunk if buf else chunk
        if eof and not buf:
            return Progress(count, last, offset, None, False)
        pos, whole, n = 0, 0, len(buf)
        partial_at: int | None = None
        reached_stop = False
        while n - pos >= records.FRAME_LEN:
            (length,) = _LENGTH.unpack_from(buf, pos)
            if length == 0 or length > records.MAX_RECORD_LEN:
                pos = n  # hand the bad frame to scan, which reports it with its offset
                break
            end = pos + records.FRAME_LEN + length
            if end > n:
                break
            pos, whole = end, whole + 1
            if stop_after is not None and expect + whole - 1 >= stop_after:
                reached_stop = True
                break
        if eof and pos < n and not reached_stop:
            partial_at, pos = pos, n  # a record cut by the end of the file: a torn tail
        if pos == 0:
            continue
        result = records.scan(memoryview(buf)[:pos], expect, base=offset)
        if result.count:
            count += result.count
            last = result.last_txid
            expect = last + 1
        if result.valid_len:
            yield buf[: result.valid_len]
        if result.error is not None:
            torn = partial_at is not None and result.error.offset == offset + partial_at
            return Progress(count, last, offset + result.valid_len, result.error, torn)
        buf = buf[result.valid_len :]
        offset += result.valid_len
        if reached_stop or eof:
            return Progress(count, last, offset, None, False)


def drain(gen: Generator[bytes, None, Progress]) -> Progress:
    while True:
        try:
            next(gen)
        except StopIteration as stop:
            result: Progress = stop.value
            return result


def corrupt(path: Path | str, offset: int, reason: str) -> CorruptSegmentError:
    return CorruptSegmentError(f"corrupt edit log segment {path} at byte offset {offset}: {reason}")


def read_raw(f: BinaryIO, path: Path | str) -> Iterator[bytes]:
    with f, storage_errors("read", path):
        while chunk := f.read(CHUNK_SIZE):
            yield chunk


def read_validated(
    f: BinaryIO, path: Path | str, start_txid: int, end_txid: int | None, fin_end: int | None
) -> Iterator[bytes]:
    """Stream header and records, validated, up to end_txid (or a finalized segment's end)."""
    stop = end_txid if end_txid is not None else fin_end
    with f:
        with storage_errors("read", path):
            header = read_exact(f, records.HEADER_LEN)
        if header != records.SEGMENT_HEADER:
            raise corrupt(path, 0, "bad segment header")
        yield header
        with storage_errors("read", path):
            progress = yield from stream_records(f, start_txid, stop)
            size = f.seek(0, os.SEEK_END)
        err = progress.error
        if err is not None and not (progress.torn and fin_end is None):
            raise corrupt(path, err.offset, str(err).removesuffix(f" at offset {err.offset}"))
        if stop is not None and progress.last_txid < stop:
            if fin_end is not None:
                raise corrupt(
                    path,
                    progress.valid_end,
                    f"file ends after txid {progress.last_txid} but the segment ends at {fin_end}",
                )
            raise JournalStateError(
                f"{path} ends at txid {progress.last_txid}, before the requested txid {stop}"
            )
        if end_txid is None and fin_end is not None and size > progress.valid_end:
            raise corrupt(path, progress.valid_end, f"data after the segment's last txid {fin_end}")
