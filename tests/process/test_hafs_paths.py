"""``hafs`` takes paths as ``hdfs dfs`` does (issue 28 item 3), through the real ``hafs``
console script against real NameNode processes (``hadev.namenodes``, as
``test_hafs_shell.py``): a trailing '/', '//', '.' and '..' are normalized by the shell; the
NameNode itself still refuses them (docs/operations.md §11, §11.1); tab completion lists the
namespace and puts a '/' after directories only."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import HaFsClient
from hanamenode.errors import InvalidPathError
from hanamenode.ha import HAState

pytestmark = pytest.mark.timeout(240)

HAFS = str(Path(sys.executable).parent / "hafs")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NameNodeProcessCluster]:
    with NameNodeProcessCluster(tmp_path_factory.mktemp("hafs-paths")) as c:
        assert c.state("nn1") is HAState.STANDBY and c.state("nn2") is HAState.STANDBY
        c.transition_to_active("nn1")
        yield c


def hafs(
    c: NameNodeProcessCluster, *args: str, env: dict[str, str] | None = None
) -> tuple[int, str, str]:
    result = subprocess.run(
        [HAFS, "--conf", str(c.conf_path), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )
    return result.returncode, result.stdout, result.stderr


def ok(c: NameNodeProcessCluster, *args: str) -> str:
    code, out, err = hafs(c, *args)
    assert (code, err) == (0, ""), (args, code, out, err)
    return out


def complete(c: NameNodeProcessCluster, *words: str) -> list[str]:
    """What ``hafs --conf C WORDS...<TAB>`` offers, through click's bash protocol."""
    line = ["hafs", "--conf", str(c.conf_path), *words]
    code, out, err = hafs(
        c,
        env={
            "_HAFS_COMPLETE": "bash_complete",
            "COMP_WORDS": " ".join(line),
            "COMP_CWORD": str(len(line) - 1),
        },
    )
    assert (code, err) == (0, ""), (words, code, out, err)
    return [line for line in out.splitlines() if line]


def test_paths_as_hdfs_dfs_takes_them(cluster: NameNodeProcessCluster) -> None:
    c = cluster
    assert ok(c, "mkdir", "-p", "/user/alice/", "//b//") == ""
    assert ok(c, "touchz", "/user/./alice/f1") == ""
    with HaFsClient(c.settings()) as fs:
        assert [st.path for st in fs.list("/")] == ["/b", "/user"]
        assert [st.path for st in fs.list("/user/alice")] == ["/user/alice/f1"]
        # The NameNode's own rule is unchanged: one spelling of each path.
        for bad in ("/user/", "//b", "/user/./alice", "/user/alice/.."):
            with pytest.raises(InvalidPathError):
                fs.stat(bad)

    # ls of a directory with a trailing '/' lists it under its one spelling.
    listing = ok(c, "ls", "/user/alice/").splitlines()
    assert listing[0] == "Found 1 items" and listing[1].endswith(" /user/alice/f1")
    assert ok(c, "ls", "-d", "/user//alice/./").splitlines()[0].endswith(" /user/alice")
    # mv into a directory given with a trailing '/', as `hdfs dfs -mv /a/f1 /b/`.
    assert ok(c, "mv", "/user/alice/f1", "/b/") == ""
    assert ok(c, "stat", "%n", "/b/f1", "/user/alice/../../b/f1/") == "f1\nf1\n"
    assert hafs(c, "test", "-d", "/b/")[0] == 0
    assert ok(c, "rm", "/b/./f1") == "Deleted /b/f1\n"
    # An error names the path in its one spelling; a '..' above the root is the NameNode's
    # refusal.
    assert hafs(c, "ls", "/nope/") == (1, "", "ls: `/nope': No such file or directory\n")
    assert hafs(c, "ls", "/nope*/") == (1, "", "ls: `/nope*': No such file or directory\n")
    code, out, err = hafs(c, "ls", "/../b")
    assert (code, out) == (1, "") and "component 1 is '..'" in err, err

    # Tab completion: the names of the directory typed, '/' after directories only.
    assert ok(c, "touchz", "/user/alice/notes") == ""
    assert complete(c, "ls", "/u") == ["plain,/user/"]
    assert complete(c, "ls", "/user/alice/") == ["plain,/user/alice/notes"]
    assert complete(c, "-ls", "/user//alice/n") == ["plain,/user//alice/notes"]
    assert sorted(complete(c, "mv", "/user/alice/notes", "/")) == ["plain,/b/", "plain,/user/"]
    assert complete(c, "ls", "/nope/") == []
    code, source, err = hafs(c, env={"_HAFS_COMPLETE": "bash_source"})
    assert code == 0 and "compopt -o nospace" in source, (code, err)
