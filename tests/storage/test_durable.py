"""``durable``: the crash-safe helpers and the VERSION file shared by the JournalNode and the
NameNode, on real temporary directories."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from durable import files, version
from hanamenode.errors import NameDirError
from hanamenode.storage import format_version as nn_format
from hanamenode.storage import parse_version as nn_parse
from journalnode import meta_files
from journalnode.errors import InvalidRequestError, StorageError
from proto.values import NamespaceInfo

NS = NamespaceInfo("CID-durable", 42, ctime=7, layout_version=1)


def jn_read(text: str) -> NamespaceInfo | str:
    """What the JournalNode reads from a VERSION text, or "refused"."""
    try:
        return meta_files.parse_version(Path("VERSION"), text.encode())
    except StorageError:
        return "refused"


def nn_read(text: str) -> NamespaceInfo | str:
    try:
        return nn_parse(text, "VERSION")
    except NameDirError:
        return "refused"


BASE = "namespaceID=42\nclusterID=CID-durable\ncTime=7\nlayoutVersion=1\n"


# The two daemons used to parse VERSION with two parsers that disagreed: the JournalNode
# kept blanks after a value ("CID-x " is another cluster), took "!" and indented "#" lines
# as comments (the NameNode refused them), refused a missing cTime, layoutVersion or
# storageType (the NameNode filled in defaults) and accepted namespaceID=0 (the NameNode
# refused it). Each row is read by both, with its own storageType, and must agree.
@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (BASE, NS),
        ("#comment\n" + BASE, NS),
        ("  # indented comment\n! bang comment\n" + BASE, NS),
        (BASE.replace("clusterID=CID-durable", "clusterID = CID-durable  "), NS),
        (BASE.replace("cTime=7\n", ""), "refused"),
        (BASE.replace("layoutVersion=1\n", ""), "refused"),
        (BASE.replace("namespaceID=42", "namespaceID=0"), "refused"),
        (BASE.replace("namespaceID=42", "namespaceID=x"), "refused"),
        (BASE.replace("clusterID=CID-durable", "clusterID="), "refused"),
        ("garbage\n" + BASE, "refused"),
    ],
)
def test_both_daemons_read_a_version_file_alike(text: str, expected: NamespaceInfo | str) -> None:
    assert jn_read(text + "storageType=JOURNAL_NODE\n") == expected
    assert nn_read(text + "storageType=NAME_NODE\n") == expected


def test_each_daemon_refuses_a_version_without_its_storage_type() -> None:
    assert jn_read(BASE) == nn_read(BASE) == "refused"
    assert jn_read(BASE + "storageType=NAME_NODE\n") == "refused"
    assert nn_read(BASE + "storageType=JOURNAL_NODE\n") == "refused"


@pytest.mark.parametrize("cluster_id", ["CID-x", "a=b", "with inner space"])
def test_what_a_daemon_writes_it_reads_back(cluster_id: str) -> None:
    ns = NamespaceInfo(cluster_id, 9, ctime=1, layout_version=1)
    assert meta_files.parse_version(Path("V"), meta_files.version_bytes(ns)) == ns
    assert nn_parse(nn_format(ns), "V") == ns


@pytest.mark.parametrize("cluster_id", ["", " CID", "CID ", "CID\n", "CID\x00"])
def test_a_cluster_id_that_would_not_read_back_is_refused_by_both_writers(
    cluster_id: str,
) -> None:
    ns = NamespaceInfo(cluster_id, 9)
    with pytest.raises(InvalidRequestError, match="invalid cluster id"):
        meta_files.version_bytes(ns)
    with pytest.raises(NameDirError, match="invalid cluster id"):
        nn_format(ns)


def test_version_names_its_source_and_the_missing_key() -> None:
    with pytest.raises(version.VersionFileError, match="/x/VERSION has no cTime"):
        version.parse_version(BASE.replace("cTime=7\n", "").encode(), "/x/VERSION", "T")


# ----------------------------------------------------------------------------- files


def test_atomic_write_replaces_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f"
    files.atomic_write(target, b"one")
    files.atomic_write(target, b"two")
    assert target.read_bytes() == b"two"
    assert os.listdir(tmp_path) == ["f"]


def test_atomic_write_failure_keeps_the_old_content_and_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "f"
    files.atomic_write(target, b"old")

    class Boom(Exception):
        pass

    class Exploding(bytes):
        def __len__(self) -> int:
            raise Boom

    with pytest.raises(Boom):
        files.atomic_write(target, Exploding(b"new"))
    assert target.read_bytes() == b"old"
    assert os.listdir(tmp_path) == ["f"]


def test_temp_names_are_recognized(tmp_path: Path) -> None:
    fd, path = files.open_temp(tmp_path, "VERSION")
    os.close(fd)
    assert files.is_temp_name(path.name)
    assert not files.is_temp_name("VERSION") and not files.is_temp_name(".tmp")


def test_ensure_dir_refuses_a_file_in_the_way(tmp_path: Path) -> None:
    files.ensure_dir(tmp_path / "a" / "b")
    assert (tmp_path / "a" / "b").is_dir()
    (tmp_path / "f").write_bytes(b"")
    with pytest.raises(FileExistsError, match="a file is in the way"):
        files.ensure_dir(tmp_path / "f")


def test_the_lock_excludes_another_process_and_names_it(tmp_path: Path) -> None:
    """flock is per open file description: a second process is refused and told the pid."""
    fd = files.lock_directory(tmp_path)
    try:
        code = textwrap.dedent(
            f"""
            from pathlib import Path
            from durable import files
            try:
                files.lock_directory(Path({str(tmp_path)!r}))
            except files.DirectoryLockedError as exc:
                print(exc.holder)
            """
        )
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
        ).stdout
        assert out.startswith(f"pid {os.getpid()} on ")
    finally:
        os.close(fd)
    fd = files.lock_directory(tmp_path)  # released with its fd: free again
    os.close(fd)
