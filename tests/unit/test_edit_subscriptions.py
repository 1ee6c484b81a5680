"""Pushed edits (SubscribeEdits): the JournalNode's bounded per-reader queues and when a
subscription ends, and the reader's feeds, checked against the same quorum table as the
polling reader (``QUORUM_TABLE``)."""

from __future__ import annotations

import pytest

from journalnode.edits_cache import CachedEdits
from journalnode.errors import InvalidRequestError, NamespaceMismatchError
from journalnode.journal import Journal
from journalnode.storage import MemoryJournalStorage
from journalnode.subscriptions import EditSubscription, EndReason, PushedEdits
from proto import records
from qjm.subscriber import FeedError, PushedFeeds
from tests.unit.test_journal import JID, NS, Writer, formatted, ops, writer_with_segment
from tests.unit.test_journaled_edits import QUORUM_TABLE, journal_with_abandoned_tail


def pushed(first: int, n: int, epoch: int = 1, segment: int = 1) -> PushedEdits:
    return PushedEdits(epoch, segment, first, n, ops(first, n, payload=b"e%d" % epoch))


def txids(batches: list[PushedEdits]) -> list[int]:
    return [op.txid for b in batches for op in records.decode_ops(b.framed)]


class Woken:
    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> None:
        self.count += 1


# --------------------------------------------------------------- one subscription


def test_a_subscription_queues_what_its_reader_lacks_from_its_txid() -> None:
    wake = Woken()
    sub = EditSubscription(3, 1 << 20, wake)
    sub.offer(pushed(1, 2))  # before its txid: nothing
    sub.offer(pushed(2, 3))  # 2-4: cut to 3-4
    sub.offer(pushed(5, 1))
    batches, ended = sub.take()
    assert ended is None
    assert txids(batches) == [3, 4, 5]
    assert [b.first_txid for b in batches] == [3, 5]
    assert sub.next_txid == 6 and wake.count == 2
    assert sub.take() == ([], None)


def test_a_subscription_ends_on_a_gap_or_another_epoch_after_what_it_queued() -> None:
    sub = EditSubscription(1, 1 << 20, Woken())
    sub.offer(pushed(1, 2))
    sub.offer(pushed(4, 1))
    batches, ended = sub.take()
    assert txids(batches) == [1, 2]
    assert ended is not None and ended[0] is EndReason.CACHE_MISS
    assert "txids 3-3" in ended[1]
    other = EditSubscription(1, 1 << 20, Woken())
    other.offer(pushed(1, 2, epoch=1))
    other.offer(pushed(3, 1, epoch=2))
    batches, ended = other.take()
    assert txids(batches) == [1, 2]
    assert ended is not None and ended[0] is EndReason.EPOCH_CHANGED


def test_a_reader_that_falls_behind_is_dropped_and_its_queue_freed() -> None:
    one = len(pushed(1, 10).framed)
    sub = EditSubscription(1, 2 * one, Woken())
    sub.offer(pushed(1, 10))
    sub.offer(pushed(11, 10))
    assert sub.queued_bytes == 2 * one
    sub.offer(pushed(21, 10))  # would pass the bound
    assert sub.queued_bytes == 0
    batches, ended = sub.take()
    assert batches == []
    assert ended is not None and ended[0] is EndReason.FELL_BEHIND
    assert f"limit of {2 * one}" in ended[1]
    sub.offer(pushed(31, 1))  # ended: nothing more is queued
    assert sub.queued_bytes == 0


# --------------------------------------------------------------- the Journal's subscriptions


def subscribe(journal: Journal, since: int) -> EditSubscription:
    return journal.subscribe_edits(NS.cluster_id, since, Woken())


def test_journal_pushes_the_cached_backlog_then_each_synced_batch() -> None:
    journal = formatted()
    w = writer_with_segment(journal, epoch=3)
    w.write(1, 1, 4)
    sub = subscribe(journal, 2)
    w.write(1, 5, 2)
    batches, ended = sub.take()
    assert ended is None
    assert txids(batches) == [2, 3, 4, 5, 6]
    assert {(b.epoch, b.segment_txid) for b in batches} == {(3, 1)}
    assert len(journal.subscribers) == 1


def test_journal_ends_subscriptions_at_a_finalize_a_new_epoch_or_a_recovery() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 3)
    in_segment = subscribe(journal, 1)
    w.finalize(1, 3)
    next_segment = subscribe(journal, 4)  # waits for the next segment
    assert in_segment.take()[1] == (EndReason.SEGMENT_FINALIZED, "segment 1-3 was finalized")
    w.start(4)
    w.write(4, 4, 1)
    batches, ended = next_segment.take()
    assert (txids(batches), ended) == ([4], None)
    w2 = Writer(journal, 2)
    w2.new_epoch()
    assert next_segment.take() == ([], (EndReason.EPOCH_CHANGED, "epoch 2 was promised"))


def test_journal_refuses_or_ends_what_it_cannot_serve() -> None:
    journal = formatted()
    w = writer_with_segment(journal)
    w.write(1, 1, 5)
    journal.edits_cache.clear()
    sub = subscribe(journal, 2)  # written here, no longer cached
    batches, ended = sub.take()
    assert batches == [] and ended is not None and ended[0] is EndReason.CACHE_MISS
    assert "txid 2 is written here but no longer in the edit cache" in ended[1]
    assert journal.stats.journaled_edits_misses == 1
    ahead = subscribe(journal, 6)  # not written yet: waits
    assert ahead.take() == ([], None)
    with pytest.raises(InvalidRequestError, match="since_txid must be positive"):
        subscribe(journal, 0)
    with pytest.raises(NamespaceMismatchError):
        journal.subscribe_edits("CID-other", 1, Woken())
    small = Journal(JID, MemoryJournalStorage(), max_subscribers=1)
    small.format(NS)
    small.subscribe_edits(NS.cluster_id, 1, Woken())
    with pytest.raises(InvalidRequestError, match=r"edit-subscription\.max"):
        small.subscribe_edits(NS.cluster_id, 1, Woken())


def test_a_new_writer_restarting_a_segment_ends_those_that_saw_the_old_tail() -> None:
    journal = journal_with_abandoned_tail()
    saw_old = subscribe(journal, 6)
    w2 = Writer(journal, 2)
    w2.new_epoch()
    waiting = subscribe(journal, 6)  # after the promise; the cache still holds epoch 1's 6
    w2.start(6)
    assert saw_old.take()[1] == (EndReason.EPOCH_CHANGED, "epoch 2 was promised")
    # Subscribed after the promise, it was pushed epoch 1's txid 6, which is replaced now.
    assert waiting.take()[1] == (EndReason.LOG_REPLACED, "segment 6 was started again")
    fresh = subscribe(journal, 6)
    w2.write(6, 6, 1, payload=b"second")
    batches, ended = fresh.take()
    assert ended is None and [b.epoch for b in batches] == [2]


# --------------------------------------------------------------- the reader's feeds


@pytest.mark.parametrize(("answers", "cluster_size", "expected"), QUORUM_TABLE)
def test_pushed_edits_follow_the_same_quorum_rule(
    answers: dict[str, CachedEdits], cluster_size: int, expected: tuple[str, int] | None
) -> None:
    """Each row of the polling reader's table, as pushes: a node that answered with edits
    pushed them from txid 1 in its epoch, one that answered NOTHING is subscribed and pushed
    nothing, one that did not answer has no subscription."""
    feeds: PushedFeeds[str] = PushedFeeds([f"jn{i}" for i in range(1, cluster_size + 1)])
    for source, answer in answers.items():
        feeds.reset(source, 1)
        if answer.count:
            feeds.add(source, pushed(1, answer.count, epoch=answer.epoch))
    got = feeds.decide(1)
    if expected is None:
        assert got == []
    else:
        epoch = answers[expected[0]].epoch
        assert [op.txid for op in got] == list(range(1, expected[1] + 1))
        assert {op.noop.payload for op in got} == {b"e%d" % epoch}


def test_feeds_apply_only_contiguous_pushes_and_forget_what_was_applied() -> None:
    feeds: PushedFeeds[str] = PushedFeeds(["a", "b", "c"], max_held_txns=50)
    for source in ("a", "b"):
        feeds.reset(source, 1)
        feeds.add(source, pushed(1, 3))
    assert [op.txid for op in feeds.decide(1)] == [1, 2, 3]
    feeds.add("a", pushed(4, 2))
    assert feeds.decide(4) == []  # only a has 4-5
    assert feeds.held_txns("a") == 2  # 1-3 forgotten
    with pytest.raises(FeedError, match="where 4 was due"):
        feeds.add("b", pushed(6, 1))
    assert feeds.held_txns("b") == 0  # dropped: its next subscription starts afresh
    feeds.reset("c", 1)
    with pytest.raises(FeedError, match="more than 50"):
        feeds.add("c", pushed(1, 51))
