"""FSEditLog's syncer and failure rules, over the real QuorumOutputStream and a fake QJM whose
sends the test holds and releases (no JournalNodes: the interleavings are chosen, not hoped
for). Each test is one event loop (``asyncio.run``), as the NameNode's; the fake's sends run
on the loop, awaited, as the real QJM's are (a held send waits off the loop)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from hanamenode.editlog import FSEditLog
from hanamenode.errors import EditLogError, SegmentOverrunError
from hanamenode.metrics import NameNodeMetrics
from proto import edits_pb2, records
from qjm.errors import QuorumException
from qjm.journal_manager import QuorumOutputStream

pytestmark = pytest.mark.timeout(30)


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

    async def astart_log_segment(self, txid: int) -> QuorumOutputStream:
        return QuorumOutputStream(self, txid)  # type: ignore[arg-type]

    async def afinalize_log_segment(self, start: int, end: int) -> None:
        if self.fail_with is not None:
            raise self.fail_with
        self.finalized.append((start, end))

    async def asend_edits(self, segment_txid: int, first: int, count: int, framed: bytes) -> None:
        self.entered.set()
        if self.hold is not None:
            # Held off the loop, as a real send waits for the JournalNodes.
            assert await asyncio.to_thread(self.hold.wait, 10)
        if self.fail_with is not None:
            raise self.fail_with
        self.sent.append((segment_txid, first, count))
        self.txids += [op.txid for op in records.decode_ops(framed)]


def mkdir_op(path: str) -> edits_pb2.EditOp:
    return edits_pb2.EditOp(mkdir=edits_pb2.MkdirOp(path=path, permission=0o755))


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), 20))


async def open_log(qjm: FakeQJM, **kwargs: Any) -> tuple[FSEditLog, list[int]]:
    """An edit log open at txid 1; one sync in flight (HDFS's double buffer) unless
    ``syncs_in_flight`` says otherwise: the batching tests below count on it."""
    kwargs.setdefault("syncs_in_flight", 1)
    applied: list[int] = []
    edit_log = FSEditLog(qjm, **kwargs)  # type: ignore[arg-type]
    await edit_log.open_for_write(1, lambda op: applied.append(op.txid))
    return edit_log, applied


async def until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await asyncio.sleep(0.005)


async def held(event: threading.Event) -> None:
    """Wait on the loop for an event a sender thread sets."""
    await asyncio.get_running_loop().run_in_executor(None, event.wait, 5)


def test_edits_logged_during_a_sync_go_out_as_one_batch() -> None:
    async def test() -> None:
        qjm = FakeQJM()
        metrics = NameNodeMetrics()
        edit_log, _ = await open_log(qjm, metrics=metrics)
        assert qjm.sent == [(1, 1, 1)]  # the StartLogSegmentOp, synced on open

        qjm.hold, qjm.entered = threading.Event(), threading.Event()
        first = edit_log.log_edit(mkdir_op("/a"))
        syncer = asyncio.create_task(edit_log.log_sync(first))
        await held(qjm.entered)  # sync of txid 2 in flight, held
        # Meanwhile three more edits accumulate; their callers wait.
        later = [edit_log.log_edit(mkdir_op(f"/b{i}")) for i in range(3)]
        waiters = [asyncio.create_task(edit_log.log_sync(txid)) for txid in later]
        await asyncio.sleep(0.05)
        assert edit_log.synced_txid == 1 and not any(w.done() for w in waiters)
        qjm.hold.set()
        await asyncio.gather(syncer, *waiters)
        # One batch for txid 2, then one batch for all three waiting callers.
        assert qjm.sent == [(1, 1, 1), (1, 2, 1), (1, 3, 3)]
        assert qjm.txids == [1, 2, 3, 4, 5]
        assert edit_log.synced_txid == 5
        assert metrics.value("hanamenode_edit_log_syncs_total") == 3
        assert metrics.value("hanamenode_edit_log_txns_synced_total") == 5
        # Already durable: no new sync.
        await edit_log.log_sync(3)
        assert len(qjm.sent) == 3

    run(test)


def test_a_batch_is_bounded_by_bytes_not_by_callers() -> None:
    # 100 callers wait during one held sync (far more than the 16 handler threads that
    # bounded a batch before issue 12); the next syncs carry them all, cut only by bytes.
    async def test() -> None:
        qjm = FakeQJM()
        ops = [mkdir_op(f"/d{i:03}") for i in range(100)]
        one = len(records.frame(mkdir_op("/d000").SerializeToString())) + 2  # txid varint
        edit_log, _ = await open_log(qjm, max_batch_bytes=40 * one)
        qjm.hold, qjm.entered = threading.Event(), threading.Event()
        first = edit_log.log_edit(mkdir_op("/first"))
        waiters = [asyncio.create_task(edit_log.log_sync(first))]
        await held(qjm.entered)
        for op in ops:
            waiters.append(asyncio.create_task(edit_log.log_sync(edit_log.log_edit(op))))
        await asyncio.sleep(0.05)
        qjm.hold.set()
        await asyncio.gather(*waiters)
        counts = [count for _, _, count in qjm.sent[2:]]
        assert sum(counts) == 100 and len(counts) >= 3, counts
        assert max(counts) > 16, counts
        for _, first_txid, count in qjm.sent[2:]:
            size = sum(
                len(records.frame(op.SerializeToString()))
                for op in ops
                if first_txid <= op.txid < first_txid + count
            )
            assert size <= 40 * one

    run(test)


async def logged_at_once(edit_log: FSEditLog, paths: list[str]) -> None:
    """Log one edit per path with no await between them (concurrent callers), then wait
    until all are durable."""
    txids = [edit_log.log_edit(mkdir_op(p)) for p in paths]
    await asyncio.gather(*(edit_log.log_sync(t) for t in txids))


async def after_a_batch_of(writers: int, gather_delay: float) -> tuple[FakeQJM, FSEditLog]:
    """An edit log whose last batch held one edit from each of ``writers`` callers."""
    qjm = FakeQJM()
    edit_log, _ = await open_log(qjm, gather_delay=gather_delay)
    await logged_at_once(edit_log, [f"/w{i}" for i in range(writers)])
    return qjm, edit_log


async def seconds_of(awaitable: Awaitable[object]) -> float:
    """How long ``awaitable`` took on the loop's clock."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    await awaitable
    return loop.time() - began


def test_a_lone_writer_never_waits_to_gather() -> None:
    # Batches of one edit: the next sync starts at once, whatever the gather delay.
    async def test() -> None:
        qjm = FakeQJM()
        edit_log, _ = await open_log(qjm, gather_delay=1.0)

        async def alone() -> None:
            for i in range(5):
                await edit_log.log_sync(edit_log.log_edit(mkdir_op(f"/alone{i}")))

        assert await seconds_of(alone()) < 0.5
        assert [count for _, _, count in qjm.sent] == [1] * 6
        assert edit_log.gather_target() == 0

    run(test)


def test_after_concurrent_batches_a_batch_waits_for_as_many_edits() -> None:
    # A batch of four shows four writers: the next batch waits until four edits are
    # pending (here the last three come 0.1 s after the first), not the whole delay.
    async def test() -> None:
        qjm, edit_log = await after_a_batch_of(4, gather_delay=1.0)
        assert edit_log.gather_target() == 4
        loop = asyncio.get_running_loop()
        began = loop.time()
        first = asyncio.create_task(edit_log.log_sync(edit_log.log_edit(mkdir_op("/x0"))))
        await asyncio.sleep(0.1)
        assert not first.done()  # gathering, not shipped alone
        await logged_at_once(edit_log, ["/x1", "/x2", "/x3"])
        await first
        assert loop.time() - began < 0.6  # shipped when the fourth came, not at the delay
        assert [count for _, _, count in qjm.sent] == [1, 4, 4]

    run(test)


def test_an_occasional_extra_writer_does_not_raise_what_a_batch_waits_for() -> None:
    # Four writers in step and, once, a fifth: the batches wait for four (their median),
    # not for five, which would make every batch of the four wait the whole delay.
    async def test() -> None:
        _, edit_log = await after_a_batch_of(4, gather_delay=1.0)
        await logged_at_once(edit_log, [f"/a{i}" for i in range(4)])
        await logged_at_once(edit_log, [f"/b{i}" for i in range(5)])
        await logged_at_once(edit_log, [f"/c{i}" for i in range(4)])
        assert edit_log.gather_target() == 4

    run(test)


def test_the_gather_delay_bounds_the_wait_for_writers_who_do_not_come() -> None:
    async def test() -> None:
        qjm, edit_log = await after_a_batch_of(3, gather_delay=0.3)
        waited = await seconds_of(edit_log.log_sync(edit_log.log_edit(mkdir_op("/late"))))
        assert 0.15 < waited < 0.9, waited  # about the delay from the previous sync's start
        assert [count for _, _, count in qjm.sent] == [1, 3, 1]
        # gather_delay=0 turns gathering off: the next edit ships at once.
        edit_log.gather_delay = 0.0
        await logged_at_once(edit_log, ["/a", "/b"])
        assert await seconds_of(edit_log.log_sync(edit_log.log_edit(mkdir_op("/c")))) < 0.15

    run(test)


def test_a_roll_does_not_wait_to_gather() -> None:
    # The END marker is the last edit of its segment (writes are held out during a roll):
    # waiting for more would only delay the roll by the gather delay.
    async def test() -> None:
        qjm, edit_log = await after_a_batch_of(4, gather_delay=1.0)
        assert await seconds_of(edit_log.roll(lambda op: None)) < 0.5
        assert qjm.finalized == [(1, 6)]

    run(test)


def test_take_batch_keeps_order_and_takes_one_oversized_edit() -> None:
    from collections import deque

    from hanamenode.editlog import take_batch

    pending = deque([(1, b"a" * 10), (2, b"b" * 10), (3, b"c" * 30), (4, b"d")])
    assert take_batch(pending, 25) == [(1, b"a" * 10), (2, b"b" * 10)]
    assert take_batch(pending, 25) == [(3, b"c" * 30)]  # alone above the bound: still sent
    assert take_batch(pending, 25) == [(4, b"d")]
    assert take_batch(pending, 25) == []


def test_a_cancelled_waiter_loses_nothing() -> None:
    # The client went away while its call awaited the sync: the edit is shipped all the same,
    # once, and later waiters are answered.
    async def test() -> None:
        qjm = FakeQJM()
        edit_log, _ = await open_log(qjm)
        qjm.hold, qjm.entered = threading.Event(), threading.Event()
        txid = edit_log.log_edit(mkdir_op("/a"))
        gone = asyncio.create_task(edit_log.log_sync(txid))
        await held(qjm.entered)
        gone.cancel()
        later = edit_log.log_edit(mkdir_op("/b"))
        qjm.hold.set()
        await edit_log.log_sync(later)
        assert gone.cancelled()
        assert qjm.txids == [1, 2, 3]

    run(test)


def test_roll_ends_finalizes_and_starts_with_markers() -> None:
    async def test() -> None:
        qjm = FakeQJM()
        edit_log, applied = await open_log(qjm)
        edit_log.log_edit(mkdir_op("/a"))
        assert await edit_log.roll(lambda op: applied.append(op.txid)) == 4
        assert qjm.finalized == [(1, 3)]
        assert edit_log.segment_txid == 4
        assert applied == [1, 3, 4]  # start, end, start: the markers go through apply too
        await edit_log.close(lambda op: applied.append(op.txid))
        assert qjm.finalized == [(1, 3), (4, 5)]
        with pytest.raises(EditLogError, match="not open"):
            edit_log.log_edit(mkdir_op("/b"))

    run(test)


def test_a_failed_sync_is_fatal_and_never_acknowledged() -> None:
    async def test() -> None:
        qjm = FakeQJM()
        failures: list[str] = []
        edit_log, _ = await open_log(qjm, on_failure=failures.append)
        qjm.fail_with = QuorumException("Got too many exceptions to achieve quorum size 2/3")
        txid = edit_log.log_edit(mkdir_op("/a"))
        with pytest.raises(EditLogError, match="quorum size 2/3"):
            await edit_log.log_sync(txid)
        assert len(failures) == 1 and "quorum size 2/3" in failures[0]
        assert edit_log.synced_txid == 1
        # Nothing more is written, and a waiter for the failed txid is never acknowledged.
        with pytest.raises(EditLogError, match="not accepting edits"):
            edit_log.log_edit(mkdir_op("/b"))
        with pytest.raises(EditLogError, match="never will be"):
            await edit_log.log_sync(txid)
        # What was durable before stays acknowledged.
        await edit_log.log_sync(1)
        assert len(failures) == 1

    run(test)


def test_waiters_of_a_failing_sync_get_the_error() -> None:
    async def test() -> None:
        qjm = FakeQJM()
        edit_log, _ = await open_log(qjm, on_failure=lambda reason: None)
        qjm.hold, qjm.entered = threading.Event(), threading.Event()
        first = edit_log.log_edit(mkdir_op("/a"))
        second = edit_log.log_edit(mkdir_op("/b"))
        syncer = asyncio.create_task(edit_log.log_sync(first))
        await held(qjm.entered)
        third = edit_log.log_edit(mkdir_op("/c"))
        waiter = asyncio.create_task(edit_log.log_sync(third))
        qjm.fail_with = QuorumException("writer fenced: epoch 1 < 2")
        qjm.hold.set()
        results = await asyncio.gather(syncer, waiter, return_exceptions=True)
        assert all(isinstance(r, EditLogError) and "fenced" in str(r) for r in results)
        assert edit_log.synced_txid == 1 < second

    run(test)


def test_a_failed_finalize_is_fatal() -> None:
    async def test() -> None:
        qjm = FakeQJM()
        failures: list[str] = []
        edit_log, applied = await open_log(qjm, on_failure=failures.append)
        edit_log.log_edit(mkdir_op("/a"))
        await edit_log.log_sync()

        async def fail_finalize(start: int, end: int) -> None:
            raise QuorumException(f"finalizeLogSegment({start}-{end}) lost its quorum")

        qjm.afinalize_log_segment = fail_finalize  # type: ignore[method-assign]
        with pytest.raises(EditLogError, match="could not finalize log segment 1-3"):
            await edit_log.roll(lambda op: applied.append(op.txid))
        assert failures and edit_log.failure is not None

    run(test)


def test_a_fence_learned_from_any_call_fails_the_edit_log_at_once() -> None:
    # Issue 11: the QJM tells the edit log when a JournalNode refused a heartbeat (or a write,
    # or a finalize) for a newer epoch; nothing more is acknowledged, the NameNode is told.
    # The QJM calls from its own thread; the edit log takes it onto its loop.
    async def test() -> None:
        qjm = FakeQJM()
        failures: list[str] = []
        edit_log, _ = await open_log(qjm, on_failure=failures.append)
        qjm.hold, qjm.entered = threading.Event(), threading.Event()
        edit_log.log_edit(mkdir_op("/a"))
        await held(qjm.entered)  # txid 2 in flight; txid 3 waits for the next sync
        txid = edit_log.log_edit(mkdir_op("/b"))
        assert len(qjm.fence_listeners) == 1
        fence = threading.Thread(
            target=qjm.fence_listeners[0],
            args=("127.0.0.1:1 refused heartbeat in epoch 1: EpochError: 1 < 2",),
        )
        fence.start()
        fence.join()
        await until(lambda: bool(failures))
        assert "refused heartbeat" in failures[0]
        qjm.hold.set()
        with pytest.raises(EditLogError, match="never will be"):
            await edit_log.log_sync(txid)
        with pytest.raises(EditLogError, match="not accepting edits"):
            edit_log.log_edit(mkdir_op("/c"))
        assert txid not in qjm.txids

    run(test)


def test_an_op_that_fails_to_apply_is_never_shipped() -> None:
    # The op reaches the syncer only once it applied, so a failure to apply ships nothing
    # (issue 11), and a caller waiting for everything logged learns that the log failed.
    async def test() -> None:
        qjm = FakeQJM()
        failures: list[str] = []
        edit_log, _ = await open_log(qjm, on_failure=failures.append)
        qjm.hold, qjm.entered = threading.Event(), threading.Event()
        first = edit_log.log_edit(mkdir_op("/a"))
        syncer = asyncio.create_task(edit_log.log_sync(first))
        await held(qjm.entered)

        def apply(op: edits_pb2.EditOp) -> object:
            raise RuntimeError("prepare and apply disagree")

        with pytest.raises(EditLogError, match="did not apply"):
            edit_log.log_and_apply(mkdir_op("/b"), apply)
        qjm.hold.set()
        with pytest.raises(EditLogError, match="did not apply"):
            await syncer
        assert first + 1 not in qjm.txids
        assert edit_log.failure is not None and failures

    run(test)


def test_a_roll_racing_the_close_ends_each_segment_once() -> None:
    """A standby's RollEditLog and a step-down both end the segment. Before issue 13's
    simulation found it, the close logged a second END op into the segment the roll was
    ending: the roll's next segment then began after it (EditLogError), or the roll
    finalized the segment short of it and the close found no segment left (AssertionError).
    Now the close waits for the roll and ends the new segment."""

    async def test() -> None:
        qjm = FakeQJM()
        edit_log, applied = await open_log(qjm)
        edit_log.log_and_apply(mkdir_op("/a"), lambda op: applied.append(op.txid))
        roll = asyncio.ensure_future(edit_log.roll(lambda op: applied.append(op.txid)))
        await asyncio.sleep(0)  # the roll has logged its END op and waits for its sync
        await edit_log.close(lambda op: applied.append(op.txid))
        assert await roll == 4
        # 1 START, 2 mkdir, 3 END | 4 START, 5 END: each segment ended once, nothing after.
        assert qjm.finalized == [(1, 3), (4, 5)]
        assert qjm.txids == applied == [1, 2, 3, 4, 5]

    run(test)


def test_an_edit_logged_after_the_end_marker_fails_the_log_before_any_finalize() -> None:
    """Nothing may be logged between a segment's END op and its finalize (the namesystem's
    write gate keeps mutations out). If something is, the segment must not be finalized
    short of it, where the JournalNodes refuse the finalize or the edits after it: the edit
    log fails at once, naming the txids (two followers' rolls passing the gate together did
    this, bench/namenode_ops.py --observers-only)."""

    async def test() -> None:
        qjm = FakeQJM()
        failures: list[str] = []
        edit_log, applied = await open_log(qjm, on_failure=failures.append)
        edit_log.log_and_apply(mkdir_op("/a"), lambda op: applied.append(op.txid))
        roll = asyncio.ensure_future(edit_log.roll(lambda op: applied.append(op.txid)))
        await asyncio.sleep(0)  # the roll has logged its END op (3) and waits for its sync
        edit_log.log_and_apply(mkdir_op("/late"), lambda op: applied.append(op.txid))
        with pytest.raises(SegmentOverrunError, match="txids 4-4 were logged after the end"):
            await roll
        assert qjm.finalized == []
        assert failures and edit_log.failure is not None

    run(test)


# -- several syncs in flight (dfs.namenode.edits.sync.in-flight) ---------------------------------


@dataclass
class GatedQJM(FakeQJM):
    """Each batch's send waits for its own gate (by first txid) and may fail alone."""

    gates: dict[int, asyncio.Event] = field(default_factory=dict)
    failing: set[int] = field(default_factory=set)
    started: list[int] = field(default_factory=list)

    async def asend_edits(self, segment_txid: int, first: int, count: int, framed: bytes) -> None:
        self.started.append(first)
        gate = self.gates.get(first)
        if gate is not None:
            await gate.wait()
        if first in self.failing:
            raise QuorumException(f"batch {first} failed (injected)")
        self.sent.append((segment_txid, first, count))
        self.txids += [op.txid for op in records.decode_ops(framed)]


def test_a_second_batch_ships_while_the_first_is_in_flight_and_counts_after_it() -> None:
    """With two syncs in flight, edits logged while one batch is held ship at once as a
    second batch; if the second is acknowledged first, its waiters still wait for the first,
    and the durable txid never passes a batch not acknowledged."""

    async def test() -> None:
        qjm = GatedQJM()
        edit_log, _ = await open_log(qjm, syncs_in_flight=2, gather_delay=0)
        qjm.gates[2] = asyncio.Event()
        qjm.gates[3] = asyncio.Event()
        first = edit_log.log_edit(mkdir_op("/a"))
        waiter_1 = asyncio.create_task(edit_log.log_sync(first))
        await until(lambda: qjm.started == [1, 2])
        second = [edit_log.log_edit(mkdir_op(f"/b{i}")) for i in range(2)]
        waiter_2 = asyncio.create_task(edit_log.log_sync(second[-1]))
        await until(lambda: qjm.started == [1, 2, 3])  # shipped with batch 2 still held
        qjm.gates[3].set()  # the second batch is acknowledged first
        await until(lambda: (1, 3, 2) in qjm.sent)
        await asyncio.sleep(0.02)
        assert edit_log.synced_txid == 1 and not waiter_1.done() and not waiter_2.done()
        qjm.gates[2].set()
        await asyncio.gather(waiter_1, waiter_2)
        assert edit_log.synced_txid == 4

    run(test)


def test_a_failed_batch_fails_the_batches_after_it_even_if_they_were_acknowledged() -> None:
    async def test() -> None:
        qjm = GatedQJM()
        edit_log, _ = await open_log(qjm, syncs_in_flight=2, gather_delay=0)
        qjm.gates[2] = asyncio.Event()
        qjm.failing.add(2)
        first = edit_log.log_edit(mkdir_op("/a"))
        waiter_1 = asyncio.create_task(edit_log.log_sync(first))
        await until(lambda: qjm.started == [1, 2])
        later = edit_log.log_edit(mkdir_op("/b"))
        waiter_2 = asyncio.create_task(edit_log.log_sync(later))
        await until(lambda: (1, 3, 1) in qjm.sent)  # acknowledged, batch 2 still held
        qjm.gates[2].set()
        for waiter in (waiter_1, waiter_2):
            with pytest.raises(EditLogError, match="batch 2 failed"):
                await waiter
        assert edit_log.synced_txid == 1
        assert edit_log.failure is not None and "txids 2-2" in edit_log.failure

    run(test)
