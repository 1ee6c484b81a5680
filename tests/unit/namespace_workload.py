"""A seeded random workload for the Namespace, checked step by step against a naive model.

``run_workload`` plays random client calls (mkdir [-p], create [overwrite], delete
[recursive], rename, now and then with a malformed path) on a small alphabet of names so that
calls collide: most are refused, the rest are logged. Each call goes the active's way —
``prepare_*``, a txid, ``apply`` — and is checked against ``ModelNamespace``, a second,
deliberately simple implementation (a dict of path -> attributes), for the same answer, the
same refusal class, and after every step the same tree. The logged ops it returns are what a
standby or an image loader would replay.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from hanamenode import paths
from hanamenode.errors import (
    DirectoryNotEmptyError,
    InvalidOperationError,
    InvalidPathError,
    InvalidRenameError,
    NamenodeError,
    ParentNotDirectoryError,
    PathExistsError,
    PathIsDirectoryError,
    PathNotFoundError,
)
from hanamenode.namespace import Namespace, StatInfo
from proto import edits_pb2

NAMES = ("a", "b", "c")
BAD_PATHS = ("/a//b", "/a/", "a/b", "/a/./b", "/a/../b", "", "/a\x00")
OWNERS = ("hdfs", "alice", "bob")
CLIENTS = (b"", b"client-one", b"client-two")

Attrs = tuple[bool, int, int, int, str, str, int]  # is_dir, length, mtime, perm, owner, group, repl


@dataclass
class _Entry:
    is_dir: bool
    mtime_ms: int
    permission: int
    owner: str
    group: str
    length: int = 0
    replication: int = 0


def view_of(ns: Namespace) -> dict[str, Attrs]:
    """A namespace as the model sees it."""
    return {
        s.path: (s.is_dir, s.length, s.mtime_ms, s.permission, s.owner, s.group, s.replication)
        for s in ns.snapshot()
    }


class ModelNamespace:
    """The namespace's semantics written the obvious way, for comparison only."""

    def __init__(self) -> None:
        self.entries: dict[str, _Entry] = {"/": _Entry(True, 0, 0o755, "hdfs", "supergroup")}

    def view(self) -> dict[str, Attrs]:
        return {
            p: (e.is_dir, e.length, e.mtime_ms, e.permission, e.owner, e.group, e.replication)
            for p, e in self.entries.items()
        }

    def _ancestors(self, path: str) -> list[str]:
        """Proper ancestors below the root, outermost first."""
        names = paths.components(path)
        return ["/" + "/".join(names[:i]) for i in range(1, len(names))]

    def _parent_error(self, path: str) -> type[NamenodeError] | None:
        for a in self._ancestors(path):
            if a not in self.entries:
                return PathNotFoundError
            if not self.entries[a].is_dir:
                return ParentNotDirectoryError
        return None

    def _touch(self, directory: str, mtime_ms: int) -> None:
        entry = self.entries[directory]
        entry.mtime_ms = max(entry.mtime_ms, mtime_ms)

    def _under(self, path: str) -> list[str]:
        return [p for p in self.entries if paths.is_ancestor(path, p)]

    def mkdir(self, path: str, parents: bool, mtime_ms: int, permission: int, owner: str,
              group: str) -> bool:
        if path in self.entries:
            if self.entries[path].is_dir and parents:
                return True
            raise PathExistsError
        missing = []
        for a in self._ancestors(path):
            if a in self.entries:
                if not self.entries[a].is_dir:
                    raise ParentNotDirectoryError
                continue
            if not parents:
                raise PathNotFoundError
            missing.append(a)
        missing.append(path)
        self._touch(paths.parent(missing[0]) or "/", mtime_ms)
        for p in missing:
            perm = permission if p == path else permission | 0o300
            self.entries[p] = _Entry(True, mtime_ms, perm, owner, group)
        return True

    def create(self, path: str, overwrite: bool, mtime_ms: int, permission: int, owner: str,
               group: str, length: int, replication: int) -> StatInfo:
        if path in self.entries:
            if self.entries[path].is_dir:
                raise PathIsDirectoryError
            if not overwrite:
                raise PathExistsError
        else:
            error = self._parent_error(path)
            if error is not None:
                raise error
        self.entries[path] = _Entry(False, mtime_ms, permission, owner, group, length, replication)
        self._touch(paths.parent(path) or "/", mtime_ms)
        return StatInfo(path, False, length, mtime_ms, permission, owner, group, replication, 0)

    def delete(self, path: str, recursive: bool, mtime_ms: int) -> bool:
        if path == "/":
            raise InvalidOperationError
        if path not in self.entries:
            raise PathNotFoundError
        below = self._under(path)
        if below and not recursive:
            raise DirectoryNotEmptyError
        for p in [*below, path]:
            del self.entries[p]
        self._touch(paths.parent(path) or "/", mtime_ms)
        return True

    def rename(self, src: str, dst: str, mtime_ms: int) -> str:
        if src == "/" or src == dst:
            raise InvalidRenameError
        if src not in self.entries:
            raise PathNotFoundError
        target = dst
        if dst in self.entries and self.entries[dst].is_dir:
            target = paths.join(dst, paths.basename(src))
            if target == src:
                raise InvalidRenameError
        if paths.is_ancestor(src, target):
            raise InvalidRenameError
        if target in self.entries:
            raise PathExistsError
        error = self._parent_error(target)
        if error is not None:
            raise error
        moved = {p: self.entries.pop(p) for p in [src, *self._under(src)]}
        for p, entry in moved.items():
            self.entries[target + p[len(src) :]] = entry
        self._touch(paths.parent(src) or "/", mtime_ms)
        self._touch(paths.parent(target) or "/", mtime_ms)
        return target


@dataclass(frozen=True)
class Call:
    """One client call: which operation, its arguments, and whether a path is malformed."""

    kind: str
    args: dict[str, Any]
    bad_path: bool = False
    client_id: bytes = b""
    call_id: int = 0

    def path(self) -> str:
        return str(self.args.get("path", self.args.get("src")))


@dataclass
class Workload:
    """The state of a run: the model, the clock, the call numbers, and what was logged."""

    rng: random.Random
    model: ModelNamespace = field(default_factory=ModelNamespace)
    mtime_ms: int = 1000
    call_ids: dict[bytes, int] = field(default_factory=dict)
    ops: list[edits_pb2.EditOp] = field(default_factory=list)
    answers: dict[tuple[bytes, int], object] = field(default_factory=dict)
    refused: int = 0

    def random_path(self) -> str:
        rng = self.rng
        existing = list(self.model.entries)
        if rng.random() < 0.6:
            base = rng.choice(existing)
            if rng.random() < 0.5 or base == "/":
                return paths.join(base, rng.choice(NAMES))
            return base
        return "/" + "/".join(rng.choice(NAMES) for _ in range(rng.randint(1, 4)))

    def next_call(self) -> Call:
        rng = self.rng
        self.mtime_ms = max(0, self.mtime_ms + rng.randint(-5, 20))
        kind = rng.choices(["mkdir", "create", "delete", "rename"], [4, 4, 1, 3])[0]
        args: dict[str, Any]
        if kind == "mkdir":
            args = {"path": self.random_path(), "parents": rng.random() < 0.5,
                    "permission": rng.choice([0o755, 0o700, 0o511]),
                    "owner": rng.choice(OWNERS), "group": "g"}
        elif kind == "create":
            args = {"path": self.random_path(), "overwrite": rng.random() < 0.3,
                    "permission": rng.choice([0o644, 0o600]), "owner": rng.choice(OWNERS),
                    "group": "g", "length": rng.randint(0, 1 << 40),
                    "replication": rng.randint(1, 5)}
        elif kind == "delete":
            args = {"path": self.random_path(), "recursive": rng.random() < 0.25}
        else:
            args = {"src": self.random_path(), "dst": self.random_path()}
        if kind == "delete" and rng.random() < 0.02:
            args["path"] = "/"
        args["mtime_ms"] = self.mtime_ms
        bad = rng.random() < 0.03
        if bad:
            args["src" if kind == "rename" else "path"] = rng.choice(BAD_PATHS)
        client_id = rng.choice(CLIENTS)
        call_id = self.call_ids.get(client_id, 0) + 1
        self.call_ids[client_id] = call_id
        return Call(kind, args, bad, client_id, call_id)


def expected_answer(model: ModelNamespace, call: Call) -> object:
    """The model's answer, or the class of the error it expects."""
    if call.bad_path:
        return InvalidPathError
    a = call.args
    try:
        if call.kind == "mkdir":
            return model.mkdir(a["path"], a["parents"], a["mtime_ms"], a["permission"],
                               a["owner"], a["group"])
        if call.kind == "create":
            return model.create(a["path"], a["overwrite"], a["mtime_ms"], a["permission"],
                                a["owner"], a["group"], a["length"], a["replication"])
        if call.kind == "delete":
            return model.delete(a["path"], a["recursive"], a["mtime_ms"])
        return model.rename(a["src"], a["dst"], a["mtime_ms"])
    except NamenodeError as exc:
        return type(exc)


def prepare(ns: Namespace, call: Call) -> edits_pb2.EditOp | None:
    method: Callable[..., edits_pb2.EditOp | None] = getattr(ns, f"prepare_{call.kind}")
    return method(**call.args, client_id=call.client_id, call_id=call.call_id)


def run_workload(
    ns: Namespace, work: Workload, steps: int, check: Callable[[str], None] | None = None
) -> None:
    """Play ``steps`` calls on ``ns`` the active's way, checking each against the model.

    Logged ops get consecutive txids after ``ns.last_applied_txid`` and are appended to
    ``work.ops``; their answers go to ``work.answers``.
    """
    for step in range(steps):
        call = work.next_call()
        where = f"step {step}: {call.kind} {call.args}"
        before = view_of(ns)
        expected = expected_answer(work.model, call)
        try:
            op = prepare(ns, call)
        except NamenodeError as exc:
            assert isinstance(expected, type), f"{where}: refused ({exc!r}), model: {expected!r}"
            assert type(exc) is expected, f"{where}: {exc!r}, model expects {expected.__name__}"
            shown = repr(call.path())[1:-1] if call.bad_path else call.path()
            assert shown in str(exc), f"{where}: message {str(exc)!r} does not name the path"
            assert view_of(ns) == before, f"{where}: a refused call changed the namespace"
            work.refused += 1
            continue
        assert not isinstance(expected, type), f"{where}: accepted, model: {expected.__name__}"
        if op is None:  # mkdir -p of an existing directory: nothing to log
            assert call.kind == "mkdir" and expected is True, where
            assert view_of(ns) == before
            continue
        op.txid = ns.last_applied_txid + 1
        answer = ns.apply(op)
        assert answer == expected, f"{where}: answered {answer!r}, model {expected!r}"
        work.ops.append(op)
        if call.client_id:
            work.answers[(call.client_id, call.call_id)] = answer
        assert view_of(ns) == work.model.view(), f"{where}: the tree differs from the model"
        dirs = sum(1 for attrs in work.model.view().values() if attrs[0])
        assert (ns.dir_count, ns.inode_count) == (dirs, len(work.model.entries)), where
        if check is not None:
            check(where)
