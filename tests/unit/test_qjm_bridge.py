"""``qjm.bridge`` and ``QuorumCall.await_for``: the blocking bridge into the QJM's coroutines,
without JournalNodes."""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future

import pytest

from qjm.bridge import drive_inline, run_blocking, shared_loop
from qjm.errors import QJMError, QuorumTimeout
from qjm.quorum import QuorumCall, await_write_quorum


def done(value: int) -> Future[int]:
    future: Future[int] = Future()
    future.set_result(value)
    return future


def test_a_coroutine_over_completed_futures_runs_inline_without_a_loop() -> None:
    """The simulator's path: every logger answered at once, so nothing suspends."""
    call = QuorumCall({"jn1": done(1), "jn2": done(2), "jn3": Future()})

    async def quorum() -> dict[str, int]:
        return await await_write_quorum(call, 3, 10.0, "journal(1-1)")

    assert drive_inline(quorum()) == {"jn1": 1, "jn2": 2}
    assert run_blocking(quorum(), None) == {"jn1": 1, "jn2": 2}


def test_inline_driving_refuses_a_coroutine_that_would_wait() -> None:
    call: QuorumCall[str, int] = QuorumCall({"jn1": done(1), "jn2": Future(), "jn3": Future()})

    async def quorum() -> dict[str, int]:
        return await await_write_quorum(call, 3, 10.0, "journal(1-1)")

    with pytest.raises(QJMError, match="would wait for a JournalNode"):
        drive_inline(quorum())


def test_await_for_wakes_when_another_thread_completes_a_future() -> None:
    pending: list[Future[int]] = [Future(), Future(), Future()]
    call = QuorumCall(dict(zip(["jn1", "jn2", "jn3"], pending, strict=True)))

    def answer() -> None:
        pending[0].set_result(1)
        pending[2].set_result(3)

    async def quorum() -> dict[str, int]:
        threading.Timer(0.05, answer).start()
        return await await_write_quorum(call, 3, 10.0, "newEpoch(2)")

    assert run_blocking(quorum(), shared_loop()) == {"jn1": 1, "jn3": 3}


def test_await_for_times_out_like_wait_for() -> None:
    call: QuorumCall[str, int] = QuorumCall({"jn1": done(1), "jn2": Future(), "jn3": Future()})

    async def quorum() -> dict[str, int]:
        return await await_write_quorum(call, 3, 0.05, "startLogSegment(5)")

    with pytest.raises(QuorumTimeout, match="startLogSegment"):
        asyncio.run(quorum())
