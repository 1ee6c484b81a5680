"""Neutral mode's clock: how long this elector has been without ZooKeeper (automatic
failover suspended; docs/consistency.md §6), for ``hanamenode_elector_neutral_seconds_total``
and for one log line when it starts and one when it ends::

    neutral = NeutralClock(log)
    neutral.start()                         # the elector starts, not connected yet
    neutral.update(connected=True, nn_state=HAState.STANDBY)
    neutral.seconds()                       # total so far, the current stretch included
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from hanamenode.ha import HAState

__all__ = ["NeutralClock"]


class NeutralClock:
    def __init__(self, log: Any, clock: Callable[[], float] = time.monotonic) -> None:
        self._log = log
        self._clock = clock
        self._lock = threading.Lock()
        self._since: float | None = None
        self._total = 0.0
        self._announced = False
        self._outages = 0

    @property
    def neutral(self) -> bool:
        return self._since is not None

    def start(self) -> None:
        """Not connected yet: neutral from now (quietly: a connection usually follows)."""
        with self._lock:
            if self._since is None:
                self._since = self._clock()

    def update(self, connected: bool, nn_state: HAState) -> None:
        """Called on every change of the connection (from kazoo's thread: never blocks)."""
        with self._lock:
            now = self._clock()
            if connected and self._since is not None:
                stretch = now - self._since
                self._total += stretch
                self._since = None
                if self._announced:
                    self._log.info("ZooKeeper reachable again: automatic failover resumed",
                                   neutral_seconds=round(stretch, 1))
                self._announced = False
            elif not connected and self._since is None:
                self._since = now
            else:
                return
            announce = not connected and not self._announced
            if announce:
                self._announced = True
                self._outages += 1
        if announce:
            # ``outage`` numbers them: each is an event of its own, never folded into the
            # previous one by the log's repeat filter.
            self._log.warning("ZooKeeper unreachable: automatic failover suspended",
                              namenode_state=nn_state.value, outage=self._outages)

    def seconds(self) -> float:
        with self._lock:
            since = self._since
            return self._total + (self._clock() - since if since is not None else 0.0)
