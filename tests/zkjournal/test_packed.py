"""A NameNode's packed segments of the ZooKeeper journal (docs/architecture.md §9.3):
written whole and in order, read from any txid, refused when they would leave a gap or
overlap, served to a peer from any txid, purged below a bound."""

from __future__ import annotations

from pathlib import Path

import pytest

from proto import edits_pb2, records
from zkjournal.errors import ZKJournalError
from zkjournal.packed import PackedSegments


def framed(first: int, count: int) -> bytes:
    return records.frame_ops(
        edits_pb2.EditOp(txid=t, mkdir=edits_pb2.MkdirOp(path=f"/d{t}"))
        for t in range(first, first + count)
    )


def test_segments_are_written_in_order_and_read_from_any_txid(tmp_path: Path) -> None:
    packed = PackedSegments(tmp_path / "zkjournal")
    assert packed.last_txid == 0 and list(packed.read(1)) == []
    packed.write(1, 10, framed(1, 10))
    packed.write(11, 15, framed(11, 5))
    assert packed.last_txid == 15
    assert [op.txid for op in packed.read(7, up_to=12)] == list(range(7, 13))
    assert b"".join(packed.framed_from(9)) == framed(9, 7)
    with pytest.raises(ZKJournalError, match="end at txid 15"):
        packed.write(20, 21, framed(20, 2))
    with pytest.raises(ZKJournalError, match="the records say 16-17"):
        packed.write(16, 18, framed(16, 2))
    assert packed.purge_below(11) == 1
    assert [first for first, _, _ in packed.segments()] == [11]
    # Another object on the same directory (the NameNode's reader and its writer) sees it.
    assert PackedSegments(tmp_path / "zkjournal").last_txid == 15


def test_a_damaged_segment_is_named(tmp_path: Path) -> None:
    packed = PackedSegments(tmp_path)
    path = packed.write(1, 3, framed(1, 3))
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ZKJournalError, match=f"packed segment {path}: record checksum"):
        list(packed.read(1))
