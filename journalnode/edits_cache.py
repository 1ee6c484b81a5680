"""Recent edits in memory, so a standby can tail the in-progress segment (GetJournaledEdits).

The Journal stores each batch here after it is on disk and synced, tagged with the epoch of
the writer that sent it. A reader asks for the edits from a txid on and gets, from one
contiguous run of batches of one writer, the records from that txid, with that epoch. What
the reader may apply is its business (``qjm.journal_manager``): only txids a majority of
JournalNodes hold in the same epoch, which no recovery can take back.

The cache never holds two versions of a txid: a batch that does not follow the newest one
(another writer, a new segment after a gap) empties it first; ``invalidate_from`` drops what
a new segment start replaces, and ``clear`` everything a recovery may have replaced. Oldest
batches go when the total size passes the capacity::

    cache = JournaledEditsCache(capacity_bytes=1 << 20)
    cache.store(first_txid=1, last_txid=3, epoch=1, framed=b"...")
    cache.retrieve(since_txid=2, max_txns=100)  # -> CachedEdits(epoch=1, count=2, framed=...)
"""

from __future__ import annotations

import collections
from dataclasses import dataclass

from proto import records


@dataclass(frozen=True, slots=True)
class CachedEdits:
    """``count`` framed records from the requested txid on, written in ``epoch``; count 0 (and
    epoch 0) when the cache holds nothing from that txid."""

    epoch: int
    count: int
    framed: bytes


NOTHING = CachedEdits(0, 0, b"")


@dataclass(frozen=True, slots=True)
class _Batch:
    first: int
    last: int
    epoch: int
    framed: bytes
    segment: int = 0


class JournaledEditsCache:
    """Not thread-safe: the Journal calls it under its own lock."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 0:
            raise ValueError(f"edit cache capacity must be >= 0 bytes, got {capacity_bytes}")
        self.capacity_bytes = capacity_bytes
        self._batches: collections.deque[_Batch] = collections.deque()
        self._bytes = 0

    @property
    def size_bytes(self) -> int:
        return self._bytes

    @property
    def txid_range(self) -> tuple[int, int] | None:
        """(first, last) txid held, or None when empty."""
        if not self._batches:
            return None
        return self._batches[0].first, self._batches[-1].last

    def store(
        self, first_txid: int, last_txid: int, epoch: int, framed: bytes, segment: int = 0
    ) -> None:
        newest = self._batches[-1] if self._batches else None
        if newest is not None and (newest.last + 1 != first_txid or newest.epoch != epoch):
            self.clear()
        if len(framed) > self.capacity_bytes:
            self.clear()  # one batch larger than the cache: keep nothing rather than a gap
            return
        self._batches.append(_Batch(first_txid, last_txid, epoch, framed, segment))
        self._bytes += len(framed)
        while self._bytes > self.capacity_bytes:
            self._bytes -= len(self._batches.popleft().framed)

    def invalidate_from(self, txid: int) -> None:
        """Drop every batch holding ``txid`` or later (a segment starting at ``txid``)."""
        while self._batches and self._batches[-1].last >= txid:
            self._bytes -= len(self._batches.pop().framed)

    def clear(self) -> None:
        self._batches.clear()
        self._bytes = 0

    def retrieve(self, since_txid: int, max_txns: int) -> CachedEdits:
        """Up to ``max_txns`` records from ``since_txid`` on (NOTHING when it is not held)."""
        held = self.txid_range
        if held is None or max_txns <= 0 or not held[0] <= since_txid <= held[1]:
            return NOTHING
        epoch = self._batches[-1].epoch
        parts: list[bytes] = []
        count = 0
        for batch in self._batches:
            if batch.last < since_txid:
                continue
            skip = max(0, since_txid - batch.first)
            take = min(batch.last - batch.first + 1 - skip, max_txns - count)
            if skip == 0 and take == batch.last - batch.first + 1:
                parts.append(batch.framed)
            else:
                parts.append(_slice_records(batch.framed, skip, take))
            count += take
            if count >= max_txns:
                break
        return CachedEdits(epoch, count, b"".join(parts))


    def batches_from(self, since_txid: int) -> list[tuple[int, int, int, int, bytes]]:
        """(epoch, segment, first txid, count, framed) of each held batch from ``since_txid``
        on, the first one cut to start there; empty when ``since_txid`` is not held."""
        held = self.txid_range
        if held is None or not held[0] <= since_txid <= held[1]:
            return []
        out = []
        for batch in self._batches:
            if batch.last < since_txid:
                continue
            skip = max(0, since_txid - batch.first)
            count = batch.last - batch.first + 1 - skip
            framed = batch.framed if not skip else _slice_records(batch.framed, skip, count)
            out.append((batch.epoch, batch.segment, batch.first + skip, count, framed))
        return out


def _slice_records(framed: bytes, skip: int, take: int) -> bytes:
    """Records ``skip`` .. ``skip + take - 1`` of a framed batch (the Journal checked every
    record before storing it: only the frame lengths are read here)."""
    offsets = records.record_offsets(framed)
    return framed[offsets[skip] : offsets[skip + take]]
