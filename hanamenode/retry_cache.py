"""The retry cache: the first answer to a mutation, kept for its retries (HDFS-4942).

A client that loses its connection during a call does not know whether the call ran; it
retries with the same ``(client_id, call_id)``. Re-executing would turn a successful
``mkdir /a`` into ``PathExistsError`` or a successful ``delete`` into ``PathNotFoundError``,
so the NameNode answers a retry from this cache instead. docs/architecture.md §5.5: the pair is
written into the edit op, and replaying an op (standby tailer, image + edits load) records the
same success here, so a retry that reaches the *new* active after a failover still gets the
first answer.

How the NameNode uses it, under the namesystem lock so that a retry and its original never
both execute::

    entry = cache.lookup(client_id, call_id, "mkdir")   # another op: RetryCallMismatchError
    if entry is not None:
        ...                                 # wait until entry.txid is durable (logSync):
        return entry.answer()               # the original may still be syncing
    op = namespace.prepare_mkdir(...)       # a user error here: cache.record_failure(...)
    ...                                     # txid assigned, namespace.apply(op) records success

Failures are recorded only locally: a refused call logged nothing, so another NameNode has no
entry and re-executes a retry, which is safe because the refused call changed nothing (HDFS
does the same).

Entries live for ``expiry`` seconds (10 minutes, HDFS's
``dfs.namenode.retrycache.expirytime.millis``), far longer than any client retries. A standby
that has been tailing holds an entry for every logged call. Unlike HDFS, the successes of
logged calls are also kept in the fsimage (``logged_entries``/``restore``, with what is left of
their lifetime as a wall-clock deadline), so a NameNode that restarts from an image still
answers a retry of a call logged before it (issue 11; docs/consistency.md §3).
"""

from __future__ import annotations

import enum
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from hanamenode.errors import NamenodeError, RetryCallMismatchError

DEFAULT_CAPACITY = 100_000
DEFAULT_EXPIRY = 600.0


class CacheState(enum.Enum):
    SUCCESS = "success"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class CacheEntry:
    """The first answer to one call. ``txid`` is the transaction that made a success (0 for a
    failure): a retry must not be answered before that txid is durable. ``op`` names the call
    (``mkdir``, ``create``, ``delete``, ``rename``; empty when unknown, as for an entry read
    from a layout-2 image): a retry must be the same call."""

    client_id: bytes
    call_id: int
    state: CacheState
    result: object
    error: NamenodeError | None
    txid: int
    expires_at: float
    op: str = ""

    def answer(self) -> object:
        """The original result, or raise the original error."""
        if self.error is not None:
            raise self.error
        return self.result


class RetryCache:
    """A bounded, expiring map ``(client_id, call_id) -> CacheEntry`` (least recently used
    entries go first when full). Thread-safe on its own; ``clock`` is in seconds and
    monotonic, injectable for tests.

    >>> cache = RetryCache(capacity=2)
    >>> cache.record_success(b"c1", 7, True, txid=42, op="mkdir")
    >>> cache.lookup(b"c1", 7, "mkdir").answer()
    True
    """

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        expiry: float = DEFAULT_EXPIRY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"retry cache capacity must be at least 1, not {capacity}")
        if expiry <= 0:
            raise ValueError(f"retry cache expiry must be positive, not {expiry}")
        self.capacity = capacity
        self.expiry = expiry
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[tuple[bytes, int], CacheEntry] = OrderedDict()

    @staticmethod
    def is_retryable(client_id: bytes, call_id: int) -> bool:
        """Calls without a client id (tools, tests, replay of old ops) are never cached."""
        return bool(client_id)

    def record_success(
        self, client_id: bytes, call_id: int, result: object, *, txid: int, op: str
    ) -> None:
        """Remember that the call ``op`` succeeded with ``result`` in transaction ``txid``
        (txid 0: a no-op, nothing logged, kept only if no answer is remembered already)."""
        self._put(client_id, call_id, CacheState.SUCCESS, result, None, txid, op)

    def record_failure(
        self, client_id: bytes, call_id: int, error: NamenodeError, *, op: str
    ) -> None:
        """Remember that the call ``op`` was refused with ``error`` (nothing was logged),
        unless an answer to it is remembered already (a retry that ran meanwhile)."""
        self._put(client_id, call_id, CacheState.FAILED, None, error, 0, op)

    def lookup(self, client_id: bytes, call_id: int, op: str) -> CacheEntry | None:
        """The first answer to this call, if it is still remembered.

        A remembered call that was not ``op`` is a ``RetryCallMismatchError``: the client
        used one call id for two different calls, and the first answer is no answer to the
        second (a mkdir's True is not a create's file status)."""
        if not self.is_retryable(client_id, call_id):
            return None
        key = (client_id, call_id)
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                return None
            if entry.expires_at <= self._clock():
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
        if entry.op and entry.op != op:
            first = f"logged at txid {entry.txid}" if entry.txid else "nothing logged"
            raise RetryCallMismatchError(
                f"call id {call_id} of client {client_id.hex()[:32]} was a {entry.op} "
                f"({first}); it cannot be reused for a {op}: a retry repeats its call, a new "
                "call takes a new call id"
            )
        return entry

    def logged_entries(self, up_to_txid: int) -> list[tuple[CacheEntry, float]]:
        """Every unexpired success of a logged call (txid 1..``up_to_txid``), with the
        seconds it has left: what an image at ``up_to_txid`` keeps."""
        with self._lock:
            now = self._clock()
            return [
                (entry, entry.expires_at - now)
                for entry in self._entries.values()
                if entry.state is CacheState.SUCCESS
                and 0 < entry.txid <= up_to_txid
                and entry.expires_at > now
            ]

    def restore(
        self,
        client_id: bytes,
        call_id: int,
        result: object,
        *,
        txid: int,
        remaining: float,
        op: str = "",
    ) -> None:
        """Put back a success read from an image, with ``remaining`` seconds to live (at
        most the cache's expiry); an entry already past its time is dropped."""
        if remaining <= 0 or not self.is_retryable(client_id, call_id):
            return
        key = (client_id, call_id)
        with self._lock:
            now = self._clock()
            expires_at = now + min(remaining, self.expiry)
            self._entries[key] = CacheEntry(
                client_id, call_id, CacheState.SUCCESS, result, None, txid, expires_at, op
            )
            self._entries.move_to_end(key)
            self._evict(now)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def _put(
        self,
        client_id: bytes,
        call_id: int,
        state: CacheState,
        result: object,
        error: NamenodeError | None,
        txid: int,
        op: str,
    ) -> None:
        """An answer that logged nothing (txid 0: a refusal or a no-op) does not replace one
        remembered already; a logged success replaces anything."""
        if not self.is_retryable(client_id, call_id):
            return
        key = (client_id, call_id)
        with self._lock:
            now = self._clock()
            known = self._entries.get(key)
            if not txid and known is not None and known.expires_at > now:
                return
            entry = CacheEntry(key[0], call_id, state, result, error, txid, now + self.expiry, op)
            self._entries[key] = entry
            self._entries.move_to_end(key)
            self._evict(now)

    def _evict(self, now: float) -> None:
        # Expired entries sit at the front unless a lookup moved them back; drop those first,
        # then the least recently used until the cache fits.
        while self._entries:
            key, oldest = next(iter(self._entries.items()))
            if oldest.expires_at > now and len(self._entries) <= self.capacity:
                break
            del self._entries[key]
