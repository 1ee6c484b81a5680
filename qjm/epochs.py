"""Generating epoch numbers (HDFS-3077 §2.5).

The writer asks a quorum for ``lastPromisedEpoch`` (``getJournalState``), proposes one more
than the highest answer, and becomes the writer of that epoch only if a quorum then accepts
``newEpoch(proposal)``. This module is the pure middle step.
"""

from __future__ import annotations

from collections.abc import Iterable


def next_epoch(promised_epochs: Iterable[int]) -> int:
    """The epoch to propose: one more than the highest ``lastPromisedEpoch`` a quorum reported.

    A proposed epoch is not unique: two writers that read the same promises propose the same
    number (HDFS-3077 §2.5, footnote 3). Uniqueness comes from ``newEpoch``: a
    JournalNode promises only a strictly higher epoch, and any two quorums overlap, so at most
    one of them gets a quorum of promises for it.

    >>> next_epoch([0, 3, 2])
    4
    """
    epochs = list(promised_epochs)
    if not epochs:
        raise ValueError("no lastPromisedEpoch answers to propose an epoch from")
    if min(epochs) < 0:
        raise ValueError(f"epochs are never negative: {epochs}")
    return max(epochs) + 1
