"""FSEditLog's group commit and failure rules, over the real QuorumOutputStream and a fake
QJM whose sends the test holds and releases (no JournalNodes: the interleavings are chosen,
not hoped for)."""

from __future__ import annotations

import threading
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pytest

from hanamenode.editlog import FSEditLog
from hanamenode.errors import EditLogError
from hanamenode.metrics import NameNodeMetrics
from proto import edits_pb2, records
from qjm.bridge import drive_inline
from qjm.errors import QuorumException
from qjm.journal_manager import QuorumOutputStream
from tests.namenode.cluster import wait_for

pytestmark = pytest.mark.timeout(30)

T = TypeVar("T")


@dataclass
class Timeouts:
    write_txns_timeout: float = 2.0


@dataclass
class FakeQJM:
    """The parts of QuorumJournalManager that FSEditLog and QuorumOutputStream use."""

    journal_id: str = "ns1"
    epoch: int = 1
    timeouts: Timeouts = field(default_factory=Timeouts)
    sent: list[tuple[int, int, int]] = field(default_factory=list)  # (segment, first, count)
    txids: list[int] = field(default_factory=list)
    finalized: list[tuple[int, int]] = field(default_factory=list)
    hold: threading.Event | None = None
    entered: threading.Event = field(default_factory=threading.Event)
    fail_with: BaseException | None = None
    fence_listeners: list[Any] = field(default_factory=list)

    def add_fence_listener(self, listener: Any) -> None:
        self.fence_listeners.append(listener)

    def start_log_segment(self, txid: int) -> QuorumOutputStream:
        return QuorumOutputStream(self, txid)  # type: ignore[arg-type]

    def finalize_log_segment(self, start: int, end: int) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.finalized.append((start, end))

    def _block(self, coro: Coroutine[Any, Any, T]) -> T:
        """The real manager's bridge into its coroutines; this one never suspends."""
        return drive_inline(coro)

    async def asend_edits(self, segment_txid: int, first: int, count: int, framed: bytes) -> None:
        self.entered.set()
        if self.hold is not None:
            assert self.hold.wait(10)
        if self.fail_with is not None:
            raise self.fail_with
        self.sent.append((segment_txid, first, count))
        self.txids += [op.txid for op in records.decode_ops(framed)]


def mkdir_op(path: str) -> edits_pb2.EditOp:
    return edits_pb2.EditOp(mkdir=edits_pb2.MkdirOp(path=path, permission=0o755))


def open_log(qjm: FakeQJM, **kwargs: Any) -> tuple[FSEditLog, list[int]]:
    applied: list[int] = []
    edit_log = FSEditLog(qjm, **kwargs)  # type: ignore[arg-type]
    edit_log.open_for_write(1, lambda op: applied.append(op.txid))
    return edit_log, applied


def test_concurrent_syncs_go_out_as_one_batch() -> None:
    qjm = FakeQJM()
    metrics = NameNodeMetrics()
    edit_log, _ = open_log(qjm, metrics=metrics)
    assert qjm.sent == [(1, 1, 1)]  # the StartLogSegmentOp, synced on open

    qjm.hold, qjm.entered = threading.Event(), threading.Event()
    first = edit_log.log_edit(mkdir_op("/a"))
    syncer = threading.Thread(target=edit_log.log_sync, args=(first,), name="sync-a")
    syncer.start()
    assert qjm.entered.wait(5)  # sync of txid 2 in flight, held
    # Meanwhile three more edits fill the other buffer; their handlers wait.
    later = [edit_log.log_edit(mkdir_op(f"/b{i}")) for i in range(3)]
    waiters = [
        threading.Thread(target=edit_log.log_sync, args=(txid,), name=f"sync-{txid}")
        for txid in later
    ]
    for thread in waiters:
        thread.start()
    wait_for(lambda: edit_log.synced_txid == 1 and all(t.is_alive() for t in waiters))
    qjm.hold.set()
    for thread in [syncer, *waiters]:
        thread.join(10)
        assert not thread.is_alive()
    # One batch for txid 2, then one batch for all three waiting handlers.
    assert qjm.sent == [(1, 1, 1), (1, 2, 1), (1, 3, 3)]
    assert qjm.txids == [1, 2, 3, 4, 5]
    assert edit_log.synced_txid == 5
    assert metrics.value("hanamenode_edit_log_syncs_total") == 3
    assert metrics.value("hanamenode_edit_log_txns_synced_total") == 5
    # Already durable: no new sync.
    edit_log.log_sync(3)
    assert len(qjm.sent) == 3


def test_roll_ends_finalizes_and_starts_with_markers() -> None:
    qjm = FakeQJM()
    edit_log, applied = open_log(qjm)
    edit_log.log_edit(mkdir_op("/a"))
    assert edit_log.roll(lambda op: applied.append(op.txid)) == 4
    assert qjm.finalized == [(1, 3)]
    assert edit_log.segment_txid == 4
    assert applied == [1, 3, 4]  # start, end, start: the markers go through apply too
    edit_log.close(lambda op: applied.append(op.txid))
    assert qjm.finalized == [(1, 3), (4, 5)]
    with pytest.raises(EditLogError, match="not open"):
        edit_log.log_edit(mkdir_op("/b"))


def test_a_failed_sync_is_fatal_and_never_acknowledged() -> None:
    qjm = FakeQJM()
    failures: list[str] = []
    edit_log, _ = open_log(qjm, on_failure=failures.append)
    qjm.fail_with = QuorumException("Got too many exceptions to achieve quorum size 2/3")
    txid = edit_log.log_edit(mkdir_op("/a"))
    with pytest.raises(EditLogError, match="quorum size 2/3"):
        edit_log.log_sync(txid)
    assert len(failures) == 1 and "quorum size 2/3" in failures[0]
    assert edit_log.synced_txid == 1
    # Nothing more is written, and a waiter for the failed txid is never acknowledged.
    with pytest.raises(EditLogError, match="not accepting edits"):
        edit_log.log_edit(mkdir_op("/b"))
    with pytest.raises(EditLogError, match="never will be"):
        edit_log.log_sync(txid)
    # What was durable before stays acknowledged.
    edit_log.log_sync(1)
    assert len(failures) == 1


def test_waiters_of_a_failing_sync_get_the_error() -> None:
    qjm = FakeQJM()
    edit_log, _ = open_log(qjm, on_failure=lambda reason: None)
    qjm.hold, qjm.entered = threading.Event(), threading.Event()
    first = edit_log.log_edit(mkdir_op("/a"))
    second = edit_log.log_edit(mkdir_op("/b"))
    errors: list[BaseException] = []

    def sync(txid: int) -> None:
        try:
            edit_log.log_sync(txid)
        except EditLogError as exc:
            errors.append(exc)

    syncer = threading.Thread(target=sync, args=(first,), name="syncer")
    syncer.start()
    assert qjm.entered.wait(5)
    third = edit_log.log_edit(mkdir_op("/c"))
    waiter = threading.Thread(target=sync, args=(third,), name="waiter")
    waiter.start()
    qjm.fail_with = QuorumException("writer fenced: epoch 1 < 2")
    qjm.hold.set()
    syncer.join(10)
    waiter.join(10)
    assert len(errors) == 2 and all("fenced" in str(e) for e in errors)
    assert edit_log.synced_txid == 1 < second


def test_a_failed_finalize_is_fatal() -> None:
    qjm = FakeQJM()
    failures: list[str] = []
    edit_log, applied = open_log(qjm, on_failure=failures.append)
    qjm.fail_with = None
    edit_log.log_edit(mkdir_op("/a"))
    edit_log.log_sync()

    def fail_finalize(start: int, end: int) -> None:
        raise QuorumException(f"finalizeLogSegment({start}-{end}) lost its quorum")

    qjm.finalize_log_segment = fail_finalize  # type: ignore[method-assign]
    with pytest.raises(EditLogError, match="could not finalize log segment 1-3"):
        edit_log.roll(lambda op: applied.append(op.txid))
    assert failures and edit_log.failure is not None


def test_a_fence_learned_from_any_call_fails_the_edit_log_at_once() -> None:
    # Issue 11: the QJM tells the edit log when a JournalNode refused a heartbeat (or a write,
    # or a finalize) for a newer epoch; nothing more is acknowledged, the NameNode is told.
    qjm = FakeQJM()
    failures: list[str] = []
    edit_log, _ = open_log(qjm, on_failure=failures.append)
    txid = edit_log.log_edit(mkdir_op("/a"))
    assert len(qjm.fence_listeners) == 1
    qjm.fence_listeners[0]("127.0.0.1:1 refused heartbeat in epoch 1: EpochError: 1 < 2")
    assert failures and "refused heartbeat" in failures[0]
    with pytest.raises(EditLogError, match="never will be"):
        edit_log.log_sync(txid)
    with pytest.raises(EditLogError, match="not accepting edits"):
        edit_log.log_edit(mkdir_op("/b"))


def test_an_op_that_fails_to_apply_is_never_shipped() -> None:
    # A syncer running while the op applies must not take it: the op reaches the buffer
    # only once it applied, so a failure to apply ships nothing (issue 11).
    qjm = FakeQJM()
    failures: list[str] = []
    edit_log, _ = open_log(qjm, on_failure=failures.append)
    first = edit_log.log_edit(mkdir_op("/a"))
    sync_errors: list[EditLogError] = []
    syncer = threading.Thread(target=_sync, args=(edit_log, sync_errors), name="syncer")

    def apply(op: edits_pb2.EditOp) -> object:
        syncer.start()  # another handler's log_sync, racing this apply
        syncer.join(0.5)
        raise RuntimeError("prepare and apply disagree")

    with pytest.raises(EditLogError, match="did not apply"):
        edit_log.log_and_apply(mkdir_op("/b"), apply)
    syncer.join(10)
    assert first + 1 not in qjm.txids
    # The racing syncer waited for the apply, then found the edit log failed.
    assert len(sync_errors) == 1 and "did not apply" in str(sync_errors[0])
    assert edit_log.failure is not None and failures


def _sync(edit_log: FSEditLog, errors: list[EditLogError]) -> None:
    try:
        edit_log.log_sync()
    except EditLogError as exc:
        errors.append(exc)
