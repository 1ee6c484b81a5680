"""In-progress tailing: the JournalNode's cache of recent edits (GetJournaledEdits), the
Journal's rules around it, and the reader's rule for what a majority makes safe to apply."""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from journalnode.edits_cache import NOTHING, CachedEdits, JournaledEditsCache
from journalnode.errors import InvalidRequestError, NamespaceMismatchError
from journalnode.journal import Journal
from proto import records
from proto.values import SegmentState
from qjm.reader import journaled_edits_quorum
from tests.unit.test_journal import NS, Writer, formatted, ops, writer_with_segment


def txids(cached: CachedEdits) -> list[int]:
    return [op.txid for op in records.decode_ops(cached.framed)]


# --------------------------------------------------------------- the cache


def test_cache_serves_from_any_txid_across_batches() -> None:
    cache = JournaledEditsCache(1 << 20)
    cache.store(1, 3, 1, ops(1, 3))
    cache.store(4, 8, 1, ops(4, 5))
    got = cache.retrieve(2, 100)
    assert (got.epoch, got.count, txids(got)) == (1, 7, [2, 3, 4, 5, 6, 7, 8])
    got = cache.retrieve(3, 3)
    assert (got.count, txids(got)) == (3, [3, 4, 5])
    assert cache.retrieve(8, 100).count == 1


@pytest.mark.parametrize("since", [9, 100])
def test_cache_has_nothing_past_its_newest_txid(since: int) -> None:
    cache = JournaledEditsCache(1 << 20)
    cache.store(1, 8, 1, ops(1, 8))
    assert cache.retrieve(since, 100) == NOTHING


def test_cache_keeps_the_newest_batches_within_its_capacity() -> None:
    one_batch = len(ops(1, 10))
    cache = JournaledEditsCache(2 * one_batch)
    for first in (1, 11, 21):
        cache.store(first, first + 9, 1, ops(first, 10))
    assert cache.txid_range == (11, 30)
    assert cache.size_bytes <= cache.capacity_bytes
    assert cache.retrieve(5, 100) == NOTHING  # dropped: older than the cache reaches
    assert txids(cache.retrieve(11, 100)) == list(range(11, 31))


def test_cache_never_holds_two_writers_or_a_gap() -> None:
    cache = JournaledEditsCache(1 << 20)
    cache.store(1, 5, 1, ops(1, 5))
    cache.store(6, 7, 2, ops(6, 2))  # another writer's epoch: the old run goes
    assert cache.txid_range == (6, 7)
    assert cache.retrieve(6, 10).epoch == 2
    cache.store(10, 12, 2, ops(10, 3))  # not contiguous: the old run goes
    assert cache.txid_range == (10, 12)


def test_cache_drops_what_a_new_segment_replaces_and_too_large_batches() -> None:
    cache = JournaledEditsCache(1 << 20)
    cache.store(1, 5, 1, ops(1, 5))
    cache.store(6, 9, 1, ops(6, 4))
    cache.invalidate_from(7)
    assert cache.txid_range == (1, 5)
    small = JournaledEditsCache(10)
    small.store(1, 5, 1, ops(1, 5))
    assert small.txid_range is None
    with pytest.raises(ValueError, match="capacity"):
        JournaledEditsCache(-1)


# --------------------------------------------------------------- the Journal


def test_journal_serves_written_edits_with_the_writer_epoch() -> None:
    journal = formatted()
    w = writer_with_segment(journal, epoch=3)
    w.write(1, 1, 4)
    got = journal.get_journaled_edits(NS.cluster_id, 2, 100)
    assert (got.epoch, txids(got)) == (3, [2, 3, 4])
    assert journal.get_journaled_edits(NS.cluster_id, 5, 100).count == 0
    assert journal.stats.journaled_edits_served == 3
    assert journal.stats.journaled_edits_misses == 0
    journal.edits_cache.clear()
    assert journal.get_journaled_edits(NS.cluster_id, 2, 100).count == 0
    assert journal.stats.journaled_edits_misses == 1  # written here, no longer cached


def test_journal_checks_the_request() -> None:
    journal = formatted()
    with pytest.raises(NamespaceMismatchError):
        journal.get_journaled_edits("CID-other", 1, 10)
    with pytest.raises(InvalidRequestError, match="since_txid"):
        journal.get_journaled_edits(NS.cluster_id, 0, 10)
    with pytest.raises(InvalidRequestError, match="max_txns"):
        journal.get_journaled_edits(NS.cluster_id, 1, 0)


def journal_with_abandoned_tail() -> Journal:
    """Epoch 1 wrote 1-5 (finalized), then txid 6 on this JournalNode alone: the next writer
    starts over at 6."""
    journal = formatted()
    w1 = writer_with_segment(journal, epoch=1)
    w1.write(1, 1, 5)
    w1.finalize(1, 5)
    w1.start(6)
    w1.write(6, 6, 1)
    return journal


def test_a_new_writer_starting_over_an_abandoned_tail_replaces_it_in_the_cache() -> None:
    journal = journal_with_abandoned_tail()
    w2 = Writer(journal, 2)
    w2.new_epoch()
    w2.start(6)
    assert journal.get_journaled_edits(NS.cluster_id, 6, 10).count == 0
    w2.write(6, 6, 2, payload=b"second writer")
    got = journal.get_journaled_edits(NS.cluster_id, 6, 10)
    assert (got.epoch, txids(got)) == (2, [6, 7])
    assert records.decode_ops(got.framed)[0].noop.payload == b"second writer"


def test_accept_recovery_empties_the_cache() -> None:
    journal = formatted()
    w1 = writer_with_segment(journal)
    w1.write(1, 1, 6)
    source = formatted()
    writer_with_segment(source).write(1, 1, 4)
    w2 = Writer(journal, 2)
    w2.new_epoch()

    def fetch(url: str, jid: str, start: int, end: int) -> Iterable[bytes]:
        return source.storage.read_segment(start, end)

    journal.accept_recovery(w2.req(), SegmentState(1, 4, True), "src", fetch)
    assert journal.get_journaled_edits(NS.cluster_id, 1, 10).count == 0


# --------------------------------------------------------------- the reader's rule

E = CachedEdits  # (epoch, count, framed): the rule looks at epoch and count only


QUORUM_TABLE: list[tuple[dict[str, CachedEdits], int, tuple[str, int] | None]] = [
    # All three agree: everything is safe.
    ({"jn1": E(1, 5, b""), "jn2": E(1, 5, b""), "jn3": E(1, 5, b"")}, 3, ("jn1", 5)),
    # The second largest count of one epoch is what a majority holds.
    ({"jn1": E(1, 9, b""), "jn2": E(1, 4, b""), "jn3": E(1, 2, b"")}, 3, ("jn1", 4)),
    # Only one answer has anything: nothing is on a majority yet.
    ({"jn1": E(1, 9, b""), "jn2": NOTHING, "jn3": NOTHING}, 3, None),
    # Two answers (the third node down) that agree are a majority of three.
    ({"jn1": E(1, 3, b""), "jn2": E(1, 7, b"")}, 3, ("jn1", 3)),
    # One answer of three nodes can never be a majority.
    ({"jn1": E(1, 3, b"")}, 3, None),
    # A stale node from an older writer (it was away while the segment was recovered and
    # restarted by epoch 2) never counts with the others: epoch 2's majority decides.
    ({"jn1": E(1, 9, b""), "jn2": E(2, 3, b""), "jn3": E(2, 6, b"")}, 3, ("jn3", 3)),
    # ...and with only the stale node and one new one answering, nothing is safe.
    ({"jn1": E(1, 9, b""), "jn2": E(2, 3, b"")}, 3, None),
    # Five nodes: the third largest count.
    (
        {f"jn{i}": E(4, c, b"") for i, c in enumerate([10, 8, 6, 1, 0], start=1)},
        5,
        ("jn1", 6),
    ),
    # Five nodes, three answered, two of them hold txids: two of five is no majority,
    # however many answered. Counting the majority over the answers (2 of 3) would
    # apply txids only two JournalNodes hold (issue 10).
    ({"jn1": E(4, 7, b""), "jn2": E(4, 7, b""), "jn3": NOTHING}, 5, None),
    ({"jn1": E(4, 7, b""), "jn2": E(4, 5, b""), "jn3": E(4, 2, b"")}, 5, ("jn1", 2)),
    # ...and with two of five answering, nothing at all.
    ({"jn1": E(4, 7, b""), "jn2": E(4, 7, b"")}, 5, None),
]
"""Answers of the JournalNodes from one txid (absent: did not answer), the cluster size,
and which answer's first how many records are safe. The polling reader and the pushed
edits (tests/unit/test_edit_subscriptions.py) are both checked against these rows."""


@pytest.mark.parametrize(("answers", "cluster_size", "expected"), QUORUM_TABLE)
def test_reader_applies_only_what_a_majority_holds_in_one_epoch(
    answers: dict[str, CachedEdits], cluster_size: int, expected: tuple[str, int] | None
) -> None:
    got = journaled_edits_quorum(answers, cluster_size=cluster_size)
    if expected is None:
        assert got is None
    else:
        assert got is not None
        source, count = got
        assert count == expected[1]
        assert answers[source].count >= count
        assert answers[source].epoch == answers[expected[0]].epoch
