"""``hafs`` as a user runs it: real processes only. Three JournalNode processes and two
``hanamenode run`` processes (nn1 formatted, nn2 bootstrapped from it, nn1 made active over
HAServiceProtocol: ``hadev.namenodes``), then the shell as a subprocess per command, with
exact output, error lines and exit statuses in the habit of ``hdfs dfs``; then a manual
failover to nn2 and a crash of nn1, after which the same commands still work."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hadev.namenodes import NameNodeProcessCluster, run_hafs
from hadev.scrape import metric_value
from hanamenode.client import HaFsClient
from hanamenode.ha import HAState

pytestmark = pytest.mark.timeout(240)  # every command is a Python process: slow on a loaded machine

FAST_CONF: dict[str, str | int | float | bool] = {
    "dfs.ha.tail-edits.period": "0.1",
    "dfs.ha.log-roll.period": "0.5",
    "dfs.qjournal.heartbeat.interval.ms": "200",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NameNodeProcessCluster]:
    with NameNodeProcessCluster(tmp_path_factory.mktemp("hafs"), extra_conf=FAST_CONF) as c:
        assert c.state("nn1") is HAState.STANDBY and c.state("nn2") is HAState.STANDBY
        c.transition_to_active("nn1")
        yield c


def hafs(c: NameNodeProcessCluster, *args: str) -> tuple[int, str, str]:
    result = run_hafs(c.conf_path, *args)
    return result.returncode, result.stdout, result.stderr


def ok(c: NameNodeProcessCluster, *args: str) -> str:
    code, out, err = hafs(c, *args)
    assert (code, err) == (0, ""), (args, code, out, err)
    return out


def fails(c: NameNodeProcessCluster, *args: str) -> str:
    """The one error line of a command that must fail with status 1 and print nothing."""
    code, out, err = hafs(c, *args)
    assert (code, out) == (1, ""), (args, code, out, err)
    assert err.count("\n") == 1, err
    return err.rstrip("\n")


def minute(mtime_ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(mtime_ms / 1000))


def dir_line(fs: HaFsClient, path: str) -> str:
    return f"drwxr-xr-x   - hdfs supergroup          0 {minute(fs.stat(path).mtime_ms)} {path}"


def file_line(fs: HaFsClient, path: str, length: str = "0") -> str:
    mtime = minute(fs.stat(path).mtime_ms)
    return f"-rw-r--r--   3 hdfs supergroup {length:>10} {mtime} {path}"


def test_the_shell_end_to_end_across_a_failover(cluster: NameNodeProcessCluster) -> None:
    c = cluster
    # mkdir
    assert ok(c, "mkdir", "-p", "/user/alice/data") == ""
    assert ok(c, "mkdir", "-p", "/user/alice/data") == ""  # -p: an existing dir is fine
    assert ok(c, "mkdir", "/empty", "/keep") == ""
    assert fails(c, "mkdir", "/user/alice/data") == "mkdir: `/user/alice/data': File exists"
    assert fails(c, "mkdir", "/nope/x") == "mkdir: `/nope/x': No such file or directory"
    assert fails(c, "mkdir", "relative").startswith("mkdir: invalid path 'relative': ")
    # touch
    assert ok(c, "touch", "/user/alice/notes", "/keep/f") == ""
    with HaFsClient(c.settings()) as fs:
        before = fs.stat("/user/alice/notes")
        assert ok(c, "touch", "/user/alice/notes") == ""  # exists: left unchanged
        assert fs.stat("/user/alice/notes") == before
        assert fails(c, "touch", "/user/alice") == "touch: `/user/alice': Is a directory"
        assert fails(c, "touch", "/keep/f/x") == "touch: `/keep/f/x': Is not a directory"

        # ls, ls -R, ls -d, errors
        assert ok(c, "ls", "/user/alice") == "\n".join(
            [
                "Found 2 items",
                dir_line(fs, "/user/alice/data"),
                file_line(fs, "/user/alice/notes"),
                "",
            ]
        )
        assert ok(c, "ls", "/empty") == ""
        assert ok(c, "ls", "/keep/f") == file_line(fs, "/keep/f") + "\n"
        assert ok(c, "ls", "-d", "/keep") == dir_line(fs, "/keep") + "\n"
        tree = [
            dir_line(fs, "/empty"),
            dir_line(fs, "/keep"),
            file_line(fs, "/keep/f"),
            dir_line(fs, "/user"),
            dir_line(fs, "/user/alice"),
            dir_line(fs, "/user/alice/data"),
            file_line(fs, "/user/alice/notes"),
        ]
        assert ok(c, "ls", "-R", "/") == "\n".join([*tree, ""])
        assert fails(c, "ls", "/nope") == "ls: `/nope': No such file or directory"
        code, out, err = hafs(c, "ls", "/nope", "/empty", "/keep")
        assert code == 1 and err == "ls: `/nope': No such file or directory\n"
        assert out == "\n".join(["Found 1 items", file_line(fs, "/keep/f"), ""])

        # stat
        notes = fs.stat("/user/alice/notes")
        assert ok(c, "stat", "%F %u:%g %b %r %a %A %n %Y", "/user/alice/notes") == (
            f"regular file hdfs:supergroup 0 3 644 rw-r--r-- notes {notes.mtime_ms}\n"
        )
        assert ok(c, "stat", "%F %n", "/user", "/") == "directory user\ndirectory \n"
        utc = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(notes.mtime_ms / 1000))
        assert ok(c, "stat", "/user/alice/notes") == utc + "\n"
        assert fails(c, "stat", "/nope") == "stat: `/nope': No such file or directory"

        # mv
        assert ok(c, "mv", "/user/alice/notes", "/user/alice/data") == ""
        assert [s.path for s in fs.list("/user/alice/data")] == ["/user/alice/data/notes"]
        assert fails(c, "mv", "/user/alice/missing", "/keep") == (
            "mv: `/user/alice/missing': No such file or directory"
        )
        assert fails(c, "mv", "/keep", "/nope/dst") == "mv: `/nope/dst': No such file or directory"
        assert fails(c, "mv", "/empty", "/keep/f") == "mv: `/keep/f': File exists"
        assert fails(c, "mv", "/user", "/user/alice").startswith("mv: cannot rename /user to ")

        # rm
        assert fails(c, "rm", "/user/alice") == "rm: `/user/alice': Is a directory"
        assert fails(c, "rm", "/empty") == "rm: `/empty': Is a directory"  # even when empty
        assert fails(c, "rm", "/nope") == "rm: `/nope': No such file or directory"
        assert ok(c, "rm", "-f", "/nope") == ""
        assert ok(c, "rm", "/user/alice/data/notes") == "Deleted /user/alice/data/notes\n"
        assert ok(c, "rm", "-r", "/user/alice") == "Deleted /user/alice\n"
        assert ok(c, "rm", "-r", "/empty") == "Deleted /empty\n"
        assert fails(c, "rm", "-r", "/").startswith("rm: cannot delete the root directory")
        final = [dir_line(fs, "/keep"), file_line(fs, "/keep/f"), dir_line(fs, "/user")]

    # Manual failover: nn1 -> standby, nn2 -> active. A new hafs process tries nn1 first
    # (configured order), is refused as standby, and fails over; --log-format json shows it.
    c.transition_to_standby("nn1")
    c.transition_to_active("nn2")
    assert ok(c, "ls", "-R", "/") == "\n".join([*final, ""])
    code, out, err = hafs(c, "--log-format", "json", "--log-level", "info", "ls", "/keep")
    assert code == 0 and out.startswith("Found 1 items\n")
    events = [json.loads(line) for line in err.splitlines()]
    assert [(e["event"], e["failed"], e["next"]) for e in events] == [
        ("failing over", "nn1", "nn2")
    ]
    assert "state standby" in events[0]["reason"]
    assert ok(c, "mkdir", "/after") == ""

    # nn1 crashes: an unreachable NameNode is skipped the same way.
    c["nn1"].kill(signal.SIGKILL)
    assert ok(c, "stat", "%F", "/after") == "directory\n"
    assert ok(c, "ls", "/").startswith("Found 3 items\n")

    # Bad configuration: one line, status 1.
    result = run_hafs(Path(c.conf_path).with_name("missing.xml"), "ls", "/")
    assert result.returncode == 1 and result.stderr.startswith("Error: bad configuration: ")


def test_hostile_arguments_and_names(cluster: NameNodeProcessCluster) -> None:
    """Issue 10, rows 7 and 8: an argument that is not UTF-8 is one line and status 1, a name
    with a control character is refused, and a listing escapes what is not printable."""
    # A str with a lone surrogate reaches the child as the raw byte 0xff (surrogateescape).
    for args in (("mkdir", "/bad\udcff"), ("ls", "/\udcff"), ("mv", "/a", "/\udcff"),
                 ("stat", "%n", "/x\udcff")):
        code, out, err = hafs(cluster, *args)
        assert (code, out) == (1, ""), (args, code, out, err)
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert "not a valid UTF-8 argument" in err and "\\xff" in err, err
    for name, shown in (("/esc\x1b[31mred", "U+001B"), ("/new\nline", "U+000A"),
                        ("/soh\x01", "U+0001"), ("/del\x7f", "U+007F"), ("/csi\x9b", "U+009B")):
        err = fails(cluster, "mkdir", name)
        assert f"contains the control character {shown}" in err, err
        assert not any(ch in err for ch in "\x1b\x01\x7f\x9b"), repr(err)
    ok(cluster, "mkdir", "/hostile")
    ok(cluster, "mkdir", "/hostile/zero\u200bwidth", "/hostile/line\u2028sep", "/hostile/back\\")
    listing = ok(cluster, "ls", "/hostile").splitlines()
    names = sorted(line.rsplit(" ", 1)[1] for line in listing[1:])
    assert names == [
        "/hostile/back\\", "/hostile/line\\u2028sep", "/hostile/zero\\u200bwidth"
    ], listing
    assert ok(cluster, "stat", "%n", "/hostile/zero\u200bwidth") == "zero\\u200bwidth\n"


@pytest.mark.timeout(360)  # about 60 hafs processes, each a Python start-up
def test_hdfs_dfs_spellings_globs_and_the_namespace_commands(
    cluster: NameNodeProcessCluster,
) -> None:
    """The commands as ``hdfs dfs`` spells them (``-ls``), with globs, ``-touchz``,
    ``-rmdir``, ``-test``, ``-count``, ``-find``, ``-ls -h``; docs/operations.md §11."""
    c = cluster
    assert ok(c, "-mkdir", "-p", "/g/alice/data", "/g/bob/data", "/g/carol") == ""
    assert fails(c, "-mkdir", "/g/alice") == "mkdir: `/g/alice': File exists"
    assert ok(c, "-touchz", "/g/alice/notes", "/g/bob/notes", "/g/bob/data/Part-0") == ""
    assert ok(c, "-touchz", "/g/alice/notes") == ""  # an empty file: left as it is
    assert fails(c, "-touchz", "/g/alice") == "touchz: `/g/alice': Is a directory"
    with HaFsClient(c.settings()) as fs:
        fs.create("/g/big", length=1536)
        assert fails(c, "-touchz", "/g/big") == "touchz: `/g/big': Not a zero-length file"

        # globs, expanded by listing
        assert ok(c, "-ls", "-d", "/g/*") == "\n".join(
            [dir_line(fs, "/g/alice"), file_line(fs, "/g/big", "1536"), dir_line(fs, "/g/bob"),
             dir_line(fs, "/g/carol"), ""]
        )
        assert ok(c, "-stat", "%n", "/g/*/notes") == "notes\nnotes\n"
        assert ok(c, "-stat", "%n", "/g/{alice,carol}") == "alice\ncarol\n"
        assert ok(c, "-stat", "%n", "/g/[ab]*") == "alice\nbig\nbob\n"
        assert fails(c, "-ls", "/g/z*") == "ls: `/g/z*': No such file or directory"
        # not a readable pattern: a literal name
        assert fails(c, "-stat", "%n", "/g/[a") == "stat: `/g/[a': No such file or directory"
        # -ls -h
        mtime = minute(fs.stat("/g/big").mtime_ms)
        assert ok(c, "-ls", "-h", "/g/big") == (
            f"-rw-r--r--   3 hdfs supergroup      1.5 K {mtime} /g/big\n"
        )

        # -test: exit status only
        for flag, path, status in [
            ("-e", "/g/alice", 0), ("-e", "/g/nope", 1), ("-d", "/g/alice", 0),
            ("-d", "/g/big", 1), ("-f", "/g/big", 0), ("-f", "/g/alice", 1),
            ("-z", "/g/alice/notes", 0), ("-z", "/g/big", 1), ("-s", "/g/big", 0),
            ("-d", "/g/nope", 1), ("-e", "/g/a*", 0), ("-e", "/g/z*", 1),
        ]:
            assert hafs(c, "-test", flag, path) == (status, "", ""), (flag, path)
        code, _, err = hafs(c, "-test", "/g/alice")
        assert code == 2 and "exactly one of -e -d -f -s -z" in err

        # -count [-q] [-h]: directories (itself included), files, bytes, path
        assert ok(c, "-count", "/g", "/g/alice/notes") == (
            f"{6:>12} {4:>12} {1536:>18} /g\n{0:>12} {1:>12} {0:>18} /g/alice/notes\n"
        )
        assert ok(c, "-count", "-q", "-h", "/g") == (
            f"{'none':>12} {'inf':>15} {'none':>15} {'inf':>15} "
            f"{6:>12} {4:>12} {'1.5 K':>18} /g\n"
        )
        assert fails(c, "-count", "/g/nope") == "count: `/g/nope': No such file or directory"

        # -find PATH -name GLOB
        assert ok(c, "-find", "/g", "-name", "notes") == "/g/alice/notes\n/g/bob/notes\n"
        assert ok(c, "-find", "/g", "-name", "*at*") == "/g/alice/data\n/g/bob/data\n"
        assert ok(c, "-find", "/g/bob", "-iname", "part-*") == "/g/bob/data/Part-0\n"
        assert ok(c, "-find", "/g/carol") == "/g/carol\n"

        # -rmdir
        assert fails(c, "-rmdir", "/g/bob") == "rmdir: `/g/bob': Directory is not empty"
        assert fails(c, "-rmdir", "/g/big") == "rmdir: `/g/big': Is not a directory"
        assert fails(c, "-rmdir", "/g/nope") == "rmdir: `/g/nope': No such file or directory"
        assert ok(c, "-rmdir", "--ignore-fail-on-non-empty", "/g/bob") == ""
        assert ok(c, "-rmdir", "/g/carol") == ""

        # -mv and -rm with globs
        assert ok(c, "-mkdir", "/g/all") == ""
        assert ok(c, "-mv", "/g/a*/notes", "/g/all") == ""  # /g/all is empty: alice's only
        assert ok(c, "-mv", "/g/b*/n*", "/g/all/bobnotes") == ""
        assert [s.path for s in fs.list("/g/all")] == ["/g/all/bobnotes", "/g/all/notes"]
        assert fails(c, "-mv", "/g/big", "/g/*") == "mv: `/g/*': matches more than one path"
        assert ok(c, "-rm", "-f", "/g/z*") == ""
        assert fails(c, "-rm", "/g/z*") == "rm: `/g/z*': No such file or directory"
        assert ok(c, "-rm", "-r", "/g/{alice,bob}") == "Deleted /g/alice\nDeleted /g/bob\n"
        assert [line.rsplit(" ", 1)[1] for line in ok(c, "-ls", "-R", "/g").splitlines()] == [
            "/g/all", "/g/all/bobnotes", "/g/all/notes", "/g/big",
        ]
    # the old spelling still works
    assert ok(c, "touch", "/g/t") == "" and ok(c, "-test", "-f", "/g/t") == ""


def test_several_paths_go_in_one_multi_and_a_refusal_falls_back_to_each_alone(
    cluster: NameNodeProcessCluster,
) -> None:
    """``mkdir`` of several paths and ``rm -r`` of several are one transaction each (one
    multi-op call, docs/protocol.md §13.5); when one path is refused, every path is tried
    alone and only that one fails, as hdfs dfs does."""
    c = cluster
    url = c[c.active() or "nn1"].metrics_url

    def calls(method: str) -> float:
        return metric_value(url, "hanamenode_rpc_seconds_count", method=method)

    with HaFsClient(c.settings()) as fs:
        fs.mkdirs("/multi-shell", parents=True)
        multis, mkdirs = calls("Multi"), calls("Mkdirs")
        assert ok(c, "-mkdir", "-p", "/multi-shell/a/1", "/multi-shell/b", "/multi-shell/c") == ""
        assert (calls("Multi"), calls("Mkdirs")) == (multis + 1, mkdirs)  # one call for three
        assert [s.path for s in fs.list("/multi-shell")] == [
            "/multi-shell/a", "/multi-shell/b", "/multi-shell/c",
        ]
        assert fails(c, "-mkdir", "/multi-shell/b", "/multi-shell/d") == (
            "mkdir: `/multi-shell/b': File exists"
        )
        assert fs.stat("/multi-shell/d").is_dir  # refused alone; the other was made
        multis, deletes = calls("Multi"), calls("Delete")
        assert ok(c, "-rm", "-r", "/multi-shell/a", "/multi-shell/b") == (
            "Deleted /multi-shell/a\nDeleted /multi-shell/b\n"
        )
        assert (calls("Multi"), calls("Delete")) == (multis + 1, deletes)
        assert [s.path for s in fs.list("/multi-shell")] == ["/multi-shell/c", "/multi-shell/d"]


def test_ls_r_walks_a_tree_as_deep_as_paths_allow(cluster: NameNodeProcessCluster) -> None:
    """1000 components, the deepest a path may be: ``ls -R`` lists every level (it used to
    die with RecursionError: one Python frame per level)."""
    c = cluster
    deep = "/deep" + "/a" * 999
    assert ok(c, "-mkdir", "-p", deep) == ""
    lines = ok(c, "-ls", "-R", "/deep").splitlines()
    assert len(lines) == 999
    assert lines[-1].endswith(deep) and lines[0].endswith(" /deep/a")
