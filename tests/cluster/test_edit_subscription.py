"""SubscribeEdits end to end: real JournalNode gRPC servers of a ``MiniJournalCluster``, a
real QJM writer, and the reader's ``EditSubscriber`` on an event loop of its own.

The rule is the polling reader's (tests/cluster/test_qjm_cluster.py runs the same scenario
through GetJournaledEdits): pushed edits are applied only when a majority of all
JournalNodes pushed them in one writer epoch; a stale node's tail is never applied."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest

from hadev.minicluster import MiniJournalCluster
from proto import edits_pb2, journal_pb2, journal_pb2_grpc
from qjm.errors import QuorumException
from qjm.subscriber import EditSubscriber, SubscriptionTarget
from tests.cluster.test_qjm_cluster import (
    HOLD,
    JID,
    NS,
    Writer,
    assert_ops,
    start_writer,
    write_batch,
)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class PushReader:
    """A reader that applies pushed edits only (no fallback), on its own event loop, and
    records every op it applied and every stream end."""

    def __init__(self, cluster: MiniJournalCluster) -> None:
        self.applied: list[edits_pb2.EditOp] = []
        self.ends: list[tuple[str, str]] = []
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="push-reader")
        targets = [SubscriptionTarget(a, JID, NS.cluster_id) for a in cluster.addresses]
        self.subscriber = EditSubscriber(
            targets, self.next_txid, self._on_push, self._on_end, retry_delay=0.05
        )

    def next_txid(self) -> int:
        return self.applied[-1].txid + 1 if self.applied else 1

    def _on_push(self) -> None:
        self.applied.extend(self.subscriber.feeds.decide(self.next_txid()))

    def _on_end(self, address: str, reason: str) -> None:
        self.ends.append((address, reason))

    @property
    def last(self) -> int:
        return self.next_txid() - 1

    def __enter__(self) -> PushReader:
        self._thread.start()
        self._run(self._start())
        return self

    async def _start(self) -> None:
        self.subscriber.start()

    def _run(self, coro: object) -> None:
        asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)  # type: ignore[arg-type]

    def __exit__(self, *exc: object) -> None:
        self._run(self.subscriber.stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(3, tmp_path, writer_hold_seconds=HOLD) as c:
        yield c


def stub(
    cluster: MiniJournalCluster, index: int
) -> tuple[grpc.Channel, journal_pb2_grpc.QJournalServiceStub]:
    channel = grpc.insecure_channel(cluster.addresses[index])
    return channel, journal_pb2_grpc.QJournalServiceStub(channel)


def subscribe(
    stub_: journal_pb2_grpc.QJournalServiceStub, since: int, journal_id: str = JID,
    cluster_id: str = NS.cluster_id,
) -> Iterator[journal_pb2.SubscribedEdits]:
    request = journal_pb2.SubscribeEditsRequest(
        journal_id=journal_id, cluster_id=cluster_id, since_txid=since
    )
    return stub_.SubscribeEdits(request, timeout=20)  # type: ignore[no-any-return]


def test_a_minority_tail_is_pushed_but_never_applied(cluster: MiniJournalCluster) -> None:
    """The scenario of the polling reader's test, pushed: edits a majority holds are
    applied as they come; epoch 1's txids 11-12, which only JN0 wrote (never acknowledged,
    and dropped by epoch 2's recovery), are pushed by JN0 but never applied, even when JN0
    pushes them again from its cache after the new epoch; epoch 2's 11-15 are."""
    with PushReader(cluster) as reader:
        with Writer(cluster) as w1:
            start_writer(w1)
            wait_until(lambda: len(reader.subscriber.subscribed) == 3, "three subscriptions")
            out = w1.qjm.start_log_segment(1)
            write_batch(out, 1, 1, 10)
            wait_until(lambda: reader.last == 10, "txids 1-10 applied from pushes")
            assert_ops(reader.applied, 1, lambda t: 1)

            jn0 = cluster.addresses[0]
            w1.reach_only("JN0")
            with pytest.raises(QuorumException):
                write_batch(out, 1, 11, 12)  # only JN0 writes 11-12
            w1.settle()
            wait_until(lambda: reader.subscriber.feeds.held_txns(jn0) == 2, "JN0 pushed 11-12")
            assert reader.last == 10  # one JournalNode's pushes are no majority

        with Writer(cluster) as w2:
            w2.reach_only("JN1", "JN2")
            assert w2.qjm.recover_unfinalized_segments() == 10
            out = w2.qjm.start_log_segment(11)
            write_batch(out, 2, 11, 15)
            wait_until(lambda: reader.last == 15, "epoch 2's 11-15 applied")
        assert_ops(reader.applied, 1, lambda t: 1 if t <= 10 else 2)
        assert {reason for _, reason in reader.ends} >= {"epoch_changed"}


def test_a_journalnode_restarted_mid_subscription_is_followed_again(
    cluster: MiniJournalCluster,
) -> None:
    """A JournalNode stopped while streaming ends its subscription (shutting down); the
    reader keeps applying from the other two, subscribes again once it is back, and no
    txid is applied twice or skipped."""
    with PushReader(cluster) as reader, Writer(cluster) as w:
        start_writer(w)
        out = w.qjm.start_log_segment(1)
        write_batch(out, 1, 1, 5)
        wait_until(lambda: reader.last == 5, "1-5 applied")
        # The writer's new epoch ended the first subscriptions (epoch changed); JN1 must be
        # followed again before it stops, or it has no subscription to end (two of three
        # JournalNodes apply 1-5 on their own).
        wait_until(lambda: len(reader.subscriber.subscribed) == 3, "all three followed")
        cluster.stop(1)
        write_batch(out, 1, 6, 10)
        wait_until(lambda: reader.last == 10, "6-10 applied from JN0 and JN2")
        assert (cluster.addresses[1], "shutting_down") in reader.ends
        cluster.start(1)
        wait_until(lambda: len(reader.subscriber.subscribed) == 3, "JN1 followed again")
        write_batch(out, 1, 11, 20)
        wait_until(lambda: reader.last == 20, "11-20 applied")
        assert_ops(reader.applied, 1, lambda t: 1)


def test_a_subscription_counts_only_once_the_journalnode_holds_it(
    cluster: MiniJournalCluster,
) -> None:
    """``subscribed`` (the tailer's subscription count, and what the tests wait on) names a
    JournalNode only once it holds the subscription: not while the call is being set up (a
    listener that never answers) and not when it refuses (an unformatted journal). Before,
    a reader counted the address as soon as it asked, so a JournalNode stopped right after
    cancelled a call it never held, and the reader saw no SHUTTING_DOWN (CI of stop 23)."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    mute = f"127.0.0.1:{silent.getsockname()[1]}"
    targets = [SubscriptionTarget(a, JID, NS.cluster_id) for a in [*cluster.addresses, mute]]
    ends: list[tuple[str, str]] = []
    seen: set[str] = set()

    async def watch() -> None:
        subscriber = EditSubscriber(
            targets, lambda: 1, lambda: None, lambda a, r: ends.append((a, r)), retry_delay=0.02
        )
        subscriber.start()
        try:
            deadline = time.monotonic() + 1.0
            while time.monotonic() < deadline:  # unformatted: every node refuses, again and again
                seen.update(subscriber.subscribed)
                await asyncio.sleep(0)
            assert sum(1 for a, r in ends if a == cluster.addresses[0]) >= 3, ends
            assert seen == set(), "counted while every JournalNode refused"
            with Writer(cluster) as w:
                start_writer(w)
            while len(subscriber.subscribed) < 3 and time.monotonic() < deadline + 10:
                seen.update(subscriber.subscribed)
                await asyncio.sleep(0.005)
            assert subscriber.subscribed == set(cluster.addresses)
            for node in range(3):
                journal = cluster.node(node).existing_journal(JID)
                assert journal is not None and len(journal.subscribers) == 1
        finally:
            await subscriber.stop()

    try:
        asyncio.run(watch())
    finally:
        silent.close()
    assert mute not in seen  # connected, never answered: never counted
    assert seen <= set(cluster.addresses)


def test_subscribe_edits_checks_its_request(cluster: MiniJournalCluster) -> None:
    with Writer(cluster) as w:
        start_writer(w)
    channel, jn = stub(cluster, 0)
    with channel:
        cases = [
            ((1, "other-journal", NS.cluster_id), grpc.StatusCode.FAILED_PRECONDITION,
             "journal 'other-journal' is not formatted"),
            ((1, "../etc", NS.cluster_id), grpc.StatusCode.INVALID_ARGUMENT, "journal id"),
            ((0, JID, NS.cluster_id), grpc.StatusCode.INVALID_ARGUMENT,
             "since_txid must be positive, got 0"),
            ((2**63, JID, NS.cluster_id), grpc.StatusCode.INVALID_ARGUMENT,
             "since_txid"),
            ((1, JID, "CID-other"), grpc.StatusCode.PERMISSION_DENIED,
             "request is for cluster 'CID-other'"),
        ]
        for (since, jid, cid), code, message in cases:
            with pytest.raises(grpc.RpcError) as err:
                next(iter(subscribe(jn, since, jid, cid)))
            assert err.value.code() == code, (since, jid, cid, err.value.details())
            assert message in (err.value.details() or ""), err.value.details()


def test_subscriptions_end_with_their_reason(cluster: MiniJournalCluster) -> None:
    """A finalized segment, and a JournalNode stopping, end a stream with a last message
    naming why; both are counted by reason on the JournalNode."""
    channel, jn = stub(cluster, 0)
    with channel, Writer(cluster) as w:
        start_writer(w)
        out = w.qjm.start_log_segment(1)
        write_batch(out, 1, 1, 3)
        stream = subscribe(jn, 2)
        first = next(stream)
        assert (first.writer_epoch, first.segment_txid, first.first_txid, first.txn_count) == (
            w.qjm.epoch, 1, 2, 2,
        )
        w.qjm.finalize_log_segment(1, 3)
        last = next(stream)
        assert last.end == journal_pb2.SEGMENT_FINALIZED
        assert "segment 1-3 was finalized" in last.end_details
        assert list(stream) == []  # then the stream closes
        waiting = subscribe(jn, 4)
        journal = cluster.node(0).existing_journal(JID)
        assert journal is not None
        wait_until(lambda: len(journal.subscribers) == 1, "the subscription from 4")
        ended = threading.Thread(target=lambda: cluster.stop(0), name="stop-jn0")
        ended.start()
        last = next(iter(waiting))
        ended.join(20)
        assert last.end == journal_pb2.SHUTTING_DOWN


def test_a_reader_that_does_not_read_is_dropped_with_its_queue(
    cluster: MiniJournalCluster,
) -> None:
    """The JournalNode queues at most the per-subscriber bound for a reader whose stream
    is full: past it the subscription ends (fell behind) and its queue is freed, while the
    writer goes on undisturbed."""
    with Writer(cluster) as w:
        start_writer(w)
        node = cluster.node(0)
        journal = node.existing_journal(JID)
        assert journal is not None
        journal.subscriber_queue_bytes = 64 * 1024
        channel, jn = stub(cluster, 0)
        with channel:
            stream = subscribe(jn, 1)
            wait_until(lambda: len(journal.subscribers) == 1, "the subscription")
            out = w.qjm.start_log_segment(1)
            txid = 1
            # 4 KiB edits, 100 per batch: far more than gRPC's stream window and the bound.
            while len(journal.subscribers) and txid < 20_000:
                write_batch(out, 1, txid, txid + 99, size=4096)
                txid += 100
            assert len(journal.subscribers) == 0, "the reader was never dropped"
            ends = [m for m in stream if m.end]
        assert [m.end for m in ends] == [journal_pb2.FELL_BEHIND]
        assert "more than the limit of 65536" in ends[0].end_details
        sample = node.registry.get_sample_value(
            "journalnode_edit_subscriptions_ended_total",
            {"journal": JID, "reason": "fell_behind"},
        )
        assert sample == 1.0
