"""The NameNode daemon: ClientProtocol, HAServiceProtocol and NamenodeProtocol over grpc.aio
on the NameNode's RPC address, on the event loop that owns the namesystem
(``hanamenode.loop``), and Prometheus ``/metrics`` on its HTTP address (docs/architecture.md
§1, §4.7, §5, §6 and docs/operations.md §5).

Every servicer method is a coroutine: a mutation that waits for its sync is a suspended
coroutine, so no thread count bounds how many calls share a sync (HDFS-7964). Calls that
must block (the elector's graceful failover, reading or writing an image file) go to the
loop's bridge executor.

The servicers only convert messages; the decisions are ``FSNamesystem``'s. Every refusal is a
``NamenodeError`` that reaches the caller through ``errors.to_status`` in one place
(``_rpc``), so ``hafs`` and the failover proxy rebuild the same exception class.

    with NameNodeServer(settings, "nn1") as nn:      # loads the newest image, STANDBY
        nn.namesystem.transition_to_active()
        print(nn.address, nn.metrics_port)
"""

from __future__ import annotations

import asyncio
import enum
import functools
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
import structlog
from google.protobuf.message import Message
from prometheus_client import CollectorRegistry

from conf import Settings
from conf.connections import watch as watch_connections
from conf.guard import ANY_ROLE, AioRequestGuard, MethodRule, Role
from conf.keys import MIB
from conf.mutants import announce as announce_mutants
from conf.rpc import bind, make_aio_server
from conf.web import Page, WebServer
from hanamenode import cluster_page, fsimage, status
from hanamenode.checkpointer import IMAGE_CHUNK_BYTES
from hanamenode.cluster_page import ClusterView
from hanamenode.errors import (
    AccessControlError,
    FSImageError,
    InvalidArgumentError,
    NamenodeError,
    ServiceFailedError,
    StandbyError,
    to_status,
)
from hanamenode.ha import ACTIVE_HINT_KEY, SEEN_TXID_KEY, STATE_TXID_KEY, HAState, parse_txid
from hanamenode.journal import packed_segments
from hanamenode.loop import NameNodeLoop
from hanamenode.metrics import NameNodeMetrics
from hanamenode.namespace import StatInfo
from hanamenode.namesystem import (
    ANSWER_TXID,
    FSNamesystem,
    QJMFactory,
    Step,
    create_step,
    delete_step,
    mkdir_step,
    rename_step,
)
from hanamenode.peers import NameNodePeers, connect_address
from hanamenode.session import SessionEnd, SessionHandler
from hanamenode.storage import NameDirectory
from hanamenode.transitions import Cause
from proto import namenode_pb2, namenode_pb2_grpc

log = structlog.get_logger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

EMPTY = namenode_pb2.HAEmpty()

MAX_REQUEST_BYTES = 1 * MIB
"""The request limit of the NameNode's three services (``proto.bounds``): a ClientProtocol
call is a few KiB at most (a path of 8000 characters, a client id of 128 bytes), an image
upload chunk 512 KiB, an HA call a few bytes. gRPC refuses a longer message from its length
prefix, before it takes memory."""


def _transition_roles(request: Any) -> frozenset[Role]:
    # The elector (inside a NameNode, with its certificate) transitions its own NameNode and
    # fences the other; an operator's transition (hactl) needs the admin role.
    if request.source == namenode_pb2.REQUEST_BY_ZKFC:
        return frozenset({Role.NAMENODE})
    return frozenset({Role.ADMIN})


def _rules() -> dict[str, MethodRule]:
    client = MethodRule(frozenset({Role.CLIENT}))
    namenode = MethodRule(frozenset({Role.NAMENODE}))
    namenode_or_admin = MethodRule(frozenset({Role.NAMENODE, Role.ADMIN}))
    rules: dict[str, MethodRule] = {}
    for method in (
        "Mkdirs", "Create", "Delete", "Rename", "GetListing", "GetFileInfo", "Msync", "Multi"
    ):
        rules[f"/hanamenode.namenode.ClientProtocol/{method}"] = client
    # Each message of a session is checked as its unary call is, by the servicer.
    rules["/hanamenode.namenode.ClientProtocol/Session"] = MethodRule(
        frozenset({Role.CLIENT}), per_message=True
    )
    ha = "/hanamenode.namenode.HAServiceProtocol/"
    rules[ha + "GetServiceStatus"] = MethodRule(ANY_ROLE)
    rules[ha + "MonitorHealth"] = MethodRule(ANY_ROLE)
    rules[ha + "TransitionToActive"] = MethodRule(roles_for=_transition_roles)
    rules[ha + "TransitionToStandby"] = MethodRule(roles_for=_transition_roles)
    rules[ha + "TransitionToObserver"] = MethodRule(roles_for=_transition_roles)
    rules[ha + "CedeActive"] = namenode  # one elector to the other, in a graceful failover
    rules[ha + "GracefulFailover"] = MethodRule(frozenset({Role.ADMIN}))
    nnp = "/hanamenode.namenode.NamenodeProtocol/"
    for method in ("RollEditLog", "PutImage", "PurgeLogs"):
        rules[nnp + method] = namenode
    # bootstrap-standby, an operator's command, reads the namespace info and the image, and
    # checks that the edits after it can be had (the ZooKeeper journal's packed segments).
    for method in ("GetMostRecentCheckpoint", "GetImage", "GetNamespaceInfo", "GetEditSegments"):
        rules[nnp + method] = namenode_or_admin
    return rules


RULES = _rules()
"""Which role may call each method of the NameNode (docs/operations.md §9)."""


class ElectionAttempt(Protocol):
    """The outcome of the elector's last attempt to become active, as the status page shows it."""

    @property
    def message(self) -> str: ...

    @property
    def time(self) -> float:
        """When it ended (seconds since the epoch): a later transition supersedes it."""
        ...


class EmbeddedElector(Protocol):
    """What the NameNode needs of the elector that runs in its process with automatic
    failover (``failover.elector.ActiveStandbyElector`` is one). The NameNode is a layer
    below ``failover`` (docs/architecture.md §2), so it is handed a factory rather than
    importing the elector."""

    def start(self) -> EmbeddedElector: ...

    def stop(self) -> None: ...

    def close(self) -> None: ...

    def cede_active(self, seconds: float) -> None: ...

    def graceful_failover(self) -> str: ...

    @property
    def failover_note(self) -> str: ...

    # What the status page shows (hanamenode.status).
    @property
    def state(self) -> enum.Enum: ...

    @property
    def zk_state(self) -> str: ...

    @property
    def healthy(self) -> bool: ...

    @property
    def last_attempt(self) -> ElectionAttempt | None: ...

    @property
    def last_fencing(self) -> tuple[float, str] | None: ...

    def lock_holder(self) -> str | None: ...


class ElectorFactory(Protocol):
    """Builds the embedded elector of NameNode ``nn_id`` (``ActiveStandbyElector`` itself)."""

    def __call__(
        self,
        settings: Settings,
        nn_id: str,
        target: FSNamesystem,
        *,
        address: str | None = ...,
        registry: CollectorRegistry | None = ...,
    ) -> EmbeddedElector: ...


Context = grpc.aio.ServicerContext[Any, Any]


async def _abort(
    context: Context, exc: NamenodeError, extra: tuple[tuple[str, str], ...] = ()
) -> None:
    code, details, trailers = to_status(exc)
    context.set_trailing_metadata((*trailers, *extra))
    await context.abort(code, details)


async def _unexpected(context: Context, rpc: str, exc: Exception) -> None:
    log.exception("NameNode RPC failed unexpectedly", rpc=rpc, error=str(exc))
    await context.abort(grpc.StatusCode.INTERNAL, f"{type(exc).__name__}: {exc}")


def _rpc(method: F) -> F:
    """Run a unary servicer coroutine: time it, and turn every error into its status. A call
    cancelled by its client (CancelledError) is not an error: it propagates."""
    name = method.__name__

    @functools.wraps(method)
    async def wrapper(self: _Servicer, request: Any, context: Context) -> Any:
        started = time.perf_counter()
        ANSWER_TXID.set(0)
        try:
            reply = await method(self, request, context)
            trailer = self.state_trailer()
            if trailer:
                context.set_trailing_metadata(trailer)
            return reply
        except NamenodeError as exc:
            await _abort(context, exc, self.state_trailer())
        except Exception as exc:
            await _unexpected(context, name, exc)
        finally:
            self.metrics.rpc_seconds.labels(name).observe(time.perf_counter() - started)
        raise AssertionError("unreachable: context.abort raises")

    return wrapper  # type: ignore[return-value]


ACTIVE_HINT_TIMEOUT = 0.5
"""Longest a step-down waits to learn the new active before it ends its sessions."""


def multi_step(index: int, op: Any) -> Step:
    """The namesystem's step for op ``index`` of a ``MultiRequest``."""
    kind = op.WhichOneof("op")
    if kind == "mkdirs":
        m = op.mkdirs
        return mkdir_step(m.path, create_parent=m.create_parent, permission=m.permission)
    if kind == "create":
        c = op.create
        return create_step(
            c.path, overwrite=c.overwrite, permission=c.permission, length=c.length,
            replication=c.replication,
        )
    if kind == "delete":
        return delete_step(op.delete.path, recursive=op.delete.recursive)
    if kind == "rename":
        return rename_step(op.rename.src, op.rename.dst)
    error = InvalidArgumentError(f"multi op {index} holds no mkdirs, create, delete or rename")
    error.multi_index = index  # type: ignore[attr-defined]
    raise error


def multi_result(kind: str | None, result: object, txid: int) -> Any:
    """The answer of one op of a multi, as its unary call would give it."""
    if kind == "mkdirs":
        return namenode_pb2.MultiResult(
            mkdirs=namenode_pb2.MkdirsResponse(created=bool(result), txid=txid)
        )
    if kind == "create":
        assert isinstance(result, StatInfo)
        return namenode_pb2.MultiResult(
            create=namenode_pb2.CreateResponse(status=file_status(result), txid=txid)
        )
    if kind == "delete":
        return namenode_pb2.MultiResult(
            delete=namenode_pb2.DeleteResponse(deleted=bool(result), txid=txid)
        )
    return namenode_pb2.MultiResult(
        rename=namenode_pb2.RenameResponse(final_path=str(result), txid=txid)
    )


def file_status(info: StatInfo) -> namenode_pb2.FileStatus:
    return namenode_pb2.FileStatus(
        path=info.path,
        is_dir=info.is_dir,
        length=info.length,
        mtime_ms=info.mtime_ms,
        permission=info.permission,
        owner=info.owner,
        group=info.group,
        replication=info.replication,
        children_num=info.children_num,
    )


class _Servicer:
    def __init__(self, fsn: FSNamesystem) -> None:
        self.fsn = fsn
        self.metrics = fsn.metrics

    def state_trailer(self) -> tuple[tuple[str, str], ...]:
        """Trailing metadata every answer of this service carries (none but ClientProtocol's)."""
        return ()


class ClientProtocolServicer(_Servicer, namenode_pb2_grpc.ClientProtocolServicer):
    """What ``hafs`` calls: mutations (retry-cached by the header's client and call ids) and
    reads (refused by a standby unless the header allows stale reads; held by an observer
    until it has applied the txid of the request's ``hn-seen-txid`` metadata). Every answer,
    a refusal included, carries the txid of the state it reflects in the trailer
    ``hn-state-txid`` when the namesystem decided one (docs/consistency.md §9).

    Each call is one coroutine of ``_calls`` (request, seen txid -> answer), served alone by
    its unary method and pipelined with others by ``Session`` (``hanamenode.session``,
    docs/protocol.md §13). ``check`` is the guard's per-message check of a session's calls
    (``(method, request, roles) -> refusal``; None: no guard)."""

    def __init__(
        self,
        fsn: FSNamesystem,
        check: Callable[[str, Any, frozenset[str] | None], Exception | None] | None = None,
        roles: Callable[[Context], frozenset[str] | None] = lambda context: None,
        active_hint: Callable[[], Awaitable[str | None]] | None = None,
    ) -> None:
        super().__init__(fsn)
        self._check = check
        self._roles = roles
        self._active_hint = active_hint
        self._sessions: set[SessionHandler] = set()
        self._ending: set[asyncio.Task[None]] = set()
        self._calls: dict[str, Callable[[Any, int], Awaitable[Any]]] = {
            "mkdirs": self._mkdirs,
            "create": self._create,
            "delete": self._delete,
            "rename": self._rename,
            "get_listing": self._get_listing,
            "get_file_info": self._get_file_info,
            "msync": self._msync,
            "multi": self._multi,
        }
        fsn.on_leave_active.append(self._end_sessions)
        # Read at scrape time from the web server's thread: list() copies the set at once.
        self.metrics.session_unanswered.set_function(
            lambda: float(sum(h.unanswered for h in list(self._sessions)))
        )

    def state_trailer(self) -> tuple[tuple[str, str], ...]:
        txid = ANSWER_TXID.get()
        return ((STATE_TXID_KEY, str(txid)),) if txid > 0 else ()

    @staticmethod
    def _seen_txid(context: Context) -> int:
        for key, value in context.invocation_metadata() or ():
            if key == SEEN_TXID_KEY:
                text = value.decode("ascii", "replace") if isinstance(value, bytes) else value
                return parse_txid(SEEN_TXID_KEY, text)
        return 0

    # -- the calls ------------------------------------------------------------------------------

    async def _mkdirs(self, request: Any, seen_txid: int) -> Any:
        h = request.header
        done = await self.fsn.mkdirs_async(
            request.path,
            create_parent=request.create_parent,
            permission=request.permission,
            client_id=h.client_id,
            call_id=h.call_id,
        )
        return namenode_pb2.MkdirsResponse(created=done.result, txid=done.txid)

    async def _create(self, request: Any, seen_txid: int) -> Any:
        h = request.header
        done = await self.fsn.create_async(
            request.path,
            overwrite=request.overwrite,
            permission=request.permission,
            length=request.length,
            replication=request.replication,
            client_id=h.client_id,
            call_id=h.call_id,
        )
        return namenode_pb2.CreateResponse(status=file_status(done.result), txid=done.txid)

    async def _delete(self, request: Any, seen_txid: int) -> Any:
        h = request.header
        done = await self.fsn.delete_async(
            request.path, recursive=request.recursive, client_id=h.client_id, call_id=h.call_id
        )
        return namenode_pb2.DeleteResponse(deleted=done.result, txid=done.txid)

    async def _rename(self, request: Any, seen_txid: int) -> Any:
        h = request.header
        done = await self.fsn.rename_async(
            request.src, request.dst, client_id=h.client_id, call_id=h.call_id
        )
        return namenode_pb2.RenameResponse(final_path=done.result, txid=done.txid)

    async def _get_listing(self, request: Any, seen_txid: int) -> Any:
        entries, has_more = await self.fsn.get_listing_page_async(
            request.path,
            start_after=request.start_after,
            limit=request.limit,
            allow_stale_read=request.header.allow_stale_read,
            seen_txid=seen_txid,
        )
        return namenode_pb2.GetListingResponse(
            entries=[file_status(e) for e in entries], has_more=has_more
        )

    async def _get_file_info(self, request: Any, seen_txid: int) -> Any:
        info = await self.fsn.get_file_info_async(
            request.path,
            allow_stale_read=request.header.allow_stale_read,
            seen_txid=seen_txid,
        )
        return namenode_pb2.GetFileInfoResponse(status=file_status(info))

    async def _msync(self, request: Any, seen_txid: int) -> Any:
        return namenode_pb2.MsyncResponse(txid=await self.fsn.msync_async())

    async def _multi(self, request: Any, seen_txid: int) -> Any:
        h = request.header
        steps = [multi_step(index, op) for index, op in enumerate(request.ops)]
        done = await self.fsn.multi_async(steps, client_id=h.client_id, call_id=h.call_id)
        results = [
            multi_result(op.WhichOneof("op"), result, done.txid)
            for op, result in zip(request.ops, done.result, strict=True)
        ]
        return namenode_pb2.MultiResponse(results=results, txid=done.txid)

    # -- unary ----------------------------------------------------------------------------------

    @_rpc
    async def Mkdirs(self, request: Any, context: Context) -> Any:
        return await self._mkdirs(request, 0)

    @_rpc
    async def Create(self, request: Any, context: Context) -> Any:
        return await self._create(request, 0)

    @_rpc
    async def Delete(self, request: Any, context: Context) -> Any:
        return await self._delete(request, 0)

    @_rpc
    async def Rename(self, request: Any, context: Context) -> Any:
        return await self._rename(request, 0)

    @_rpc
    async def GetListing(self, request: Any, context: Context) -> Any:
        return await self._get_listing(request, self._seen_txid(context))

    @_rpc
    async def GetFileInfo(self, request: Any, context: Context) -> Any:
        return await self._get_file_info(request, self._seen_txid(context))

    @_rpc
    async def Msync(self, request: Any, context: Context) -> Any:
        return await self._msync(request, 0)

    @_rpc
    async def Multi(self, request: Any, context: Context) -> Any:
        return await self._multi(request, 0)

    # -- the session ----------------------------------------------------------------------------

    async def Session(self, request_iterator: AsyncIterator[Any], context: Context) -> Any:
        """Many calls of one client, pipelined (``hanamenode.session``)."""
        roles = self._roles(context)
        check = self._check

        def refusal(method: str, request: Message) -> Exception | None:
            if check is None:
                return None
            return check(f"/hanamenode.namenode.ClientProtocol/{method}", request, roles)

        async def serve(kind: str, request: Any, seen_txid: int) -> Any:
            return await self._calls[kind](request, seen_txid)

        observe = self.metrics.rpc_seconds.labels
        handler = SessionHandler(
            serve,
            refusal,
            limit=self.fsn.settings.ha.session_max_unanswered,
            name=self.fsn.nn_id,
            observe=lambda method, seconds: observe(method).observe(seconds),
        )
        self._sessions.add(handler)
        self.metrics.sessions_opened.inc()
        try:
            async for response in handler.run(request_iterator):
                yield response
        finally:
            self._sessions.discard(handler)
        end = handler.ended
        if end is not None and end.code is not grpc.StatusCode.CANCELLED:
            context.set_trailing_metadata(end.trailers)
            await context.abort(end.code, end.details)

    def _end_sessions(self, reason: str) -> None:
        """The NameNode left the active state: end every open session with a StandbyError
        that names the new active when the election already knows it (the client resends
        its unanswered calls there, with the same ids)."""
        sessions = list(self._sessions)
        if not sessions:
            return
        task = asyncio.get_running_loop().create_task(
            self._end_sessions_with_hint(sessions, reason), name=f"end-sessions-{self.fsn.nn_id}"
        )
        self._ending = {t for t in self._ending if not t.done()} | {task}

    async def _end_sessions_with_hint(self, sessions: list[SessionHandler], reason: str) -> None:
        hint: str | None = None
        if self._active_hint is not None:
            try:
                hint = await asyncio.wait_for(self._active_hint(), ACTIVE_HINT_TIMEOUT)
            except Exception as exc:  # the election is unreachable: no hint
                log.info(
                    "no new active known for ending sessions", error=f"{type(exc).__name__}: {exc}"
                )
        if hint == self.fsn.nn_id:
            hint = None
        where = f"; the active is now {hint}" if hint else "; the new active is not known yet"
        refusal = StandbyError(
            f"Operation category WRITE is not supported in state standby: NameNode "
            f"{self.fsn.nn_id} left the active state ({reason}){where}"
        )
        code, details, trailers = to_status(refusal)
        if hint:
            trailers = (*trailers, (ACTIVE_HINT_KEY, hint))
        for handler in sessions:
            handler.end(SessionEnd(code, details, trailers))
        self.metrics.sessions_ended.inc(len(sessions))


class HAServiceProtocolServicer(_Servicer, namenode_pb2_grpc.HAServiceProtocolServicer):
    """What ``hactl`` and the elector call. ``elector`` returns the NameNode's embedded
    elector (None without automatic failover), which serves CedeActive and GracefulFailover."""

    def __init__(
        self,
        fsn: FSNamesystem,
        automatic_failover: bool,
        elector: Callable[[], EmbeddedElector | None] = lambda: None,
    ) -> None:
        super().__init__(fsn)
        self.automatic_failover = automatic_failover
        self._elector = elector

    def _running_elector(self) -> EmbeddedElector:
        elector = self._elector()
        if elector is None:
            raise ServiceFailedError(
                f"automatic failover is not enabled on NameNode {self.fsn.nn_id} "
                "(dfs.ha.automatic-failover.enabled)"
            )
        return elector

    def _check_manual_control(self, request: Any) -> None:
        # HDFS NameNode.checkHaStateChange: with automatic failover, only the ZKFC (or a user
        # who insists with --forcemanual) may change the state. Fail closed: a source that is
        # neither (the guard refuses unknown enum values first) is a user's.
        allowed = (namenode_pb2.REQUEST_BY_ZKFC, namenode_pb2.REQUEST_BY_USER_FORCED)
        if self.automatic_failover and request.source not in allowed:
            raise AccessControlError(
                "Manual HA control for this NameNode is disallowed, because automatic HA is "
                "enabled (use --forcemanual to override)"
            )

    @_rpc
    async def GetServiceStatus(self, request: Any, context: Context) -> Any:
        s = self.fsn.service_status()
        elector = self._elector()
        return namenode_pb2.ServiceStatus(
            state=s.state.name,
            ready_to_become_active=s.ready_to_become_active,
            not_ready_reason=s.not_ready_reason,
            last_applied_txid=s.last_applied_txid,
            epoch=s.epoch,
            namenode_id=s.namenode_id,
            failover_note=elector.failover_note if elector is not None else "",
        )

    @_rpc
    async def TransitionToActive(self, request: Any, context: Context) -> Any:
        self._check_manual_control(request)
        await self.fsn.transition_to_active_async(*_transition_cause(request))
        return EMPTY

    @_rpc
    async def TransitionToStandby(self, request: Any, context: Context) -> Any:
        # Between observer and standby by hand even with automatic failover (HDFS-14067):
        # neither state takes part in the election's decisions.
        if self.fsn.state is not HAState.OBSERVER:
            self._check_manual_control(request)
        await self.fsn.transition_to_standby_async(*_transition_cause(request))
        return EMPTY

    @_rpc
    async def TransitionToObserver(self, request: Any, context: Context) -> Any:
        await self.fsn.transition_to_observer_async()
        return EMPTY

    @_rpc
    async def MonitorHealth(self, request: Any, context: Context) -> Any:
        self.fsn.check_health()
        return EMPTY

    @_rpc
    async def CedeActive(self, request: Any, context: Context) -> Any:
        # The elector's calls block on ZooKeeper: they run on the bridge, never on the loop.
        elector = self._running_elector()
        await self.fsn.nn_loop.blocking(elector.cede_active, request.millis_to_cede / 1000.0)
        return EMPTY

    @_rpc
    async def GracefulFailover(self, request: Any, context: Context) -> Any:
        elector = self._running_elector()
        previous = await self.fsn.nn_loop.blocking(elector.graceful_failover)
        return namenode_pb2.GracefulFailoverResponse(previous_active=previous)


class NamenodeProtocolServicer(_Servicer, namenode_pb2_grpc.NamenodeProtocolServicer):
    """Between NameNodes: rolls, checkpoints, purges, bootstrap."""

    def __init__(self, fsn: FSNamesystem, journal_uri: str) -> None:
        super().__init__(fsn)
        self.journal_uri = journal_uri

    @_rpc
    async def RollEditLog(self, request: Any, context: Context) -> Any:
        return namenode_pb2.RollEditLogResponse(segment_txid=await self.fsn.roll_edit_log_async())

    @_rpc
    async def GetMostRecentCheckpoint(self, request: Any, context: Context) -> Any:
        info = self.fsn.most_recent_checkpoint()
        if info is None:
            raise FSImageError(f"NameNode {self.fsn.nn_id} has no fsimage")
        return namenode_pb2.CheckpointInfo(txid=info.txid, md5=info.md5, size=info.size)

    def _image_to_send(self, txid: int) -> Path:
        if txid == 0:
            newest = self.fsn.name_dir.newest_image()
            if newest is None:
                raise FSImageError(f"NameNode {self.fsn.nn_id} has no fsimage")
            fsimage.verify_md5(newest[1])
            return newest[1]
        return self.fsn.image_path(txid)

    async def GetImage(self, request: Any, context: Context) -> AsyncIterator[Any]:
        """Stream an image (``txid`` 0: the newest) in 1 MiB chunks, read off the loop."""
        blocking = self.fsn.nn_loop.blocking
        try:
            path = await blocking(self._image_to_send, request.txid)
            with open(path, "rb") as f:  # each read goes to the bridge
                while chunk := await blocking(f.read, IMAGE_CHUNK_BYTES):
                    yield namenode_pb2.ImageChunk(data=chunk)
        except NamenodeError as exc:
            await _abort(context, exc)
        except FileNotFoundError as exc:
            # Purged by a newer checkpoint while being sent: the caller asks again.
            await _abort(context, FSImageError(f"image disappeared while being sent: {exc}"))
        except Exception as exc:
            await _unexpected(context, "GetImage", exc)

    async def GetEditSegments(self, request: Any, context: Context) -> AsyncIterator[Any]:
        """Stream this NameNode's packed segments of the ZooKeeper journal from
        ``since_txid`` (docs/architecture.md §9.3), in chunks of at most 1 MiB, read off the
        loop; nothing when it packed none from there."""
        blocking = self.fsn.nn_loop.blocking
        try:
            segments = packed_segments(self.fsn.name_dir.path).framed_from(request.since_txid)
            while (data := await blocking(next, segments, None)) is not None:
                for start in range(0, len(data), IMAGE_CHUNK_BYTES):
                    yield namenode_pb2.ImageChunk(data=data[start : start + IMAGE_CHUNK_BYTES])
        except FileNotFoundError as exc:
            # Purged while being sent: the caller asks another NameNode, or again.
            await _abort(context, FSImageError(f"packed segment gone while sent: {exc}"))
        except Exception as exc:
            await _unexpected(context, "GetEditSegments", exc)

    async def PutImage(self, request_iterator: AsyncIterator[Any], context: Context) -> Any:
        nn_loop = self.fsn.nn_loop
        try:
            first = await anext(aiter(request_iterator), None)
            if first is None or not first.HasField("info"):
                raise InvalidArgumentError("PutImage: the first message must name the image")
            info = first.info

            def chunks() -> Iterator[bytes]:
                # Runs in a bridge thread; each message is read on the loop.
                if first.data:
                    yield first.data
                messages = aiter(request_iterator)
                while True:
                    message = asyncio.run_coroutine_threadsafe(
                        anext(messages, None), nn_loop.loop
                    ).result()
                    if message is None:
                        return
                    yield message.data

            def install() -> int:
                path = self.fsn.install_uploaded_image(info.txid, info.md5, chunks())
                return path.stat().st_size

            size = await nn_loop.blocking(install)
            return namenode_pb2.CheckpointInfo(txid=info.txid, md5=info.md5, size=size)
        except NamenodeError as exc:
            await _abort(context, exc)
        except Exception as exc:
            await _unexpected(context, "PutImage", exc)
        raise AssertionError("unreachable: context.abort raises")

    @_rpc
    async def PurgeLogs(self, request: Any, context: Context) -> Any:
        await self.fsn.purge_logs_async(request.min_txid_to_keep)
        return EMPTY

    @_rpc
    async def GetNamespaceInfo(self, request: Any, context: Context) -> Any:
        return namenode_pb2.NamespaceInfoResponse(
            namespace_info=self.fsn.ns_info.to_pb(), journal_uri=self.journal_uri
        )


def _transition_cause(request: Any) -> tuple[Cause, str]:
    """The failover history's cause of a transition asked over HAServiceProtocol: a new
    active's graceful fence (``REQUEST_BY_ZKFC``), or ``hactl`` (docs/operations.md §13.1)."""
    if request.source == namenode_pb2.REQUEST_BY_ZKFC:
        return Cause.FENCING, "asked to step down by the new active (graceful fence)"
    forced = request.source == namenode_pb2.REQUEST_BY_USER_FORCED
    return Cause.MANUAL, "hactl --forcemanual" if forced else "hactl"


class NameNodeServer:
    """One NameNode: name dir (locked), namesystem, gRPC server, metrics, and with
    ``dfs.ha.automatic-failover.enabled`` its elector, built by ``elector_factory`` (which
    is then required; ``hanamenode run`` passes ``failover.elector.ActiveStandbyElector``).
    A context manager.

    ``rpc_address``/``metrics_address`` override the configured ones (port 0: any free
    port); ``metrics_address=""`` serves no metrics. ``qjm_factory`` and ``peers`` are for
    tests that wrap the JournalNode or NameNode connections.
    """

    def __init__(
        self,
        settings: Settings,
        nn_id: str,
        *,
        rpc_address: str | None = None,
        metrics_address: str | None = None,
        qjm_factory: QJMFactory | None = None,
        peers: NameNodePeers | None = None,
        elector_factory: ElectorFactory | None = None,
        use_uvloop: bool | None = None,
    ) -> None:
        if settings.ha.automatic_failover_enabled and elector_factory is None:
            raise ValueError(
                f"NameNode {nn_id}: automatic failover is enabled "
                "(dfs.ha.automatic-failover.enabled) but no elector_factory was given"
            )
        self._elector_factory = elector_factory
        self.settings = settings
        self.nn_id = nn_id
        nn = settings.namenode(nn_id)
        self.rpc_address = rpc_address if rpc_address is not None else nn.rpc_address
        self.metrics_address = metrics_address if metrics_address is not None else (
            nn.http_address
        )
        self.name_dir = NameDirectory(nn.name_dir)
        self._qjm_factory = qjm_factory
        self._peers = peers
        self.metrics = NameNodeMetrics()
        self._fsn: FSNamesystem | None = None
        self._elector: EmbeddedElector | None = None
        self.nn_loop = NameNodeLoop(nn_id, use_uvloop=use_uvloop)
        self._server: grpc.aio.Server | None = None
        self._terminated = threading.Event()
        self._metrics_server: WebServer | None = None
        self._cluster: ClusterView | None = None
        self.port = 0
        self.metrics_port = 0
        self._log = log.bind(nn=nn_id)

    @property
    def namesystem(self) -> FSNamesystem:
        if self._fsn is None:
            raise RuntimeError(f"NameNode {self.nn_id} is not started")
        return self._fsn

    @property
    def elector(self) -> EmbeddedElector | None:
        """The embedded elector while automatic failover runs, else None."""
        return self._elector

    @property
    def address(self) -> str:
        """host:port to connect to."""
        return connect_address(f"{self.rpc_address.rsplit(':', 1)[0]}:{self.port}")

    @property
    def state(self) -> HAState:
        return self._fsn.state if self._fsn is not None else HAState.INITIALIZING

    def start(self) -> NameNodeServer:
        try:
            self.name_dir.lock()
            self.nn_loop.start()
            fsn = FSNamesystem(
                self.settings,
                self.nn_id,
                self.name_dir,
                metrics=self.metrics,
                peers=self._peers,
                qjm_factory=self._qjm_factory,
                nn_loop=self.nn_loop,
            )
            self._fsn = fsn
            self.metrics.watch(fsn.metrics_snapshot)
            self.port = self.nn_loop.run(self._start_rpc(fsn))
            if self.metrics_address:
                self._start_metrics_server(self.metrics_address)
            fsn.start()
            if self._elector_factory is not None and self.settings.ha.automatic_failover_enabled:
                self._elector = self._elector_factory(
                    self.settings, self.nn_id, fsn, address=self.address,
                    registry=self.metrics.registry,
                ).start()
        except BaseException:
            self.stop()
            raise
        announce_mutants("hanamenode", self.metrics.registry, self._log)
        watch_connections("hanamenode", self.metrics.registry)
        self._log.info(
            "namenode started",
            rpc=self.address,
            metrics_port=self.metrics_port,
            name_dir=str(self.name_dir.path),
            state=fsn.state.value,
            uvloop=self.nn_loop.use_uvloop,
        )
        return self

    async def _start_rpc(self, fsn: FSNamesystem) -> int:
        """The grpc.aio server, made on the loop (it binds to the running loop)."""
        guard = AioRequestGuard(
            RULES,
            check_roles=self.settings.tls.enabled,
            invalid=InvalidArgumentError,
            denied=AccessControlError,
            to_status=to_status,
        )
        server = make_aio_server(
            self.settings, max_receive_bytes=MAX_REQUEST_BYTES, interceptors=[guard]
        )
        self._server = server
        namenode_pb2_grpc.add_ClientProtocolServicer_to_server(
            ClientProtocolServicer(
                fsn, guard.refusal, guard.caller_roles, active_hint=self._active_hint
            ),
            server,
        )
        namenode_pb2_grpc.add_HAServiceProtocolServicer_to_server(
            HAServiceProtocolServicer(
                fsn, self.settings.ha.automatic_failover_enabled, lambda: self._elector
            ),
            server,
        )
        namenode_pb2_grpc.add_NamenodeProtocolServicer_to_server(
            NamenodeProtocolServicer(fsn, str(self.settings.journal_uri or "")), server
        )
        port = bind(server, self.rpc_address, self.settings.tls)
        await server.start()
        return port

    async def _active_hint(self) -> str | None:
        """Who holds the election lock now (a ZooKeeper read, off the loop); None without
        automatic failover or when nobody does."""
        elector = self._elector
        if elector is None:
            return None
        return await self.nn_loop.blocking(elector.lock_holder)

    def _start_metrics_server(self, address: str) -> None:
        """/metrics, and the status page with /status.json (docs/operations.md §13)."""
        self._cluster = ClusterView(
            self.settings, self.nn_id, own=lambda: status.collect(self),
            own_url=lambda: self._status_url,
        )
        self._metrics_server = WebServer(
            address,
            self.metrics.registry,
            status=lambda: status.collect(self),
            render=status.render,
            title=f"NameNode {self.nn_id}",
            pages={"cluster": Page(
                self._cluster.collect, cluster_page.render,
                f"Cluster {self.settings.nameservice} (from NameNode {self.nn_id})",
            )},
            nav=status.nav_links(self.nn_id),
        ).start()
        self.metrics_port = self._metrics_server.port

    @property
    def _status_url(self) -> str | None:
        """This NameNode's status page, as the cluster page links it."""
        if not self.metrics_port:
            return None
        host = connect_address(self.metrics_address).rsplit(":", 1)[0]
        return f"http://{host}:{self.metrics_port}/status"

    def stop(self, grace: float | None = 1.0) -> None:
        """Leave ACTIVE if active (finalizing the segment when possible), stop serving.

        The elector stops first but keeps a lock it holds until the namesystem has left the
        active state and the RPC server is down: no other NameNode wins meanwhile, and the
        next winner finds the breadcrumb naming this one and fences it."""
        elector = self._elector
        if elector is not None:
            elector.stop()
        if self._fsn is not None:
            try:
                self._fsn.stop()
            except Exception:
                self._log.exception("namesystem did not stop cleanly")
        server, self._server = self._server, None
        if server is not None and self.nn_loop.running:
            try:
                self.nn_loop.run(server.stop(grace), timeout=(grace or 0) + 5)
            except Exception:
                self._log.exception("RPC server did not stop cleanly")
        if elector is not None:
            elector.close()
            self._elector = None
        if self._metrics_server is not None:
            self._metrics_server.stop()
            self._metrics_server = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
        self.nn_loop.stop()
        self._terminated.set()
        self.name_dir.unlock()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the server is stopped (or ``timeout``); True if it was."""
        return self._terminated.wait(timeout)

    def __enter__(self) -> NameNodeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
