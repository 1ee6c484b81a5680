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

from journalnode.edits_cache import CachedEdits
from journalnode.errors import JournalUnavailableError
from proto.values import (
    NamespaceInfo,
    PrepareRecoveryResult,
    RemoteEditLog,
    RequestInfo,
    SegmentState,
)
from qjm.sim.cluster import SimJournalChannel


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

    async def is_formatted(
        self, journal_id: str, timeout: float
    ) -> tuple[bool, NamespaceInfo | None]:
        return await self._call("is_formatted", journal_id, timeout)

    async def format(self, journal_id: str, ns: NamespaceInfo, force: bool, timeout: float) -> None:
        await self._call("format", journal_id, ns, force, timeout)

    async def get_journal_state(
        self, journal_id: str, cluster_id: str, timeout: float
    ) -> tuple[int, str]:
        return await self._call("get_journal_state", journal_id, cluster_id, timeout)

    async def new_epoch(
        self, journal_id: str, ns: NamespaceInfo, epoch: int, timeout: float
    ) -> int | None:
        return await self._call("new_epoch", journal_id, ns, epoch, timeout)

    async def start_log_segment(self, req: RequestInfo, txid: int, timeout: float) -> None:
        await self._call("start_log_segment", req, txid, timeout)

    async def journal(
        self,
        req: RequestInfo,
        segment_txid: int,
        first_txid: int,
        num_txns: int,
        framed: bytes,
        timeout: float,
    ) -> None:
        await self._call("journal", req, segment_txid, first_txid, num_txns, framed, timeout)

    async def heartbeat(self, req: RequestInfo, timeout: float) -> None:
        await self._call("heartbeat", req, timeout)

    async def finalize_log_segment(
        self, req: RequestInfo, start: int, end: int, timeout: float, md5: bytes = b""
    ) -> None:
        await self._call("finalize_log_segment", req, start, end, timeout, md5)

    async def purge_logs(self, req: RequestInfo, min_txid_to_keep: int, timeout: float) -> None:
        await self._call("purge_logs", req, min_txid_to_keep, timeout)

    async def get_edit_log_manifest(
        self,
        journal_id: str,
        cluster_id: str,
        since_txid: int,
        in_progress_ok: bool,
        timeout: float,
    ) -> tuple[list[RemoteEditLog], int]:
        return await self._call(
            "get_edit_log_manifest", journal_id, cluster_id, since_txid, in_progress_ok, timeout
        )

    async def get_journaled_edits(
        self, journal_id: str, cluster_id: str, since_txid: int, max_txns: int, timeout: float
    ) -> CachedEdits:
        return await self._call(
            "get_journaled_edits", journal_id, cluster_id, since_txid, max_txns, timeout
        )

    async def prepare_recovery(
        self, req: RequestInfo, segment_txid: int, timeout: float
    ) -> PrepareRecoveryResult:
        return await self._call("prepare_recovery", req, segment_txid, timeout)

    async def accept_recovery(
        self, req: RequestInfo, state: SegmentState, from_url: str, timeout: float
    ) -> None:
        await self._call("accept_recovery", req, state, from_url, timeout)

    async def aclose(self) -> None:
        pass
