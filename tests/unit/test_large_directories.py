"""Large directories (issue 27 item 4): a directory's children are a list sorted by name,
searched by bisect (HDFS's INodeDirectory layout), so a listing page is a slice and a stat a
binary search. Children made in any order list in name order, page by page, with none missed
or repeated; deletes, renames and a refused multi keep the order.

The million-child directory and the million-inode image round trip are opt-in (``--soak``):
about a minute on the shared machine. A seeded test prints ``seed=N``.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from hanamenode import fsimage
from hanamenode.errors import PathExistsError
from hanamenode.namespace import Namespace
from proto.values import NamespaceInfo

NS_INFO = NamespaceInfo("CID-large-dirs", 27)


def every_page(ns: Namespace, path: str, limit: int) -> list[str]:
    """The names of ``path``'s children, asked page by page as a client does."""
    names: list[str] = []
    after = ""
    while True:
        page, more = ns.list_page(path, start_after=after, limit=limit)
        names += [s.path.rsplit("/", 1)[1] for s in page]
        if not more:
            return names
        after = names[-1]


@pytest.mark.parametrize("seed", [0, 1])
def test_children_made_in_any_order_list_in_name_order_page_by_page(seed: int) -> None:
    print(f"seed={seed}")
    rng = random.Random(seed)
    names = [f"f{i:05d}" for i in range(5000)] + ["é", "Z", "a b", "\U0001f642"]
    rng.shuffle(names)
    ns = Namespace()
    ns.mkdir("/big")
    for name in names:
        ns.create(f"/big/{name}", mtime_ms=1)
    # Code point order is UTF-8 byte order, as HDFS lists.
    expected = sorted(names, key=lambda n: n.encode("utf-8"))
    assert sorted(names) == expected
    assert every_page(ns, "/big", 333) == expected == [s.path[5:] for s in ns.list("/big")]
    gone = rng.sample(names, 500)
    for name in gone:
        ns.delete(f"/big/{name}")
    moved = rng.sample(sorted(set(names) - set(gone)), 200)
    for name in moved:
        ns.rename(f"/big/{name}", f"/big/{name}-moved")
    left = sorted((set(names) - set(gone) - set(moved)) | {f"{n}-moved" for n in moved})
    assert every_page(ns, "/big", 1000) == left
    for name in rng.sample(left, 100):
        assert ns.stat(f"/big/{name}").path == f"/big/{name}"
    assert not ns.exists("/big/" + gone[0])
    assert ns.stat("/big").children_num == len(left)


def test_a_refused_multi_puts_every_child_back_in_its_place() -> None:
    ns = Namespace()
    ns.mkdir("/d")
    for i in range(0, 100, 2):
        ns.create(f"/d/f{i:03d}", mtime_ms=1)
    before = ns.snapshot()
    with pytest.raises(PathExistsError, match="multi op 3 of 4 refused"):
        ns.multi([
            lambda n: n.prepare_create("/d/f051", mtime_ms=2),
            lambda n: n.prepare_rename("/d/f010", "/d/f011", mtime_ms=2),
            lambda n: n.prepare_delete("/d/f020", mtime_ms=2),
            lambda n: n.prepare_create("/d/f000", mtime_ms=2),
        ])
    assert ns.snapshot() == before


@pytest.mark.slow
def test_a_directory_of_a_million_children_and_its_image(tmp_path: Path) -> None:
    """One directory of 1,000,000 children beside 1,000 directories of 1,000 files: created,
    listed page by page, stat'ed; saved and loaded, the namespace's digest is unchanged."""
    ns = Namespace()
    ns.mkdir("/big")
    for i in range(1_000_000):
        ns.create(f"/big/f{i:07d}", mtime_ms=1_795_000_000_000 + i)
    for d in range(1000):
        ns.mkdir(f"/d{d:04d}", mtime_ms=1)
        for f in range(1000):
            ns.create(f"/d{d:04d}/f{f:04d}", mtime_ms=2)
    names = every_page(ns, "/big", 1000)
    assert names == [f"f{i:07d}" for i in range(1_000_000)]
    page, more = ns.list_page("/big", start_after="f0499999", limit=2)
    assert [s.path for s in page] == ["/big/f0500000", "/big/f0500001"] and more
    assert ns.stat("/big/f0999999").mtime_ms == 1_795_000_000_000 + 999_999
    assert ns.inode_count == 2_001_002
    digest = ns.digest()
    loaded, _, _ = fsimage.load_image(fsimage.save_image(ns, tmp_path, None, NS_INFO))
    assert loaded.digest() == digest
    assert (loaded.dir_count, loaded.file_count) == (ns.dir_count, ns.file_count)
