"""FSImage on real temporary directories: save/load round trips, image + edits, corruption,
retention (docs/protocol.md §7.4, "NameNode").

The namespaces come from the seeded workload of ``tests/unit/namespace_workload.py``; a
failure prints ``seed=N``.
"""

from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import time
from pathlib import Path

import pytest

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


@pytest.mark.parametrize("layout", [2, 3])
def test_the_image_keeps_which_call_made_each_retry_entry(tmp_path: Path, layout: int) -> None:
    """Layout 3 keeps each entry's call, so a call id reused for another call is refused after
    a restart as before it; a layout-2 image (no ``op`` column) still loads and answers."""
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
    if layout == 2:
        _edit_database(
            path,
            "ALTER TABLE retry_cache DROP COLUMN op",
            "UPDATE image_info SET layout_version = 2",
        )
    loaded_cache = RetryCache()
    _, _, info = load_image(path, retry_cache=loaded_cache)
    assert info.layout_version == layout
    entry = loaded_cache.lookup(b"c1", 2, "create")
    assert entry is not None and entry.txid == 2
    if layout == 3:
        assert entry.op == "create"
        with pytest.raises(RetryCallMismatchError, match=r"call id 1 .* was a mkdir"):
            loaded_cache.lookup(b"c1", 1, "delete")
    else:
        assert entry.op == ""
        mkdir_entry = loaded_cache.lookup(b"c1", 1, "delete")
        assert mkdir_entry is not None and mkdir_entry.answer() is True


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


@pytest.mark.parametrize(
    ("statements", "message"),
    [
        (["UPDATE inodes SET parent_id = NULL WHERE id = 2"], "inode 2 is a second root"),
        (["UPDATE inodes SET parent_id = 999 WHERE id = 3"], "inode 3 has parent 999"),
        (["UPDATE inodes SET parent_id = 3 WHERE id = 3"], "inode 3 has parent 3"),
        (["UPDATE inodes SET name = 'x/y' WHERE id = 2"], "inode 2 has an invalid name 'x/y'"),
        (["UPDATE inodes SET name = '' WHERE id = 2"], "inode 2 has an invalid name ''"),
        (["UPDATE inodes SET name = 'b' WHERE id = 2"], "inode 5 repeats the name 'b'"),
        (["DELETE FROM inodes WHERE id = 1"], "inode 2 has parent 1"),
        (["DELETE FROM inodes"], "no root directory"),
        (["DELETE FROM inodes WHERE id = 4"], "4 inodes, image_info says 5"),
        (["UPDATE image_info SET layout_version = 99"], "has layout version 99"),
        (["DELETE FROM image_info"], "has 0 image_info rows, expected 1"),
        (["UPDATE image_info SET txid = 8"], "holds txid 8, not the one in its name"),
        (["DROP TABLE inodes"], "no such table: inodes"),
    ],
)
def test_an_invalid_database_with_a_valid_md5_is_refused(
    tmp_path: Path, statements: list[str], message: str
) -> None:
    ns = Namespace()
    ns.mkdir("/a", mtime_ms=1)  # id 2
    ns.mkdir("/a/d", mtime_ms=1)  # id 3
    ns.create("/a/d/f", mtime_ms=1)  # id 4
    ns.create("/b", mtime_ms=1)  # id 5
    path = save_image(ns, tmp_path, ns.last_applied_txid, NS_INFO)
    _edit_database(path, *statements)
    with pytest.raises(FSImageError) as info:
        load_image(path)
    assert type(info.value) is FSImageError
    assert str(path) in str(info.value)
    assert message in str(info.value)


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


# -- a standby's checkpoint reads the namespace in slices ----------------------------------------


def test_the_sliced_read_is_the_locked_read_and_the_loop_turns_between_slices(
    tmp_path: Path,
) -> None:
    ns, _ = workload_namespace(5)
    for i in range(40):
        ns.mkdir(f"/wide/d{i}", parents=True)
        for j in range(50):
            ns.create(f"/wide/d{i}/f{j}", length=j)
    inodes = len(fsimage.collect_image(ns).rows)
    turns: list[bool] = []  # the namespace's freeze, seen by another task of the loop

    async def other_work(done: asyncio.Event) -> None:
        while not done.is_set():
            turns.append(ns.frozen)
            await asyncio.sleep(0)

    async def checkpoint() -> fsimage.ImageContent:
        done = asyncio.Event()
        task = asyncio.create_task(other_work(done))
        try:
            return await fsimage.collect_image_in_slices(ns, lambda: False, slice_rows=50)
        finally:
            done.set()
            await task

    content = asyncio.run(checkpoint())
    assert content.rows == fsimage.collect_image(ns).rows and content.txid == ns.last_applied_txid
    # The other task ran between the slices, while the tree was held still for the read.
    assert turns.count(True) >= inodes // 50 - 1 > 10
    assert not ns.frozen
    path = fsimage.write_image(content, tmp_path, NS_INFO, now_ms=123)
    loaded, txid, _ = load_image(path)
    assert txid == ns.last_applied_txid and loaded.snapshot() == ns.snapshot()


def test_the_frozen_namespace_refuses_ops_and_a_cancelled_read_thaws_it() -> None:
    ns = Namespace()
    for i in range(300):
        ns.mkdir(f"/d{i}")
    stop = False

    async def read() -> None:
        await fsimage.collect_image_in_slices(ns, lambda: stop, slice_rows=20)

    async def meanwhile() -> None:
        nonlocal stop
        await asyncio.sleep(0)
        assert ns.frozen
        with pytest.raises(EditLogReplayError, match="a checkpoint is reading the namespace"):
            ns.mkdir("/late")
        assert not ns.exists("/late")
        with pytest.raises(FSImageError, match="another checkpoint"):
            await fsimage.collect_image_in_slices(ns, lambda: False)
        stop = True  # the NameNode leaves the standby state

    async def both() -> None:
        reading = asyncio.create_task(read())
        await meanwhile()
        with pytest.raises(CheckpointCancelledError, match="cancelled after 20 rows"):
            await reading

    asyncio.run(both())
    assert not ns.frozen
    assert ns.mkdir("/late") and ns.exists("/late")
