"""Segment names and the validated record stream as pure code: names are strings, streams
are ``io.BytesIO`` (the same functions ``FileJournalStorage`` runs over real files)."""

from __future__ import annotations

import io

import pytest

from journalnode import record_stream, segment_names
from journalnode.errors import CorruptSegmentError, JournalStateError, StorageError
from journalnode.segment_names import Kind, SegmentName, finalized_name, in_progress_name
from proto import edits_pb2, records


def ops(first: int, last: int, size: int = 20) -> bytes:
    return records.frame_ops(
        edits_pb2.EditOp(txid=t, noop=edits_pb2.NoOp(payload=(b"%d:" % t).ljust(size, b"x")))
        for t in range(first, last + 1)
    )


def body(first: int, last: int) -> io.BytesIO:
    """A stream positioned just after the header, as ``stream_records`` expects."""
    f = io.BytesIO(records.SEGMENT_HEADER + ops(first, last))
    f.seek(records.HEADER_LEN)
    return f


# ----------------------------------------------------------------------------- names


@pytest.mark.parametrize(
    ("name", "parsed"),
    [
        (in_progress_name(7), SegmentName(Kind.IN_PROGRESS, 7)),
        (finalized_name(1, 20), SegmentName(Kind.FINALIZED, 1, 20)),
        (in_progress_name(9) + ".empty", SegmentName(Kind.MOVED_ASIDE, 9)),
        (finalized_name(3, 4) + ".corrupt.2", SegmentName(Kind.MOVED_ASIDE, 3)),
        ("edits_inprogress_7", None),  # not 19 digits
        ("VERSION", None),
        ("." + in_progress_name(7) + ".ab12.tmp", None),  # a temp file is never a segment
    ],
)
def test_names_parse(name: str, parsed: SegmentName | None) -> None:
    assert segment_names.parse(name) == parsed


def test_names_sort_in_txid_order() -> None:
    starts = [1, 9, 10, 100, 2**40]
    names = [finalized_name(s, s + 1) for s in starts]
    assert sorted(names) == names
    assert all(
        n.startswith(segment_names.finalized_prefix(s)) for s, n in zip(starts, names, strict=True)
    )


# Purge removes what lies wholly below the first txid to keep, never the txid itself: a
# segment ending at min_txid_to_keep still holds a txid a reader may ask for (`<`, not `<=`).
@pytest.mark.parametrize(
    ("name", "min_txid_to_keep", "removed"),
    [
        (finalized_name(1, 10), 11, True),
        (finalized_name(1, 10), 10, False),  # ends exactly at the first txid to keep
        (finalized_name(1, 10), 5, False),
        (in_progress_name(1), 1000, False),  # the open segment is never purged
        (in_progress_name(5) + ".empty", 6, True),
        (in_progress_name(5) + ".empty", 5, False),
        (finalized_name(5, 9) + ".stale", 5, False),
        ("VERSION", 1000, False),
    ],
)
def test_purgeable(name: str, min_txid_to_keep: int, removed: bool) -> None:
    assert segment_names.purgeable(name, min_txid_to_keep) is removed


# ----------------------------------------------------------------------------- stream


def test_a_whole_segment_streams_back_byte_for_byte() -> None:
    gen = record_stream.stream_records(body(1, 50), 1, None)
    chunks = []
    while True:
        try:
            chunks.append(next(gen))
        except StopIteration as stop:
            progress = stop.value
            break
    assert b"".join(chunks) == ops(1, 50)
    assert (progress.count, progress.last_txid, progress.error) == (50, 50, None)
    assert progress.valid_end == records.HEADER_LEN + len(ops(1, 50))


def test_stop_after_ends_at_that_record() -> None:
    progress = record_stream.drain(record_stream.stream_records(body(1, 50), 1, 20))
    assert (progress.count, progress.last_txid) == (20, 20)
    assert progress.valid_end == records.HEADER_LEN + len(ops(1, 20))


@pytest.mark.parametrize("cut", [1, 7, 8, 20])
def test_a_torn_tail_is_reported_as_torn_at_the_last_whole_record(cut: int) -> None:
    data = records.SEGMENT_HEADER + ops(1, 5)
    f = io.BytesIO(data[:-cut])
    f.seek(records.HEADER_LEN)
    progress = record_stream.drain(record_stream.stream_records(f, 1, None))
    assert progress.torn and progress.error is not None
    assert (progress.count, progress.last_txid) == (4, 4)
    assert progress.valid_end == records.HEADER_LEN + len(ops(1, 4))


def test_a_flipped_byte_is_corruption_not_a_torn_tail() -> None:
    data = bytearray(records.SEGMENT_HEADER + ops(1, 5))
    data[-3] ^= 0xFF
    f = io.BytesIO(bytes(data))
    f.seek(records.HEADER_LEN)
    progress = record_stream.drain(record_stream.stream_records(f, 1, None))
    assert not progress.torn and progress.error is not None
    assert progress.count == 4


def test_a_txid_gap_stops_the_stream() -> None:
    f = io.BytesIO(records.SEGMENT_HEADER + ops(1, 3) + ops(5, 6))
    f.seek(records.HEADER_LEN)
    progress = record_stream.drain(record_stream.stream_records(f, 1, None))
    assert progress.error is not None and progress.last_txid == 3


def test_header_status() -> None:
    assert record_stream.header_status(records.SEGMENT_HEADER, "seg") == "ok"
    assert record_stream.header_status(records.SEGMENT_HEADER[:5], "seg") == "short"
    assert record_stream.header_status(b"X" * records.HEADER_LEN, "seg") == "bad-magic"
    other = records.SEGMENT_MAGIC + (records.LAYOUT_VERSION + 1).to_bytes(4, "big")
    with pytest.raises(StorageError, match="seg has segment layout version 2"):
        record_stream.header_status(other, "seg")


def test_read_validated_streams_a_finalized_segment_and_refuses_extra_data() -> None:
    whole = records.SEGMENT_HEADER + ops(1, 10)
    out = b"".join(record_stream.read_validated(io.BytesIO(whole), "seg", 1, None, 10))
    assert out == whole
    with pytest.raises(CorruptSegmentError, match="data after the segment's last txid 10"):
        b"".join(record_stream.read_validated(io.BytesIO(whole + ops(11, 11)), "seg", 1, None, 10))
    with pytest.raises(CorruptSegmentError, match="file ends after txid 9"):
        b"".join(
            record_stream.read_validated(
                io.BytesIO(records.SEGMENT_HEADER + ops(1, 9)), "seg", 1, None, 10
            )
        )


def test_read_validated_up_to_a_txid_of_an_in_progress_segment() -> None:
    whole = records.SEGMENT_HEADER + ops(1, 10)
    out = b"".join(record_stream.read_validated(io.BytesIO(whole), "seg", 1, 4, None))
    assert out == records.SEGMENT_HEADER + ops(1, 4)
    with pytest.raises(
        JournalStateError, match="seg ends at txid 10, before the requested txid 12"
    ):
        b"".join(record_stream.read_validated(io.BytesIO(whole), "seg", 1, 12, None))
    with pytest.raises(CorruptSegmentError, match="bad segment header"):
        b"".join(record_stream.read_validated(io.BytesIO(b"nope" + whole), "seg", 1, 4, None))
