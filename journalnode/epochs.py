"""How far above its promise a JournalNode lets an epoch go (docs/protocol.md §3.10).

Writers choose epochs as one more than the highest ``lastPromisedEpoch`` a quorum reports
(``qjm.epochs.next_epoch``), so an honest epoch is at most the number of elections this
JournalNode missed above its own promise. A request carrying an epoch far beyond that is a
bug or an attack: promised, it would make every later ``newEpoch`` overflow the 64-bit field
(issue 10: one Heartbeat with epoch 2^64-1 to two of three JournalNodes left no NameNode able
to become active). Two bounds keep the arithmetic safe:

- ``MAX_EPOCH`` (2^63-1): no epoch above it is ever promised, so ``max + 1`` always fits
  in the wire's uint64 (and in a Java long, as in HDFS);
- ``EPOCH_WINDOW`` (2^24): no request may raise the promise by more than this at once. A
  JournalNode would have to miss 16.7 million elections to see a legitimate epoch that far
  ahead (at one election per second, over six months), while an abuser needs 2^39 accepted
  requests, each a durable promise, to walk the promise up to ``MAX_EPOCH``.
"""

from __future__ import annotations

MAX_EPOCH = 2**63 - 1
EPOCH_WINDOW = 2**24


def epoch_out_of_range(epoch: int, promised: int) -> str | None:
    """Why ``epoch`` may not be accepted by a JournalNode that promised ``promised``, or None.

    Only the upper side is judged here; an epoch below the promise is the fence
    (``EpochError``), decided by the Journal.
    """
    if epoch > MAX_EPOCH:
        return f"epoch {epoch} is above the largest epoch {MAX_EPOCH}"
    if epoch > promised + EPOCH_WINDOW:
        return (
            f"epoch {epoch} is more than {EPOCH_WINDOW} above the last promised epoch"
            f" {promised}: no election could have produced it"
        )
    return None
