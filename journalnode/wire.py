"""The JournalNode's edits wire: the writer's batches on a plain asyncio connection
(docs/protocol.md §13.8).

A connection carries what a ``JournalStream`` carries, framed by ``conf.wire``: each frame
from the writer is one ``JournalRequest``, each frame back one ``JournalStreamResponse``, in
the order of the requests. A batch is written exactly as a ``JournalStream`` batch is
(``BatchSink``: on the event loop when only its own disk can hold it up, in the
``journal-io`` pool otherwise), and a failed batch is answered with the status the unary
call would have failed with; the connection goes on. What ends a connection, with an answer
naming why where there is a request to answer:

* a caller whose certificate lacks the NameNode role, as soon as it connects
  (PERMISSION_DENIED, as the gRPC guard answers it; with TLS off every caller is let in, as
  on gRPC);
* a frame above ``max_message_bytes``, bytes that are not a ``JournalRequest``, or a request
  out of ``proto.bounds`` (INVALID_ARGUMENT);
* a TLS handshake not done within the handshake timeout, or no frame for the idle limit
  (``hanamenode.rpc.handshake-timeout.ms``, ``hanamenode.rpc.max-connection-idle.ms``);
* more than ``MAX_CONNECTIONS`` open at once: the newest is closed at once.

Reading pauses while ``MAX_UNANSWERED`` requests wait for the disk, so a writer that sends
faster than the disk syncs cannot grow the JournalNode's memory.
"""

from __future__ import annotations

import asyncio
import collections
import ssl
from typing import Any, Protocol, cast

import structlog
from google.protobuf.message import DecodeError

from conf.guard import Role
from conf.settings import RPCSettings
from conf.wire import FrameReader, FrameTooLargeError, frame, peer_roles
from journalnode.errors import AccessDeniedError, InvalidRequestError
from proto import bounds, journal_pb2

log = structlog.get_logger(__name__)

__all__ = ["MAX_CONNECTIONS", "MAX_UNANSWERED", "BatchSink", "EditsWire"]

MAX_CONNECTIONS = 64
"""Edits-wire connections one JournalNode holds at once. Only writers connect (one active
NameNode, and for a moment a deposed one), so anything beyond a handful is a flood."""

MAX_UNANSWERED = 64
"""Requests one connection may have waiting for the disk before its reading pauses."""

OK_FRAME = frame(journal_pb2.JournalStreamResponse().SerializeToString())


class BatchSink(Protocol):
    """Where the wire's batches go: the servicer's own way of writing a JournalStream batch."""

    def write_batch_if_quick(self, request: Any) -> bool: ...

    async def write_batch(self, request: Any) -> None: ...

    def refusal(self, rpc: str, request: Any, exc: Exception) -> Any:
        """The JournalStreamResponse a failed batch is answered with (the failure logged)."""
        ...


class EditsWire:
    """The edits-wire listener of one JournalNode, on its event loop; counts for its metrics."""

    def __init__(
        self,
        sink: BatchSink,
        *,
        max_message_bytes: int,
        ssl_context: ssl.SSLContext | None,
        bounds_: RPCSettings,
        node: str,
    ) -> None:
        self._sink = sink
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
    """One writer's connection: frames in, batches written in order, answers out."""

    def __init__(self, wire: EditsWire) -> None:
        self._wire = wire
        self._reader = FrameReader(wire._max_message_bytes)
        self._transport: asyncio.Transport | None = None
        self._peer = "?"
        self._waiting: collections.deque[Any] = collections.deque()
        self._worker: asyncio.Task[None] | None = None
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
        if wire._ssl is not None:
            roles = peer_roles(transport)
            if Role.NAMENODE.value not in roles:
                # Answered and closed at once, so a certificate of another role cannot hold
                # one of the few connections a JournalNode keeps for writers.
                presented = " or ".join(sorted(roles)) or "none"
                self._end(
                    None,
                    AccessDeniedError(
                        f"the edits wire needs the role namenode; the caller's certificate "
                        f"presents {presented}"
                    ),
                )
                return
        self._arm_idle()

    def connection_lost(self, exc: Exception | None) -> None:
        self._wire.connections.discard(self)
        if self._idle is not None:
            self._idle.cancel()
            self._idle = None
        if self._worker is not None:
            self._worker.cancel()
        self._waiting.clear()
        self._transport = None

    def data_received(self, data: bytes) -> None:
        self._heard = True
        try:
            frames = self._reader.feed(data)
        except FrameTooLargeError as exc:
            self._end(None, InvalidRequestError(f"JournalStream: {exc}"))
            return
        for payload in frames:
            if self._transport is None:
                return
            self._received(payload)

    # ------------------------------------------------------------------ requests

    def _received(self, payload: bytes) -> None:
        request = journal_pb2.JournalRequest()
        try:
            request.ParseFromString(payload)
        except DecodeError as exc:
            self._end(None, InvalidRequestError(f"JournalStream: undecodable request: {exc}"))
            return
        violation = bounds.check(request)
        if violation is not None:
            self._end(request, InvalidRequestError(f"JournalStream: {violation}"))
            return
        if not self._waiting:
            try:
                if self._wire._sink.write_batch_if_quick(request):
                    self._answer(OK_FRAME)
                    return
            except Exception as exc:
                self._answer_failure(request, exc)
                return
        self._waiting.append(request)
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._drain())
        if len(self._waiting) >= MAX_UNANSWERED and not self._paused and self._transport:
            self._paused = True
            self._transport.pause_reading()

    async def _drain(self) -> None:
        """Write the waiting batches one after another in the pool, answering each."""
        try:
            while self._waiting:
                request = self._waiting[0]
                try:
                    await self._wire._sink.write_batch(request)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    self._answer_failure(request, exc)
                else:
                    self._answer(OK_FRAME)
                if self._waiting:
                    self._waiting.popleft()
                if self._paused and len(self._waiting) < MAX_UNANSWERED // 2 and self._transport:
                    self._paused = False
                    self._transport.resume_reading()
        finally:
            self._worker = None

    def _answer(self, data: bytes) -> None:
        if self._transport is not None:
            self._transport.write(data)

    def _answer_failure(self, request: Any, exc: Exception) -> None:
        response = self._wire._sink.refusal("JournalStream", request, exc)
        self._answer(frame(response.SerializeToString()))

    def _end(self, request: Any, exc: Exception) -> None:
        """Answer ``exc`` (to the request, or as the stream's end) and close the connection."""
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

    # ------------------------------------------------------------------ idle limit

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
