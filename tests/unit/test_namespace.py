"""Namespace operations one by one: what each does, what each refuses and how it says so.

Every refusal is checked for its exact class (the client maps it back by name) and for a
message that names the path. Every mutation is also checked through prepare + apply, the
active's path, which must give the same tree and the same answer as the direct call.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from hanamenode.errors import (
    DirectoryNotEmptyError,
    EditLogReplayError,
    InvalidArgumentError,
    InvalidOperationError,
    InvalidPathError,
    InvalidRenameError,
    NamenodeError,
    ParentNotDirectoryError,
    PathExistsError,
    PathIsDirectoryError,
    PathNotFoundError,
)
from hanamenode.namespace import (
    DEFAULT_GROUP,
    DEFAULT_OWNER,
    Namespace,
    StatInfo,
    describe_op,
)
from proto import edits_pb2


def tree() -> Namespace:
    """/a/b/f (file, length 5), /a/e (empty dir), /g (file), all at mtime 10."""
    ns = Namespace(root_mtime_ms=1)
    ns.mkdir("/a/b", parents=True, mtime_ms=10)
    ns.mkdir("/a/e", mtime_ms=10)
    ns.create("/a/b/f", mtime_ms=10, length=5)
    ns.create("/g", mtime_ms=10)
    return ns


def paths_of(ns: Namespace) -> list[str]:
    return [s.path for s in ns.snapshot()]


# -- reads -------------------------------------------------------------------------------------


def test_a_new_namespace_holds_only_the_root() -> None:
    ns = Namespace(root_mtime_ms=7)
    assert ns.stat("/") == StatInfo("/", True, 0, 7, 0o755, DEFAULT_OWNER, DEFAULT_GROUP, 0, 0)
    assert ns.list("/") == []
    assert (ns.dir_count, ns.file_count, ns.inode_count) == (1, 0, 1)
    assert ns.last_applied_txid == 0


def test_stat_and_list() -> None:
    ns = tree()
    assert ns.stat("/a/b/f") == StatInfo(
        "/a/b/f", False, 5, 10, 0o644, DEFAULT_OWNER, DEFAULT_GROUP, 3, 0
    )
    assert ns.stat("/a").children_num == 2
    assert [s.path for s in ns.list("/a")] == ["/a/b", "/a/e"]
    assert [s.path for s in ns.list("/")] == ["/a", "/g"]
    assert ns.list("/g") == [ns.stat("/g")]  # a file lists as itself
    assert ns.exists("/a/b") and not ns.exists("/a/x")


def test_list_is_sorted_by_utf8_byte_order() -> None:
    ns = Namespace()
    for name in ["b", "B", "a-", "a", "é", "z", "_"]:
        ns.create("/" + name, mtime_ms=1)
    names = [s.path[1:] for s in ns.list("/")]
    assert names == sorted(names, key=lambda n: n.encode())


@pytest.mark.parametrize("read", ["stat", "list"])
def test_reading_a_missing_path(read: str) -> None:
    ns = tree()
    with pytest.raises(PathNotFoundError, match=r"^no such file or directory: /a/x$"):
        getattr(ns, read)("/a/x")
    with pytest.raises(PathNotFoundError, match=r"/g/x \(/g is a file\)"):
        getattr(ns, read)("/g/x")
    with pytest.raises(InvalidPathError, match="'/a/'"):
        getattr(ns, read)("/a/")


# -- mkdir -------------------------------------------------------------------------------------


def test_mkdir() -> None:
    ns = tree()
    assert ns.mkdir("/a/c", mtime_ms=20, permission=0o700, owner="alice", group="staff")
    assert ns.stat("/a/c") == StatInfo("/a/c", True, 0, 20, 0o700, "alice", "staff", 0, 0)
    assert ns.stat("/a").mtime_ms == 20  # the parent is touched
    assert ns.dir_count == 5


def test_mkdir_parents_creates_every_missing_ancestor_in_one_op() -> None:
    ns = tree()
    op = ns.prepare_mkdir("/a/x/y/z", parents=True, mtime_ms=30, permission=0o700)
    assert op is not None and op.mkdir.create_parent
    op.txid = ns.last_applied_txid + 1
    assert ns.apply(op) is True
    # Implicit parents get u+wx added to the requested permission, the leaf gets it as is.
    assert ns.stat("/a/x").permission == 0o700 | 0o300
    assert ns.stat("/a/x/y").permission == 0o700 | 0o300
    assert ns.stat("/a/x/y/z").permission == 0o700
    assert {ns.stat(p).mtime_ms for p in ("/a", "/a/x", "/a/x/y", "/a/x/y/z")} == {30}
    assert ns.dir_count == 7


def test_mkdir_parents_of_an_existing_directory_is_true_and_logs_nothing() -> None:
    ns = tree()
    before = ns.snapshot()
    assert ns.prepare_mkdir("/a/b", parents=True, mtime_ms=99) is None
    assert ns.mkdir("/a/b", parents=True, mtime_ms=99) is True
    assert ns.mkdir("/", parents=True) is True
    assert ns.snapshot() == before


@pytest.mark.parametrize(
    ("path", "parents", "error", "message"),
    [
        ("/a/b", False, PathExistsError, "cannot create directory /a/b: directory exists"),
        ("/", False, PathExistsError, "cannot create directory /: directory exists"),
        ("/g", False, PathExistsError, "cannot create directory /g: a file exists"),
        ("/g", True, PathExistsError, "cannot create directory /g: a file exists"),
        (
            "/x/y",
            False,
            PathNotFoundError,
            "cannot create directory /x/y: parent directory /x does not exist "
            "(use parents=True to create it)",
        ),
        (
            "/a/x/y/z",
            False,
            PathNotFoundError,
            "cannot create directory /a/x/y/z: parent directory /a/x does not exist",
        ),
        (
            "/g/x",
            False,
            ParentNotDirectoryError,
            "cannot create directory /g/x: /g is a file, not a directory",
        ),
        (
            "/a/b/f/x/y",
            True,
            ParentNotDirectoryError,
            "cannot create directory /a/b/f/x/y: /a/b/f is a file, not a directory",
        ),
        ("/a//b", True, InvalidPathError, "invalid path '/a//b': empty component 2"),
        ("a", True, InvalidPathError, "invalid path 'a': the path must be absolute"),
    ],
)
def test_mkdir_refusals(
    path: str, parents: bool, error: type[NamenodeError], message: str
) -> None:
    assert_refused(
        lambda ns: ns.prepare_mkdir(path, parents=parents, mtime_ms=5),
        lambda ns: ns.mkdir(path, parents=parents, mtime_ms=5),
        error,
        message,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"permission": 0o10000}, "invalid permission 4096"),
        ({"permission": -1}, "invalid permission -1"),
        ({"permission": True}, "invalid permission True"),
        ({"owner": ""}, "invalid owner ''"),
        ({"group": "a\x00b"}, "invalid group 'a\\x00b': contains a NUL"),
        ({"owner": "x" * 256}, "invalid owner 'xxx"),
        ({"mtime_ms": -1}, "invalid mtime_ms -1"),
        ({"mtime_ms": 2**63}, "invalid mtime_ms 9223372036854775808"),
    ],
)
def test_mkdir_argument_refusals(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"mtime_ms": 5, **kwargs}
    assert_refused(
        lambda ns: ns.prepare_mkdir("/new", **args),  # type: ignore[arg-type]
        lambda ns: ns.mkdir("/new", **args),  # type: ignore[arg-type]
        InvalidArgumentError,
        message,
    )


# -- create ------------------------------------------------------------------------------------


def test_create() -> None:
    ns = tree()
    stat = ns.create(
        "/a/e/new", mtime_ms=40, permission=0o600, owner="bob", group="g", length=123,
        replication=2,
    )
    assert stat == StatInfo("/a/e/new", False, 123, 40, 0o600, "bob", "g", 2, 0)
    assert ns.stat("/a/e/new") == stat
    assert ns.stat("/a/e").mtime_ms == 40
    assert ns.file_count == 3


def test_create_overwrite_replaces_the_file() -> None:
    ns = tree()
    stat = ns.create("/a/b/f", overwrite=True, mtime_ms=50, length=1, owner="carol")
    assert ns.stat("/a/b/f") == stat
    assert (stat.length, stat.mtime_ms, stat.owner) == (1, 50, "carol")
    assert ns.file_count == 2


@pytest.mark.parametrize(
    ("path", "overwrite", "error", "message"),
    [
        ("/a/b/f", False, PathExistsError, "cannot create file /a/b/f: file exists"),
        ("/a/b", True, PathIsDirectoryError, "cannot create file /a/b: it is a directory"),
        ("/", True, PathIsDirectoryError, "cannot create file /: it is a directory"),
        (
            "/x/f",
            False,
            PathNotFoundError,
            "cannot create file /x/f: parent directory /x does not exist",
        ),
        (
            "/a/x/y/f",
            False,
            PathNotFoundError,
            "cannot create file /a/x/y/f: parent directory /a/x does not exist",
        ),
        (
            "/g/f",
            False,
            ParentNotDirectoryError,
            "cannot create file /g/f: /g is a file, not a directory",
        ),
        (
            "/a/b/f/x/y",
            True,
            ParentNotDirectoryError,
            "cannot create file /a/b/f/x/y: /a/b/f is a file, not a directory",
        ),
        ("/a/./f", False, InvalidPathError, "invalid path '/a/./f': component 2 is '.'"),
    ],
)
def test_create_refusals(
    path: str, overwrite: bool, error: type[NamenodeError], message: str
) -> None:
    assert_refused(
        lambda ns: ns.prepare_create(path, overwrite=overwrite, mtime_ms=5),
        lambda ns: ns.create(path, overwrite=overwrite, mtime_ms=5),
        error,
        message,
    )


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"length": -1}, "invalid length -1"),
        ({"length": 2**63}, "invalid length 9223372036854775808"),
        ({"replication": 0}, "invalid replication 0: must be an integer in 1..512"),
        ({"replication": 513}, "invalid replication 513"),
        ({"permission": 0o20000}, "invalid permission 8192: must be an integer in 0o0..0o7777"),
    ],
)
def test_create_argument_refusals(kwargs: dict[str, object], message: str) -> None:
    args: dict[str, object] = {"mtime_ms": 5, **kwargs}
    assert_refused(
        lambda ns: ns.prepare_create("/new", **args),  # type: ignore[arg-type]
        lambda ns: ns.create("/new", **args),  # type: ignore[arg-type]
        InvalidArgumentError,
        message,
    )


# -- delete ------------------------------------------------------------------------------------


def test_delete_a_file_and_an_empty_directory() -> None:
    ns = tree()
    assert ns.delete("/g", mtime_ms=60) is True
    assert ns.delete("/a/e", mtime_ms=61) is True
    assert paths_of(ns) == ["/", "/a", "/a/b", "/a/b/f"]
    assert ns.stat("/").mtime_ms == 60
    assert ns.stat("/a").mtime_ms == 61
    assert (ns.dir_count, ns.file_count) == (3, 1)


def test_delete_recursive() -> None:
    ns = tree()
    assert ns.delete("/a", recursive=True, mtime_ms=70) is True
    assert paths_of(ns) == ["/", "/g"]
    assert (ns.dir_count, ns.file_count) == (1, 1)
    assert ns.stat("/").mtime_ms == 70


def test_recursive_delete_of_a_file_or_empty_directory_is_fine() -> None:
    ns = tree()
    assert ns.delete("/g", recursive=True)
    assert ns.delete("/a/e", recursive=True)


@pytest.mark.parametrize(
    ("path", "recursive", "error", "message"),
    [
        ("/", True, InvalidOperationError, "cannot delete the root directory /"),
        ("/", False, InvalidOperationError, "cannot delete the root directory /"),
        (
            "/a",
            False,
            DirectoryNotEmptyError,
            "cannot delete /a: directory is not empty (2 entries; use recursive=True)",
        ),
        ("/x", True, PathNotFoundError, "cannot delete /x: no such file or directory"),
        ("/g/x", True, PathNotFoundError, "cannot delete /g/x: no such file or directory"),
        ("/a/../g", True, InvalidPathError, "invalid path '/a/../g': component 2 is '..'"),
    ],
)
def test_delete_refusals(
    path: str, recursive: bool, error: type[NamenodeError], message: str
) -> None:
    assert_refused(
        lambda ns: ns.prepare_delete(path, recursive=recursive, mtime_ms=5),
        lambda ns: ns.delete(path, recursive=recursive, mtime_ms=5),
        error,
        message,
    )


# -- rename ------------------------------------------------------------------------------------


def test_rename_a_file() -> None:
    ns = tree()
    before = ns.stat("/a/b/f")
    assert ns.rename("/a/b/f", "/a/e/f2", mtime_ms=80) == "/a/e/f2"
    after = ns.stat("/a/e/f2")
    assert after.mtime_ms == before.mtime_ms  # the inode keeps its own mtime
    assert after.length == 5
    assert not ns.exists("/a/b/f")
    assert ns.stat("/a/b").mtime_ms == 80 and ns.stat("/a/e").mtime_ms == 80


def test_rename_a_directory_moves_its_subtree() -> None:
    ns = tree()
    assert ns.rename("/a", "/z", mtime_ms=90) == "/z"
    assert paths_of(ns) == ["/", "/g", "/z", "/z/b", "/z/b/f", "/z/e"]
    assert (ns.dir_count, ns.file_count) == (4, 2)


def test_rename_into_an_existing_directory() -> None:
    ns = tree()
    op = ns.prepare_rename("/g", "/a/e", mtime_ms=91)
    assert op.rename.dst == "/a/e/g"  # the op carries the resolved destination
    assert ns.rename("/g", "/a/e", mtime_ms=91) == "/a/e/g"
    assert ns.exists("/a/e/g")
    assert ns.rename("/a/e/g", "/", mtime_ms=92) == "/g"  # into the root


def test_rename_within_one_directory() -> None:
    ns = tree()
    assert ns.rename("/a/b/f", "/a/b/f2", mtime_ms=93) == "/a/b/f2"
    assert [s.path for s in ns.list("/a/b")] == ["/a/b/f2"]


def test_rename_to_an_ancestor_that_is_not_the_parent() -> None:
    ns = tree()
    assert ns.rename("/a/b/f", "/a", mtime_ms=94) == "/a/f"
    assert ns.rename("/a/b", "/", mtime_ms=95) == "/b"


@pytest.mark.parametrize(
    ("src", "dst", "error", "message"),
    [
        ("/", "/x", InvalidRenameError, "cannot rename / to /x: the root directory cannot"),
        ("/a", "/a", InvalidRenameError, "cannot rename /a to /a: source and destination"),
        ("/g", "/g", InvalidRenameError, "cannot rename /g to /g: source and destination"),
        # /a/b into its own parent /a means /a/b again.
        ("/a/b", "/a", InvalidRenameError, "cannot rename /a/b to /a/b: source and destination"),
        ("/a", "/a/e", InvalidRenameError, "cannot rename /a to /a/e/a: the destination is"),
        ("/a", "/a/x/y", InvalidRenameError, "cannot rename /a to /a/x/y: the destination is"),
        ("/g", "/g/x", InvalidRenameError, "cannot rename /g to /g/x: the destination is"),
        ("/x", "/y", PathNotFoundError, "cannot rename /x to /y: source /x does not exist"),
        ("/g/x", "/y", PathNotFoundError, "cannot rename /g/x to /y: source /g/x does not"),
        ("/g", "/a/b/f", PathExistsError, "cannot rename /g to /a/b/f: destination /a/b/f exists"),
        ("/a/e", "/a/b/f", PathExistsError, "cannot rename /a/e to /a/b/f: destination"),
        (
            "/a/e",
            "/x/y",
            PathNotFoundError,
            "cannot rename /a/e to /x/y: parent directory /x does not exist",
        ),
        (
            "/a/e",
            "/g/y",
            ParentNotDirectoryError,
            "cannot rename /a/e to /g/y: /g is a file, not a directory",
        ),
        ("/a/e", "/x/", InvalidPathError, "invalid path '/x/': trailing '/'"),
        ("/a/e/", "/x", InvalidPathError, "invalid path '/a/e/': trailing '/'"),
    ],
)
def test_rename_refusals(src: str, dst: str, error: type[NamenodeError], message: str) -> None:
    assert_refused(
        lambda ns: ns.prepare_rename(src, dst, mtime_ms=5),
        lambda ns: ns.rename(src, dst, mtime_ms=5),
        error,
        message,
    )


def test_rename_into_a_directory_where_the_name_is_taken() -> None:
    ns = tree()
    ns.create("/a/e/g", mtime_ms=11)
    assert_refused(
        lambda n: n.prepare_rename("/g", "/a/e", mtime_ms=5),
        lambda n: n.rename("/g", "/a/e", mtime_ms=5),
        PathExistsError,
        "cannot rename /g to /a/e/g: destination /a/e/g exists",
        ns=ns,
    )


# -- prepare + apply ---------------------------------------------------------------------------


def test_prepare_does_not_change_the_namespace() -> None:
    ns = tree()
    before = ns.snapshot()
    ops = [
        ns.prepare_mkdir("/a/new/deep", parents=True, mtime_ms=100),
        ns.prepare_create("/a/b/f", overwrite=True, mtime_ms=100, length=0),
        ns.prepare_delete("/a", recursive=True, mtime_ms=100),
        ns.prepare_rename("/a", "/z", mtime_ms=100),
    ]
    assert all(op is not None and op.txid == 0 for op in ops)
    assert ns.snapshot() == before
    assert ns.last_applied_txid == 4


def test_prepared_ops_carry_the_retry_identity() -> None:
    ns = tree()
    op = ns.prepare_delete("/g", mtime_ms=1, client_id=b"cid", call_id=42)
    assert (op.client_id, op.call_id) == (b"cid", 42)
    assert (op.delete.path, op.delete.recursive, op.delete.mtime_ms) == ("/g", False, 1)


MUTATIONS: list[tuple[str, Callable[[Namespace], object], Callable[[Namespace], object]]] = [
    (
        "mkdir",
        lambda ns: ns.mkdir("/a/e/x", mtime_ms=200, permission=0o711, owner="o", group="g"),
        lambda ns: ns.prepare_mkdir("/a/e/x", mtime_ms=200, permission=0o711, owner="o", group="g"),
    ),
    (
        "mkdir -p",
        lambda ns: ns.mkdir("/p/q/r", parents=True, mtime_ms=201),
        lambda ns: ns.prepare_mkdir("/p/q/r", parents=True, mtime_ms=201),
    ),
    (
        "create",
        lambda ns: ns.create("/a/e/n", mtime_ms=202, length=7, replication=1),
        lambda ns: ns.prepare_create("/a/e/n", mtime_ms=202, length=7, replication=1),
    ),
    (
        "create overwrite",
        lambda ns: ns.create("/g", overwrite=True, mtime_ms=203, length=8),
        lambda ns: ns.prepare_create("/g", overwrite=True, mtime_ms=203, length=8),
    ),
    (
        "delete",
        lambda ns: ns.delete("/a", recursive=True, mtime_ms=204),
        lambda ns: ns.prepare_delete("/a", recursive=True, mtime_ms=204),
    ),
    (
        "rename",
        lambda ns: ns.rename("/a/b", "/a/e", mtime_ms=205),
        lambda ns: ns.prepare_rename("/a/b", "/a/e", mtime_ms=205),
    ),
]


@pytest.mark.parametrize(("name", "direct", "prepare"), MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_apply_of_prepare_equals_the_direct_call(
    name: str, direct: Callable[[Namespace], object], prepare: Callable[[Namespace], object]
) -> None:
    direct_ns, logged_ns, replica = tree(), tree(), tree()
    answer = direct(direct_ns)
    op = prepare(logged_ns)
    assert isinstance(op, edits_pb2.EditOp)
    op.txid = 100
    assert logged_ns.apply(op) == answer
    # The op travels as bytes to another NameNode, which applies it to the same result.
    assert replica.apply(edits_pb2.EditOp.FromString(op.SerializeToString())) == answer
    assert logged_ns.snapshot() == direct_ns.snapshot() == replica.snapshot()
    assert logged_ns.last_applied_txid == replica.last_applied_txid == 100
    assert logged_ns.digest() == direct_ns.digest()
    counts = (direct_ns.dir_count, direct_ns.file_count)
    assert (logged_ns.dir_count, logged_ns.file_count) == counts


def test_apply_refuses_an_op_that_does_not_fit_and_changes_nothing() -> None:
    ns = tree()
    before = ns.snapshot()
    op = edits_pb2.EditOp(
        txid=50,
        mkdir=edits_pb2.MkdirOp(path="/x/y", mtime_ms=1, permission=0o755, owner="o", group="g"),
    )
    with pytest.raises(EditLogReplayError) as info:
        ns.apply(op)
    message = str(info.value)
    assert message.startswith("cannot apply txid 50 (txid: 50 mkdir {")
    assert "/x/y" in message and "parent directory /x does not exist" in message
    assert info.value.txid == 50
    assert isinstance(info.value.__cause__, PathNotFoundError)
    assert ns.snapshot() == before
    assert ns.last_applied_txid == 4


def test_apply_refuses_mkdir_parents_of_an_existing_directory() -> None:
    # prepare logs nothing for it, so such an op means the log and the tree disagree.
    ns = tree()
    op = ns.prepare_mkdir("/a/new", parents=True, mtime_ms=1)
    assert op is not None
    op.txid = 6
    ns.apply(op)
    op.txid = 7
    with pytest.raises(EditLogReplayError, match="cannot create directory /a/new: directory"):
        ns.apply(op)


def test_apply_refuses_a_delete_that_found_nothing_and_a_rename_into_a_taken_name() -> None:
    ns = tree()
    delete = edits_pb2.EditOp(txid=6, delete=edits_pb2.DeleteOp(path="/nope", mtime_ms=1))
    with pytest.raises(EditLogReplayError, match="cannot delete /nope"):
        ns.apply(delete)
    # A logged rename names its final destination: an existing directory there is an error,
    # not a move into it.
    rename = edits_pb2.EditOp(txid=6, rename=edits_pb2.RenameOp(src="/g", dst="/a/e"))
    with pytest.raises(EditLogReplayError, match="destination /a/e exists"):
        ns.apply(rename)


def test_apply_refuses_bad_fields_in_a_logged_op() -> None:
    ns = tree()
    op = edits_pb2.EditOp(
        txid=6, create=edits_pb2.CreateOp(path="/n", mtime_ms=1, permission=0o644, owner="o")
    )
    with pytest.raises(EditLogReplayError, match="invalid group ''"):
        ns.apply(op)  # no group, replication 0
    op = edits_pb2.EditOp(txid=6, rename=edits_pb2.RenameOp(src="/g", dst="relative"))
    with pytest.raises(EditLogReplayError, match="invalid path 'relative'"):
        ns.apply(op)


def test_apply_refuses_old_txids_and_empty_ops() -> None:
    ns = tree()
    assert ns.last_applied_txid == 4
    op = edits_pb2.EditOp(txid=4, noop=edits_pb2.NoOp())
    with pytest.raises(EditLogReplayError, match="txid 4: not after the last applied txid 4"):
        ns.apply(op)
    with pytest.raises(EditLogReplayError, match="txid 5: the op is empty"):
        ns.apply(edits_pb2.EditOp(txid=5))
    assert ns.last_applied_txid == 4


def test_segment_markers_and_noops_only_advance_the_txid() -> None:
    ns = tree()
    before = ns.snapshot()
    start = edits_pb2.EditOp(txid=6, start_log_segment=edits_pb2.StartLogSegmentOp())
    assert ns.apply(start) is None
    assert ns.apply(edits_pb2.EditOp(txid=9, noop=edits_pb2.NoOp(payload=b"x"))) is None
    assert ns.apply(edits_pb2.EditOp(txid=10, end_log_segment=edits_pb2.EndLogSegmentOp())) is None
    assert ns.snapshot() == before
    assert ns.last_applied_txid == 10


def test_parent_mtime_only_moves_forward() -> None:
    ns = tree()
    ns.create("/a/e/late", mtime_ms=500)
    ns.create("/a/e/early", mtime_ms=400)  # e.g. the new active's clock is behind
    assert ns.stat("/a/e").mtime_ms == 500
    assert ns.stat("/a/e/early").mtime_ms == 400


def test_default_mtime_comes_from_the_clock() -> None:
    ns = Namespace(clock=lambda: 12345)
    ns.mkdir("/d")
    assert ns.stat("/d").mtime_ms == 12345
    op = ns.prepare_delete("/d")
    assert op.delete.mtime_ms == 12345


def test_describe_op_names_every_field() -> None:
    op = edits_pb2.EditOp(txid=3, rename=edits_pb2.RenameOp(src="/a", dst="/b", mtime_ms=9))
    assert describe_op(op) == 'txid: 3 rename { src: "/a" dst: "/b" mtime_ms: 9 }'


def test_deep_trees_do_not_hit_the_recursion_limit() -> None:
    ns = Namespace()
    deep = "/" + "/".join(["d"] * 1000)
    ns.mkdir(deep, parents=True, mtime_ms=1)
    assert ns.dir_count == 1001
    assert len(ns.snapshot()) == 1001
    ns.delete("/d", recursive=True, mtime_ms=2)
    assert ns.dir_count == 1


# -- helpers -----------------------------------------------------------------------------------


def assert_refused(
    prepare: Callable[[Namespace], object],
    direct: Callable[[Namespace], object],
    error: type[NamenodeError],
    message: str,
    ns: Namespace | None = None,
) -> None:
    """Both the active's prepare and the direct call refuse with exactly ``error`` and a
    message containing ``message``, and leave the namespace as it was."""
    for call in (prepare, direct):
        target = ns or tree()
        before = (target.snapshot(), target.last_applied_txid)
        with pytest.raises(NamenodeError) as info:
            call(target)
        assert type(info.value) is error, f"{type(info.value).__name__}: {info.value}"
        assert message in str(info.value)
        assert (target.snapshot(), target.last_applied_txid) == before
