"""FileJournalStorage on real temporary directories, with real fsync (docs/protocol.md §7.1).

The crash cases are made by hand: a segment cut at every byte of its last record, a
flipped byte, a temp file left where an atomic write stopped before its rename.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from journalnode import fsutil
from journalnode.errors import (
    CorruptSegmentError,
    InvalidRequestError,
    JournalStateError,
    StorageError,
    StorageLockedError,
)
from journalnode.file_storage import (
    FileJournalStorage,
    finalized_name,
    in_progress_name,
    validate_journal_id,
)
from journalnode.segment_names import digest_name
from journalnode.storage import AcceptedRecovery, JournalStorage
from proto import edits_pb2, records
from proto.values import NamespaceInfo, SegmentState

REPO = Path(__file__).resolve().parents[2]
JID = "ns1"
NS = NamespaceInfo("cluster-A", 42, ctime=7, layout_version=1)


def ops(first: int, last: int, size: int = 20) -> bytes:
    """Framed NoOp records first..last, each with a payload that identifies it."""
    return records.frame_ops(
        edits_pb2.EditOp(txid=t, noop=edits_pb2.NoOp(payload=(b"%d:" % t).ljust(size, b"x")))
        for t in range(first, last + 1)
    )


def record_bounds(data: bytes) -> list[tuple[int, int]]:
    """(start, end) file offsets of every record of a segment file."""
    out = []
    for offset, body in records.iter_records(memoryview(data)[records.HEADER_LEN :]):
        start = records.HEADER_LEN + offset
        out.append((start, start + records.FRAME_LEN + len(body)))
    return out


@pytest.fixture
def storage(tmp_path: Path) -> Iterator[FileJournalStorage]:
    with FileJournalStorage(tmp_path, JID) as st:
        st.format(NS)
        yield st


def write_segment(st: FileJournalStorage, start: int, end: int) -> Path:
    st.start_segment(start)
    st.append(start, ops(start, end))
    return st.current_dir / in_progress_name(start)


def test_is_a_journal_storage(storage: FileJournalStorage) -> None:
    _: JournalStorage = storage  # mypy checks the Protocol; this keeps the claim visible


# ------------------------------------------------------------------- torn and corrupt tails


def test_torn_tail_at_every_byte_of_the_last_record(tmp_path: Path) -> None:
    with FileJournalStorage(tmp_path / "src", JID) as st:
        st.format(NS)
        path = write_segment(st, 1, 5)
        data = path.read_bytes()
    prev_end, full_end = record_bounds(data)[-1]
    assert full_end == len(data)

    for cut in range(prev_end, full_end):
        root = tmp_path / f"cut{cut}"
        with FileJournalStorage(root, JID) as st:
            st.format(NS)
            copy = st.current_dir / in_progress_name(1)
            copy.write_bytes(data[:cut])
            loaded = st.load()
            assert loaded.segments == (SegmentState(1, 4, True),), f"cut at {cut}"
            assert copy.stat().st_size == prev_end, f"cut at {cut}"
            # The repaired segment takes appends again, right after the last valid record.
            st.append(1, ops(5, 5))
            assert st.scan_segment(1) == SegmentState(1, 5, True)
            assert copy.read_bytes() == data


def test_flipped_byte_in_last_record_body_is_cut(storage: FileJournalStorage) -> None:
    path = write_segment(storage, 1, 5)
    data = bytearray(path.read_bytes())
    prev_end, _ = record_bounds(bytes(data))[-1]
    data[prev_end + records.FRAME_LEN + 3] ^= 0x40
    path.write_bytes(data)
    with capture_logs() as logs:
        loaded = storage.load()
    assert loaded.segments == (SegmentState(1, 4, True),)
    assert path.stat().st_size == prev_end
    [warning] = [e for e in logs if e["log_level"] == "warning"]
    assert warning["file"] == str(path)
    assert warning["offset"] == prev_end
    assert "checksum mismatch" in warning["error"]
    assert warning["journal"] == JID


def test_scan_segment_repairs_like_load(storage: FileJournalStorage) -> None:
    path = write_segment(storage, 1, 3)
    good = path.stat().st_size
    with open(path, "ab") as f:
        f.write(ops(4, 4)[:-2])
    assert storage.scan_segment(1) == SegmentState(1, 3, True)
    assert path.stat().st_size == good


@pytest.mark.parametrize("content", [records.SEGMENT_HEADER, records.SEGMENT_HEADER[:5], b""])
def test_empty_in_progress_segment_is_moved_aside(
    storage: FileJournalStorage, content: bytes
) -> None:
    write_segment(storage, 1, 3)
    storage.finalize_segment(1, 3)
    (storage.current_dir / in_progress_name(4)).write_bytes(content)
    loaded = storage.load()
    assert loaded.segments == (SegmentState(1, 3, False),)
    assert not (storage.current_dir / in_progress_name(4)).exists()
    aside = storage.current_dir / (in_progress_name(4) + ".empty")
    assert aside.read_bytes() == content


def test_bad_magic_is_moved_aside_as_corrupt(storage: FileJournalStorage) -> None:
    path = storage.current_dir / in_progress_name(1)
    path.write_bytes(b"NOTASEGMENTHDR" + ops(1, 2))
    assert storage.load().segments == ()
    assert (storage.current_dir / (path.name + ".corrupt")).exists()


def test_move_aside_never_overwrites(storage: FileJournalStorage) -> None:
    for _ in range(3):
        storage.start_segment(9)
        storage.move_aside(9, "stale")
    names = sorted(p.name for p in storage.current_dir.glob(in_progress_name(9) + "*"))
    base = in_progress_name(9)
    assert names == [f"{base}.stale", f"{base}.stale.1", f"{base}.stale.2"]
    assert storage.scan_segment(9) is None


# ------------------------------------------------------------------- finalized segments


def corrupt_middle_record(storage: FileJournalStorage) -> tuple[Path, int]:
    """Finalize 1..5 and flip a byte in the body of txid 3; return the path and its offset."""
    write_segment(storage, 1, 5)
    storage.finalize_segment(1, 5)
    path = storage.current_dir / finalized_name(1, 5)
    data = bytearray(path.read_bytes())
    bad_start, _ = record_bounds(bytes(data))[2]
    data[bad_start + records.FRAME_LEN + 1] ^= 0x01
    path.write_bytes(data)
    return path, bad_start


def test_corrupt_finalized_segment_names_file_and_offset(storage: FileJournalStorage) -> None:
    path, bad = corrupt_middle_record(storage)
    with pytest.raises(CorruptSegmentError) as verify_err:
        storage.verify_finalized(1)
    assert path.name in str(verify_err.value)
    assert f"byte offset {bad}:" in str(verify_err.value)

    received = bytearray()
    with pytest.raises(CorruptSegmentError) as read_err:
        for chunk in storage.read_segment(1):
            received += chunk
    assert path.name in str(read_err.value)
    assert f"byte offset {bad}:" in str(read_err.value)
    # Nothing of the bad record was handed out before the error.
    assert bytes(received) == path.read_bytes()[:bad]
    # load does not scan finalized segments (that is verify_finalized's job).
    assert storage.load().segments == (SegmentState(1, 5, False),)


def test_finalized_records_must_match_the_name(storage: FileJournalStorage) -> None:
    write_segment(storage, 1, 5)
    storage.finalize_segment(1, 5)
    path = storage.current_dir / finalized_name(1, 5)
    short = storage.current_dir / finalized_name(1, 6)
    path.rename(short)
    with pytest.raises(CorruptSegmentError, match="byte offset"):
        storage.verify_finalized(1)
    long = storage.current_dir / finalized_name(1, 4)
    short.rename(long)
    with pytest.raises(CorruptSegmentError, match="data after"):
        storage.verify_finalized(1)
    long.rename(path)
    assert storage.verify_finalized(1) == SegmentState(1, 5, False)


def test_finalized_name_first_after_last_is_an_error(storage: FileJournalStorage) -> None:
    (storage.current_dir / finalized_name(9, 8)).write_bytes(records.SEGMENT_HEADER)
    with pytest.raises(StorageError, match=finalized_name(9, 8)):
        storage.load()


def test_read_segment(storage: FileJournalStorage) -> None:
    write_segment(storage, 1, 5)
    whole = (storage.current_dir / in_progress_name(1)).read_bytes()
    assert b"".join(storage.read_segment(1)) == whole
    bounds = record_bounds(whole)
    assert b"".join(storage.read_segment(1, 3)) == whole[: bounds[2][1]]
    assert b"".join(storage.read_segment(1, 0)) == records.SEGMENT_HEADER
    with pytest.raises(JournalStateError):
        b"".join(storage.read_segment(1, 6))
    storage.finalize_segment(1, 5)
    assert b"".join(storage.read_segment(1)) == whole
    assert b"".join(storage.read_segment(1, 2)) == whole[: bounds[1][1]]
    with pytest.raises(JournalStateError):
        storage.read_segment(1, 6)
    with pytest.raises(JournalStateError):
        storage.read_segment(77)


def test_read_segment_streams_in_chunks(storage: FileJournalStorage) -> None:
    storage.start_segment(1)
    for t in range(1, 401, 100):
        storage.append(1, ops(t, t + 99, size=8000))  # about 3 MiB in all
    storage.finalize_segment(1, 400)
    chunks = list(storage.read_segment(1))
    assert len(chunks) > 3
    data = b"".join(chunks)
    assert data == (storage.current_dir / finalized_name(1, 400)).read_bytes()
    assert storage.verify_finalized(1) == SegmentState(1, 400, False)
    assert b"".join(storage.read_segment(1, 250)) == data[: record_bounds(data)[249][1]]


def test_finalize_is_idempotent(storage: FileJournalStorage) -> None:
    write_segment(storage, 1, 5)
    storage.finalize_segment(1, 5)
    storage.finalize_segment(1, 5)
    assert storage.scan_segment(1) == SegmentState(1, 5, False)
    with pytest.raises(JournalStateError):
        storage.finalize_segment(1, 6)
    with pytest.raises(JournalStateError):
        storage.start_segment(1)
    with pytest.raises(JournalStateError):
        storage.finalize_segment(10, 12)


# ------------------------------------------------------------------- install_segment


def test_install_segment(storage: FileJournalStorage) -> None:
    path = write_segment(storage, 1, 3)
    old = path.read_bytes()
    good = records.SEGMENT_HEADER + ops(1, 6)
    bad = bytearray(good)
    bad[-2] ^= 0xFF

    with pytest.raises(JournalStateError, match="expected up to 7"):
        storage.install_segment(1, [good], 7)
    with pytest.raises(JournalStateError, match="corrupt"):
        storage.install_segment(1, [bytes(bad)], 6)
    with pytest.raises(JournalStateError, match="header"):
        storage.install_segment(1, [ops(1, 6)], 6)
    with pytest.raises(JournalStateError, match="no transactions"):
        storage.install_segment(1, [records.SEGMENT_HEADER], 6)

    def failing() -> Iterator[bytes]:
        yield good[:10]
        raise ConnectionError("peer went away")

    with pytest.raises(ConnectionError):
        storage.install_segment(1, failing(), 6)
    assert path.read_bytes() == old
    assert [n for n in os.listdir(storage.current_dir) if fsutil.is_temp_name(n)] == []

    storage.install_segment(1, [good[:5], good[5:100], good[100:]], 6)
    assert path.read_bytes() == good
    assert storage.scan_segment(1) == SegmentState(1, 6, True)
    storage.append(1, ops(7, 7))  # the fd opened before the install is not reused
    assert storage.scan_segment(1) == SegmentState(1, 7, True)


# ------------------------------------------------------------------- small files


def test_epoch_write_interrupted_before_rename_keeps_old_value(tmp_path: Path) -> None:
    with FileJournalStorage(tmp_path, JID) as st:
        st.format(NS)
        st.persist_last_promised_epoch(3)
        st.persist_last_writer_epoch(2)
        # What atomic_write leaves if the process dies after fsync, before the rename.
        fd, tmp = fsutil.open_temp(st.current_dir, "last-promised-epoch")
        fsutil.write_all(fd, b"7\n")
        os.fsync(fd)
        os.close(fd)
    with FileJournalStorage(tmp_path, JID) as st:
        loaded = st.load()
        assert (loaded.last_promised_epoch, loaded.last_writer_epoch) == (3, 2)
        assert not tmp.exists()
        assert loaded.namespace_info == NS


@pytest.mark.parametrize("content", [b"", b"12x\n", b"\x00\x00", b"-1\n", b"3\n4\n"])
def test_garbage_epoch_file_is_an_error(storage: FileJournalStorage, content: bytes) -> None:
    (storage.current_dir / "last-writer-epoch").write_bytes(content)
    with pytest.raises(StorageError, match="last-writer-epoch"):
        storage.load()


def test_fresh_and_formatted_state(tmp_path: Path) -> None:
    with FileJournalStorage(tmp_path, JID) as st:
        loaded = st.load()
        assert loaded.namespace_info is None
        assert (loaded.last_promised_epoch, loaded.last_writer_epoch) == (0, 0)
        assert (loaded.committed_txid, loaded.segments, loaded.accepted) == (0, (), {})
        st.format(NS)
        st.persist_last_promised_epoch(5)
        st.persist_last_writer_epoch(4)
        st.persist_committed_txid(17)
        accepted = AcceptedRecovery(SegmentState(1, 3, True), 5)
        st.persist_accepted_recovery(1, accepted)
        write_segment(st, 1, 3)
    version = (tmp_path / JID / "current" / "VERSION").read_text()
    assert "clusterID=cluster-A\n" in version and "storageType=JOURNAL_NODE\n" in version
    with FileJournalStorage(tmp_path, JID) as st:
        loaded = st.load()
        assert loaded.namespace_info == NS
        assert (loaded.last_promised_epoch, loaded.last_writer_epoch) == (5, 4)
        assert loaded.committed_txid == 17
        assert loaded.accepted == {1: accepted}
        assert loaded.segments == (SegmentState(1, 3, True),)
        st.clear_accepted_recovery(1)
        st.clear_accepted_recovery(1)
        assert st.load().accepted == {}


def test_format_wipes_everything(storage: FileJournalStorage) -> None:
    write_segment(storage, 1, 3)
    storage.finalize_segment(1, 3)
    write_segment(storage, 4, 4)
    storage.move_aside(4, "stale")
    storage.persist_last_promised_epoch(9)
    storage.persist_committed_txid(3)
    storage.persist_accepted_recovery(4, AcceptedRecovery(SegmentState(4, 4, True), 9))
    other = NamespaceInfo("cluster-B", 43)
    storage.format(other)
    assert sorted(os.listdir(storage.current_dir)) == ["VERSION", "paxos"]
    assert os.listdir(storage.paxos_dir) == []
    loaded = storage.load()
    assert loaded.namespace_info == other
    assert (loaded.last_promised_epoch, loaded.committed_txid, loaded.segments) == (0, 0, ())
    storage.persist_committed_txid(5)  # the kept-open fd was not left on the deleted file
    assert storage.load().committed_txid == 5


def test_purge(storage: FileJournalStorage) -> None:
    for start, end in [(1, 10), (11, 20), (21, 30)]:
        write_segment(storage, start, end)
        storage.finalize_segment(start, end)
    for start in (15, 25):
        storage.start_segment(start)
        storage.move_aside(start, "empty")
    write_segment(storage, 31, 33)
    for seg in (1, 11, 21, 31):
        storage.persist_accepted_recovery(seg, AcceptedRecovery(SegmentState(seg, seg, True), 1))

    removed = storage.purge(21)
    assert sorted(removed) == sorted(
        [
            finalized_name(1, 10),
            digest_name(1, 10),
            finalized_name(11, 20),
            digest_name(11, 20),
            in_progress_name(15) + ".empty",
            "paxos/1",
            "paxos/11",
        ]
    )
    assert storage.load().segments == (SegmentState(21, 30, False), SegmentState(31, 33, True))
    assert sorted(storage.load().accepted) == [21, 31]
    assert (storage.current_dir / (in_progress_name(25) + ".empty")).exists()
    assert storage.purge(21) == []


# ------------------------------------------------------------------- appends


def test_append_reports_fdatasync_time_and_reopens_after_load(tmp_path: Path) -> None:
    seen: list[float] = []
    with FileJournalStorage(tmp_path, JID, sync_observer=seen.append) as st:
        st.format(NS)
        write_segment(st, 1, 2)
        assert len(seen) == 1 and seen[0] >= 0
        st.load()  # closes the append fd
        st.append(1, ops(3, 4))
        assert len(seen) == 2
        assert st.scan_segment(1) == SegmentState(1, 4, True)
        with pytest.raises(JournalStateError):
            st.append(99, ops(99, 99))


def test_segments_sorted_and_duplicate_in_progress_moved_aside(
    storage: FileJournalStorage,
) -> None:
    for start, end in [(100, 110), (1, 50), (51, 99)]:
        write_segment(storage, start, end)
        if start != 100:
            storage.finalize_segment(start, end)
    # An in-progress copy beside a finalized segment with the same start must not shadow it.
    (storage.current_dir / in_progress_name(1)).write_bytes(records.SEGMENT_HEADER + ops(1, 60))
    loaded = storage.load()
    assert loaded.segments == (
        SegmentState(1, 50, False),
        SegmentState(51, 99, False),
        SegmentState(100, 110, True),
    )
    assert (storage.current_dir / (in_progress_name(1) + ".stale")).exists()


# ------------------------------------------------------------------- lock, ids, layout


def test_second_instance_in_same_process_is_locked_out(tmp_path: Path) -> None:
    with FileJournalStorage(tmp_path, JID):
        with pytest.raises(StorageLockedError) as err:
            FileJournalStorage(tmp_path, JID)
        assert str(tmp_path / JID) in str(err.value)
        assert f"pid {os.getpid()}" in str(err.value)
    # Released on close.
    FileJournalStorage(tmp_path, JID).close()


def test_closed_storage_refuses_writes(tmp_path: Path) -> None:
    st = FileJournalStorage(tmp_path, JID)
    st.format(NS)
    st.start_segment(1)
    st.close()
    st.close()
    with pytest.raises(StorageError, match="closed"):
        st.persist_last_promised_epoch(1)
    with pytest.raises(StorageError, match="closed"):
        st.append(1, ops(1, 1))


def test_lock_held_by_another_process(tmp_path: Path) -> None:
    holder = textwrap.dedent(
        f"""
        import sys
        sys.path.insert(0, {str(REPO)!r})
        from pathlib import Path
        from journalnode.file_storage import FileJournalStorage
        st = FileJournalStorage(Path({str(tmp_path)!r}), {JID!r})
        print("locked", flush=True)
        sys.stdin.read()
        """
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", holder], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "locked"
        with pytest.raises(StorageLockedError) as err:
            FileJournalStorage(tmp_path, JID)
        assert str(tmp_path / JID) in str(err.value)
        assert f"pid {proc.pid}" in str(err.value)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(timeout=30)
    FileJournalStorage(tmp_path, JID).close()


@pytest.mark.parametrize("jid", ["", ".", "..", "a/b", "a b", "x" * 201, "é", "a\x00", 5])
def test_invalid_journal_ids(tmp_path: Path, jid: object) -> None:
    with pytest.raises(InvalidRequestError):
        validate_journal_id(jid)
    with pytest.raises(InvalidRequestError):
        FileJournalStorage(tmp_path, jid)  # type: ignore[arg-type]


@pytest.mark.parametrize("jid", ["ns1", "a.b-c_D", "x" * 200, "..."])
def test_valid_journal_ids(jid: str) -> None:
    assert validate_journal_id(jid) == jid


def test_describe(storage: FileJournalStorage) -> None:
    write_segment(storage, 1, 2)
    storage.finalize_segment(1, 2)
    storage.persist_last_promised_epoch(1)
    layout = dict(storage.describe())
    assert set(layout) == {
        "in_use.lock",
        "current/VERSION",
        "current/last-promised-epoch",
        f"current/{finalized_name(1, 2)}",
        f"current/{digest_name(1, 2)}",
    }
    assert layout["current/last-promised-epoch"] == 2
    assert layout[f"current/{finalized_name(1, 2)}"] == len(records.SEGMENT_HEADER + ops(1, 2))


def test_purge_keeps_what_holds_the_first_txid_to_keep(storage: FileJournalStorage) -> None:
    """Purging at ``m`` keeps a segment ending at ``m``, a moved-aside file starting at ``m``
    and the accepted recovery of a segment starting at ``m`` (issue 10: ``<=`` survived)."""
    write_segment(storage, 1, 10)
    storage.finalize_segment(1, 10)
    storage.start_segment(11)
    storage.move_aside(11, "empty")
    write_segment(storage, 11, 12)
    storage.persist_accepted_recovery(10, AcceptedRecovery(SegmentState(10, 10, True), 1))
    assert storage.purge(10) == []
    assert storage.purge(11) == [finalized_name(1, 10), digest_name(1, 10), "paxos/10"]
    assert (storage.current_dir / (in_progress_name(11) + ".empty")).exists()


def test_append_is_fdatasynced_after_its_write(
    storage: FileJournalStorage, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every append reaches the disk before it returns: a spy on fdatasync records the
    segment's size at each sync, and each append must end with a sync of all its bytes.
    (A kill -9 cannot show a missing sync: the page cache survives the process.)"""
    synced: list[tuple[str, int]] = []
    real = os.fdatasync

    def spy(fd: int) -> None:
        real(fd)
        synced.append((os.readlink(f"/proc/self/fd/{fd}"), os.fstat(fd).st_size))

    monkeypatch.setattr(os, "fdatasync", spy)
    storage.start_segment(1)
    path = str(storage.current_dir / in_progress_name(1))
    size = len(records.SEGMENT_HEADER)
    for first, last in ((1, 3), (4, 6), (7, 7)):
        storage.append(1, ops(first, last))
        size += len(ops(first, last))
        assert synced and synced[-1] == (path, size), (first, last, synced)
    assert len(synced) == 3


def test_an_unlocked_storage_holds_no_file_descriptor_while_idle(tmp_path: Path) -> None:
    """The JournalNode opens journals with ``lock=False`` (its root lock covers them): a
    journal nobody writes must cost no fd, or 20,000 journal ids reach EMFILE (issue 10)."""

    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    before = fds()
    stores = [FileJournalStorage(tmp_path, f"j{i}", lock=False) for i in range(50)]
    for st in stores:
        st.format(NS)
        st.load()
    assert fds() <= before
    for st in stores:
        st.close()
    with pytest.raises(StorageError, match="is closed"):
        stores[0].start_segment(1)
