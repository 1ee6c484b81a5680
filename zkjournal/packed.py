"""One NameNode's packed segments of the ZooKeeper journal (docs/architecture.md §9.3): the
batches of the live log it read, written to its own disk as finalized segment files, so
that ZooKeeper need keep only a window of recent batches.

``<name dir>/zkjournal/edits_<first, 19 digits>-<last, 19 digits>``: the segment header of
docs/protocol.md §7.2, then the framed records of txids ``first``..``last``, written whole
(``durable.files.atomic_write``: temp file, fsync, rename, directory fsync), so a file is
either there and complete or not there.

    packed = PackedSegments(name_dir / "zkjournal")
    packed.write(41, 60, framed)                 # txids 41-60, durable when it returns
    for op in packed.read(45): ...               # txids 45-60, in order
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator
from pathlib import Path

import structlog

from durable.files import atomic_write, ensure_dir
from proto import edits_pb2, records
from zkjournal.errors import ZKJournalError

__all__ = ["PackedSegments"]

log = structlog.get_logger(__name__)

_NAME = re.compile(r"edits_(\d{19})-(\d{19})")
_LOCKS: dict[Path, threading.Lock] = {}
_LOCKS_LOCK = threading.Lock()


class PackedSegments:
    """The packed segment files in ``directory`` (made on first write). Thread-safe."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        # One lock per directory in the process: a NameNode's reader and its active
        # period's writer both pack into it.
        with _LOCKS_LOCK:
            self._lock = _LOCKS.setdefault(directory.absolute(), threading.Lock())

    def segments(self) -> list[tuple[int, int, Path]]:
        """``(first, last, path)`` of every packed segment, by first txid."""
        if not self.directory.is_dir():
            return []
        found = []
        for path in self.directory.iterdir():
            match = _NAME.fullmatch(path.name)
            if match is not None:
                found.append((int(match.group(1)), int(match.group(2)), path))
        return sorted(found)

    @property
    def last_txid(self) -> int:
        """The last txid of the newest segment (0: none)."""
        segments = self.segments()
        return segments[-1][1] if segments else 0

    def write(self, first: int, last: int, framed: bytes) -> Path:
        """Write txids ``first``..``last`` (``framed``, checked here) as one segment; it
        must follow the newest segment (or be the first). ZKJournalError otherwise."""
        scan = records.scan(framed, expected_first_txid=first)
        if scan.error is not None or scan.last_txid != last or scan.valid_len != len(framed):
            raise ZKJournalError(
                f"packing txids {first}-{last}: the records say {scan.first_txid}-"
                f"{scan.last_txid} ({scan.error or 'no error'})"
            )
        with self._lock:
            newest = self.last_txid
            if newest and first != newest + 1:
                raise ZKJournalError(
                    f"packing txids {first}-{last} in {self.directory}: the packed segments "
                    f"end at txid {newest}"
                )
            ensure_dir(self.directory)
            path = self.directory / f"edits_{first:019d}-{last:019d}"
            atomic_write(path, records.SEGMENT_HEADER + framed)
        log.debug("packed segment", path=str(path), first=first, last=last)
        return path

    def framed_from(self, since_txid: int) -> Iterator[bytes]:
        """The framed records of every packed txid from ``since_txid`` on, one segment's
        worth at a time (what a peer that missed them fetches)."""
        for _, data in self._chunks(since_txid):
            yield data

    def _chunks(self, since_txid: int) -> Iterator[tuple[Path, bytes]]:
        for first, last, path in self.segments():
            if last < since_txid:
                continue
            data = path.read_bytes()[records.HEADER_LEN :]
            if first < since_txid:
                offsets = records.record_offsets(data)
                data = data[offsets[since_txid - first] :]
            yield path, data

    def read(self, since_txid: int, up_to: int | None = None) -> Iterator[edits_pb2.EditOp]:
        """The ops of the packed segments from ``since_txid`` (through ``up_to``), in order;
        ZKJournalError naming the file at a gap or a damaged record."""
        expected = since_txid
        for path, chunk in self._chunks(since_txid):
            for body in _bodies(path, chunk):
                op = edits_pb2.EditOp.FromString(body)
                if op.txid != expected:
                    raise ZKJournalError(
                        f"packed segments in {self.directory}: txid {op.txid} where "
                        f"{expected} was next"
                    )
                if up_to is not None and op.txid > up_to:
                    return
                yield op
                expected += 1

    def purge_below(self, min_txid_to_keep: int) -> int:
        """Delete the segments wholly below ``min_txid_to_keep``; how many."""
        purged = 0
        with self._lock:
            for _, last, path in self.segments():
                if last < min_txid_to_keep:
                    path.unlink()
                    purged += 1
        return purged


def _bodies(path: Path, chunk: bytes) -> Iterator[bytes]:
    """The records of ``chunk`` (read from ``path``); ZKJournalError naming the file at a
    damaged one."""
    try:
        for _, body in records.iter_records(chunk):
            yield body
    except records.RecordError as exc:
        raise ZKJournalError(f"packed segment {path}: {exc}") from None

