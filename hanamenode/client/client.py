"""``HaFsClient``: the namespace of an HA nameservice as one client sees it (docs/architecture.md
§1, ``hafs``; HDFS ``DistributedFileSystem`` over ``DFSClient``).

Each method is one logical ClientProtocol call made through a ``FailoverProxy``, so it
reaches whichever NameNode is active and a retry across a failover runs at most once. The
results are the in-process ``Namespace``'s types (``StatInfo``, ``bool``, the final path)
and the refusals its exceptions (``hanamenode.errors``), so code written against a
``Namespace`` runs against a cluster unchanged::

    with HaFsClient(load_settings("hdfs-site.xml")) as fs:
        fs.mkdirs("/user/alice", parents=True)
        fs.create("/user/alice/notes")
        for status in fs.list("/user/alice"):
            print(status.path, status.length)
"""

from __future__ import annotations

import builtins
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType

import grpc

from conf import Settings, TLSSettings
from hanamenode.client.failover_proxy import FailoverProxy, NameNodeAddress, RetryPolicy
from hanamenode.namespace import StatInfo
from proto import namenode_pb2, namenode_pb2_grpc

__all__ = ["CreateOp", "DeleteOp", "HaFsClient", "ListingsAhead", "MkdirsOp", "RenameOp",
           "status_from_pb"]

_Stub = namenode_pb2_grpc.ClientProtocolStub
_Header = namenode_pb2.RpcHeader


@dataclass(frozen=True, slots=True)
class MkdirsOp:
    """A mkdir in a multi (``HaFsClient.multi``); its answer is ``mkdirs``'s."""

    path: str
    parents: bool = False
    permission: int = 0

    def message(self) -> namenode_pb2.MultiOp:
        return namenode_pb2.MultiOp(mkdirs=namenode_pb2.MkdirsRequest(
            path=self.path, create_parent=self.parents, permission=self.permission
        ))


@dataclass(frozen=True, slots=True)
class CreateOp:
    """A create in a multi; its answer is the new file's ``StatInfo``."""

    path: str
    overwrite: bool = False
    permission: int = 0
    length: int = 0
    replication: int = 0

    def message(self) -> namenode_pb2.MultiOp:
        return namenode_pb2.MultiOp(create=namenode_pb2.CreateRequest(
            path=self.path, overwrite=self.overwrite, permission=self.permission,
            length=self.length, replication=self.replication,
        ))


@dataclass(frozen=True, slots=True)
class DeleteOp:
    """A delete in a multi; its answer is True."""

    path: str
    recursive: bool = False

    def message(self) -> namenode_pb2.MultiOp:
        return namenode_pb2.MultiOp(
            delete=namenode_pb2.DeleteRequest(path=self.path, recursive=self.recursive)
        )


@dataclass(frozen=True, slots=True)
class RenameOp:
    """A rename in a multi; its answer is the final path."""

    src: str
    dst: str

    def message(self) -> namenode_pb2.MultiOp:
        return namenode_pb2.MultiOp(
            rename=namenode_pb2.RenameRequest(src=self.src, dst=self.dst)
        )


MultiOpSpec = MkdirsOp | CreateOp | DeleteOp | RenameOp


def _multi_answer(result: namenode_pb2.MultiResult) -> object:
    kind = result.WhichOneof("result")
    if kind == "mkdirs":
        return bool(result.mkdirs.created)
    if kind == "create":
        return status_from_pb(result.create.status)
    if kind == "delete":
        return bool(result.delete.deleted)
    return str(result.rename.final_path)


def status_from_pb(status: namenode_pb2.FileStatus) -> StatInfo:
    """The ``StatInfo`` a ``FileStatus`` message carries."""
    return StatInfo(
        path=status.path,
        is_dir=status.is_dir,
        length=status.length,
        mtime_ms=status.mtime_ms,
        permission=status.permission,
        owner=status.owner,
        group=status.group,
        replication=status.replication,
        children_num=status.children_num,
    )


class HaFsClient:
    """mkdirs/create/delete/rename/list/stat against the active NameNode; a context manager.

    ``target`` is ``Settings`` (the NameNodes of ``dfs.ha.namenodes.<ns>``, the
    ``dfs.client.*`` policy, TLS), a list of ``host:port`` addresses (then ``policy`` and
    ``tls``, or their defaults), or a ``FailoverProxy`` made by the caller (the other
    arguments are then ignored). ``client_id`` and ``channel_factory`` go to the proxy.

    ``allow_stale_read`` makes ``list`` and ``stat`` accept a standby's answer, which may lag
    the active (as etcd's serializable reads); by default every answer is linearizable
    (docs/consistency.md §4). ``sessions`` (default: ``dfs.client.sessions.enabled``, else
    True) pipelines every call of every thread on one session per NameNode; False makes one
    unary call each (docs/protocol.md §13).
    """

    def __init__(
        self,
        target: Settings | Sequence[str | NameNodeAddress] | FailoverProxy,
        *,
        policy: RetryPolicy | None = None,
        tls: TLSSettings | None = None,
        client_id: bytes | None = None,
        channel_factory: Callable[[str], grpc.Channel] | None = None,
        allow_stale_read: bool = False,
        sessions: bool | None = None,
    ) -> None:
        self.allow_stale_read = allow_stale_read
        self.proxy: FailoverProxy
        if isinstance(target, FailoverProxy):
            self.proxy = target
        elif isinstance(target, Settings):
            self.proxy = FailoverProxy.from_settings(
                target, policy, client_id=client_id, channel_factory=channel_factory,
                sessions=sessions,
            )
        else:
            self.proxy = FailoverProxy(
                target, policy, tls=tls, client_id=client_id, channel_factory=channel_factory,
                sessions=True if sessions is None else sessions,
            )

    # -- mutations -----------------------------------------------------------------------------

    def mkdirs(self, path: str, *, parents: bool = False, permission: int = 0) -> bool:
        """Create directory ``path`` (``parents``: and its missing ancestors, like
        ``mkdir -p``). False when ``parents`` is set and it already existed."""
        request = namenode_pb2.MkdirsRequest(
            path=path, create_parent=parents, permission=permission
        )

        def invoke(stub: _Stub, header: _Header, timeout: float) -> namenode_pb2.MkdirsResponse:
            request.header.CopyFrom(header)
            return stub.Mkdirs(request, timeout=timeout)

        return bool(self.proxy.call("mkdirs", invoke).created)

    def create(
        self,
        path: str,
        *,
        overwrite: bool = False,
        permission: int = 0,
        length: int = 0,
        replication: int = 0,
    ) -> StatInfo:
        """Create file ``path`` (replacing an existing file with ``overwrite``). The length
        is metadata only; 0 for ``permission``/``replication`` means 0644/3."""
        request = namenode_pb2.CreateRequest(
            path=path,
            overwrite=overwrite,
            permission=permission,
            length=length,
            replication=replication,
        )

        def invoke(stub: _Stub, header: _Header, timeout: float) -> namenode_pb2.CreateResponse:
            request.header.CopyFrom(header)
            return stub.Create(request, timeout=timeout)

        return status_from_pb(self.proxy.call("create", invoke).status)

    def delete(self, path: str, *, recursive: bool = False) -> bool:
        """Delete ``path``; a non-empty directory needs ``recursive``."""
        request = namenode_pb2.DeleteRequest(path=path, recursive=recursive)

        def invoke(stub: _Stub, header: _Header, timeout: float) -> namenode_pb2.DeleteResponse:
            request.header.CopyFrom(header)
            return stub.Delete(request, timeout=timeout)

        return bool(self.proxy.call("delete", invoke).deleted)

    def rename(self, src: str, dst: str) -> str:
        """Move ``src`` to ``dst``, or into ``dst`` when it is a directory; the final path."""
        request = namenode_pb2.RenameRequest(src=src, dst=dst)

        def invoke(stub: _Stub, header: _Header, timeout: float) -> namenode_pb2.RenameResponse:
            request.header.CopyFrom(header)
            return stub.Rename(request, timeout=timeout)

        return str(self.proxy.call("rename", invoke).final_path)

    def multi(self, ops: Sequence[MultiOpSpec]) -> builtins.list[object]:
        """Apply ``ops`` (``MkdirsOp``, ``CreateOp``, ``DeleteOp``, ``RenameOp``) as one
        atomic unit, in order: every one or none (docs/consistency.md §11). The answers,
        one per op, as the single calls give them. A refusal is the first refused op's
        error, with its index in ``multi_index``::

            fs.multi([MkdirsOp("/a"), CreateOp("/a/f"), RenameOp("/b", "/a/b")])
        """
        request = namenode_pb2.MultiRequest(ops=[op.message() for op in ops])

        def invoke(stub: _Stub, header: _Header, timeout: float) -> namenode_pb2.MultiResponse:
            request.header.CopyFrom(header)
            return stub.Multi(request, timeout=timeout)

        return [_multi_answer(r) for r in self.proxy.call("multi", invoke).results]

    # -- reads ---------------------------------------------------------------------------------

    def list(self, path: str) -> builtins.list[StatInfo]:
        """The children of directory ``path`` sorted by name, or ``[stat(path)]`` for a file:
        every page of ``list_pages``."""
        return [status for page in self.list_pages(path) for status in page]

    def list_pages(
        self, path: str, *, limit: int = 0
    ) -> Iterator[builtins.list[StatInfo]]:
        """The listing of ``path`` a page at a time (at most ``limit`` entries each, and at
        most the NameNode's ``dfs.ls.limit``), each page asked after the last name of the one
        before, as HDFS's ``listStatus`` iterates. Each page is its own read: a listing of a
        directory that changes meanwhile is not one snapshot (docs/protocol.md §13.6)."""
        start_after = ""
        while True:
            request = namenode_pb2.GetListingRequest(
                path=path, start_after=start_after, limit=limit
            )

            def invoke(
                stub: _Stub,
                header: _Header,
                timeout: float,
                request: namenode_pb2.GetListingRequest = request,
            ) -> namenode_pb2.GetListingResponse:
                request.header.CopyFrom(header)
                return stub.GetListing(request, timeout=timeout)

            reply = self.proxy.call(
                "list", invoke, allow_stale_read=self.allow_stale_read, read=True
            )
            page = [status_from_pb(e) for e in reply.entries]
            yield page
            if not reply.has_more or not page:
                return
            start_after = page[-1].path.rsplit("/", 1)[-1]

    def stat(self, path: str) -> StatInfo:
        """The attributes of ``path``; ``PathNotFoundError`` when it does not exist."""
        request = namenode_pb2.GetFileInfoRequest(path=path)

        def invoke(
            stub: _Stub, header: _Header, timeout: float
        ) -> namenode_pb2.GetFileInfoResponse:
            request.header.CopyFrom(header)
            return stub.GetFileInfo(request, timeout=timeout)

        return status_from_pb(
            self.proxy.call(
                "stat", invoke, allow_stale_read=self.allow_stale_read, read=True
            ).status
        )

    def msync(self) -> int:
        """Make this client's next reads, on observers too, see every mutation acknowledged
        before this call (docs/consistency.md §9); the active's latest durable txid."""
        return self.proxy.msync()

    # -- lifetime ------------------------------------------------------------------------------

    def close(self) -> None:
        self.proxy.close()

    def __enter__(self) -> HaFsClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class ListingsAhead:
    """The listings of a depth-first walk (``hafs ls -R``), asked up to ``window`` at a time
    ahead of the walk, so a tree of many small directories costs about one round trip per
    ``window`` directories instead of one each (concurrent reads on the active share its
    read-index rounds, docs/consistency.md §4.1). Each listing is still its own
    linearizable read, as a serial walk's are; only their order differs.

    The walk tells which directories it found (``found``, in the order it will visit them,
    before it visits any of them) and takes each listing with ``take``: from the listing
    asked ahead, or asked now if the window was full when it was found. A refusal is
    raised by ``take`` for the directory it concerns::

        with ListingsAhead(fs.list, window=8) as ahead:
            ahead.found([root])
            items = ahead.take(root)          # then found(children dirs), take(child), ...
    """

    def __init__(self, list_fn: Callable[[str], list[StatInfo]], window: int = 8) -> None:
        if window < 1:
            raise ValueError(f"window must be at least 1, not {window}")
        self._list = list_fn
        self.window = window
        self._waiting: deque[str] = deque()  # found, not asked yet: in visiting order
        self._asked: dict[str, Future[list[StatInfo]]] = {}
        self._taken: set[str] = set()  # taken before they were asked: never ask them
        self._pool = ThreadPoolExecutor(window, thread_name_prefix="listings-ahead")

    def found(self, paths: Iterable[str]) -> None:
        """Directories the walk will visit next, in that order (before the ones found earlier
        and not visited yet, as in a depth-first walk)."""
        self._waiting.extendleft(reversed(list(paths)))
        self._ask()

    def take(self, path: str) -> list[StatInfo]:
        """The listing of ``path``; what ``list`` raised for it, if it failed."""
        future = self._asked.pop(path, None)
        if future is None:
            self._taken.add(path)
            try:
                return self._list(path)
            finally:
                self._ask()
        try:
            return future.result()
        finally:
            self._ask()

    def _ask(self) -> None:
        while self._waiting and len(self._asked) < self.window:
            path = self._waiting.popleft()
            if path in self._taken:
                self._taken.discard(path)
                continue
            self._asked[path] = self._pool.submit(self._list, path)

    def close(self) -> None:
        """Stop asking; listings in flight are awaited, their answers dropped."""
        self._waiting.clear()
        for future in self._asked.values():
            future.cancel()
        self._asked.clear()
        self._pool.shutdown(wait=True)

    def __enter__(self) -> ListingsAhead:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
