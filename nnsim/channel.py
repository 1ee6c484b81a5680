"""The active NameNode's channel to a simulated JournalNode: the QJM simulator's
``SimJournalChannel`` (real ``Journal`` calls, seeded faults) behind a network that takes
virtual time.

The QJM simulator's writers use ``DirectExecutor`` loggers: every call is answered at once.
The NameNode's writer here runs the real asynchronous ``AsyncLogger`` tasks instead, over
this coroutine channel (what ``AioJournalChannel`` is in production): a call waits a seeded
latency, is delivered, and its answer (or error) waits another, on the NameNode's event loop.
So a sync, a heartbeat or a read-index round is in flight for a while, and other calls
(a retry, a read, a step-down) can run meanwhile, as they do on grpc.aio.

    channel = SimAioJournalChannel(net.channels(client)[0], latency)
    AsyncLogger(channel, JOURNAL_ID, NAMESPACE)      # bound to the running loop
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from journalnode.errors import JournalUnavailableError
from qjm.channel import JOURNAL_RPCS
from qjm.sim.cluster import SimJournalChannel

JOURNAL_CALLS = JOURNAL_RPCS - {"get_segment"}
"""What the writer calls on a JournalNode (``qjm.channel.JournalChannel``'s unary calls;
``get_segment`` is a stream between JournalNodes, which the simulated ones do in process)."""


class SimAioJournalChannel:
    """A coroutine ``JournalChannel`` (``is_aio``) over a ``SimJournalChannel``."""

    is_aio = True

    def __init__(
        self,
        inner: SimJournalChannel,
        wire: asyncio.AbstractEventLoop,
        latency: Callable[[], float],
        cut: Callable[[], bool] = lambda: False,
    ) -> None:
        """``wire`` is the network's loop: a request travels, is delivered and its answer
        travels back there, so a paused NameNode's requests still arrive and their answers
        wait for it as bytes wait in a socket (handled before its timers when it resumes,
        as an asyncio loop handles I/O before due timers). ``latency()`` draws one way of
        one call; ``cut()`` says whether the network between this NameNode and the
        JournalNode drops packets now: a call sent then gets no answer and fails at its
        deadline (grpc's DEADLINE_EXCEEDED)."""
        self.inner = inner
        self.address = inner.address
        self._wire = wire
        self._latency = latency
        self._cut = cut

    async def _call(self, method: str, *args: Any) -> Any:
        if self._cut():
            # Every call's last argument is its timeout, but finalize's (then the md5).
            timeout = args[-2] if method == "finalize_log_segment" else args[-1]
            await asyncio.sleep(float(timeout))
            raise JournalUnavailableError(
                f"{method} to {self.address}: no answer within its deadline (cut off)"
            )
        home = asyncio.get_running_loop()
        answer: asyncio.Future[Any] = home.create_future()

        def settle(result: Any, error: BaseException | None) -> None:
            if answer.done():  # the caller gave up (its logger was closed)
                return
            if error is not None:
                answer.set_exception(error)
            else:
                answer.set_result(result)

        async def on_the_wire() -> None:
            await asyncio.sleep(self._latency())
            result: Any = None
            error: BaseException | None = None
            try:
                result = getattr(self.inner, method)(*args)
            except Exception as exc:  # the JournalNode's answer, or a fault's
                error = exc
            await asyncio.sleep(self._latency())
            home.call_soon(settle, result, error)

        self._wire.create_task(on_the_wire())
        return await answer

    def __getattr__(self, method: str) -> Callable[..., Any]:
        """The ``JournalChannel`` calls, each a coroutine with ``_call``'s network (a name
        outside them is an AttributeError: no ``send_journal``, so batches are unary calls)."""
        if method not in JOURNAL_CALLS:
            raise AttributeError(f"{type(self).__name__} has no {method!r}")

        async def call(*args: Any) -> Any:
            return await self._call(method, *args)

        return call

    async def aclose(self) -> None:
        pass
