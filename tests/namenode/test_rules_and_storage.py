"""The NameNode's pure HA rules (where the new segment starts, how far a purge may go) and its
name directory (VERSION, lock, images)."""

from __future__ import annotations

from pathlib import Path

import pytest

from hanamenode import fsimage
from hanamenode.errors import CorruptImageError, NameDirError, ServiceFailedError
from hanamenode.ha import min_txid_to_keep, next_segment_txid
from hanamenode.namespace import Namespace
from hanamenode.storage import NameDirectory, format_version, new_namespace_info, parse_version


@pytest.mark.parametrize(
    ("last_applied", "recovered_end", "expected"),
    [
        (0, None, 1),  # freshly formatted: no segments
        (7, 7, 8),  # caught up with the recovered log
        (120, None, 121),  # image at 120, nothing after it on the JournalNodes
    ],
)
def test_next_segment_txid(last_applied: int, recovered_end: int | None, expected: int) -> None:
    assert next_segment_txid(last_applied, recovered_end) == expected


def test_next_segment_txid_refuses_a_namespace_off_the_log() -> None:
    with pytest.raises(ServiceFailedError, match="only txids up to 5"):
        next_segment_txid(5, 9)
    with pytest.raises(ServiceFailedError, match="beyond the end of the recovered log"):
        next_segment_txid(12, 9)


@pytest.mark.parametrize(
    ("images", "expected"),
    [
        ({"nn1": 100, "nn2": 100}, 101),
        ({"nn1": 0, "nn2": 250}, 1),  # the active never got a newer image: keep everything
        ({"nn1": 300, "nn2": 250, "nn3": 90}, 91),  # the lowest newest image wins
        ({"nn1": 300, "nn2": None}, None),  # unknown: purge nothing
        ({}, None),
    ],
)
def test_min_txid_to_keep(images: dict[str, int | None], expected: int | None) -> None:
    assert min_txid_to_keep(images) == expected


def test_version_round_trip_and_errors() -> None:
    info = new_namespace_info()
    assert info.cluster_id.startswith("CID-") and info.namespace_id > 0
    assert parse_version(format_version(info), "VERSION") == info
    with pytest.raises(NameDirError, match="has no clusterID"):
        parse_version("namespaceID=3\n", "VERSION")
    with pytest.raises(NameDirError, match="not key=value"):
        parse_version("garbage\n", "VERSION")
    with pytest.raises(NameDirError, match="layout version 9"):
        parse_version("namespaceID=3\nclusterID=c\nlayoutVersion=9\n", "VERSION")


def test_name_directory_lock_and_images(tmp_path: Path) -> None:
    name_dir = NameDirectory(tmp_path / "nn1")
    with pytest.raises(NameDirError, match="not formatted"):
        name_dir.read_version()
    assert not name_dir.has_data()
    info = new_namespace_info()
    with name_dir.locked():
        with pytest.raises(NameDirError, match="in use by another NameNode"):
            NameDirectory(tmp_path / "nn1").lock()
        name_dir.write_version(info)
        ns = Namespace()
        ns.mkdir("/a/b", parents=True, mtime_ms=5)
        fsimage.save_image(ns, name_dir.path, 1, info)
        ns.mkdir("/c", mtime_ms=6)
        # None: the namespace's own last applied txid, read with the rows.
        image = fsimage.save_image(ns, name_dir.path, None, info)
        assert fsimage.image_txid(image) == ns.last_applied_txid == 2
        loaded, txid, _ = name_dir.load_newest_image()
        assert txid == 2 and loaded.snapshot() == ns.snapshot()
        # A corrupt newest image: the previous one is loaded instead.
        with open(image, "r+b") as f:
            f.seek(200)
            f.write(b"\xff")
        with pytest.raises(CorruptImageError):
            fsimage.verify_md5(image)
        loaded, txid, _ = name_dir.load_newest_image()
        assert txid == 1 and loaded.exists("/a/b") and not loaded.exists("/c")
    NameDirectory(tmp_path / "nn1").lock()  # released


def test_install_image_checks_the_announced_md5(tmp_path: Path) -> None:
    info = new_namespace_info()
    source = fsimage.save_image(Namespace(), tmp_path, 0, info)
    md5 = fsimage.verify_md5(source)
    target = tmp_path / "copy"
    target.mkdir()
    with pytest.raises(CorruptImageError, match="corrupt"):
        fsimage.install_image(target, 0, [source.read_bytes()[:-1]], md5)
    assert list(target.iterdir()) == []
    installed = fsimage.install_image(target, 0, [source.read_bytes()], md5)
    assert fsimage.verify_md5(installed) == md5
