"""FSImage on real temporary directories: save/load round trips, image + edits, corruption,
retention (docs/protocol.md §7.4, "NameNode").

The namespaces come from the seeded workload of ``tests/unit/namespace_workload.py``; a
failure prints ``seed=N``.
"""

from __future__ import annotations

import array
import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from hadev.daemon import child_environment
from hanamenode import fsimage
from hanamenode.errors import (
    CheckpointCancelledError,
    CorruptImageError,
    EditLogReplayError,
    FSImageError,
    RetryCallMismatchError,
)
from hanamenode.fsimage import (
    IMAGE_LAYOUT_VERSION,
    ImageInfo,
    image_name,
    latest_image,
    list_images,
    load_image,
    md5_path,
    purge_old_images,
    save_image,
)
from hanamenode.namespace import INodeDirectory, INodeFile, Namespace
from hanamenode.retry_cache import RetryCache
from proto.values import NamespaceInfo
from tests.unit.namespace_workload import Workload, run_workload

NS_INFO = NamespaceInfo("CID-image-test", 4242)


def workload_namespace(seed: int, steps: int = 600) -> tuple[Namespace, Workload]:
    print(f"seed={seed}")
    ns = Namespace()
    work = Workload(random.Random(seed))
    run_workload(ns, work, steps)
    return ns, work


def rewrite_md5(image: Path) -> None:
    """Make the md5 file match the image again, after the test edited the database."""
    digest = fsimage._md5_of(image)
    md5_path(image).write_text(f"{digest}  {image.name}\n")


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_save_then_load_gives_the_same_namespace(tmp_path: Path, seed: int) -> None:
    ns, _ = workload_namespace(seed)
    txid = ns.last_applied_txid
    path = save_image(ns, tmp_path, txid, NS_INFO, now_ms=123)
    assert path == tmp_path / f"fsimage_{txid:019d}.db"
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, path.name + ".md5"]
    digest = md5_path(path).read_text()
    assert digest == f"{fsimage._md5_of(path)}  {path.name}\n"  # md5sum's format

    loaded, loaded_txid, info = load_image(path)
    assert loaded_txid == txid == loaded.last_applied_txid
    expected = ImageInfo(txid, 4242, "CID-image-test", IMAGE_LAYOUT_VERSION, 123, ns.inode_count)
    assert info == expected
    assert loaded.snapshot() == ns.snapshot(), f"seed={seed}"
    assert loaded.digest() == ns.digest()
    assert (loaded.dir_count, loaded.file_count) == (ns.dir_count, ns.file_count)


def test_an_empty_namespace_keeps_its_root_attributes(tmp_path: Path) -> None:
    ns = Namespace(root_mtime_ms=77, root_permission=0o711, root_owner="o", root_group="g")
    loaded, txid, info = load_image(save_image(ns, tmp_path, 0, NS_INFO))
    assert txid == 0 and info.inode_count == 1
    assert loaded.snapshot() == ns.snapshot()
    assert loaded.stat("/").permission == 0o711


def test_unusual_names_and_extreme_values_survive(tmp_path: Path) -> None:
    ns = Namespace()
    names = ["日本語", "with space", "quote'\"", "emoji\U0001f642", "nbsp\u00a0x", "é" * 127]
    names += ["-", "a:b"]
    for name in names:
        ns.mkdir("/" + name, mtime_ms=2**63 - 1, permission=0o7777, owner=name, group=name)
        ns.create(f"/{name}/f", mtime_ms=0, length=2**63 - 1, replication=512, owner="x" * 255)
    loaded, _, _ = load_image(save_image(ns, tmp_path, ns.last_applied_txid, NS_INFO))
    assert loaded.snapshot() == ns.snapshot()


@pytest.mark.parametrize("seed", [10, 11, 12])
def test_image_plus_later_edits_equals_the_live_namespace(tmp_path: Path, seed: int) -> None:
    """The checkpoint flow: save at txid N while the active goes on; a NameNode that starts
    from the image and replays N+1.. ends where the active is."""
    live, work = workload_namespace(seed, steps=500)
    image_txid = live.last_applied_txid
    path = save_image(live, tmp_path, image_txid, NS_INFO)
    run_workload(live, work, 500)
    later = [op for op in work.ops if op.txid > image_txid]
    assert later, f"seed={seed}: no ops after the image"

    cache = RetryCache()
    restarted, txid, _ = load_image(path, retry_cache=cache)
    assert txid == image_txid
    for op in later:
        restarted.apply(op)
    assert restarted.snapshot() == live.snapshot(), f"seed={seed}"
    assert restarted.last_applied_txid == live.last_applied_txid
    # The retry cache is not in the image: only the replayed ops have entries.
    expected = {(op.client_id, op.call_id, op.WhichOneof("op")) for op in later if op.client_id}
    assert len(cache) == len(expected)
    assert all(cache.lookup(*key) is not None for key in expected)


def test_the_image_keeps_which_call_made_each_retry_entry(tmp_path: Path) -> None:
    """Since layout 3 the image keeps each entry's call, so a call id reused for another call
    is refused after a restart as before it (layout 2: test_old_layout_images_load)."""
    cache = RetryCache()
    ns = Namespace(retry_cache=cache)
    for txid, prepare in enumerate(
        [
            lambda: ns.prepare_mkdir("/a", mtime_ms=1, client_id=b"c1", call_id=1),
            lambda: ns.prepare_create("/a/f", mtime_ms=2, client_id=b"c1", call_id=2),
        ],
        start=1,
    ):
        op = prepare()
        assert op is not None
        op.txid = txid
        ns.apply(op)
    path = save_image(ns, tmp_path, ns.last_applied_txid, NS_INFO)
    loaded_cache = RetryCache()
    _, _, info = load_image(path, retry_cache=loaded_cache)
    assert info.layout_version == IMAGE_LAYOUT_VERSION
    entry = loaded_cache.lookup(b"c1", 2, "create")
    assert entry is not None and entry.txid == 2
    assert entry.op == "create"
    with pytest.raises(RetryCallMismatchError, match=r"call id 1 .* was a mkdir"):
        loaded_cache.lookup(b"c1", 1, "delete")


def test_a_multis_retry_entry_survives_the_image(tmp_path: Path) -> None:
    """A multi is retry-cached as one call whose answer is the list of its ops' answers; an
    image keeps it, so a NameNode restarted from it answers the multi's retry the same."""
    cache = RetryCache()
    ns = Namespace(retry_cache=cache)
    op = ns.prepare_multi(
        [
            lambda n: n.prepare_mkdir("/m", mtime_ms=1),
            lambda n: n.prepare_create("/m/f", mtime_ms=2, length=7),
            lambda n: n.prepare_mkdir("/m", parents=True, mtime_ms=3),
            lambda n: n.prepare_rename("/m/f", "/m/g", mtime_ms=4),
        ],
        client_id=b"c9",
        call_id=5,
    )
    op.txid = 1
    answer = ns.apply(op)
    path = save_image(ns, tmp_path, ns.last_applied_txid, NS_INFO)
    loaded_cache = RetryCache()
    loaded, _, _ = load_image(path, retry_cache=loaded_cache)
    entry = loaded_cache.lookup(b"c9", 5, "multi")
    assert entry is not None and entry.txid == 1 and entry.op == "multi"
    assert entry.answer() == answer
    assert [type(a).__name__ for a in answer] == ["bool", "StatInfo", "bool", "str"]
    assert loaded.digest() == ns.digest()


def test_a_loaded_image_refuses_edits_it_already_holds(tmp_path: Path) -> None:
    live, work = workload_namespace(20, steps=200)
    loaded, txid, _ = load_image(save_image(live, tmp_path, live.last_applied_txid, NS_INFO))
    with pytest.raises(EditLogReplayError, match=f"not after the last applied txid {txid}"):
        loaded.apply(work.ops[-1])


def test_hundred_thousand_inodes(tmp_path: Path) -> None:
    """Save and load time at 100k inodes (printed, not asserted: see the reply's table)."""
    root = INodeDirectory("", 1, 0o755, "hdfs", "supergroup")
    for d in range(100):
        top = INodeDirectory(f"dir{d:03d}", 2, 0o755, "hdfs", "supergroup")
        root.add_child(top)
        for s in range(10):
            sub = INodeDirectory(f"sub{s}", 3, 0o750, "alice", "staff")
            top.add_child(sub)
            for f in range(99):
                name = f"part-{f:05d}"
                sub.add_child(INodeFile(name, 4 + f, 0o644, "alice", "staff", f << 20, 3))
    ns = Namespace.from_root(root, 1_000_000)
    assert ns.inode_count == 1 + 100 + 1000 + 99_000

    start = time.perf_counter()
    path = save_image(ns, tmp_path, 1_000_000, NS_INFO)
    saved = time.perf_counter()
    loaded, _, info = load_image(path)
    loaded_at = time.perf_counter()
    assert info.inode_count == ns.inode_count
    assert loaded.snapshot() == ns.snapshot()
    size_mb = path.stat().st_size / 1e6
    print(
        f"\n{ns.inode_count} inodes: save {saved - start:.2f} s, load {loaded_at - saved:.2f} s,"
        f" {size_mb:.1f} MB"
    )


# -- refusals ----------------------------------------------------------------------------------


def test_save_refuses_a_txid_below_what_the_namespace_holds(tmp_path: Path) -> None:
    ns, _ = workload_namespace(30, steps=50)
    with pytest.raises(FSImageError, match="the namespace has applied up to txid"):
        save_image(ns, tmp_path, ns.last_applied_txid - 1, NS_INFO)
    assert list(tmp_path.iterdir()) == []


def test_save_refuses_to_replace_an_existing_image(tmp_path: Path) -> None:
    ns = Namespace()
    save_image(ns, tmp_path, 0, NS_INFO)
    with pytest.raises(FSImageError, match="an image for txid 0 already exists"):
        save_image(ns, tmp_path, 0, NS_INFO)


def test_a_failed_save_leaves_no_image_and_no_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ns, _ = workload_namespace(31, steps=50)

    def broken_md5(path: Path, data: bytes) -> None:
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(fsimage, "atomic_write", broken_md5)
    with pytest.raises(OSError, match="No space left"):
        save_image(ns, tmp_path, ns.last_applied_txid, NS_INFO)
    assert list(tmp_path.iterdir()) == []
    assert latest_image(tmp_path) is None


def test_a_temp_left_by_a_crashed_save_is_replaced(tmp_path: Path) -> None:
    ns = Namespace()
    (tmp_path / (image_name(0) + ".tmp")).write_bytes(b"half a database")
    path = save_image(ns, tmp_path, 0, NS_INFO)
    assert load_image(path)[0].snapshot() == ns.snapshot()
    assert not (tmp_path / (image_name(0) + ".tmp")).exists()


@pytest.mark.parametrize("where", [0, 100, 0.5, -1])
def test_a_flipped_byte_is_a_corrupt_image(tmp_path: Path, where: float) -> None:
    ns, _ = workload_namespace(40, steps=300)
    path = save_image(ns, tmp_path, ns.last_applied_txid, NS_INFO)
    data = bytearray(path.read_bytes())
    offset = int(len(data) * where) if isinstance(where, float) else where % len(data)
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptImageError) as info:
        load_image(path)
    message = str(info.value)
    assert str(path) in message and "is corrupt: its md5 is" in message
    assert md5_path(path).name in message


def test_a_missing_or_malformed_md5_file_is_a_corrupt_image(tmp_path: Path) -> None:
    path = save_image(Namespace(), tmp_path, 0, NS_INFO)
    md5 = md5_path(path)
    good = md5.read_text()

    md5.write_text("not an md5\n")
    with pytest.raises(CorruptImageError, match=f"md5 file {md5} is malformed"):
        load_image(path)

    md5.write_text(good.replace(path.name, "fsimage_0000000000000000009.db"))
    with pytest.raises(CorruptImageError, match=r"is for 'fsimage_0000000000000000009\.db'"):
        load_image(path)

    md5.unlink()
    with pytest.raises(CorruptImageError, match=f"image {path} has no md5 file"):
        load_image(path)


def _edit_database(path: Path, *statements: str) -> None:
    conn = sqlite3.connect(path)
    with conn:
        for statement in statements:
            conn.execute(statement)
    conn.close()
    rewrite_md5(path)


def assert_refused(path: Path, message: str) -> None:
    """Loading ``path`` is a plain FSImageError naming the file and saying ``message``."""
    with pytest.raises(FSImageError) as info:
        load_image(path)
    assert type(info.value) is FSImageError
    assert str(path) in str(info.value) and message in str(info.value)


def _small_namespace() -> Namespace:
    ns = Namespace()
    ns.mkdir("/a", mtime_ms=1)  # inode 1 in pre-order (the root is 0)
    ns.mkdir("/a/d", mtime_ms=1)  # 2
    ns.create("/a/d/f", mtime_ms=1)  # 3
    ns.create("/b", mtime_ms=1)  # 4
    return ns


def _edit_section(path: Path, **columns: bytes) -> None:
    """Replace columns of the image's first section (``_section_columns`` gives them)."""
    conn = sqlite3.connect(path)
    with conn:
        for column, value in columns.items():
            conn.execute(f"UPDATE inode_sections SET {column} = ? WHERE seq = 0", (value,))
    conn.close()
    rewrite_md5(path)


def _section_columns(path: Path) -> dict[str, Any]:
    conn = sqlite3.connect(path)
    kinds, names, mtimes, attrs, sizes = conn.execute(
        "SELECT kinds, names, mtimes, attrs, sizes FROM inode_sections WHERE seq = 0"
    ).fetchone()
    conn.close()
    return {
        "kinds": bytearray(kinds),
        "names": bytes(names).decode().split("\0"),
        "mtimes": array.array("q", mtimes),
        "attrs": array.array("I", attrs),
        "sizes": array.array("q", sizes),
    }


def _names(names: list[str]) -> bytes:
    return "\0".join(names).encode()


def _with(values: list[str], index: int, value: str) -> list[str]:
    return [*values[:index], value, *values[index + 1 :]]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda c: {"names": _names(_with(c["names"], 2, "x/y"))}, "inode 2 has a name with a '/'"),
        (lambda c: {"names": _names(_with(c["names"], 2, ""))}, "inode 2 has an invalid name ''"),
        (lambda c: {"names": _names(_with(c["names"], 2, ".."))}, "invalid name '..'"),
        (lambda c: {"names": _names(_with(c["names"], 4, "a"))},
         "inode 4 repeats or misorders the name 'a'"),
        (lambda c: {"names": _names(_with(c["names"], 0, "r"))},
         "inode 0 is the root but not an unnamed directory"),
        (lambda c: {"kinds": b"\x00" + bytes(c["kinds"][1:])},
         "inode 0 is the root but not an unnamed directory"),
        (lambda c: {"sizes": array.array("q", [1, *c["sizes"][1:]]).tobytes()},
         "inode 4 is beyond the tree"),
        (lambda c: {"sizes": array.array("q", [3, *c["sizes"][1:]]).tobytes()},
         "directories count more children than it holds"),
        (lambda c: {"attrs": array.array("I", [9, *c["attrs"][1:]]).tobytes()},
         "names an attribute id above"),
        (lambda c: {"mtimes": c["mtimes"][:-1].tobytes()}, "columns of different lengths"),
    ],
)
def test_an_invalid_tree_with_a_valid_md5_is_refused(
    tmp_path: Path, edit: Callable[[dict[str, Any]], dict[str, bytes]], message: str
) -> None:
    path = save_image(_small_namespace(), tmp_path, 4, NS_INFO)
    _edit_section(path, **edit(_section_columns(path)))
    assert_refused(path, message)


@pytest.mark.parametrize(
    ("statements", "message"),
    [
        (["DELETE FROM inode_sections"], "no root directory"),
        (["UPDATE image_info SET inode_count = 6"], "5 inodes, image_info says 6"),
        (["UPDATE image_info SET layout_version = 99"], "has layout version 99"),
        (["DELETE FROM image_info"], "has 0 image_info rows, expected 1"),
        (["UPDATE image_info SET txid = 8"], "holds txid 8, not the one in its name"),
        (["UPDATE inode_attrs SET id = 5 WHERE id = 1"], "inode_attrs ids skip 1"),
        (["DROP TABLE inode_sections"], "no such table: inode_sections"),
    ],
)
def test_an_invalid_database_with_a_valid_md5_is_refused(
    tmp_path: Path, statements: list[str], message: str
) -> None:
    path = save_image(_small_namespace(), tmp_path, 4, NS_INFO)
    _edit_database(path, *statements)
    assert_refused(path, message)


def test_a_namespace_in_many_sections_round_trips(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Sections end anywhere in the tree: the loader carries the open directories over."""
    monkeypatch.setattr(fsimage, "SECTION_INODES", 7)
    ns, _ = workload_namespace(6)
    for i in range(30):
        ns.create(f"/wide/f{i:02d}" if i else "/wide-file", length=i)
        if i == 0:
            ns.mkdir("/wide")
    path = save_image(ns, tmp_path, ns.last_applied_txid, NS_INFO)
    conn = sqlite3.connect(path)
    [(sections,)] = conn.execute("SELECT count(*) FROM inode_sections").fetchall()
    conn.close()
    assert sections == -(-ns.inode_count // 7) > 5
    loaded, _, _ = load_image(path)
    assert loaded.digest() == ns.digest()


# -- old layouts -------------------------------------------------------------------------------

LAYOUT3_FIXTURE = Path(__file__).parent / "fixtures" / "fsimage_layout3"


def _layout3_copy(tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """The layout-3 image made by the code before layout 4 (see its expected.json)."""
    expected = json.loads((LAYOUT3_FIXTURE / "expected.json").read_text())
    name = image_name(expected["txid"])
    for suffix in ("", ".md5"):
        shutil.copy(LAYOUT3_FIXTURE / (name + suffix), tmp_path / (name + suffix))
    return tmp_path / name, expected


@pytest.mark.parametrize("layout", [2, 3])
def test_old_layout_images_load(tmp_path: Path, layout: int) -> None:
    """A layout-3 image written by the old code loads to the same namespace, with its retry
    entries; made into a layout-2 image (no ``op`` column) its entries load without a call
    name and are answered as before."""
    path, expected = _layout3_copy(tmp_path)
    if layout == 2:
        _edit_database(
            path,
            "ALTER TABLE retry_cache DROP COLUMN op",
            "UPDATE image_info SET layout_version = 2",
        )
    cache = RetryCache()
    loaded, txid, info = load_image(path, retry_cache=cache)
    assert (info.layout_version, txid, info.inode_count) == (
        layout, expected["txid"], expected["inode_count"]
    )
    assert loaded.digest() == expected["digest"]
    assert len(cache) == expected["retry_entries"]
    entry = cache.lookup(b"fixture-client", 9, "create")
    assert entry is not None and entry.op == ("create" if layout == 3 else "")
    # Saved again, it is a layout-4 image of the same namespace.
    (tmp_path / "new").mkdir()
    again, _, info = load_image(save_image(loaded, tmp_path / "new", None, NS_INFO))
    assert info.layout_version == IMAGE_LAYOUT_VERSION and again.digest() == expected["digest"]


@pytest.mark.parametrize(
    ("statements", "message"),
    [
        (["UPDATE inodes SET parent_id = NULL WHERE id = 2"], "inode 2 is a second root"),
        (["UPDATE inodes SET parent_id = 999 WHERE id = 3"], "inode 3 has parent 999"),
        (["UPDATE inodes SET parent_id = 3 WHERE id = 3"], "inode 3 has parent 3"),
        (["UPDATE inodes SET name = 'x/y' WHERE id = 2"], "inode 2 has an invalid name 'x/y'"),
        (["UPDATE inodes SET name = '' WHERE id = 2"], "inode 2 has an invalid name ''"),
        (["UPDATE inodes SET name = 'b' WHERE id = 9"], "inode 9 repeats the name 'b'"),
        (["DELETE FROM inodes WHERE id = 1"], "inode 2 has parent 1"),
        (["DELETE FROM inodes"], "no root directory"),
        (["DROP TABLE inodes"], "no such table: inodes"),
    ],
)
def test_an_invalid_old_layout_image_is_refused(
    tmp_path: Path, statements: list[str], message: str
) -> None:
    path, _ = _layout3_copy(tmp_path)
    conn = sqlite3.connect(path)
    siblings = conn.execute("SELECT parent_id, name FROM inodes WHERE id IN (8, 9)").fetchall()
    conn.close()
    assert siblings == [(2, "b"), (2, "c")], "the fixture's inodes 8 and 9 are /a/b and /a/c"
    _edit_database(path, *statements)
    assert_refused(path, message)


# -- listing and retention ---------------------------------------------------------------------


def test_latest_image(tmp_path: Path) -> None:
    assert latest_image(tmp_path) is None
    ns = Namespace()
    for txid in (0, 12, 7):
        save_image(ns, tmp_path, txid, NS_INFO)
    (tmp_path / (image_name(99) + ".tmp")).write_bytes(b"in progress")
    (tmp_path / "VERSION").write_text("x")
    assert [txid for txid, _ in list_images(tmp_path)] == [0, 7, 12]
    assert latest_image(tmp_path) == tmp_path / image_name(12)


def test_purge_keeps_the_newest_images(tmp_path: Path) -> None:
    ns = Namespace()
    for txid in (10, 20, 30, 40, 50):
        save_image(ns, tmp_path, txid, NS_INFO)
    # Leftovers of crashed saves: an md5 without its image, temps old and new.
    (tmp_path / (image_name(15) + ".md5")).write_text("orphan")
    (tmp_path / (image_name(25) + ".tmp")).write_bytes(b"stale")
    (tmp_path / (image_name(60) + ".tmp")).write_bytes(b"a save in progress")
    (tmp_path / "VERSION").write_text("not an image file")

    removed = purge_old_images(tmp_path, keep=2)
    assert sorted(p.name for p in removed) == sorted(
        [
            image_name(10), image_name(10) + ".md5",
            image_name(15) + ".md5",
            image_name(20), image_name(20) + ".md5",
            image_name(25) + ".tmp",
            image_name(30), image_name(30) + ".md5",
        ]
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        [
            "VERSION",
            image_name(40), image_name(40) + ".md5",
            image_name(50), image_name(50) + ".md5",
            image_name(60) + ".tmp",
        ]
    )
    assert purge_old_images(tmp_path, keep=2) == []
    assert [load_image(p)[1] for _, p in list_images(tmp_path)] == [40, 50]


def test_purge_with_fewer_images_than_kept_removes_nothing(tmp_path: Path) -> None:
    save_image(Namespace(), tmp_path, 1, NS_INFO)
    assert purge_old_images(tmp_path, keep=3) == []
    assert len(os.listdir(tmp_path)) == 2


def test_purge_must_keep_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="must keep at least one image"):
        purge_old_images(tmp_path, keep=0)


# -- a checkpoint written by a forked child -----------------------------------------------------


def test_a_forked_save_writes_the_namespace_as_it_was_at_the_fork(tmp_path: Path) -> None:
    """The parent goes on changing its namespace while the child writes: the image holds the
    tree at the fork, at that txid, and the parent's later changes are not in it."""
    cache = RetryCache()
    ns = Namespace(retry_cache=cache)
    work = Workload(random.Random(5))
    run_workload(ns, work, 400)
    at_fork, txid = ns.digest(), ns.last_applied_txid
    save = fsimage.fork_save_image(ns, tmp_path, NS_INFO, now_ms=123)
    assert save.txid == txid and save.pid != os.getpid()
    assert save.fork_seconds > 0 and save.fork_cpu_seconds > 0
    for i in range(200):
        ns.mkdir(f"/after-fork/d{i}", parents=True)
    path = save.wait(lambda: False)
    assert path == tmp_path / image_name(txid)
    assert not list(tmp_path.glob("*.tmp"))
    loaded_cache = RetryCache()
    loaded, loaded_txid, info = load_image(path, retry_cache=loaded_cache)
    assert (loaded_txid, info.created_ms) == (txid, 123)
    assert loaded.digest() == at_fork != ns.digest()
    assert len(loaded_cache) == len(cache.logged_entries(txid)) > 0
    with pytest.raises(FSImageError, match="already waited for"):
        save.wait(lambda: False)


def test_a_cancelled_forked_save_kills_its_child_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    slow = fsimage._sections

    def sections_slowly(*args: Any) -> Iterator[dict[str, Any]]:
        time.sleep(30)  # in the child only: it is killed long before
        yield from slow(*args)

    monkeypatch.setattr(fsimage, "_sections", sections_slowly)
    ns = Namespace()
    ns.mkdir("/a")
    save = fsimage.fork_save_image(ns, tmp_path, NS_INFO)
    began = time.monotonic()
    asks: list[float] = []

    def should_stop() -> bool:
        asks.append(time.monotonic())
        return len(asks) >= 3

    with pytest.raises(CheckpointCancelledError, match=f"child \\(pid {save.pid}\\)"):
        save.wait(should_stop, poll=0.05)
    assert time.monotonic() - began < 10
    with pytest.raises(ChildProcessError):
        os.waitpid(save.pid, os.WNOHANG)  # killed and reaped already
    assert list(tmp_path.iterdir()) == []


def test_a_child_that_fails_is_an_image_error_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*args: Any) -> Iterator[dict[str, Any]]:
        raise OSError(28, "No space left on device")
        yield {}

    monkeypatch.setattr(fsimage, "_sections", broken)
    save = fsimage.fork_save_image(Namespace(), tmp_path, NS_INFO)
    with pytest.raises(FSImageError, match=r"exited with 1: OSError: \[Errno 28\] No space left"):
        save.wait(lambda: False)
    assert list(tmp_path.iterdir()) == []


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie waiting for a parent that does not reap is not)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_the_writer_child_dies_with_the_thread_that_forked_it(tmp_path: Path) -> None:
    """A NameNode killed while its checkpoint is written leaves no writer behind: the child
    asked for SIGKILL when the forking thread ends (PR_SET_PDEATHSIG)."""
    script = f"""
import time
from pathlib import Path
from hanamenode import fsimage
from hanamenode.namespace import Namespace
from proto.values import NamespaceInfo
sections = fsimage._sections
def slowly(*args):
    time.sleep(60)
    yield from sections(*args)
fsimage._sections = slowly
save = fsimage.fork_save_image(Namespace(), Path({str(tmp_path)!r}), NamespaceInfo("c", 1))
print(save.pid, flush=True)
time.sleep(1)
"""
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
        env=child_environment(),
    )
    assert done.returncode == 0, done.stderr
    child = int(done.stdout.split()[0])
    deadline = time.monotonic() + 10
    while _running(child):
        assert time.monotonic() < deadline, f"the writer {child} outlived its parent"
        time.sleep(0.05)
