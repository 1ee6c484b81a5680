"""Quorum arithmetic and ``QuorumCall`` (HDFS-3077 §2.3, §2.11 and §5.1.2).

Every writer operation goes to all JournalNodes in parallel and succeeds once a majority has
answered with success; it fails as soon as so many have failed that a majority is impossible,
or when its timeout passes. Latency is therefore the median JournalNode's (docs/protocol.md §4.2).

The rule itself is the pure function ``quorum_decision`` (etcd raft's ``VoteResult``: won, lost
or pending); ``QuorumCall`` only collects the outcomes of ``concurrent.futures.Future`` objects
as they complete and wakes the waiting writer, a blocked thread (``wait_for``) or a coroutine
(``await_for``, on the writer's event loop: the asyncio QJM of ``qjm.bridge``). It works the
same when every future has already completed, which is how the deterministic simulator drives
it: ``await_for`` then returns without suspending.
"""

from __future__ import annotations

import asyncio
import enum
import functools
import threading
import time
from collections.abc import Callable, Mapping
from concurrent.futures import CancelledError, Future
from typing import Generic, NoReturn, TypeVar

from qjm.errors import QJMError, QuorumException, QuorumTimeout

K = TypeVar("K")
V = TypeVar("V")


def majority(n: int) -> int:
    """The smallest number of loggers that overlaps every other such set: ``n // 2 + 1``.

    Any two majorities of the same ``n`` loggers share at least one logger, which is what makes
    epochs fence (HDFS-3077 §2.3) and recovery find every committed txid (§2.8).
    """
    if n < 1:
        raise ValueError(f"a quorum needs at least one logger, not {n}")
    return n // 2 + 1


class QuorumResult(enum.Enum):
    """Where a quorum call stands (etcd raft's ``VoteResult``)."""

    WON = "won"
    """Enough successes: the call succeeded."""
    LOST = "lost"
    """Too many failures, or too few loggers left to succeed: the call failed."""
    PENDING = "pending"
    """Neither yet; wait for more responses."""


def quorum_decision(
    total: int, successes: int, failures: int, min_successes: int, max_failures: int
) -> QuorumResult:
    """Decide a quorum call from counts alone.

    WON once ``successes >= min_successes`` (checked first: a call that has its quorum has
    succeeded, whatever else failed); LOST once ``failures > max_failures``, or once even every
    outstanding logger succeeding could not reach ``min_successes``; PENDING otherwise.

    >>> quorum_decision(3, successes=2, failures=1, min_successes=2, max_failures=1)
    <QuorumResult.WON: 'won'>
    >>> quorum_decision(3, successes=1, failures=2, min_successes=2, max_failures=1)
    <QuorumResult.LOST: 'lost'>
    """
    if min(total, successes, failures, min_successes, max_failures) < 0:
        raise ValueError("quorum counts can't be negative")
    if successes + failures > total:
        raise ValueError(f"{successes} successes + {failures} failures exceed {total} loggers")
    if successes >= min_successes:
        return QuorumResult.WON
    pending = total - successes - failures
    if failures > max_failures or successes + pending < min_successes:
        return QuorumResult.LOST
    return QuorumResult.PENDING


class QuorumCall(Generic[K, V]):
    """One RPC sent to several loggers: waits for a quorum of their futures.

    Wraps ``{logger: Future}``; each future reports its outcome through a done-callback and a
    ``threading.Condition`` wakes the waiter, so nothing polls. Usage::

        call = QuorumCall({jn: logger.new_epoch(epoch) for jn, logger in loggers.items()})
        call.wait_for(min_responses=3, min_successes=2, max_exceptions=1, timeout_s=20.0)
        if call.count_successes() < 2:
            call.rethrow_exception("newEpoch failed")
        responses = call.successes()

    or, for the usual majority rule, ``wait_for_write_quorum(call, 3, 20.0, "newEpoch(5)")``.
    A cancelled future counts as an exception (``CancelledError``).
    """

    def __init__(self, calls: Mapping[K, Future[V]]) -> None:
        self._cond = threading.Condition()
        self._total = len(calls)
        self._successes: dict[K, V] = {}
        self._exceptions: dict[K, BaseException] = {}
        self._waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        # Registered last: a future that is already done runs its callback right here.
        for key, future in calls.items():
            future.add_done_callback(functools.partial(self._on_done, key))

    def _on_done(self, key: K, future: Future[V]) -> None:
        with self._cond:
            try:
                exc = future.exception()
            except CancelledError as cancelled:
                exc = cancelled
            if exc is None:
                self._successes[key] = future.result()
            else:
                self._exceptions[key] = exc
            self._cond.notify_all()
            waiters, self._waiters = self._waiters, []
        for loop, waiter in waiters:
            _wake(loop, waiter)

    def __len__(self) -> int:
        return self._total

    def wait_for(
        self,
        min_responses: int,
        min_successes: int,
        max_exceptions: int,
        timeout_s: float,
        *,
        time_fn: Callable[[], float] = time.monotonic,
        operation_name: str | None = None,
    ) -> None:
        """Block until (a) ``successes >= min_successes``, or (b) ``exceptions >
        max_exceptions``, or (c) ``responses >= min_responses``; raise ``QuorumTimeout`` if none
        holds by ``timeout_s``.

        As in Hadoop's ``QuorumCall.waitFor``, a condition is switched off by a non-positive
        ``min_responses``/``min_successes`` or a negative ``max_exceptions``. Returning says
        nothing about success: look at ``count_successes()``. ``time_fn`` is the clock the
        deadline is measured on; the wait itself sleeps in real time for at most the remaining
        time, so with a fake clock the clock must advance (or futures complete) to end it.
        """
        if timeout_s < 0:
            raise ValueError(f"timeout must not be negative, got {timeout_s}")
        deadline = time_fn() + timeout_s
        with self._cond:
            while not self._satisfied(min_responses, min_successes, max_exceptions):
                remaining = deadline - time_fn()
                if remaining <= 0:
                    raise self._timed_out(timeout_s, operation_name)
                self._cond.wait(remaining)

    async def await_for(
        self,
        min_responses: int,
        min_successes: int,
        max_exceptions: int,
        timeout_s: float,
        *,
        operation_name: str | None = None,
    ) -> None:
        """``wait_for`` for a coroutine on an event loop: the same conditions, the same
        ``QuorumTimeout``. Returns at once, without touching the event loop, when a condition
        already holds (so the simulator's direct loggers never make it suspend)."""
        if timeout_s < 0:
            raise ValueError(f"timeout must not be negative, got {timeout_s}")
        with self._cond:
            if self._satisfied(min_responses, min_successes, max_exceptions):
                return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            raise QJMError(
                f"{operation_name or 'a quorum call'} would wait for a JournalNode, but runs "
                "with no event loop (DirectExecutor loggers must answer every call at once)"
            ) from None
        deadline = loop.time() + timeout_s
        while True:
            with self._cond:
                if self._satisfied(min_responses, min_successes, max_exceptions):
                    return
                remaining = deadline - loop.time()
                if remaining <= 0:
                    raise self._timed_out(timeout_s, operation_name)
                waiter: asyncio.Future[None] = loop.create_future()
                self._waiters.append((loop, waiter))
            # The deadline wakes the waiter too; the loop above then raises QuorumTimeout.
            timer = loop.call_later(remaining, _wake, loop, waiter)
            try:
                await waiter
            finally:
                timer.cancel()

    def _timed_out(self, timeout_s: float, operation_name: str | None) -> QuorumTimeout:
        what = f" to respond to {operation_name}" if operation_name else " to respond"
        return QuorumTimeout(
            f"Timed out waiting {timeout_s}s for a quorum of nodes{what}",
            self._successes,
            self._exceptions,
        )

    def _satisfied(self, min_responses: int, min_successes: int, max_exceptions: int) -> bool:
        ok, failed = len(self._successes), len(self._exceptions)
        return (
            (min_responses > 0 and ok + failed >= min_responses)
            or (min_successes > 0 and ok >= min_successes)
            or (max_exceptions >= 0 and failed > max_exceptions)
        )

    def successes(self) -> dict[K, V]:
        """A copy of the results so far, by logger."""
        with self._cond:
            return dict(self._successes)

    def exceptions(self) -> dict[K, BaseException]:
        """A copy of the exceptions so far, by logger."""
        with self._cond:
            return dict(self._exceptions)

    def count_successes(self) -> int:
        with self._cond:
            return len(self._successes)

    def count_exceptions(self) -> int:
        with self._cond:
            return len(self._exceptions)

    def count_responses(self) -> int:
        """Successes plus exceptions."""
        with self._cond:
            return len(self._successes) + len(self._exceptions)

    def rethrow_exception(self, msg: str) -> NoReturn:
        """Raise ``QuorumException(msg)`` carrying every success and exception seen so far."""
        with self._cond:
            raise QuorumException(msg, self._successes, self._exceptions)


def _wake(loop: asyncio.AbstractEventLoop, waiter: asyncio.Future[None]) -> None:
    """Complete an ``await_for`` waiter from whichever thread completed a logger's future."""

    def wake() -> None:
        if not waiter.done():
            waiter.set_result(None)

    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        wake()
    elif not loop.is_closed():
        loop.call_soon_threadsafe(wake)


def wait_for_write_quorum(
    call: QuorumCall[K, V], n_loggers: int, timeout_s: float, operation_name: str
) -> dict[K, V]:
    """Wait for a majority of ``n_loggers`` to succeed; return their results.

    Fails fast: as soon as ``n_loggers - majority(n_loggers) + 1`` loggers have failed no
    majority can succeed, and ``QuorumException`` names ``operation_name`` and every failure.
    ``QuorumTimeout`` if neither happens within ``timeout_s``. Usage::

        results = wait_for_write_quorum(call, len(loggers), 20.0, f"newEpoch({epoch})")

    The result may hold more than a majority (every logger that had answered by then); the
    stragglers' futures keep running and are not waited for.
    """
    quorum = majority(n_loggers)
    call.wait_for(
        n_loggers, quorum, n_loggers - quorum, timeout_s, operation_name=operation_name
    )
    return _write_quorum_result(call, n_loggers, operation_name)


async def await_write_quorum(
    call: QuorumCall[K, V], n_loggers: int, timeout_s: float, operation_name: str
) -> dict[K, V]:
    """``wait_for_write_quorum`` for a coroutine: the same rule, the same errors."""
    quorum = majority(n_loggers)
    await call.await_for(
        n_loggers, quorum, n_loggers - quorum, timeout_s, operation_name=operation_name
    )
    return _write_quorum_result(call, n_loggers, operation_name)


def _write_quorum_result(
    call: QuorumCall[K, V], n_loggers: int, operation_name: str
) -> dict[K, V]:
    """The majority's results once a wait returned, or ``QuorumException`` naming every
    failure."""
    quorum = majority(n_loggers)
    max_failures = n_loggers - quorum
    successes, exceptions = call.successes(), call.exceptions()
    decision = quorum_decision(
        max(n_loggers, len(successes) + len(exceptions)),
        len(successes),
        len(exceptions),
        quorum,
        max_failures,
    )
    if decision is not QuorumResult.WON:
        raise QuorumException(
            f"Got too many exceptions to achieve quorum size {quorum}/{n_loggers} "
            f"for {operation_name}",
            successes,
            exceptions,
        )
    return successes
