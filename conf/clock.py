"""The clock that the NameNode and the QJM decide by, injectable per context.

Code whose behaviour depends on time (deadlines, idle heartbeats, the tailer's and the
checkpointer's periods, the namespace's mtimes, the failover history) reads
``clock.monotonic()``, ``clock.time()`` or ``clock.time_ns()`` from this module, never the
``time`` module directly. By default they are the system's. ``with use_clock(c):`` hands
clock ``c`` to the code that runs in the current context: this thread, and the asyncio tasks
and callbacks created inside the block (they copy the context, PEP 567). Other threads and
everything outside the block keep the system clock; nothing is patched.

The deterministic simulator of the NameNode layer (``nnsim``, docs/architecture.md §8.2)
runs its NameNodes this way on its virtual clock, so that a seed fixes every time they read.
"""

from __future__ import annotations

import contextlib
import time as _time
from collections.abc import Iterator
from contextvars import ContextVar
from typing import Protocol


class Clock(Protocol):
    """Monotonic seconds, wall-clock seconds and wall-clock nanoseconds since the epoch."""

    def monotonic(self) -> float: ...

    def time(self) -> float: ...

    def time_ns(self) -> int: ...


class SystemClock:
    """The machine's clocks (``time.monotonic``, ``time.time``, ``time.time_ns``)."""

    def monotonic(self) -> float:
        return _time.monotonic()

    def time(self) -> float:
        return _time.time()

    def time_ns(self) -> int:
        return _time.time_ns()


SYSTEM_CLOCK = SystemClock()

_current: ContextVar[Clock] = ContextVar("hanamenode_clock", default=SYSTEM_CLOCK)


def monotonic() -> float:
    """The current context's monotonic seconds."""
    return _current.get().monotonic()


def time() -> float:
    """The current context's wall-clock seconds since the epoch."""
    return _current.get().time()


def time_ns() -> int:
    """The current context's wall-clock nanoseconds since the epoch."""
    return _current.get().time_ns()


@contextlib.contextmanager
def use_clock(clock: Clock) -> Iterator[Clock]:
    """Read ``clock`` in this context (and the tasks created in it) until the block ends."""
    token = _current.set(clock)
    try:
        yield clock
    finally:
        _current.reset(token)
