"""The JournalNode's edits wire: a writer's batches, and the pushes of edit subscriptions,
on plain asyncio connections (docs/protocol.md §13.8).

A connection starts with one byte saying what it carries, then frames (``conf.wire``):

* ``KIND_JOURNAL``: what a ``JournalStream`` carries. Each frame from the writer is one
  ``JournalRequest``, each frame back one ``JournalStreamResponse``, in the order of the
  requests. A batch is written exactly as a ``JournalStream`` batch is (``WireServicer``: on
  the event loop when only its own disk can hold it up, in the ``journal-io`` pool
  otherwise), and a failed batch is answered with the status the unary call would have
  failed with; the connection goes on.
* ``KIND_STATE``: ``GetJournalState`` calls, the read-index question of linearizable reads,
  answered in order with ``WireStateAnswer`` frames.
* ``KIND_SUBSCRIBE``: what ``SubscribeEdits`` carries. One ``SubscribeEditsRequest`` from the
  reader, then ``WirePush`` frames back: ``subscribed_since`` once the node holds the
  subscription, each ``SubscribedEdits``, and the last one (its ``end`` set), or ``refused``
  with the status the call would end with. Pushes wait while the reader's socket is full.

What ends a connection, with an answer naming why where there is a request to answer:

* a caller whose certificate lacks the role of the calls it carries (``namenode`` to
  write; ``namenode`` or ``journalnode`` to ask the state; ``namenode`` or ``admin`` to
  subscribe), as soon as it says what it carries (PERMISSION_DENIED, as the gRPC
  guard answers; with TLS off every caller is let in, as on gRPC);
* no first byte within the handshake timeout, or a first byte that is no kind;
* a frame above ``max_message_bytes``, bytes that are not a ``JournalRequest``, or a request
  out of ``proto.bounds`` (INVALID_ARGUMENT);
* a TLS handshake not done within the handshake timeout, or a writer's connection without a
  frame for the idle limit (``hanamenode.rpc.handshake-timeout.ms``,
  ``hanamenode.rpc.max-connection-idle.ms``; a held subscription is never idle);
* more than ``MAX_CONNECTIONS`` open at once: the newest is closed at once.

Reading pauses while ``MAX_UNANSWERED`` requests wait for the disk, so a writer that sends
faster than the disk syncs cannot grow the JournalNode's memory; a subscription's pushes wait
for the reader's socket, and its queue (``EditSubscription``) ends it with ``FELL_BEHIND``.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import ssl
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from typing import Any, Protocol, cast

import structlog
from google.protobuf.message import DecodeError

from conf.settings import RPCSettings
from conf.wire import (
    KIND_JOURNAL,
    KIND_STATE,
    KIND_SUBSCRIBE,
    FrameReader,
    FrameTooLargeError,
    frame,
    peer_roles,
)
from journalnode.errors import AccessDeniedError, InvalidRequestError
from proto import bounds, journal_pb2

log = structlog.get_logger(__name__)

__all__ = ["MAX_CONNECTIONS", "MAX_UNANSWERED", "EditsWire", "SubscriptionRefused", "WireServicer"]

MAX_CONNECTIONS = 128
"""Edits-wire connections one JournalNode holds at once: its writer (and for a moment a
deposed one) and the subscriptions of standbys and observers
(``dfs.journalnode.edit-subscription.max``, 64 by default), so anything beyond is a flood."""

NAMES = {
    KIND_JOURNAL: "JournalStream",
    KIND_STATE: "GetJournalState",
    KIND_SUBSCRIBE: "SubscribeEdits",
}
"""The QJournalService method each kind of connection carries: its role rule
(``journalnode.server.RULES``) is the connection's."""

REQUESTS = {
    KIND_JOURNAL: journal_pb2.JournalRequest,
    KIND_STATE: journal_pb2.GetJournalStateRequest,
}
"""The request of each kind of connection that carries calls answered in order."""

MAX_UNANSWERED = 64
"""Requests one connection may have waiting for the disk before its reading pauses."""

OK_FRAME = frame(journal_pb2.JournalStreamResponse().SerializeToString())


class SubscriptionRefused(Exception):
    """A subscription could not be opened; ``cause`` is why (the status it answers with)."""

    def __init__(self, cause: Exception) -> None:
        super().__init__(str(cause))
        self.cause = cause


class WireServicer(Protocol):
    """What the wire's requests go to: the servicer's own ways of writing a JournalStream
    batch and of serving a subscription."""

    def write_batch_if_quick(self, request: Any) -> bool: ...

    async def write_batch(self, request: Any) -> None: ...

    def refusal(self, rpc: str, request: Any, exc: Exception) -> Any:
        """The JournalStreamResponse a failed call is answered with (the failure logged)."""
        ...

    def subscription(
        self, request: Any, subscribed: Callable[[], Awaitable[None]]
    ) -> AsyncGenerator[Any, None]: ...

    def journal_state_if_loaded(self, request: Any) -> Any: ...

    async def journal_state(self, request: Any) -> Any: ...


class EditsWire:
    """The edits-wire listener of one JournalNode, on its event loop; counts for its metrics."""

    def __init__(
        self,
        sink: WireServicer,
        *,
        max_message_bytes: int,
        ssl_context: ssl.SSLContext | None,
        bounds_: RPCSettings,
        node: str,
        roles: Mapping[bytes, frozenset[str]],
    ) -> None:
        self._sink = sink
        self.roles = roles
        """Who may open each kind of connection (the role names of its method's rule)."""
        self._max_message_bytes = max_message_bytes
        self._ssl = ssl_context
        self._bounds = bounds_
        self._node = node
        self._server: asyncio.Server | None = None
        self.connections: set[_Connection] = set()
        self.accepted = 0
        self.refused = 0
        """Connections closed for their caller, their bytes or their number."""
        self.port = 0

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.get_running_loop().create_server(
            self._connection,
            host or None,
            port,
            ssl=self._ssl,
            ssl_handshake_timeout=self._bounds.handshake_timeout if self._ssl else None,
            reuse_address=True,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        return self.port

    def _connection(self) -> _Connection:
        return _Connection(self)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for connection in list(self.connections):
                connection.abort("the JournalNode is stopping")
            await self._server.wait_closed()
            self._server = None


class _Connection(asyncio.Protocol):
    """One connection: its kind, then a writer's batches (written in order, answered) or
    one subscription's pushes."""

    def __init__(self, wire: EditsWire) -> None:
        self._wire = wire
        self._reader = FrameReader(wire._max_message_bytes)
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self._kind: bytes | None = None
        self._waiting: collections.deque[Any] = collections.deque()
        self._worker: asyncio.Task[None] | None = None
        self._pusher: asyncio.Task[None] | None = None
        self._writable = asyncio.Event()
        self._writable.set()
        self._paused = False
        self._idle: asyncio.TimerHandle | None = None
        self._heard = True

    # ------------------------------------------------------------------ asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self._transport = transport
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        wire = self._wire
        if len(wire.connections) >= MAX_CONNECTIONS:
            wire.refused += 1
            log.warning(
                "edits wire connection refused: too many open",
                peer=self._peer,
                open=len(wire.connections),
                limit=MAX_CONNECTIONS,
            )
            transport.abort()
            return
        wire.connections.add(self)
        wire.accepted += 1
        # Until it says what it carries, a connection gets the handshake's time, no more.
        self._idle = asyncio.get_running_loop().call_later(
            wire._bounds.handshake_timeout, self._check_kind
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self._wire.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        for task in (self._worker, self._pusher):
            if task is not None:
                task.cancel()
        self._waiting.clear()
        self._writable.set()
        self._transport = None

    def pause_writing(self) -> None:
        self._writable.clear()

    def resume_writing(self) -> None:
        self._writable.set()

    def data_received(self, data: bytes) -> None:
        self._heard = True
        if self._kind is None:
            if not self._choose_kind(data[:1]):
                return
            data = data[1:]
        try:
            frames = self._reader.feed(data)
        except FrameTooLargeError as exc:
            self._end(None, InvalidRequestError(f"{NAMES[self._kind or KIND_JOURNAL]}: {exc}"))
            return
        for payload in frames:
            if self._transport is None:
                return
            if self._kind == KIND_SUBSCRIBE:
                self._subscribe(payload)
            else:
                self._received(payload)

    # ------------------------------------------------------------------ kind and role

    def _choose_kind(self, kind: bytes) -> bool:
        """Take the connection's first byte; False (the connection ended) for no kind or a
        caller without the kind's role."""
        if kind not in NAMES:
            self._end(None, InvalidRequestError(f"the edits wire has no connection kind {kind!r}"))
            return False
        self._kind = kind
        if self._wire._ssl is not None:
            roles = peer_roles(self._transport)
            if not roles & self._wire.roles[kind]:
                # Answered and closed at once, so a certificate of another role cannot hold
                # one of the connections a JournalNode keeps for writers and readers.
                needed = " or ".join(sorted(self._wire.roles[kind]))
                presented = " or ".join(sorted(roles)) or "none"
                self._end(
                    None,
                    AccessDeniedError(
                        f"{NAMES[kind]} on the edits wire needs the role {needed}; the "
                        f"caller's certificate presents {presented}"
                    ),
                )
                return False
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if kind != KIND_SUBSCRIBE:
            self._arm_idle()
        return True

    def _check_kind(self) -> None:
        self._idle = None
        if self._kind is None and self._transport is not None:
            self._wire.refused += 1
            log.info(
                "edits wire connection closed: it never said what it carries",
                peer=self._peer,
                waited_seconds=self._wire._bounds.handshake_timeout,
            )
            self._transport.close()

    # ------------------------------------------------------------------ calls answered in order

    def _decode(self, message: Any, payload: bytes) -> Any:
        """``payload`` parsed into ``message`` and within bounds, or None (the connection
        ended with INVALID_ARGUMENT naming why)."""
        name = NAMES[self._kind or KIND_JOURNAL]
        try:
            message.ParseFromString(payload)
        except DecodeError as exc:
            self._end(None, InvalidRequestError(f"{name}: undecodable request: {exc}"))
            return None
        violation = bounds.check(message)
        if violation is not None:
            self._end(message, InvalidRequestError(f"{name}: {violation}"))
            return None
        return message

    def _received(self, payload: bytes) -> None:
        request = self._decode(REQUESTS[self._kind or KIND_JOURNAL](), payload)
        if request is None:
            return
        if not self._waiting:
            try:
                answer = self._quick(request)
            except Exception as exc:
                self._answer_failure(request, exc)
                return
            if answer is not None:
                self._answer(answer)
                return
        self._waiting.append(request)
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._drain())
        if len(self._waiting) >= MAX_UNANSWERED and not self._paused and self._transport:
            self._paused = True
            self._transport.pause_reading()

    def _quick(self, request: Any) -> bytes | None:
        """The answer from the event loop, or None when the call must wait for the pool."""
        sink = self._wire._sink
        if self._kind == KIND_JOURNAL:
            return OK_FRAME if sink.write_batch_if_quick(request) else None
        state = sink.journal_state_if_loaded(request)
        return None if state is None else _state_frame(state)

    async def _slow(self, request: Any) -> bytes:
        sink = self._wire._sink
        if self._kind == KIND_JOURNAL:
            await sink.write_batch(request)
            return OK_FRAME
        return _state_frame(await sink.journal_state(request))

    async def _drain(self) -> None:
        """Run the waiting calls one after another in the pool, answering each."""
        try:
            while self._waiting:
                request = self._waiting[0]
                try:
                    answer = await self._slow(request)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._answer_failure(request, exc)
                else:
                    self._answer(answer)
                if self._waiting:
                    self._waiting.popleft()
                if self._paused and len(self._waiting) < MAX_UNANSWERED // 2 and self._transport:
                    self._paused = False
                    self._transport.resume_reading()
        finally:
            self._worker = None

    # ------------------------------------------------------------------ a subscription

    def _subscribe(self, payload: bytes) -> None:
        if self._pusher is not None:
            self._end(None, InvalidRequestError("SubscribeEdits: one request per connection"))
            return
        request = self._decode(journal_pb2.SubscribeEditsRequest(), payload)
        if request is not None:
            self._pusher = asyncio.get_running_loop().create_task(self._push(request))

    async def _push(self, request: Any) -> None:
        sink = self._wire._sink

        async def subscribed() -> None:
            self._send(journal_pb2.WirePush(subscribed_since=request.since_txid))

        try:
            async with contextlib.aclosing(sink.subscription(request, subscribed)) as messages:
                async for message in messages:
                    if not message.end:
                        # A reader whose socket is full holds its pushes here; the node's
                        # queue for it fills and ends the subscription (FELL_BEHIND).
                        await self._writable.wait()
                    if self._transport is None:
                        return
                    self._send(journal_pb2.WirePush(edits=message))
        except SubscriptionRefused as refused:
            self._send(
                journal_pb2.WirePush(refused=sink.refusal("SubscribeEdits", request, refused.cause))
            )
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._send(journal_pb2.WirePush(refused=sink.refusal("SubscribeEdits", request, exc)))
        finally:
            if self._transport is not None:
                self._transport.close()

    def _send(self, push: Any) -> None:
        if self._transport is not None:
            self._transport.write(frame(push.SerializeToString()))

    # ------------------------------------------------------------------ answers and ends

    def _answer(self, data: bytes) -> None:
        if self._transport is not None:
            self._transport.write(data)

    def _answer_failure(self, request: Any, exc: Exception) -> None:
        response = self._wire._sink.refusal(NAMES[self._kind or KIND_JOURNAL], request, exc)
        if self._kind == KIND_SUBSCRIBE:
            self._send(journal_pb2.WirePush(refused=response))
        elif self._kind == KIND_STATE:
            self._send(journal_pb2.WireStateAnswer(refused=response))
        else:
            self._answer(frame(response.SerializeToString()))

    def _end(self, request: Any, exc: Exception) -> None:
        """Answer ``exc`` (to the request, or as the connection's end) and close it."""
        self._wire.refused += 1
        log.warning(
            "edits wire connection closed",
            peer=self._peer,
            node=self._wire._node,
            error=f"{type(exc).__name__}: {exc}",
        )
        self._answer_failure(request, exc)
        if self._transport is not None:
            self._transport.close()

    def abort(self, reason: str) -> None:
        log.info("edits wire connection closed", peer=self._peer, reason=reason)
        if self._transport is not None:
            self._transport.abort()

    # ------------------------------------------------------------------ a writer's idle limit

    def _arm_idle(self) -> None:
        limit = self._wire._bounds.max_connection_idle
        self._idle = asyncio.get_running_loop().call_later(limit, self._check_idle)

    def _check_idle(self) -> None:
        self._idle = None
        if self._transport is None:
            return
        if self._heard or self._waiting:
            self._heard = False
            self._arm_idle()
            return
        log.info(
            "edits wire connection closed: idle",
            peer=self._peer,
            idle_seconds=self._wire._bounds.max_connection_idle,
        )
        self._transport.close()


def _state_frame(state: Any) -> bytes:
    return frame(journal_pb2.WireStateAnswer(state=state).SerializeToString())
