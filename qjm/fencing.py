"""``FenceLatch``: whether a journal writer is fenced, and who is told when it becomes so.

Both journal managers (the QJM and the ZooKeeper journal) learn of a newer writer on
whichever thread or task first sees it (a refused call, a watch, a read-index round); the
latch is set once, logs why, and tells every listener once, from that thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

__all__ = ["FenceLatch"]


class FenceLatch:
    """Set once from any thread; ``reason`` is None until then."""

    def __init__(self, log: Any) -> None:
        self._log = log
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._listeners: list[Callable[[str], None]] = []

    @property
    def reason(self) -> str | None:
        return self._reason

    def add_listener(self, listener: Callable[[str], None]) -> None:
        """Call ``listener(reason)`` once when the writer is fenced (at once if it is)."""
        with self._lock:
            reason = self._reason
            if reason is None:
                self._listeners.append(listener)
        if reason is not None:
            listener(reason)

    def fence(self, reason: str, event: str) -> bool:
        """Set the latch: log ``event`` with ``reason`` and tell the listeners; False (and
        nothing done) when it was already set."""
        with self._lock:
            if self._reason is not None:
                return False
            self._reason = reason
            listeners, self._listeners = self._listeners, []
        self._log.error(event, reason=reason)
        for listener in listeners:
            try:
                listener(reason)
            except Exception:
                self._log.exception("a fence listener failed", reason=reason)
        return True
