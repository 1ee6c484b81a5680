"""One client session on the NameNode: many calls pipelined on one bidirectional stream
(``ClientProtocol/Session``; docs/protocol.md §13).

A unary grpc.aio call costs the server a few hundred microseconds before any of our code
runs; a message on an open stream costs a fraction of that. A session therefore carries every
call of a client: each ``SessionRequest`` holds an id and one call (the request message of
the unary method of the same name), each ``SessionResponse`` the same id and the unary
method's answer, or its refusal as the status the unary call would have ended with.

Calls run concurrently, each in a task of its own, and are answered as they finish, in any
order. Every rule of the unary calls holds because each call runs the same servicer code:
the retry cache, linearizable answers sharing the read-index round, observer reads held
until the seen txid is applied, stale reads only when the header asks. The caller's role and
each call's field bounds are checked per message (``check``), and a refused message is
answered alone: the session goes on.

Flow control: at most ``limit`` calls are unanswered (received, and their answer not yet
handed to gRPC). A call beyond that is answered RESOURCE_EXHAUSTED at once. Those refusals
queue too, up to ``limit`` more; past that the session stops reading, so HTTP/2 flow control
holds the client back. A client that never reads its answers thus holds at most twice
``limit`` answers of server memory.

The session ends when the client has half-closed and every call is answered, or with a
status when the NameNode stops serving it (``end``: it left the active state), so that the
client resends its unanswered calls, with the same ids, to the next NameNode.

    handler = SessionHandler(serve, check, limit=1024, name="nn1")
    async for response in handler.run(request_iterator):
        yield response
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import grpc
import structlog
from google.protobuf.message import Message

from hanamenode.errors import (
    InvalidArgumentError,
    NamenodeError,
    SessionExhaustedError,
    to_status,
)
from hanamenode.namesystem import ANSWER_TXID
from proto import namenode_pb2

log = structlog.get_logger(__name__)

BATCH_ANSWERS = 256
"""Most answers one ``SessionResponses`` message carries."""

METHODS: dict[str, str] = {
    "mkdirs": "Mkdirs",
    "create": "Create",
    "delete": "Delete",
    "rename": "Rename",
    "get_listing": "GetListing",
    "get_file_info": "GetFileInfo",
    "msync": "Msync",
    "multi": "Multi",
}
"""The calls a session carries (the SessionRequest oneof) and the unary method of each."""

Serve = Callable[[str, Any, int], Awaitable[Message]]
"""``serve(call, request, seen_txid)``: the answer of the unary method ``call`` (a name of
``METHODS``), or raise its refusal (a ``NamenodeError``)."""

Check = Callable[[str, Message], Exception | None]
"""``check(unary_method, request)``: why the caller may not make this call (role, bounds)."""


@dataclass(frozen=True, slots=True)
class SessionEnd:
    """Why a session ends early: the status every unanswered call takes on the client."""

    code: grpc.StatusCode
    details: str
    trailers: tuple[tuple[str, str], ...] = ()


def error_response(request_id: int, exc: NamenodeError, state_txid: int = 0) -> Any:
    """The answer that refuses one call as its unary call would be refused."""
    code, details, trailers = to_status(exc)
    error = namenode_pb2.SessionError(
        code=code.value[0],
        message=details,
        trailers=[namenode_pb2.SessionTrailer(key=k, value=v) for k, v in trailers],
    )
    return namenode_pb2.SessionResponse(id=request_id, state_txid=state_txid, error=error)


class SessionHandler:
    """The calls of one open session and the answers waiting to be written. ``run`` it."""

    def __init__(
        self,
        serve: Serve,
        check: Check,
        *,
        limit: int,
        name: str,
        observe: Callable[[str, float], None] = lambda method, seconds: None,
    ) -> None:
        self._serve = serve
        self._check = check
        self.limit = limit
        self._observe = observe
        self._answers: asyncio.Queue[tuple[Any, bool] | None] = asyncio.Queue()
        """(answer, whether it is a RESOURCE_EXHAUSTED refusal); None wakes ``run``."""
        self._running = 0
        """Calls received whose answer is not in ``_answers`` yet."""
        self._refusals = 0
        """RESOURCE_EXHAUSTED answers in ``_answers``."""
        self._drained = asyncio.Event()
        self._tasks: set[asyncio.Task[None]] = set()
        self._reading = True
        self._end: SessionEnd | None = None
        self._log = log.bind(nn=name)

    @property
    def unanswered(self) -> int:
        """Calls received whose answer was not handed to gRPC yet."""
        return self._running + self._answers.qsize()

    def end(self, why: SessionEnd) -> None:
        """End the session with ``why`` after the answers already queued (their calls were
        answered); calls still running are cancelled and never answered here."""
        if self._end is None:
            self._end = why
            self._answers.put_nowait(None)

    async def run(self, requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        """``SessionResponses``, each holding every answer ready when it is written (the
        answers one group commit releases travel together, in one write); returns once the
        client half-closed and every call is answered, or after ``end``."""
        reader = asyncio.get_running_loop().create_task(self._read(requests))
        try:
            while True:
                batch = self._take(await self._answers.get())
                while len(batch) < BATCH_ANSWERS and not self._answers.empty():
                    batch.extend(self._take(self._answers.get_nowait()))
                if batch:
                    yield namenode_pb2.SessionResponses(responses=batch)
                    if self._answers.qsize() < self.limit:
                        self._drained.set()
                if self._end is not None:
                    return
                if not self._reading and self.unanswered == 0:
                    return
        finally:
            reader.cancel()
            for task in self._tasks:
                task.cancel()

    def _take(self, item: tuple[Any, bool] | None) -> list[Any]:
        if item is None:  # the reader is done, or end() was called: run() checks which
            return []
        response, refusal = item
        if refusal:
            self._refusals -= 1
        return [response]

    @property
    def ended(self) -> SessionEnd | None:
        return self._end

    async def _read(self, requests: AsyncIterator[Any]) -> None:
        try:
            loop = asyncio.get_running_loop()
            async for message in requests:
                for request in (message, *message.batch) if message.batch else (message,):
                    if self._end is not None:
                        return
                    if request.batch and request is not message:
                        self._put(error_response(request.id, InvalidArgumentError(
                            f"session call {request.id} is in a batch and carries a batch"
                        )))
                        continue
                    if request.WhichOneof("call") is None and request is message and (
                        message.batch
                    ):
                        continue  # a message that only carries its batch
                    if self._running + self._answers.qsize() - self._refusals >= self.limit:
                        await self._refuse(request)
                        continue
                    self._running += 1
                    task = loop.create_task(self._call(request))
                    self._tasks.add(task)
                    task.add_done_callback(self._tasks.discard)
        except asyncio.CancelledError:
            raise
        except NamenodeError as exc:  # undecodable bytes: no id to answer, end the session
            code, details, trailers = to_status(exc)
            self.end(SessionEnd(code, details, trailers))
        except Exception as exc:  # the stream broke (client gone): nothing left to answer
            self._log.debug("session stream ended", error=f"{type(exc).__name__}: {exc}")
            self.end(SessionEnd(grpc.StatusCode.CANCELLED, f"the session's stream ended: {exc}"))
        finally:
            self._reading = False
            self._answers.put_nowait(None)

    async def _refuse(self, request: Any) -> None:
        """Answer ``request`` RESOURCE_EXHAUSTED; wait for the client to read answers first
        when ``limit`` refusals are queued already (stop reading its stream meanwhile)."""
        while self._refusals >= self.limit:
            self._drained.clear()
            await self._drained.wait()
        self._refusals += 1
        exc = SessionExhaustedError(
            f"session call {request.id}: this session already holds {self.limit} unanswered "
            "calls (dfs.namenode.session.max-unanswered-calls); read the answers before "
            "sending more"
        )
        self._answers.put_nowait((error_response(request.id, exc), True))

    def _put(self, response: Any) -> None:
        """Queue an answer that took no call slot (refused before it ran)."""
        self._answers.put_nowait((response, False))

    async def _call(self, request: Any) -> None:
        ANSWER_TXID.set(0)
        kind = request.WhichOneof("call")
        method = METHODS.get(kind or "", "Session")
        started = time.perf_counter()
        try:
            if kind is None:
                raise InvalidArgumentError(f"session call {request.id} carries no call")
            call = getattr(request, kind)
            refused = self._check(method, call)
            if refused is not None:
                raise refused
            reply = await self._serve(kind, call, request.seen_txid)
            answer: dict[str, Any] = {kind: reply}
            response = namenode_pb2.SessionResponse(
                id=request.id, state_txid=ANSWER_TXID.get(), **answer
            )
        except NamenodeError as exc:
            response = error_response(request.id, exc, ANSWER_TXID.get())
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._log.exception(
                "session call failed unexpectedly", call=method, id=request.id, error=str(exc)
            )
            internal = NamenodeError(f"{type(exc).__name__}: {exc}")
            response = error_response(request.id, internal)
        finally:
            self._running -= 1
            self._observe(method, time.perf_counter() - started)
        self._answers.put_nowait((response, False))
