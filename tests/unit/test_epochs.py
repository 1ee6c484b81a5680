"""``qjm.epochs.next_epoch``: the proposal step of epoch generation (HDFS-3077 §2.5)."""

from __future__ import annotations

import pytest

from journalnode.epochs import MAX_EPOCH
from qjm.epochs import next_epoch


@pytest.mark.parametrize(
    ("promised", "expected"),
    [
        ([0, 0, 0], 1),  # freshly formatted journal: the annotated log's "new epoch 1"
        ([3, 1, 2], 4),
        ([5], 6),  # a quorum of one (a single JournalNode)
        (iter([2, 7]), 8),  # any iterable, e.g. a generator over QuorumCall results
    ],
)
def test_next_epoch_is_max_plus_one(promised: list[int], expected: int) -> None:
    assert next_epoch(promised) == expected


def test_two_writers_reading_the_same_promises_propose_the_same_epoch() -> None:
    # Proposals are not unique (footnote 3); newEpoch on a quorum is what makes epochs unique.
    assert next_epoch([1, 2]) == next_epoch([2, 0]) == 3


@pytest.mark.parametrize("promised", [[], [1, -1]], ids=["no-answers", "negative"])
def test_next_epoch_rejects_bad_input(promised: list[int]) -> None:
    with pytest.raises(ValueError):
        next_epoch(promised)


def test_next_epoch_never_overflows() -> None:
    """A promise above MAX_EPOCH (an older, unbounded JournalNode took 2^64-1 from a bad
    request) is left out; the proposal always fits in 64 bits (docs/protocol.md §3.10)."""
    assert next_epoch([2**64 - 1, 4, 3]) == 5
    assert next_epoch([MAX_EPOCH - 1, 0]) == MAX_EPOCH
    with pytest.raises(ValueError, match="exhausted"):
        next_epoch([MAX_EPOCH, 0])
    with pytest.raises(ValueError, match="above the largest epoch"):
        next_epoch([2**64 - 1])
