"""Thread ``elector-<nn>`` with its stop flag and its wake-up (docs/architecture.md §4.4):
the thread pauses between polls, any other thread (or a kazoo callback) wakes it early::

    loop = ElectorThread("nn1")
    loop.start(run)             # run() loops while not loop.stopping
    loop.wake()                 # any thread: something changed, look again now
    loop.pause(0.5)             # the thread itself: until woken or 0.5 s passed
    loop.stop()                 # stopping from now on, and woken
    loop.join(10.0)             # True when the thread is still alive afterwards
"""

from __future__ import annotations

import threading
from collections.abc import Callable

__all__ = ["ElectorThread"]


class ElectorThread:
    def __init__(self, nn_id: str) -> None:
        self.name = f"elector-{nn_id}"
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()
        self._wake = threading.Event()

    @property
    def started(self) -> bool:
        return self._thread is not None

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    @property
    def running(self) -> bool:
        thread = self._thread
        return thread is not None and thread.is_alive() and not self._stopping.is_set()

    def start(self, run: Callable[[], None]) -> None:
        self._thread = threading.Thread(target=run, name=self.name, daemon=True)
        self._thread.start()

    def wake(self) -> None:
        self._wake.set()

    def pause(self, seconds: float) -> None:
        self._wake.wait(seconds)
        self._wake.clear()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` for the thread to end; True if it is still alive (never
        for the thread itself, which does not wait for itself)."""
        thread = self._thread
        if thread is None or thread is threading.current_thread():
            return False
        thread.join(timeout)
        return thread.is_alive()
