"""The NameNode's side of a JournalNode's edits wire (docs/protocol.md §13.8).

``WireCalls`` is one connection of one kind, calls answered in order: ``send`` (on the
loop's thread) frames one request and returns an asyncio Future that its answer completes,
or that fails with ``JournalUnavailableError`` once the connection broke, missed a deadline
or was closed. ``WireJournalStream`` carries a writer's batches (an ``AioJournalStream``
without gRPC: the answers are the unary Journal call's outcomes); ``WireStateCalls`` the
read-index question, ``GetJournalState``.

The connection is opened in the background. Calls sent before it is up wait in order; if
it cannot be opened (nothing listens there any more, a handshake refused), the waiting calls
and every later one go to what ``fallback`` makes instead (a gRPC ``JournalStream``, unary
``GetJournalState`` calls), so a JournalNode whose wire is gone costs speed, never a batch.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, cast

import structlog

from conf.settings import TLSSettings
from conf.wire import (
    KIND_JOURNAL,
    KIND_STATE,
    FrameReader,
    FrameTooLargeError,
    client_ssl_context,
    frame,
    open_within,
)
from journalnode.errors import JournalUnavailableError, from_status, status_code
from proto import journal_pb2

log = structlog.get_logger(__name__)

__all__ = [
    "CONNECT_SECONDS",
    "WireCalls",
    "WireJournalStream",
    "WireStateCalls",
    "complete_from_answer",
]

CONNECT_SECONDS = 5.0
"""How long opening the connection (TCP and TLS) may take before the gRPC stream is used."""

MAX_ANSWER_BYTES = 1 << 20
"""An answer is a status and a message; anything longer is not a JournalNode speaking."""


class WireCalls(asyncio.Protocol):
    """Calls of one ``kind`` to one JournalNode over its edits wire, each answer decoded by
    ``complete(future, payload)``; falling back to ``fallback()``."""

    kind = b""
    what = "calls"

    def __init__(
        self,
        host: str,
        port: int,
        tls: TLSSettings | None,
        fallback: Callable[[], Any],
    ) -> None:
        self.address = f"{host}:{port}"
        self._loop = asyncio.get_running_loop()
        self._fallback_factory = fallback
        self._fallback: Any = None
        self._transport: asyncio.Transport | None = None
        self._reader = FrameReader(MAX_ANSWER_BYTES)
        self._waiting: list[tuple[Any, asyncio.Future[Any], float]] = []
        self._unanswered: collections.deque[tuple[asyncio.Future[Any], float]] = (
            collections.deque()
        )
        self._error: Exception | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._connecting = self._loop.create_task(
            self._connect(host, port, tls), name=f"edits-wire-{self.address}"
        )

    @property
    def broken(self) -> bool:
        if self._fallback is not None:
            return bool(self._fallback.broken)
        return self._error is not None

    @property
    def on_wire(self) -> bool:
        """True while batches go on the edits wire (False: connecting, or fell back)."""
        return self._transport is not None and self._fallback is None

    async def _connect(self, host: str, port: int, tls: TLSSettings | None) -> None:
        context = client_ssl_context(tls)
        try:
            await open_within(
                self._loop.create_connection(
                    lambda: self, host, port, ssl=context,
                    server_hostname=host if context is not None else None,
                    ssl_handshake_timeout=CONNECT_SECONDS if context is not None else None,
                ),
                CONNECT_SECONDS,
                lambda made: made[0].abort(),
            )
        except asyncio.CancelledError:
            self._fail(JournalUnavailableError(f"edits wire to {self.address} closed"))
        except (TimeoutError, OSError) as exc:
            if self._error is not None:
                return
            log.warning(
                "edits wire unavailable; falling back to gRPC",
                journalnode=self.address,
                calls=self.what,
                error=f"{type(exc).__name__}: {exc}",
            )
            self._fall_back()

    def _fall_back(self) -> None:
        self._fallback = self._fallback_factory()
        waiting, self._waiting = self._waiting, []
        now = self._loop.time()
        for request, future, deadline in waiting:
            _chain(self._fallback.send(request, max(0.0, deadline - now)), future)

    def send(self, request: Any, timeout: float) -> asyncio.Future[Any]:
        if self._fallback is not None:
            future_: asyncio.Future[Any] = self._fallback.send(request, timeout)
            return future_
        future: asyncio.Future[Any] = self._loop.create_future()
        if self._error is not None:
            future.set_exception(JournalUnavailableError(f"not sent: {self._error}"))
            return future
        deadline = self._loop.time() + timeout
        if self._transport is None:
            self._waiting.append((request, future, deadline))
        else:
            self._unanswered.append((future, deadline))
            self._transport.write(frame(request.SerializeToString()))
        if self._timer is None:
            self._arm()
        return future

    def complete(self, future: asyncio.Future[Any], payload: bytes) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self._fallback is not None:
            self._fallback.close()
        self._fail(JournalUnavailableError(f"edits wire to {self.address} closed"))

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        if self._error is not None or self._fallback is not None:
            transport.abort()  # made after it was given up
            return
        self._transport = transport
        transport.write(self.kind)
        waiting, self._waiting = self._waiting, []
        for request, future, deadline in waiting:
            self._unanswered.append((future, deadline))
            transport.write(frame(request.SerializeToString()))

    def data_received(self, data: bytes) -> None:
        try:
            answers = self._reader.feed(data)
        except FrameTooLargeError as exc:
            self._fail(JournalUnavailableError(f"edits wire to {self.address}: {exc}"))
            return
        for payload in answers:
            if not self._unanswered:
                self._fail(
                    JournalUnavailableError(
                        f"edits wire to {self.address}: an answer to a batch never sent"
                    )
                )
                return
            future, _ = self._unanswered.popleft()
            if not future.done():
                self.complete(future, payload)

    def connection_lost(self, exc: Exception | None) -> None:
        why = f": {exc}" if exc is not None else ""
        self._transport = None
        self._fail(JournalUnavailableError(f"edits wire to {self.address} ended{why}"))

    # ------------------------------------------------------------------ deadlines and failure

    def _arm(self) -> None:
        self._timer = None
        oldest = self._oldest_deadline()
        if oldest is not None and self._error is None:
            self._timer = self._loop.call_at(oldest, self._check_deadline)

    def _oldest_deadline(self) -> float | None:
        if self._unanswered:
            return self._unanswered[0][1]
        if self._waiting:
            return self._waiting[0][2]
        return None

    def _check_deadline(self) -> None:
        self._timer = None
        if self._fallback is not None:
            return
        oldest = self._oldest_deadline()
        if oldest is not None and oldest <= self._loop.time():
            self._fail(
                JournalUnavailableError(
                    f"DEADLINE_EXCEEDED: {self.address} did not answer a journal batch in time"
                )
            )
        else:
            self._arm()

    def _fail(self, error: Exception) -> None:
        """End the wire once: every unanswered or waiting batch fails with ``error`` (its
        class, a fresh instance each)."""
        if self._error is None:
            self._error = error
        futures = [f for f, _ in self._unanswered] + [f for _, f, _ in self._waiting]
        self._unanswered.clear()
        self._waiting.clear()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._transport is not None:
            self._transport.abort()
            self._transport = None
        if not self._connecting.done():
            self._connecting.cancel()
        for future in futures:
            if not future.done():
                future.set_exception(type(error)(str(error)))


class WireJournalStream(WireCalls):
    """A writer's batches (``JournalRequest``), answered with ``JournalStreamResponse``s."""

    kind = KIND_JOURNAL
    what = "journal batches"

    def complete(self, future: asyncio.Future[Any], payload: bytes) -> None:
        complete_from_answer(future, journal_pb2.JournalStreamResponse.FromString(payload))


class WireStateCalls(WireCalls):
    """The read-index question (``GetJournalStateRequest``), answered with
    ``WireStateAnswer``s: the ``GetJournalStateResponse``, or the status the unary call would
    have failed with."""

    kind = KIND_STATE
    what = "GetJournalState"

    def complete(self, future: asyncio.Future[Any], payload: bytes) -> None:
        answer = journal_pb2.WireStateAnswer.FromString(payload)
        if answer.WhichOneof("kind") == "state":
            future.set_result(answer.state)
        else:
            refused = answer.refused
            future.set_exception(
                from_status(status_code(refused.code), refused.details, refused.error_class or None)
            )


def complete_from_answer(future: Future[None] | asyncio.Future[None], response: Any) -> None:
    """A batch's Future from its JournalStream answer (on a gRPC stream or the wire): None,
    or the exception the unary Journal call would have raised."""
    if response.code == 0:
        future.set_result(None)
    else:
        code = status_code(response.code)
        future.set_exception(from_status(code, response.details, response.error_class or None))


def _chain(source: asyncio.Future[Any], target: asyncio.Future[Any]) -> None:
    """``target`` completes as ``source`` does."""

    def copy(done: asyncio.Future[Any]) -> None:
        if target.done():
            return
        if done.cancelled():
            target.cancel()
        elif done.exception() is not None:
            target.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            target.set_result(done.result())

    source.add_done_callback(copy)
