"""Read-index rounds: confirm, once per batch of waiting readers, that the writer still holds
its epoch on a quorum of JournalNodes (issue 11; the read index of Raft, etcd's linearizable
reads).

The active NameNode answers a read from memory. The answer is linearizable only if, at some
moment after the read arrived, no newer writer could have acknowledged anything: that holds
once a majority of JournalNodes answered a call stamped with our epoch *after* the read
arrived, since a newer writer must first have a majority promise its epoch, and the two
majorities share a JournalNode that would then have refused us.

A round is one quorum call. Rounds run one at a time: a reader that arrives while a round is
in flight waits for the *next* one (the one in flight may have been answered before it
arrived), and every reader waiting when a round starts shares it. Under load this costs one
quorum round trip per batch of reads, not per read.

    rounds = ReadIndex(lambda: qjm.heartbeat_quorum(timeout))
    rounds.confirm(timeout=20.0)   # returns, or raises what the round raised
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from conf import clock
from qjm.errors import QJMError


class ReadIndexTimeout(QJMError):
    """No round started after this reader arrived finished in time."""


class ReadIndex:
    """Shares quorum confirmation rounds among concurrent readers.

    ``round_fn`` runs one round in the caller's thread: it returns when a quorum confirmed,
    or raises. ``confirm`` runs it (one caller at a time) or waits for another caller's.
    """

    def __init__(self, round_fn: Callable[[], None]) -> None:
        self._round_fn = round_fn
        self._cond = threading.Condition(threading.Lock())
        self._started = 0  # rounds started so far (the number of the newest)
        self._finished = 0  # rounds finished so far
        self._running = False
        self._last_error: BaseException | None = None  # outcome of round ``_finished``
        self.rounds = 0  # for tests and metrics: rounds run

    def confirm(self, timeout: float) -> None:
        """Return once a round that started after this call finished well; raise the error
        of the newest finished round when it failed, ReadIndexTimeout after ``timeout``."""
        deadline = clock.monotonic() + timeout
        with self._cond:
            # A round in flight may have been answered before we arrived: wait for a later one.
            needed = self._started + 1
            while True:
                if self._finished >= needed:
                    # This round, or a later one (which also started after we arrived).
                    if self._last_error is not None:
                        raise self._last_error
                    return
                if not self._running:
                    self._started += 1
                    needed = self._started
                    self._running = True
                    break
                left = deadline - clock.monotonic()
                if left <= 0:
                    raise ReadIndexTimeout(
                        f"no quorum confirmation round finished within {timeout:.1f}s"
                    )
                self._cond.wait(left)
        error: BaseException | None = None
        try:
            self._round_fn()
        except BaseException as exc:
            error = exc
        with self._cond:
            self._finished = needed
            self._running = False
            self._last_error = error
            self.rounds += 1
            self._cond.notify_all()
        if error is not None:
            raise error
