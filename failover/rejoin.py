"""Rejoining as the active (docs/architecture.md §6.2, docs/consistency.md §6): when the
ZooKeeper session expired while this NameNode was active and no rule said to step down, it
stays active (neutral) and queues for the lock in a new session. It keeps serving until it
wins the lock again, and steps down once another NameNode holds it::

    rejoin = Rejoin()
    rejoin.begin()                     # the elector thread, on finding the session expired
    rejoin.check(nn_state, holder, decide, step_down)   # before queueing, and while waiting
    rejoin.end()                       # became active again in the new session
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from failover.election_rules import Decision
from hanamenode.errors import ServiceFailedError
from hanamenode.ha import HAState

__all__ = ["Rejoin"]


class Rejoin:
    """Threads: ``begin`` and ``end`` in the elector thread; ``check`` in the elector thread
    (before it queues) and in the health monitor's (while it waits), one at a time."""

    def __init__(self, nn_id: str, log: Any) -> None:
        self.nn_id = nn_id
        self._log = log
        self._lock = threading.Lock()
        self.as_active = False
        """The session expired while active: stay active while queueing again."""

    def begin(self) -> None:
        self.as_active = True

    def end(self) -> None:
        self.as_active = False

    def check(
        self,
        nn_state: Callable[[], HAState],
        holder: Callable[[], str | None],
        decide: Callable[[str], Decision | None],
        step_down: Callable[[Decision], object],
    ) -> None:
        """While rejoining as the active: if the NameNode left ACTIVE meanwhile, stop
        rejoining; if ``holder()`` names another NameNode and ``decide(holder)`` says to step
        down, ``step_down(decision)``. A holder that cannot be read yet is read at the next
        check."""
        with self._lock:
            if not self.as_active:
                return
            if nn_state() is not HAState.ACTIVE:
                self.as_active = False  # fenced or stepped down meanwhile
                return
            try:
                other = holder()
            except ServiceFailedError as exc:
                self._log.info("cannot read the lock holder yet", error=str(exc))
                return
            if other is None or other == self.nn_id:
                return
            decision = decide(other)
            if decision is None:
                return
            self.as_active = False
            step_down(decision)
