"""The elector's state and its wait for the lock, shared between thread ``elector-<nn>`` and
the others (RPC threads, the health monitor, kazoo's callbacks) under one condition
(docs/architecture.md §6.2)::

    board = StateBoard(log)
    board.queue(lock, why_out)      # elector thread: WAITING, unless why_out() names a reason
    board.interrupt(cede.end)       # any thread: change an input and wake whoever waits
    board.interrupt(cancel=True)    # ... and cancel the wait for the lock
    board.wait_released(20.0)       # an RPC thread: until the lock is no longer held

The condition is what makes a cancel safe: an input changed under it is either seen by the
round's last eligibility check (``queue``), or finds the round's wait published and cancels it.
"""

from __future__ import annotations

import enum
import threading
from collections.abc import Callable
from typing import Any

from kazoo.recipe.lock import Lock

__all__ = ["HOLDING", "ElectorState", "StateBoard"]


class ElectorState(enum.Enum):
    STOPPED = "stopped"
    OUT = "out"
    """Not in the election: unhealthy, ceding, disconnected or ZooKeeper not formatted."""
    WAITING = "waiting"
    """Queued for the lock."""
    BECOMING_ACTIVE = "becoming_active"
    """Holding the lock: fencing, breadcrumb, transition."""
    ACTIVE = "active"
    """Holding the lock, the NameNode active."""


HOLDING = (ElectorState.BECOMING_ACTIVE, ElectorState.ACTIVE)


class StateBoard:
    """Only the elector thread sets the state and publishes its wait; any thread reads,
    interrupts and waits."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self._cond = threading.Condition()
        self._state = ElectorState.STOPPED
        self._pending: Lock | None = None

    @property
    def state(self) -> ElectorState:
        return self._state

    def set(self, state: ElectorState) -> None:
        with self._cond:
            if state is self._state:
                return
            previous, self._state = self._state, state
            self._cond.notify_all()
        self._log.info("elector state", state=state.value, previous=previous.value)

    def queue(self, lock: Lock, why_out: Callable[[], object | None]) -> bool:
        """Publish the wait for ``lock`` and enter WAITING, unless ``why_out()`` (called under
        the condition) names a reason to stay out: False then, e.g. a cancel that came
        before the wait was published."""
        with self._cond:
            if why_out() is not None:
                return False
            self._pending = lock
            self._state, previous = ElectorState.WAITING, self._state
            self._cond.notify_all()
        self._log.info("elector state", state="waiting", previous=previous.value)
        return True

    def dequeue(self) -> None:
        """The wait for the lock is over (won, cancelled or failed)."""
        with self._cond:
            self._pending = None

    def interrupt(self, change: Callable[[], None] = lambda: None, *,
                  cancel: bool = False) -> None:
        """Run ``change`` under the condition and wake its waiters; with ``cancel``, cancel
        the published wait for the lock (outside the condition: kazoo's ``cancel`` takes
        locks of its own). Never blocks for long: safe in callbacks."""
        with self._cond:
            change()
            pending = self._pending
            self._cond.notify_all()
        if cancel and pending is not None:
            pending.cancel()

    def wait_released(self, timeout: float) -> bool:
        """Until the lock is no longer held (False: still held after ``timeout`` seconds)."""
        with self._cond:
            return self._cond.wait_for(lambda: self._state not in HOLDING, timeout)
