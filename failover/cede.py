"""How long this NameNode stays out of the election after a graceful failover asked it to
cede (``cede_active``; HDFS: twice the graceful fence timeout; docs/architecture.md §6.4).
The rules read ``left()`` and ``seconds`` into their snapshot (``ElectionInputs.cede_left``,
``cede_for``)::

    cede = Cede()
    cede.begin(4.0)     # an RPC thread: stay out for 4 s
    cede.left()         # the elector thread: 3.2 (0.0 once over, or after end())
    cede.end()          # the graceful failover is over: rejoin at once
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Cede"]


class Cede:
    """Written by RPC threads, read by the elector thread: each field is one atomic store,
    and a reader that sees a stale value only decides a poll later."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._until = 0.0
        self.seconds = 0.0
        """The length of the last cede asked for (kept after it ends, for messages)."""

    def begin(self, seconds: float) -> None:
        self._until = self._clock() + seconds
        self.seconds = seconds

    def end(self) -> None:
        self._until = 0.0

    def left(self) -> float:
        """Seconds left of the cede; 0.0 when not ceding."""
        return max(0.0, self._until - self._clock())
