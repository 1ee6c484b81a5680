"""How much of the live log the active's publisher deletes (docs/architecture.md §9.3): a
pure rule over the batches ZooKeeper holds and what each NameNode packed.

Normally every batch that every NameNode has packed goes. A NameNode that lags (or is
down, or wiped) must not make ZooKeeper hold more than the window, though: then the oldest
batches go until the rest fits in ``max_bytes`` and none is older than ``max_seconds``, and
the laggard fetches those txids from another NameNode's packed segments. Never beyond what
the active itself packed.

>>> batches = [LiveBatch(10, 100, 0.0), LiveBatch(20, 100, 50.0), LiveBatch(30, 100, 90.0)]
>>> deletion_bound(batches, {"nn1": 30, "nn2": 5}, "nn1", now=100.0,
...                max_bytes=1000, max_seconds=60.0)   # nn2 lags; only the first is too old
10
>>> deletion_bound(batches, {"nn1": 30, "nn2": 25}, "nn1", now=100.0,
...                max_bytes=1000, max_seconds=600.0)  # everyone packed through 25
20
>>> deletion_bound(batches, {"nn1": 15, "nn2": 30}, "nn1", now=100.0,
...                max_bytes=150, max_seconds=600.0)   # never beyond the active's own
10
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = ["LiveBatch", "deletion_bound"]


@dataclass(frozen=True, slots=True)
class LiveBatch:
    """One batch znode as the publisher sees it: its last txid, its size, when it was made."""

    last_txid: int
    size: int
    created: float
    """Seconds, on ZooKeeper's clock (the znode's ctime)."""


def deletion_bound(
    batches: Sequence[LiveBatch],
    packed: Mapping[str, int],
    own: str,
    *,
    now: float,
    max_bytes: int,
    max_seconds: float,
) -> int:
    """The last txid whose batch may be deleted (0: none), ``batches`` oldest first,
    ``packed`` each NameNode's last packed txid (``own``: the active's)."""
    own_packed = packed.get(own, 0)
    everyone = min(packed.values(), default=0)
    held = sum(b.size for b in batches)
    window = 0
    for batch in batches:
        if held <= max_bytes and now - batch.created <= max_seconds:
            break
        window = batch.last_txid
        held -= batch.size
    bound = min(own_packed, max(everyone, window))
    # Whole batches only: a batch goes once every txid of it may.
    return max((b.last_txid for b in batches if b.last_txid <= bound), default=0)
