"""The files JournalNode sync writes (docs/protocol.md §10), on a real directory with real
fsync: a staged download is a temp file until it is installed under its finalized name, a
stale in-progress copy is moved aside, a refused or interrupted download leaves nothing
behind, and a self-formatted journal keeps its promise and rejoin mark across a restart."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from journalnode import fsutil
from journalnode.errors import JournalStateError
from journalnode.file_storage import FileJournalStorage, finalized_name, in_progress_name
from journalnode.journal import Journal
from journalnode.segment_names import digest_name
from journalnode.sync import SegmentToSync
from proto import edits_pb2, records
from proto.values import NamespaceInfo, SegmentState

JID = "ns1"
NS = NamespaceInfo("cluster-A", 42, ctime=7, layout_version=1)


def segment(first: int, last: int, payload: bytes = b"p") -> bytes:
    ops = (
        edits_pb2.EditOp(txid=t, noop=edits_pb2.NoOp(payload=payload))
        for t in range(first, last + 1)
    )
    return records.SEGMENT_HEADER + records.frame_ops(ops)


def md5(data: bytes) -> bytes:
    return hashlib.md5(data[records.HEADER_LEN :]).digest()


def names(storage: FileJournalStorage) -> list[str]:
    return sorted(p.name for p in storage.current_dir.iterdir() if p.is_file())


def test_a_synced_segment_replaces_a_stale_copy_and_a_refused_one_leaves_nothing(
    tmp_path: Path,
) -> None:
    with FileJournalStorage(tmp_path, JID) as storage:
        storage.format(NS)
        storage.start_segment(1)
        storage.append(1, segment(1, 3)[records.HEADER_LEN :])
        before = names(storage)
        data = segment(1, 5)
        # Chunks cut anywhere, as a download streams them; the md5 skips the header.
        chunks = [data[:5], data[5:20], data[20:]]
        staged = storage.stage_finalized(1, 5, iter(chunks))
        assert staged.md5 == md5(data) and staged.size == len(data)
        assert fsutil.is_temp_name(Path(str(staged.handle)).name)
        storage.install_finalized(staged)
        assert names(storage) == sorted(
            [*(n for n in before if n != in_progress_name(1)), finalized_name(1, 5),
             digest_name(1, 5), f"{in_progress_name(1)}.stale"]
        )
        assert (storage.current_dir / finalized_name(1, 5)).read_bytes() == data
        assert storage.load().segments == (SegmentState(1, 5, False),)

        after = names(storage)
        with pytest.raises(JournalStateError, match="expected up to 10"):
            storage.stage_finalized(6, 10, [segment(6, 9)])
        with pytest.raises(ConnectionError):
            storage.stage_finalized(6, 10, broken_download(segment(6, 10)))
        staged = storage.stage_finalized(6, 10, [segment(6, 10)])
        storage.discard_staged(staged)
        assert names(storage) == after


def broken_download(data: bytes) -> Iterator[bytes]:
    yield data[:30]
    raise ConnectionError("peer went away")


def test_a_staged_copy_left_by_a_crash_is_removed_at_start(tmp_path: Path) -> None:
    with FileJournalStorage(tmp_path, JID) as storage:
        storage.format(NS)
        storage.stage_finalized(1, 4, [segment(1, 4)])  # the process dies before the rename
    with FileJournalStorage(tmp_path, JID) as storage:
        assert storage.load().segments == ()
        assert not [n for n in names(storage) if fsutil.is_temp_name(n)]


def test_a_self_formatted_journal_keeps_its_promise_and_rejoin_mark(tmp_path: Path) -> None:
    with FileJournalStorage(tmp_path, JID) as storage:
        journal = Journal(JID, storage)
        journal.format_to_rejoin(NS, promised_epoch=9, sync_until=4)
    with FileJournalStorage(tmp_path, JID) as storage:
        journal = Journal(JID, storage)  # a restart
        assert journal.namespace_info == NS
        assert journal.last_promised_epoch == 9 and journal.rejoining
        data = segment(1, 4)
        journal.install_synced_segment(SegmentToSync(1, 4, ("jn1",)), md5(data), [data])
        assert not journal.rejoining
    with FileJournalStorage(tmp_path, JID) as storage:
        assert not Journal(JID, storage).rejoining
        assert "rejoin-sync-until" not in names(storage)
