"""The in-memory namespace: a tree of INodeDirectory and INodeFile (docs/architecture.md §5.1).

Every mutation is split in two so that one code path serves the active and every replay:

- ``prepare_mkdir``/``prepare_create``/``prepare_delete``/``prepare_rename`` *decide*: they
  validate the arguments against the current tree, raise the user's error (``errors``) if the
  call is refused, and return the ``EditOp`` to log, without changing anything;
- ``apply(op)`` *applies* an op that is already in the log: the active after giving it a txid,
  the standby's tailer, and the image + edits loader. It re-runs the same decision on the op
  and mutates only when the decision passed, so a failed apply changes nothing and is an
  ``EditLogReplayError`` naming the txid and the op.

The active holds ``namespace.lock`` across both steps, so nothing can change the tree between
the decision and the mutation and ``apply(prepare_x(...))`` cannot fail::

    with ns.lock:
        op = ns.prepare_mkdir("/a/b", parents=True, client_id=cid, call_id=7)
        if op is not None:                  # None: mkdir -p of an existing directory
            op.txid = edit_log.log_edit(op) # assigns the next txid, buffers the op
            ns.apply(op)                    # records (cid, 7) in the retry cache
    edit_log.log_sync()                     # answer the client only once durable

Everything that replay must reproduce comes from the op, never from the replaying node: mtimes
(including the parent directory's), the permission of parents made by ``mkdir -p``, and the
final destination of a rename into an existing directory. The plain ``mkdir``/``create``/
``delete``/``rename`` methods do both steps at once for a namespace without an edit log
(tests, tools).
"""

from __future__ import annotations

import bisect
import builtins
import hashlib
import operator
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from google.protobuf import text_format

from conf import clock
from hanamenode import paths
from hanamenode.errors import (
    DirectoryNotEmptyError,
    EditLogReplayError,
    InvalidArgumentError,
    InvalidOperationError,
    InvalidRenameError,
    NamenodeError,
    ParentNotDirectoryError,
    PathExistsError,
    PathIsDirectoryError,
    PathNotFoundError,
)
from hanamenode.retry_cache import RetryCache
from proto import edits_pb2

DIR_PERMISSION = 0o755
FILE_PERMISSION = 0o644
DEFAULT_OWNER = "hdfs"
DEFAULT_GROUP = "supergroup"
DEFAULT_REPLICATION = 3
MAX_REPLICATION = 512  # HDFS dfs.replication.max
MAX_PERMISSION = 0o7777
# The fsimage stores numbers in SQLite INTEGER columns, which are signed 64-bit.
MAX_INT64 = 2**63 - 1
MAX_NAME_BYTES = 255
# mkdir -p gives the parents it creates the requested permission plus u+wx, so that the
# creator can always make the child below it (HDFS FSDirMkdirOp.addImplicitUwx).
IMPLICIT_PARENT_BITS = 0o300

LISTING_ENTRY_BYTES = 64
"""What a listing entry costs beyond its path, at most (the other fields of a FileStatus)."""

_NAMESPACE_OPS = frozenset({"mkdir", "create", "delete", "rename", "multi"})

Undo = Callable[[], None]
"""Puts back one change of a tentative or failed multi (``Namespace._undo``)."""


# ---------------------------------------------------------------------------------------------
# Values and tree nodes.
# ---------------------------------------------------------------------------------------------


Attrs = tuple[int, str, str, int]
"""What many inodes share: (permission, owner, group, replication; 0 for a directory)."""

_ATTRS: dict[Attrs, Attrs] = {}
"""Every distinct ``Attrs`` once (HDFS keeps user and group names once, in its
SerialNumberManager, and packs them with the permission into one long per inode): a million
files of one owner hold one tuple, one owner and one group string among them, instead of
three objects each. It only grows, as HDFS's table does; its size is the number of distinct
(permission, owner, group, replication) combinations, not of inodes."""


def intern_attrs(permission: int, owner: str, group: str, replication: int = 0) -> Attrs:
    """The shared ``Attrs`` with these values."""
    key = (permission, owner, group, replication)
    return _ATTRS.setdefault(key, key)


_NAME = operator.attrgetter("name")


class INode:
    """Attributes every inode has: the base of ``INodeDirectory`` and ``INodeFile``, never
    made itself. Nodes are mutable and compared by identity; compare namespaces with
    ``snapshot()``.

    Compact by design (issue 27, docs/architecture.md §5.1): ``__slots__`` only, and the
    permission, owner, group and replication live in one interned ``Attrs`` tuple that all
    inodes with the same values share; ``permission``, ``owner`` and ``group`` read it."""

    __slots__ = ("attrs", "mtime_ms", "name")

    name: str
    mtime_ms: int
    attrs: Attrs

    @property
    def permission(self) -> int:
        return self.attrs[0]

    @property
    def owner(self) -> str:
        return self.attrs[1]

    @property
    def group(self) -> str:
        return self.attrs[2]

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}({self.name!r}, mtime_ms={self.mtime_ms}, "
            f"permission={self.permission:#o}, owner={self.owner!r}, group={self.group!r})"
        )


class INodeDirectory(INode):
    """A directory. ``children`` is a list sorted by name (code point order, which is UTF-8
    byte order), HDFS's layout (``INodeDirectory.children``, an array searched by binary
    search): 8 bytes a child instead of a dict entry's 16 to 24 plus its empty slots, a
    listing page is a slice with no sort, and a lookup is O(log n). Change it only through
    ``add_child`` and ``remove_child``."""

    __slots__ = ("children",)

    children: builtins.list[INode]

    def __init__(
        self, name: str, mtime_ms: int, permission: int, owner: str, group: str,
        children: builtins.list[INode] | None = None,
    ) -> None:
        # Each class sets every slot itself: an INode.__init__ called through super() made
        # a node cost twice as long to make, and a build or a replay makes every one here.
        self.name, self.mtime_ms = name, mtime_ms
        self.attrs = intern_attrs(permission, owner, group)
        self.children = [] if children is None else sorted(children, key=_NAME)

    def child(self, name: str) -> INode | None:
        """The child called ``name``, or None (binary search)."""
        children = self.children
        i = bisect.bisect_left(children, name, key=_NAME)
        if i < len(children):
            found = children[i]
            if found.name == name:
                return found
        return None

    def add_child(self, node: INode) -> INode | None:
        """Insert ``node`` at its place by name, or replace the child of that name; the
        child replaced, or None."""
        children = self.children
        name = node.name
        # Appending in name order (an image load, a batch of creates) skips the search.
        if not children or children[-1].name < name:
            children.append(node)
            return None
        i = bisect.bisect_left(children, name, key=_NAME)
        if i < len(children) and children[i].name == name:
            replaced = children[i]
            children[i] = node
            return replaced
        children.insert(i, node)
        return None

    def remove_child(self, name: str) -> INode:
        """Take out the child called ``name`` (which must exist) and return it."""
        children = self.children
        i = bisect.bisect_left(children, name, key=_NAME)
        if i == len(children) or children[i].name != name:
            raise KeyError(name)
        return children.pop(i)

    def after(self, start_after: str) -> int:
        """The index of the first child whose name sorts after ``start_after``."""
        return bisect.bisect_right(self.children, start_after, key=_NAME)


class INodeFile(INode):
    """A file: metadata only, there are no blocks; the length is what the client declared."""

    __slots__ = ("length",)

    length: int

    def __init__(
        self, name: str, mtime_ms: int, permission: int, owner: str, group: str,
        length: int = 0, replication: int = DEFAULT_REPLICATION,
    ) -> None:
        self.name, self.mtime_ms, self.length = name, mtime_ms, length
        self.attrs = intern_attrs(permission, owner, group, replication)

    @property
    def replication(self) -> int:
        return self.attrs[3]


@dataclass(frozen=True, slots=True)
class StatInfo:
    """What ``stat`` and ``list`` report about one inode (HDFS HdfsFileStatus)."""

    path: str
    is_dir: bool
    length: int
    mtime_ms: int
    permission: int
    owner: str
    group: str
    replication: int
    children_num: int

    @classmethod
    def of(cls, path: str, node: INode) -> StatInfo:
        if isinstance(node, INodeDirectory):
            return cls(
                path, True, 0, node.mtime_ms, node.permission, node.owner, node.group, 0,
                len(node.children),
            )
        assert isinstance(node, INodeFile)
        return cls(
            path, False, node.length, node.mtime_ms, node.permission, node.owner, node.group,
            node.replication, 0,
        )


# The decisions: where a mutation lands, computed from the tree without changing it.


@dataclass(frozen=True, slots=True)
class _MkdirPlan:
    parent: INodeDirectory  # the deepest existing directory on the path
    missing: tuple[str, ...]  # names to create below it, outermost first; () if it exists


@dataclass(frozen=True, slots=True)
class _CreatePlan:
    parent: INodeDirectory
    name: str


@dataclass(frozen=True, slots=True)
class _DeletePlan:
    parent: INodeDirectory
    node: INode


@dataclass(frozen=True, slots=True)
class _RenamePlan:
    src_parent: INodeDirectory
    node: INode
    dst_parent: INodeDirectory
    dst: str


def _wall_clock_ms() -> int:
    return clock.time_ns() // 1_000_000


def _shown(path: str) -> str:
    """A valid path as it appears in a message: bare when readable, quoted when not."""
    return path if path.isprintable() and len(path) <= 120 else paths.describe(path)


def describe_op(op: edits_pb2.EditOp) -> str:
    """One line naming an op and all its fields, for logs and replay errors."""
    return text_format.MessageToString(op, as_one_line=True)


class Namespace:
    """The namespace tree with its counters and its lock (HDFS FSDirectory).

    >>> ns = Namespace()
    >>> ns.mkdir("/user/alice", parents=True, mtime_ms=1)
    True
    >>> [s.path for s in ns.list("/user")]
    ['/user/alice']

    ``retry_cache``, when given, receives a success entry for every applied op that carries
    a client id. ``clock`` (wall-clock milliseconds) supplies mtimes not passed explicitly.
    """

    def __init__(
        self,
        *,
        root_mtime_ms: int = 0,
        root_permission: int = DIR_PERMISSION,
        root_owner: str = DEFAULT_OWNER,
        root_group: str = DEFAULT_GROUP,
        retry_cache: RetryCache | None = None,
        clock: Callable[[], int] = _wall_clock_ms,
    ) -> None:
        self.root = INodeDirectory("", root_mtime_ms, root_permission, root_owner, root_group)
        self.retry_cache = retry_cache
        self.lock = threading.RLock()
        """The namesystem lock: hold it across ``prepare_*`` and ``apply``."""
        self.frozen = False
        """Someone reads the tree over several turns of the loop and needs it to stay one
        txid's tree: ``apply`` refuses until it thaws, and the tailer defers its ops
        meanwhile. A standby's checkpoint no longer freezes the namespace (issue 27: a
        forked child writes the image from its own copy, ``fsimage.fork_save_image``)."""
        self.last_applied_txid = 0
        self._clock = clock
        self._dir_count = 1
        self._file_count = 0
        self._undo: builtins.list[Undo] | None = None
        """While a multi is decided or applied: how to put back each change made so far."""

    @classmethod
    def from_root(
        cls,
        root: INodeDirectory,
        last_applied_txid: int,
        *,
        retry_cache: RetryCache | None = None,
        clock: Callable[[], int] = _wall_clock_ms,
        counts: tuple[int, int] | None = None,
    ) -> Namespace:
        """A namespace over an already-built tree (the fsimage loader); counts its inodes
        unless ``counts`` (directories, files) says how many the builder made."""
        ns = cls(retry_cache=retry_cache, clock=clock)
        ns.root = root
        ns.last_applied_txid = last_applied_txid
        ns._dir_count, ns._file_count = _count(root) if counts is None else counts
        return ns

    # -- counters ------------------------------------------------------------------------------

    @property
    def dir_count(self) -> int:
        """Directories, the root included."""
        return self._dir_count

    @property
    def file_count(self) -> int:
        return self._file_count

    @property
    def inode_count(self) -> int:
        return self._dir_count + self._file_count

    # -- reads ---------------------------------------------------------------------------------

    def stat(self, path: str) -> StatInfo:
        """The attributes of ``path``; PathNotFoundError if it does not exist."""
        path = paths.validate_path(path)
        with self.lock:
            return StatInfo.of(path, self._get(path))

    def list(self, path: str) -> builtins.list[StatInfo]:
        """The children of a directory sorted by name (UTF-8 byte order, as HDFS lists), or
        ``[stat(path)]`` for a file."""
        path = paths.validate_path(path)
        with self.lock:
            node = self._get(path)
            if not isinstance(node, INodeDirectory):
                return [StatInfo.of(path, node)]
            return [StatInfo.of(paths.join(path, c.name), c) for c in node.children]

    def list_page(
        self, path: str, *, start_after: str = "", limit: int = 1000, max_bytes: int = 1 << 20
    ) -> tuple[builtins.list[StatInfo], bool]:
        """One page of ``list(path)``: the children whose names sort after ``start_after``, at
        most ``limit`` of them and about ``max_bytes`` of paths (at least one), and whether
        more follow. A file is its own one-entry page."""
        path = paths.validate_path(path)
        if limit < 1:
            raise InvalidArgumentError(f"invalid listing limit {limit}: must be at least 1")
        with self.lock:
            node = self._get(path)
            if not isinstance(node, INodeDirectory):
                return [StatInfo.of(path, node)], False
            children = node.children
            first = node.after(start_after) if start_after else 0
            page: builtins.list[StatInfo] = []
            size = 0
            for entry in children[first : first + limit]:
                child = paths.join(path, entry.name)
                cost = len(child.encode("utf-8", "surrogatepass")) + LISTING_ENTRY_BYTES
                if page and size + cost > max_bytes:
                    break
                page.append(StatInfo.of(child, entry))
                size += cost
            return page, first + len(page) < len(children)

    def exists(self, path: str) -> bool:
        path = paths.validate_path(path)
        with self.lock:
            return self._find(path) is not None

    # -- the decisions: validate, raise the user's error, return the op to log -----------------

    def prepare_mkdir(
        self,
        path: str,
        *,
        parents: bool = False,
        mtime_ms: int | None = None,
        permission: int = DIR_PERMISSION,
        owner: str = DEFAULT_OWNER,
        group: str = DEFAULT_GROUP,
        client_id: bytes = b"",
        call_id: int = 0,
    ) -> edits_pb2.EditOp | None:
        """The op that creates directory ``path`` (and its missing parents with ``parents``),
        or None when ``parents`` is set and the directory already exists: nothing to log."""
        mtime_ms = self._now() if mtime_ms is None else mtime_ms
        path = paths.validate_path(path)
        _check_attributes(mtime_ms, permission, owner, group)
        with self.lock:
            missing = self._plan_mkdir(path, parents).missing
            if not missing:
                return None
        paths.check_new_names(path, missing)
        mkdir = edits_pb2.MkdirOp(
            path=path,
            mtime_ms=mtime_ms,
            permission=permission,
            owner=owner,
            group=group,
            create_parent=parents,
        )
        return edits_pb2.EditOp(client_id=client_id, call_id=call_id, mkdir=mkdir)

    def prepare_create(
        self,
        path: str,
        *,
        overwrite: bool = False,
        mtime_ms: int | None = None,
        permission: int = FILE_PERMISSION,
        owner: str = DEFAULT_OWNER,
        group: str = DEFAULT_GROUP,
        length: int = 0,
        replication: int = DEFAULT_REPLICATION,
        client_id: bytes = b"",
        call_id: int = 0,
    ) -> edits_pb2.EditOp:
        """The op that creates file ``path`` (replacing an existing file with ``overwrite``)."""
        mtime_ms = self._now() if mtime_ms is None else mtime_ms
        path = paths.validate_path(path)
        _check_attributes(mtime_ms, permission, owner, group)
        _check_file_attributes(length, replication)
        with self.lock:
            self._plan_create(path, overwrite)
        paths.check_new_names(path, [paths.basename(path)])
        create = edits_pb2.CreateOp(
            path=path,
            mtime_ms=mtime_ms,
            permission=permission,
            owner=owner,
            group=group,
            overwrite=overwrite,
            length=length,
            replication=replication,
        )
        return edits_pb2.EditOp(client_id=client_id, call_id=call_id, create=create)

    def prepare_delete(
        self,
        path: str,
        *,
        recursive: bool = False,
        mtime_ms: int | None = None,
        client_id: bytes = b"",
        call_id: int = 0,
    ) -> edits_pb2.EditOp:
        """The op that deletes ``path``; ``mtime_ms`` becomes its parent's mtime."""
        mtime_ms = self._now() if mtime_ms is None else mtime_ms
        path = paths.validate_path(path)
        _check_mtime(mtime_ms)
        with self.lock:
            self._plan_delete(path, recursive)
        delete = edits_pb2.DeleteOp(path=path, recursive=recursive, mtime_ms=mtime_ms)
        return edits_pb2.EditOp(client_id=client_id, call_id=call_id, delete=delete)

    def prepare_rename(
        self,
        src: str,
        dst: str,
        *,
        mtime_ms: int | None = None,
        client_id: bytes = b"",
        call_id: int = 0,
    ) -> edits_pb2.EditOp:
        """The op that moves ``src`` to ``dst``, or into ``dst`` as ``dst/basename(src)`` when
        ``dst`` is an existing directory. The op carries the resolved destination."""
        mtime_ms = self._now() if mtime_ms is None else mtime_ms
        src = paths.validate_path(src)
        dst = paths.validate_path(dst)
        _check_mtime(mtime_ms)
        with self.lock:
            plan = self._plan_rename(src, dst, into_directory=True)
        paths.check_new_names(plan.dst, [paths.basename(plan.dst)])
        rename = edits_pb2.RenameOp(src=src, dst=plan.dst, mtime_ms=mtime_ms)
        return edits_pb2.EditOp(client_id=client_id, call_id=call_id, rename=rename)

    def prepare_multi(
        self,
        steps: Sequence[Callable[[Namespace], edits_pb2.EditOp | None]],
        *,
        client_id: bytes = b"",
        call_id: int = 0,
    ) -> edits_pb2.EditOp:
        """The one op that applies every step, in order, or raise the first step's refusal.

        Each step is a decision (``lambda ns: ns.prepare_create(...)``) taken on the tree
        that the steps before it leave: they are applied tentatively and put back before
        this returns, so the namespace is unchanged either way. A refusal is the step's own
        error class, its message prefixed with the index, and ``multi_index`` set::

            op = ns.prepare_multi([lambda ns: ns.prepare_mkdir("/a"),
                                   lambda ns: ns.prepare_create("/a/f")])
        """
        with self.lock:
            tentative = self.tentative_multi(steps, client_id=client_id, call_id=call_id)
            tentative.roll_back()
        return tentative.op

    def tentative_multi(
        self,
        steps: Sequence[Callable[[Namespace], edits_pb2.EditOp | None]],
        *,
        client_id: bytes = b"",
        call_id: int = 0,
    ) -> TentativeMulti:
        """``prepare_multi`` that leaves the steps applied: the active logs the op and then
        keeps them (``TentativeMulti.apply`` is the ``apply`` its edit log calls) instead of
        putting them back and applying the same op again, which was 40% of a multi's time in
        the namespace. Until it is kept or rolled back no other op applies (the undo journal
        is open: "a multi cannot contain a multi"). A refusal leaves nothing."""
        entries: builtins.list[edits_pb2.MultiEntry] = []
        results: builtins.list[object] = []
        with self.lock:
            if self._undo is not None:
                raise InvalidArgumentError("a multi cannot contain a multi")
            self._undo = []
            try:
                for index, step in enumerate(steps):
                    try:
                        op = step(self)
                        if op is None:
                            entries.append(edits_pb2.MultiEntry(unchanged=edits_pb2.NoOp()))
                            results.append(False)
                            continue
                        kind = op.WhichOneof("op")
                        if kind not in ("mkdir", "create", "delete", "rename"):
                            raise InvalidArgumentError(f"a multi cannot hold a {kind} op")
                        results.append(self._apply(kind, op))
                    except NamenodeError as exc:
                        raise multi_refusal(exc, index, len(steps)) from exc
                    entry = edits_pb2.MultiEntry()
                    getattr(entry, kind).CopyFrom(getattr(op, kind))
                    entries.append(entry)
            except BaseException:
                self._roll_back()
                raise
        multi = edits_pb2.MultiOp(entries=entries)
        op = edits_pb2.EditOp(client_id=client_id, call_id=call_id, multi=multi)
        return TentativeMulti(self, op, results)

    def _keep_tentative(self, tentative: TentativeMulti, op: edits_pb2.EditOp) -> object:
        """``TentativeMulti.apply``: what ``apply`` does for a logged op, the changes being in
        the tree already."""
        with self.lock:
            if op is not tentative.op or self._undo is None:
                raise EditLogReplayError(
                    f"cannot apply txid {op.txid}: it is not the open tentative multi "
                    f"({describe_op(op)})",
                    op.txid,
                )
            if self.frozen or op.txid <= self.last_applied_txid:
                self._roll_back()
                if self.frozen:
                    raise EditLogReplayError(
                        f"cannot apply txid {op.txid}: a checkpoint is reading the namespace "
                        f"({describe_op(op)})",
                        op.txid,
                    )
                raise EditLogReplayError(
                    f"cannot apply txid {op.txid}: not after the last applied txid "
                    f"{self.last_applied_txid} ({describe_op(op)})",
                    op.txid,
                )
            self._undo = None
            self.last_applied_txid = op.txid
            results = list(tentative.results)
            if self.retry_cache is not None:
                self.retry_cache.record_success(
                    op.client_id, op.call_id, results, txid=op.txid, op="multi"
                )
            return results

    # -- applying logged ops ------------------------------------------------------------------

    def apply(self, op: edits_pb2.EditOp) -> object:
        """Apply an op that is in the log and return the result its client was given:
        True for mkdir and delete, the new file's StatInfo for create, the final destination
        path for rename, None for ops that do not touch the namespace (segment markers, NoOp).

        ``op.txid`` must be above ``last_applied_txid``: applying an op twice (an image loaded
        and then the edits it already contains) is refused rather than silently diverging.
        """
        with self.lock:
            if self.frozen:
                raise EditLogReplayError(
                    f"cannot apply txid {op.txid}: a checkpoint is reading the namespace "
                    f"({describe_op(op)}); apply it once the checkpoint has its rows",
                    op.txid,
                )
            if op.txid <= self.last_applied_txid:
                raise EditLogReplayError(
                    f"cannot apply txid {op.txid}: not after the last applied txid "
                    f"{self.last_applied_txid} ({describe_op(op)})",
                    op.txid,
                )
            kind = op.WhichOneof("op")
            if kind is None:
                raise EditLogReplayError(
                    f"cannot apply txid {op.txid}: the op is empty ({describe_op(op)})", op.txid
                )
            if self._undo is not None:
                raise EditLogReplayError(
                    f"cannot apply txid {op.txid}: a tentative multi is open (it is kept or "
                    f"rolled back first) ({describe_op(op)})",
                    op.txid,
                )
            try:
                result = self._apply(kind, op)
            except NamenodeError as exc:
                raise EditLogReplayError(
                    f"cannot apply txid {op.txid} ({describe_op(op)}): {exc}", op.txid
                ) from exc
            self.last_applied_txid = op.txid
            if kind in _NAMESPACE_OPS and self.retry_cache is not None:
                self.retry_cache.record_success(
                    op.client_id, op.call_id, result, txid=op.txid, op=kind
                )
            return result

    def _apply(self, kind: str, op: edits_pb2.EditOp) -> object:
        if kind == "mkdir":
            return self._apply_mkdir(op.mkdir)
        if kind == "create":
            return self._apply_create(op.create)
        if kind == "delete":
            return self._apply_delete(op.delete)
        if kind == "rename":
            return self._apply_rename(op.rename)
        if kind == "multi":
            return self._apply_multi(op.multi)
        return None  # start_log_segment, end_log_segment, noop

    # -- multi: all of its ops or none --------------------------------------------------------

    def _apply_multi(self, op: edits_pb2.MultiOp) -> builtins.list[object]:
        """Apply every entry in order, each on the tree the ones before it left; when one
        fails, put back what the earlier ones changed and raise: nothing of the multi stays.
        The results, one per entry (False for an ``unchanged`` one: mkdir -p of an existing
        directory)."""
        if self._undo is not None:
            raise InvalidArgumentError("a multi cannot contain a multi")
        self._undo = []
        results: builtins.list[object] = []
        try:
            for index, entry in enumerate(op.entries):
                kind = entry.WhichOneof("op")
                if kind == "unchanged":
                    results.append(False)
                    continue
                if kind is None:
                    raise InvalidArgumentError(f"multi entry {index} is empty")
                try:
                    # A MultiEntry names its fields as EditOp does: mkdir, create, ...
                    results.append(self._apply(kind, entry))  # type: ignore[arg-type]
                except NamenodeError as exc:
                    raise multi_refusal(exc, index, len(op.entries)) from exc
        except BaseException:
            self._roll_back()
            raise
        self._undo = None
        return results

    def _roll_back(self) -> None:
        undo, self._undo = self._undo or [], None
        for step in reversed(undo):
            step()

    def _undo_mkdir(self, plan: _MkdirPlan) -> Undo:
        parent, first, mtime, made = plan.parent, plan.missing[0], plan.parent.mtime_ms, len(
            plan.missing
        )

        def undo() -> None:
            parent.remove_child(first)
            parent.mtime_ms = mtime
            self._dir_count -= made

        return undo

    def _undo_create(self, plan: _CreatePlan) -> Undo:
        parent, name, mtime = plan.parent, plan.name, plan.parent.mtime_ms
        replaced = parent.child(name)

        def undo() -> None:
            if replaced is None:
                parent.remove_child(name)
                self._file_count -= 1
            else:
                parent.add_child(replaced)
            parent.mtime_ms = mtime

        return undo

    def _undo_delete(self, plan: _DeletePlan, dirs: int, files: int) -> Undo:
        parent, node, mtime = plan.parent, plan.node, plan.parent.mtime_ms

        def undo() -> None:
            parent.add_child(node)
            parent.mtime_ms = mtime
            self._dir_count += dirs
            self._file_count += files

        return undo

    def _apply_mkdir(self, op: edits_pb2.MkdirOp) -> bool:
        path = paths.validate_path(op.path)
        _check_attributes(op.mtime_ms, op.permission, op.owner, op.group)
        plan = self._plan_mkdir(path, op.create_parent)
        if not plan.missing:
            raise PathExistsError(f"cannot create directory {_shown(path)}: directory exists")
        # Decided: from here on nothing can fail.
        if self._undo is not None:
            self._undo.append(self._undo_mkdir(plan))
        _touch(plan.parent, op.mtime_ms)
        directory = plan.parent
        last = len(plan.missing) - 1
        for index, name in enumerate(plan.missing):
            permission = op.permission if index == last else op.permission | IMPLICIT_PARENT_BITS
            child = INodeDirectory(name, op.mtime_ms, permission, op.owner, op.group)
            directory.add_child(child)
            directory = child
        self._dir_count += len(plan.missing)
        return True

    def _apply_create(self, op: edits_pb2.CreateOp) -> StatInfo:
        path = paths.validate_path(op.path)
        _check_attributes(op.mtime_ms, op.permission, op.owner, op.group)
        _check_file_attributes(op.length, op.replication)
        plan = self._plan_create(path, op.overwrite)
        # Decided: from here on nothing can fail.
        if self._undo is not None:
            self._undo.append(self._undo_create(plan))
        node = INodeFile(
            plan.name, op.mtime_ms, op.permission, op.owner, op.group, op.length, op.replication
        )
        if plan.parent.add_child(node) is None:
            self._file_count += 1
        _touch(plan.parent, op.mtime_ms)
        return StatInfo.of(path, node)

    def _apply_delete(self, op: edits_pb2.DeleteOp) -> bool:
        path = paths.validate_path(op.path)
        _check_mtime(op.mtime_ms)
        plan = self._plan_delete(path, op.recursive)
        # Decided: from here on nothing can fail.
        dirs, files = _count(plan.node)
        if self._undo is not None:
            self._undo.append(self._undo_delete(plan, dirs, files))
        plan.parent.remove_child(plan.node.name)
        _touch(plan.parent, op.mtime_ms)
        self._dir_count -= dirs
        self._file_count -= files
        return True

    def _apply_rename(self, op: edits_pb2.RenameOp) -> str:
        src = paths.validate_path(op.src)
        dst = paths.validate_path(op.dst)
        _check_mtime(op.mtime_ms)
        plan = self._plan_rename(src, dst, into_directory=False)
        # Decided: from here on nothing can fail.
        if self._undo is not None:
            self._undo.append(_undo_rename(plan))
        plan.src_parent.remove_child(plan.node.name)
        plan.node.name = paths.basename(plan.dst)
        plan.dst_parent.add_child(plan.node)
        _touch(plan.src_parent, op.mtime_ms)
        _touch(plan.dst_parent, op.mtime_ms)
        return plan.dst

    # -- decide and apply at once (no edit log) -------------------------------------------------

    def mkdir(
        self,
        path: str,
        *,
        parents: bool = False,
        mtime_ms: int | None = None,
        permission: int = DIR_PERMISSION,
        owner: str = DEFAULT_OWNER,
        group: str = DEFAULT_GROUP,
    ) -> bool:
        """Create a directory (``mkdir``, or ``mkdir -p`` with ``parents``); True on success."""
        with self.lock:
            op = self.prepare_mkdir(
                path, parents=parents, mtime_ms=mtime_ms, permission=permission, owner=owner,
                group=group,
            )
            return True if op is None else bool(self._execute(op))

    def create(
        self,
        path: str,
        *,
        overwrite: bool = False,
        mtime_ms: int | None = None,
        permission: int = FILE_PERMISSION,
        owner: str = DEFAULT_OWNER,
        group: str = DEFAULT_GROUP,
        length: int = 0,
        replication: int = DEFAULT_REPLICATION,
    ) -> StatInfo:
        """Create a file (``touch``; replace an existing file with ``overwrite``)."""
        with self.lock:
            op = self.prepare_create(
                path, overwrite=overwrite, mtime_ms=mtime_ms, permission=permission, owner=owner,
                group=group, length=length, replication=replication,
            )
            result = self._execute(op)
        assert isinstance(result, StatInfo)
        return result

    def delete(self, path: str, *, recursive: bool = False, mtime_ms: int | None = None) -> bool:
        """Delete a file or directory; True (a missing path is PathNotFoundError)."""
        with self.lock:
            op = self.prepare_delete(path, recursive=recursive, mtime_ms=mtime_ms)
            return bool(self._execute(op))

    def rename(self, src: str, dst: str, *, mtime_ms: int | None = None) -> str:
        """Move ``src`` to ``dst`` (or into ``dst`` if it is a directory); the final path."""
        with self.lock:
            op = self.prepare_rename(src, dst, mtime_ms=mtime_ms)
            return str(self._execute(op))

    def multi(
        self, steps: Sequence[Callable[[Namespace], edits_pb2.EditOp | None]]
    ) -> builtins.list[object]:
        """Apply ``steps`` (see ``prepare_multi``) all at once or not at all; their results."""
        with self.lock:
            result = self._execute(self.prepare_multi(steps))
        assert isinstance(result, builtins.list)
        return result

    def _execute(self, op: edits_pb2.EditOp) -> object:
        # Without an edit log the op still takes the next txid, so that a test can replay the
        # same ops into another namespace and expect the same tree.
        op.txid = self.last_applied_txid + 1
        return self.apply(op)

    # -- comparison ----------------------------------------------------------------------------

    def snapshot(self) -> tuple[StatInfo, ...]:
        """Every inode, root first, in pre-order with children sorted by name: two namespaces
        hold the same tree exactly when their snapshots are equal."""
        with self.lock:
            return tuple(StatInfo.of(path, node) for path, node in self.walk())

    def digest(self) -> str:
        """sha256 of ``snapshot()``: a short fingerprint to compare namespaces across processes."""
        h = hashlib.sha256()
        for s in self.snapshot():
            fields = (
                s.path, int(s.is_dir), s.length, s.mtime_ms, s.permission, s.owner, s.group,
                s.replication, s.children_num,
            )
            h.update("\x00".join(map(str, fields)).encode("utf-8", "surrogatepass") + b"\n")
        return h.hexdigest()

    def walk(self) -> Iterator[tuple[str, INode]]:
        """``(path, inode)`` for every inode in pre-order, children by name. Iterative: a
        path may be 1000 components deep, deeper than Python's recursion limit allows.
        The caller holds ``lock`` while iterating."""
        stack: builtins.list[tuple[str, INode]] = [(paths.ROOT, self.root)]
        while stack:
            path, node = stack.pop()
            yield path, node
            if isinstance(node, INodeDirectory):
                for child in reversed(node.children):
                    stack.append((paths.join(path, child.name), child))

    # -- decisions (no mutation) ----------------------------------------------------------------

    def _now(self) -> int:
        return self._clock()

    def _prefix(self, names: builtins.list[str]) -> builtins.list[INode]:
        """The inodes along ``names`` from the root, as far as they exist: stops before the
        first missing name, or at a file that still has names after it."""
        nodes: builtins.list[INode] = [self.root]
        node: INode = self.root
        for name in names:
            if not isinstance(node, INodeDirectory):
                break
            child = node.child(name)
            if child is None:
                break
            nodes.append(child)
            node = child
        return nodes

    def _find(self, path: str) -> INode | None:
        names = paths.components(path)
        nodes = self._prefix(names)
        return nodes[-1] if len(nodes) == len(names) + 1 else None

    def _get(self, path: str) -> INode:
        names = paths.components(path)
        nodes = self._prefix(names)
        if len(nodes) == len(names) + 1:
            return nodes[-1]
        found = len(nodes) - 1
        if isinstance(nodes[-1], INodeFile):
            prefix = "/" + "/".join(names[:found])
            raise PathNotFoundError(
                f"no such file or directory: {_shown(path)} ({_shown(prefix)} is a file)"
            )
        raise PathNotFoundError(f"no such file or directory: {_shown(path)}")

    def _missing_parent(
        self, action: str, path: str, names: builtins.list[str], nodes: builtins.list[INode]
    ) -> NamenodeError:
        """The error for a path whose parent does not resolve to a directory."""
        found = len(nodes) - 1
        prefix = "/" + "/".join(names[:found])
        if isinstance(nodes[-1], INodeFile):
            return ParentNotDirectoryError(
                f"cannot {action} {_shown(path)}: {_shown(prefix)} is a file, not a directory"
            )
        missing = paths.join(prefix, names[found])
        return PathNotFoundError(
            f"cannot {action} {_shown(path)}: parent directory {_shown(missing)} does not exist"
        )

    def _plan_mkdir(self, path: str, parents: bool) -> _MkdirPlan:
        names = paths.components(path)
        nodes = self._prefix(names)
        last = nodes[-1]
        if len(nodes) == len(names) + 1:
            if not isinstance(last, INodeDirectory):
                raise PathExistsError(
                    f"cannot create directory {_shown(path)}: a file exists with that name"
                )
            if not parents:
                raise PathExistsError(f"cannot create directory {_shown(path)}: directory exists")
            return _MkdirPlan(last, ())
        if not isinstance(last, INodeDirectory) or (len(nodes) < len(names) and not parents):
            error = self._missing_parent("create directory", path, names, nodes)
            if isinstance(error, PathNotFoundError):
                error = PathNotFoundError(f"{error} (use parents=True to create it)")
            raise error
        return _MkdirPlan(last, tuple(names[len(nodes) - 1 :]))

    def _plan_create(self, path: str, overwrite: bool) -> _CreatePlan:
        names = paths.components(path)
        nodes = self._prefix(names)
        last = nodes[-1]
        if len(nodes) == len(names) + 1:
            if isinstance(last, INodeDirectory):
                raise PathIsDirectoryError(
                    f"cannot create file {_shown(path)}: it is a directory"
                )
            if not overwrite:
                raise PathExistsError(
                    f"cannot create file {_shown(path)}: file exists (use overwrite=True)"
                )
            parent = nodes[-2]
            assert isinstance(parent, INodeDirectory)
            return _CreatePlan(parent, names[-1])
        if len(nodes) == len(names) and isinstance(last, INodeDirectory):
            return _CreatePlan(last, names[-1])
        raise self._missing_parent("create file", path, names, nodes)

    def _plan_delete(self, path: str, recursive: bool) -> _DeletePlan:
        if path == paths.ROOT:
            raise InvalidOperationError("cannot delete the root directory /")
        names = paths.components(path)
        nodes = self._prefix(names)
        if len(nodes) != len(names) + 1:
            raise PathNotFoundError(f"cannot delete {_shown(path)}: no such file or directory")
        node, parent = nodes[-1], nodes[-2]
        assert isinstance(parent, INodeDirectory)
        if isinstance(node, INodeDirectory) and node.children and not recursive:
            raise DirectoryNotEmptyError(
                f"cannot delete {_shown(path)}: directory is not empty "
                f"({len(node.children)} entries; use recursive=True)"
            )
        return _DeletePlan(parent, node)

    def _plan_rename(self, src: str, dst: str, *, into_directory: bool) -> _RenamePlan:
        """HDFS rename semantics. With ``into_directory`` (the client's call) an existing
        directory ``dst`` means ``dst/basename(src)``; replay gets the resolved path."""
        what = f"cannot rename {_shown(src)} to {_shown(dst)}"
        if src == paths.ROOT:
            raise InvalidRenameError(f"{what}: the root directory cannot be renamed")
        if src == dst:
            raise InvalidRenameError(f"{what}: source and destination are the same")
        src_names = paths.components(src)
        src_nodes = self._prefix(src_names)
        if len(src_nodes) != len(src_names) + 1:
            raise PathNotFoundError(f"{what}: source {_shown(src)} does not exist")
        node, src_parent = src_nodes[-1], src_nodes[-2]
        assert isinstance(src_parent, INodeDirectory)
        target = dst
        if into_directory and isinstance(self._find(dst), INodeDirectory):
            target = paths.join(dst, paths.basename(src))
            what = f"cannot rename {_shown(src)} to {_shown(target)}"
            if target == src:
                raise InvalidRenameError(f"{what}: source and destination are the same")
        if paths.is_ancestor(src, target):
            raise InvalidRenameError(f"{what}: the destination is inside the source")
        dst_names = paths.components(target)
        dst_nodes = self._prefix(dst_names)
        if len(dst_nodes) == len(dst_names) + 1:
            raise PathExistsError(f"{what}: destination {_shown(target)} exists")
        last = dst_nodes[-1]
        if len(dst_nodes) != len(dst_names) or not isinstance(last, INodeDirectory):
            raise self._missing_parent(f"rename {_shown(src)} to", target, dst_names, dst_nodes)
        return _RenamePlan(src_parent, node, last, target)


# ---------------------------------------------------------------------------------------------
# Helpers over plain values.
# ---------------------------------------------------------------------------------------------


def multi_refusal(exc: NamenodeError, index: int, count: int) -> NamenodeError:
    """The refusal of a whole multi whose op ``index`` (of ``count``) was refused with ``exc``:
    the same class, so a caller catches a multi's ``PathExistsError`` as a single call's,
    with the index in its message and in ``multi_index``."""
    message = f"multi op {index} of {count} refused: {exc}"
    try:
        refusal = type(exc)(message)
    except TypeError:  # a class with a constructor of its own
        refusal = NamenodeError(message)
    refusal.multi_index = index  # type: ignore[attr-defined]
    return refusal


def _undo_rename(plan: _RenamePlan) -> Undo:
    src_parent, dst_parent, node = plan.src_parent, plan.dst_parent, plan.node
    name, src_mtime, dst_mtime = node.name, src_parent.mtime_ms, dst_parent.mtime_ms
    new_name = paths.basename(plan.dst)

    def undo() -> None:
        dst_parent.remove_child(new_name)
        node.name = name
        src_parent.add_child(node)
        dst_parent.mtime_ms = dst_mtime
        src_parent.mtime_ms = src_mtime

    return undo


def _touch(directory: INodeDirectory, mtime_ms: int) -> None:
    # A directory's mtime only moves forward: after a failover the new active's clock may be
    # behind the old one's, and a listing should not appear to go back in time.
    if mtime_ms > directory.mtime_ms:
        directory.mtime_ms = mtime_ms


def _count(node: INode) -> tuple[int, int]:
    """(directories, files) in the subtree of ``node``, itself included."""
    dirs = files = 0
    stack = [node]
    while stack:
        current = stack.pop()
        if isinstance(current, INodeDirectory):
            dirs += 1
            stack.extend(current.children)
        else:
            files += 1
    return dirs, files


def _check_int(name: str, value: int, low: int, high: int, shown: str | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        bound = shown or f"{low}..{high}"
        raise InvalidArgumentError(f"invalid {name} {value!r}: must be an integer in {bound}")


def _check_mtime(mtime_ms: int) -> None:
    _check_int("mtime_ms", mtime_ms, 0, MAX_INT64)


def _check_name(kind: str, name: str) -> None:
    if not isinstance(name, str) or not name:
        raise InvalidArgumentError(f"invalid {kind} {name!r}: must be a non-empty string")
    if "\x00" in name:
        raise InvalidArgumentError(f"invalid {kind} {name!r}: contains a NUL character")
    try:
        size = len(name.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidArgumentError(f"invalid {kind} {name!r}: not valid UTF-8") from None
    if size > MAX_NAME_BYTES:
        raise InvalidArgumentError(
            f"invalid {kind} {paths.describe(name)}: longer than {MAX_NAME_BYTES} bytes"
        )


def _check_attributes(mtime_ms: int, permission: int, owner: str, group: str) -> None:
    _check_mtime(mtime_ms)
    _check_int("permission", permission, 0, MAX_PERMISSION, "0o0..0o7777")
    _check_name("owner", owner)
    _check_name("group", group)


def _check_file_attributes(length: int, replication: int) -> None:
    _check_int("length", length, 0, MAX_INT64)
    _check_int("replication", replication, 1, MAX_REPLICATION)


class TentativeMulti:
    """A multi applied to the namespace but not logged yet (``Namespace.tentative_multi``):
    ``apply`` keeps it once the edit log has given ``op`` its txid, ``roll_back`` puts the
    tree back. Exactly one of the two ends it."""

    __slots__ = ("_namespace", "op", "results")

    def __init__(
        self, namespace: Namespace, op: edits_pb2.EditOp, results: builtins.list[object]
    ) -> None:
        self._namespace = namespace
        self.op = op
        self.results = results

    def apply(self, op: edits_pb2.EditOp) -> object:
        return self._namespace._keep_tentative(self, op)

    def roll_back(self) -> None:
        with self._namespace.lock:
            self._namespace._roll_back()
