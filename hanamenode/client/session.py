"""The client side of a session: every call of one client object to one NameNode pipelined on
one ``ClientProtocol/Session`` stream (docs/protocol.md §13; the server side is
``hanamenode.session``).

``ClientSession`` owns the stream: any thread sends a call with ``call`` and waits for the
answer with the same id, while one reader thread hands each answer to its caller. When the
stream ends (the NameNode left the active state, died, or the connection broke), every call
still waiting fails with the stream's status, as its unary call would have failed, and the
session is ``broken``: the failover proxy opens a new one on the next NameNode and resends
those calls there with their headers unchanged, so the retry cache still runs each at most
once.

``SessionStub`` puts a session behind the unary stub's methods (``Mkdirs(request,
timeout=...)``...), so the failover proxy and ``HaFsClient`` use either alike; a refusal is a
``SessionCallError``, a ``grpc.RpcError`` with the code, details and trailers of the unary
call's refusal::

    session = ClientSession(channel, name="nn1")
    stub = SessionStub(lambda: session, seen=lambda: 0, saw=print)
    stub.Mkdirs(namenode_pb2.MkdirsRequest(header=header, path="/a"), timeout=20)
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

import grpc
import structlog

from proto import namenode_pb2, namenode_pb2_grpc

__all__ = ["ClientSession", "SessionCallError", "SessionStub"]

log = structlog.get_logger(__name__)

_CLOSE = object()

BATCH_CALLS = 128
CLOSE_WAIT = 5.0  # seconds close() waits for the reader thread to see the cancelled stream
"""Most calls one message of the session carries."""


class SessionCallError(grpc.RpcError, grpc.Call):
    """One call of a session that failed: refused by the NameNode (the status its unary call
    would end with), or lost with the stream (the stream's status), or past its deadline."""

    def __init__(
        self, code: grpc.StatusCode, details: str, trailers: tuple[tuple[str, str], ...] = ()
    ) -> None:
        super().__init__(details)
        self._code = code
        self._details = details
        self._trailers = trailers

    @classmethod
    def from_answer(cls, error: Any) -> SessionCallError:
        code = _CODES.get(error.code, grpc.StatusCode.UNKNOWN)
        return cls(code, error.message, tuple((t.key, t.value) for t in error.trailers))

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> Any:
        return self._trailers

    def initial_metadata(self) -> tuple[tuple[str, str], ...]:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> float:
        return 0.0

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: Callable[[], None]) -> bool:
        return False

    def __str__(self) -> str:
        return f"{self._code.name}: {self._details}"


_CODES = {code.value[0]: code for code in grpc.StatusCode}


def _stream_failure(err: grpc.RpcError) -> SessionCallError:
    """What every call waiting on a stream that ended with ``err`` fails with."""
    if not isinstance(err, grpc.Call):
        return SessionCallError(grpc.StatusCode.UNKNOWN, str(err))
    trailers: list[tuple[str, str]] = []
    for key, value in err.trailing_metadata() or ():
        text = value if isinstance(value, str) else bytes(value).decode("utf-8", "replace")
        trailers.append((str(key), text))
    return SessionCallError(err.code(), err.details() or "", tuple(trailers))


class ClientSession:
    """One Session stream to one NameNode, shared by every thread of a client. Thread-safe;
    ``close`` ends it (calls still waiting fail as CANCELLED)."""

    def __init__(self, channel: grpc.Channel, *, name: str) -> None:
        self.name = name
        self._ids = itertools.count(1)
        self._pending: dict[int, Future[Any]] = {}
        self._lock = threading.Lock()
        self._outbox: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._failure: SessionCallError | None = None
        stub = namenode_pb2_grpc.ClientProtocolStub(channel)
        self._stream: Any = stub.Session(self._requests())
        self._reader = threading.Thread(target=self._read, name=f"session-{name}", daemon=True)
        self._reader.start()

    @property
    def broken(self) -> bool:
        """The stream ended: no call can be sent on this session any more."""
        return self._failure is not None

    def call(self, kind: str, request: Any, seen_txid: int, timeout: float | None) -> Any:
        """Send ``request`` as the session call ``kind`` (a SessionRequest field: ``mkdirs``,
        ``get_file_info``...) and return its ``SessionResponse``; ``SessionCallError`` when
        the stream ended first or ``timeout`` passed."""
        future: Future[Any] = Future()
        with self._lock:
            if self._failure is not None:
                raise self._failure
            call_id = next(self._ids)
            self._pending[call_id] = future
        message: dict[str, Any] = {kind: request}
        self._outbox.put(namenode_pb2.SessionRequest(id=call_id, seen_txid=seen_txid, **message))
        try:
            return future.result(timeout)
        except FutureTimeout:
            with self._lock:
                self._pending.pop(call_id, None)
            raise SessionCallError(
                grpc.StatusCode.DEADLINE_EXCEEDED,
                f"no answer from NameNode {self.name} within {timeout:g}s (session call {call_id})",
            ) from None

    def close(self) -> None:
        """Half-close the stream, cancel it and wait for its reader to finish; calls still
        waiting fail as CANCELLED. Waiting means no thread of ours is still inside the
        stream when the channel closes or the interpreter exits."""
        self._outbox.put(_CLOSE)
        self._fail(SessionCallError(grpc.StatusCode.CANCELLED, "the session was closed"))
        self._stream.cancel()
        if self._reader is not threading.current_thread():
            self._reader.join(CLOSE_WAIT)
            if self._reader.is_alive():
                log.warning(
                    "session reader still running after close", nn=self.name, waited_s=CLOSE_WAIT
                )
        # Let the call object go now, while every thread runs. Left to the interpreter's
        # exit, its finalizer takes the call's lock after the daemon threads were frozen,
        # and one frozen holding it hangs the exit for good (a busy make test: `hafs
        # -mkdir` aborted after 60 s inside grpc's _Rendezvous.__del__).
        self._stream = None

    def abandon(self, detail: str) -> None:
        """Give the session up because its NameNode is no longer the one to ask (the
        resolver saw another become active): the calls still waiting fail as UNAVAILABLE
        with ``detail``, which the failover proxy sends again, with their ids, to the next
        NameNode, as if this one had died; then ``close``."""
        self._fail(SessionCallError(grpc.StatusCode.UNAVAILABLE, detail))
        self.close()

    def _requests(self) -> Iterator[Any]:
        """The stream's messages: each call waiting in the outbox when the stream can send,
        the first with the others in its ``batch`` (one message, one read on the server)."""
        while True:
            message = self._outbox.get()
            if message is _CLOSE:
                return
            closing = False
            while len(message.batch) < BATCH_CALLS:
                try:
                    more = self._outbox.get_nowait()
                except queue.Empty:
                    break
                if more is _CLOSE:
                    closing = True
                    break
                message.batch.append(more)
            yield message
            if closing:
                return

    def _read(self) -> None:
        try:
            for batch in self._stream:
                for response in batch.responses:
                    with self._lock:
                        future = self._pending.pop(response.id, None)
                    if future is not None:  # None: its caller gave up (deadline)
                        future.set_result(response)
            failure = SessionCallError(
                grpc.StatusCode.UNAVAILABLE, f"NameNode {self.name} ended the session"
            )
        except grpc.RpcError as err:
            failure = _stream_failure(err)
            # The exception is the call object itself: its traceback's frames hold it, a
            # cycle only the garbage collector frees, maybe at the interpreter's exit.
            err.__traceback__ = None
        except Exception as exc:  # a bug here must not leave callers waiting forever
            log.exception("session reader failed", nn=self.name, error=str(exc))
            failure = SessionCallError(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")
        self._fail(failure)

    def _fail(self, failure: SessionCallError) -> None:
        with self._lock:
            if self._failure is None:
                self._failure = failure
            pending, self._pending = self._pending, {}
        self._outbox.put(_CLOSE)
        for future in pending.values():
            future.set_exception(self._failure)


class SessionStub:
    """The unary stub's call methods over a session: ``session()`` gives the open session
    (the proxy replaces a broken one), ``seen()`` the highest txid the client has seen and
    ``saw(txid)`` takes each answer's state txid, as the unary calls' interceptor does."""

    def __init__(
        self,
        session: Callable[[], ClientSession],
        seen: Callable[[], int],
        saw: Callable[[int], None],
    ) -> None:
        self._session = session
        self._seen = seen
        self._saw = saw

    def _call(self, kind: str, request: Any, timeout: float | None) -> Any:
        response = self._session().call(kind, request, self._seen(), timeout)
        if response.state_txid:
            self._saw(response.state_txid)
        if response.WhichOneof("answer") == "error":
            raise SessionCallError.from_answer(response.error)
        return getattr(response, kind)

    def Mkdirs(self, request: Any, timeout: float | None = None) -> Any:
        return self._call("mkdirs", request, timeout)

    def Create(self, request: Any, timeout: float | None = None) -> Any:
        return self._call("create", request, timeout)

    def Delete(self, request: Any, timeout: float | None = None) -> Any:
        return self._call("delete", request, timeout)

    def Rename(self, request: Any, timeout: float | None = None) -> Any:
        return self._call("rename", request, timeout)

    def GetListing(self, request: Any, timeout: float | None = None) -> Any:
        return self._call("get_listing", request, timeout)

    def GetFileInfo(self, request: Any, timeout: float | None = None) -> Any:
        return self._call("get_file_info", request, timeout)

    def Msync(self, request: Any, timeout: float | None = None) -> Any:
        return self._call("msync", request, timeout)

    def Multi(self, request: Any, timeout: float | None = None) -> Any:
        return self._call("multi", request, timeout)
