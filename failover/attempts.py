"""The record of this elector's attempts to become active after winning the lock
(docs/architecture.md §6.2): the elector thread writes one entry per attempt, a graceful
failover (an RPC thread) waits for the next one::

    attempts = AttemptLog()
    seq = attempts.seq                      # before asking the others to cede
    attempts.record(True, "became active")  # thread elector-<nn>
    attempts.wait_after(seq, timeout=20.0)  # ActiveAttempt(seq=1, succeeded=True, ...)
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

__all__ = ["ActiveAttempt", "AttemptLog"]


@dataclass(frozen=True, slots=True)
class ActiveAttempt:
    """The outcome of one attempt to become active after winning the lock."""

    seq: int
    succeeded: bool
    message: str
    time: float = field(default=0.0, compare=False)
    """When it ended (seconds since the epoch; the status page hides an attempt older than
    the newest transition)."""


class AttemptLog:
    """The last attempt and how many there were; safe to use from any thread."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._seq = 0
        self._last: ActiveAttempt | None = None

    @property
    def seq(self) -> int:
        """How many attempts were recorded so far."""
        return self._seq

    @property
    def last(self) -> ActiveAttempt | None:
        return self._last

    def record(self, succeeded: bool, message: str) -> ActiveAttempt:
        with self._cond:
            self._seq += 1
            self._last = ActiveAttempt(self._seq, succeeded, message, time.time())
            self._cond.notify_all()
            return self._last

    def wait_after(self, seq: int, timeout: float) -> ActiveAttempt | None:
        """The last attempt once there is one after ``seq``; None if none came within
        ``timeout`` seconds."""
        with self._cond:
            done = self._cond.wait_for(lambda: self._seq > seq, timeout)
            return self._last if done else None
