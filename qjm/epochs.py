"""Generating epoch numbers (HDFS-3077 §2.5).

The writer asks a quorum for ``lastPromisedEpoch`` (``getJournalState``), proposes one more
than the highest answer, and becomes the writer of that epoch only if a quorum then accepts
``newEpoch(proposal)``. This module is the pure middle step.
"""

from __future__ import annotations

from collections.abc import Iterable

from journalnode.epochs import MAX_EPOCH


def next_epoch(promised_epochs: Iterable[int]) -> int:
    """The epoch to propose: one more than the highest ``lastPromisedEpoch`` a quorum reported.

    A proposed epoch is not unique: two writers that read the same promises propose the same
    number (HDFS-3077 §2.5, footnote 3). Uniqueness comes from ``newEpoch``: a
    JournalNode promises only a strictly higher epoch, and any two quorums overlap, so at most
    one of them gets a quorum of promises for it.

    A promise above ``MAX_EPOCH`` can only be what an unbounded older JournalNode accepted
    from a bad request (docs/protocol.md §3.10); it is left out, and that JournalNode refuses
    the proposal while the others can still make a quorum. The proposal never exceeds
    ``MAX_EPOCH``, so it always fits the 64-bit field.

    >>> next_epoch([0, 3, 2])
    4
    """
    epochs = list(promised_epochs)
    if not epochs:
        raise ValueError("no lastPromisedEpoch answers to propose an epoch from")
    if min(epochs) < 0:
        raise ValueError(f"epochs are never negative: {epochs}")
    usable = [e for e in epochs if e <= MAX_EPOCH]
    if not usable:
        raise ValueError(f"every lastPromisedEpoch is above the largest epoch {MAX_EPOCH}")
    proposal = max(usable) + 1
    if proposal > MAX_EPOCH:
        raise ValueError(f"epochs are exhausted: a promise is already {MAX_EPOCH}")
    return proposal
