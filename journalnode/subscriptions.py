"""Edit subscriptions: a JournalNode pushes each batch to its readers once it is on disk
(SubscribeEdits, docs/protocol.md §11).

A reader subscribes from a txid; the ``Journal`` hands every batch it wrote and synced to
``EditSubscribers.publish`` (under its lock, right after the edit cache took it), and each
``EditSubscription`` queues what its reader still needs. The server's stream drains the
queue on its event loop. A subscription ends, once, with an ``EndReason``: the segment it
follows was finalized, another writer epoch was promised, the log it followed was replaced
(recovery, sync, format), the node stops, the reader asked for what the cache no longer
holds, or the reader fell behind: more than ``limit_bytes`` queued for it, which are dropped
at once so that a stalled reader costs the node a bounded amount of memory.

    subscribers = EditSubscribers(limit_bytes=4 << 20)
    sub = EditSubscription(since_txid=11, limit_bytes=4 << 20, wake=event_set_threadsafe)
    subscribers.add(sub)
    subscribers.publish(PushedEdits(epoch=2, segment_txid=1, first_txid=11, count=1, framed=b".."))
    batches, end = sub.take()       # ([PushedEdits(...)], None)

What a reader may apply of what it is pushed is not decided here: only txids a majority
holds in one writer epoch (``qjm.reader.journaled_edits_quorum``).
"""

from __future__ import annotations

import collections
import enum
import threading
from collections.abc import Callable
from dataclasses import dataclass

from proto import records

DEFAULT_SUBSCRIBER_QUEUE_BYTES = 4 << 20
"""dfs.journalnode.edit-subscription.queue.bytes: edits queued for one subscriber at most."""

DEFAULT_MAX_SUBSCRIBERS = 64
"""dfs.journalnode.edit-subscription.max: subscriptions one journal serves at once."""

SUBSCRIBED_KEY = "hn-subscribed"
"""The initial metadata a JournalNode sends once it holds a subscription (the value is the
txid it pushes from): a reader counts the stream as open only then, not when it asks."""


class EndReason(enum.Enum):
    """Why a subscription ended; the values are ``journal_pb2.SubscriptionEnd``'s."""

    SEGMENT_FINALIZED = 1
    EPOCH_CHANGED = 2
    SHUTTING_DOWN = 3
    CACHE_MISS = 4
    FELL_BEHIND = 5
    LOG_REPLACED = 6

    @property
    def label(self) -> str:
        """The metric label (``cache_miss``)."""
        return self.name.lower()


@dataclass(frozen=True, slots=True)
class PushedEdits:
    """``count`` framed records from ``first_txid`` on, written in ``epoch`` into the segment
    that starts at ``segment_txid``."""

    epoch: int
    segment_txid: int
    first_txid: int
    count: int
    framed: bytes

    @property
    def last_txid(self) -> int:
        return self.first_txid + self.count - 1

    def from_txid(self, txid: int) -> PushedEdits:
        """The same batch without its records before ``txid`` (which it must hold)."""
        skip = txid - self.first_txid
        if skip <= 0:
            return self
        offsets = records.record_offsets(self.framed)
        return PushedEdits(
            self.epoch, self.segment_txid, txid, self.count - skip, self.framed[offsets[skip] :]
        )


class EditSubscription:
    """One reader's queue. ``offer`` and ``end`` come from the Journal's thread (under its
    lock), ``take`` from the stream on the event loop; ``wake`` tells the stream (thread-safe,
    e.g. ``loop.call_soon_threadsafe(event.set)``)."""

    def __init__(self, since_txid: int, limit_bytes: int, wake: Callable[[], None]) -> None:
        self.next_txid = since_txid
        """The txid this reader needs next (every txid before it was queued or skipped)."""
        self.limit_bytes = limit_bytes
        self.epoch = 0
        """The writer epoch of what was queued so far (0: nothing yet)."""
        self._wake = wake
        self._lock = threading.Lock()
        self._queue: collections.deque[PushedEdits] = collections.deque()
        self._bytes = 0
        self.pushed_txns = 0
        self.ended: tuple[EndReason, str] | None = None

    def offer(self, batch: PushedEdits) -> None:
        """Queue what this reader lacks of a batch just written (nothing before its txid)."""
        if self.ended is not None or batch.last_txid < self.next_txid:
            return
        if batch.first_txid > self.next_txid:
            self.end(
                EndReason.CACHE_MISS,
                f"txids {self.next_txid}-{batch.first_txid - 1} were never pushed here",
            )
            return
        if self.epoch and batch.epoch != self.epoch:
            self.end(
                EndReason.EPOCH_CHANGED,
                f"a batch of writer epoch {batch.epoch} followed epoch {self.epoch}",
            )
            return
        batch = batch.from_txid(self.next_txid)
        with self._lock:
            if self._bytes + len(batch.framed) > self.limit_bytes:
                dropped = self._bytes
                self._queue.clear()
                self._bytes = 0
                self.ended = (
                    EndReason.FELL_BEHIND,
                    f"{dropped + len(batch.framed)} bytes of edits would be queued for this "
                    f"subscriber, more than the limit of {self.limit_bytes}",
                )
            else:
                self._queue.append(batch)
                self._bytes += len(batch.framed)
                self.epoch = batch.epoch
                self.next_txid = batch.last_txid + 1
        self._wake()

    def end(self, reason: EndReason, details: str) -> None:
        """End the subscription once it has pushed what is queued (FELL_BEHIND drops that)."""
        with self._lock:
            if self.ended is None:
                self.ended = (reason, details)
        self._wake()

    def take(self) -> tuple[list[PushedEdits], tuple[EndReason, str] | None]:
        """Everything queued, and why the subscription ended (None: it goes on)."""
        with self._lock:
            batches = list(self._queue)
            self._queue.clear()
            self._bytes = 0
            self.pushed_txns += sum(b.count for b in batches)
            return batches, self.ended

    @property
    def queued_bytes(self) -> int:
        return self._bytes


class EditSubscribers:
    """The live subscriptions of one journal (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subs: set[EditSubscription] = set()

    def __len__(self) -> int:
        return len(self._subs)

    def add(self, sub: EditSubscription) -> None:
        with self._lock:
            self._subs.add(sub)

    def remove(self, sub: EditSubscription) -> None:
        with self._lock:
            self._subs.discard(sub)

    def _live(self) -> list[EditSubscription]:
        with self._lock:
            return list(self._subs)

    def publish(self, batch: PushedEdits) -> None:
        """Offer a batch to every subscription; those it ends (a reader fell behind) are no
        longer live, whether or not their stream has said so yet."""
        for sub in self._live():
            sub.offer(batch)
            if sub.ended is not None:
                self.remove(sub)

    def end(
        self, reason: EndReason, details: str, when: Callable[[EditSubscription], bool] = bool
    ) -> None:
        """End every subscription (for which ``when`` holds)."""
        for sub in self._live():
            if when(sub):
                sub.end(reason, details)
                self.remove(sub)
