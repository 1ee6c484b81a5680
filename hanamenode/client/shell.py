"""``hafs``: the file system shell of the nameservice, in the habit of ``hdfs dfs``
(docs/architecture.md §1).

    hafs --conf C mkdir [-p] PATH...       silent; "mkdir: `/x': File exists"
    hafs --conf C touch PATH...            an empty file; an existing file is left as it is
    hafs --conf C rm [-r] [-f] PATH...     "Deleted /x"; a directory needs -r
    hafs --conf C mv SRC... DST            into DST when it is a directory
    hafs --conf C ls [-R] [-d] [PATH...]   "Found N items", then one line per entry
    hafs --conf C stat [FORMAT] PATH...    FORMAT as hdfs dfs -stat (%y by default)

Each command works through every path it is given, prints one line on stderr for each that
fails (``ls: `/nope': No such file or directory``; an argument that is not valid UTF-8 is
such a failure, sent nowhere) and exits with status 1 if any did, 0 otherwise. Names are
printed with anything not printable escaped (``hanamenode.paths.printable``), so a name
cannot send commands to the terminal. The NameNode to talk to is found by ``HaFsClient``'s
failover proxy; when none answers as active the line names every NameNode's last answer.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import click

from conf import ConfigError, Settings, load_settings
from conf.logging import LOG_FORMAT_OPTION, LOG_LEVELS, setup_logging
from hanamenode import paths as namespace_paths
from hanamenode.client.client import HaFsClient
from hanamenode.errors import (
    DirectoryNotEmptyError,
    NamenodeError,
    ParentNotDirectoryError,
    PathExistsError,
    PathIsDirectoryError,
    PathNotFoundError,
)
from hanamenode.namespace import StatInfo

__all__ = ["format_stat", "ls_line", "main", "permission_string"]

# hdfs dfs prints these refusals as "<cmd>: `<path>': <phrase>" (the Java PathIOException
# family); every other error is printed as "<cmd>: <message>".
_PHRASES: dict[type[NamenodeError], str] = {
    PathNotFoundError: "No such file or directory",
    PathExistsError: "File exists",
    PathIsDirectoryError: "Is a directory",
    DirectoryNotEmptyError: "Directory is not empty",
    ParentNotDirectoryError: "Is not a directory",
}

DEFAULT_STAT_FORMAT = "%y"


# ---------------------------------------------------------------------------------------------
# Formatting: plain functions of plain values.
# ---------------------------------------------------------------------------------------------


def permission_string(permission: int) -> str:
    """``rwxr-xr-x`` for 0755, as HDFS FsPermission prints it (the sticky bit as t/T)."""
    symbols = "".join(
        ("r" if bits & 4 else "-") + ("w" if bits & 2 else "-") + ("x" if bits & 1 else "-")
        for bits in ((permission >> 6) & 7, (permission >> 3) & 7, permission & 7)
    )
    if permission & 0o1000:
        symbols = symbols[:-1] + ("t" if permission & 1 else "T")
    return symbols


def _local_minute(mtime_ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(mtime_ms / 1000))


@dataclass
class Columns:
    """hdfs dfs -ls column widths: running maxima over everything listed so far, starting
    at 3 for replication and 10 for length (HDFS ``Ls.adjustColumnWidths``)."""

    replication: int = 3
    length: int = 10
    owner: int = 0
    group: int = 0

    def widen(self, items: Sequence[StatInfo]) -> None:
        for st in items:
            self.replication = max(self.replication, len(str(st.replication)))
            self.length = max(self.length, len(str(st.length)))
            self.owner = max(self.owner, len(st.owner))
            self.group = max(self.group, len(st.group))


def ls_line(st: StatInfo, columns: Columns) -> str:
    """One ``hdfs dfs -ls`` line::

        drwxr-xr-x   - hdfs supergroup          0 2026-11-22 12:00 /user
        -rw-r--r--   3 hdfs supergroup         42 2026-11-22 12:00 /user/f
    """
    kind = "d" if st.is_dir else "-"
    replication = "-" if st.is_dir else str(st.replication)
    owner = f"{st.owner:<{columns.owner}} " if columns.owner else st.owner
    group = f"{st.group:<{columns.group}} " if columns.group else st.group
    return (
        f"{kind}{permission_string(st.permission)} {replication:>{columns.replication}} "
        f"{owner}{group}{st.length:>{columns.length}} {_local_minute(st.mtime_ms)} "
        f"{namespace_paths.printable(st.path)}"
    )


def format_stat(fmt: str, st: StatInfo) -> str:
    """``hdfs dfs -stat FORMAT``: %a octal and %A symbolic permission, %b length, %F type,
    %g group, %n name, %o block size (always 0: there are no blocks), %r replication,
    %u owner, %y modification time (UTC, ``yyyy-MM-dd HH:mm:ss``), %Y it in milliseconds."""
    values = {
        "a": f"{st.permission:o}",
        "A": permission_string(st.permission),
        "b": str(st.length),
        "F": "directory" if st.is_dir else "regular file",
        "g": namespace_paths.printable(st.group),
        "n": namespace_paths.printable(namespace_paths.basename(st.path)),
        "o": "0",
        "r": str(st.replication),
        "u": namespace_paths.printable(st.owner),
        "y": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(st.mtime_ms / 1000)),
        "Y": str(st.mtime_ms),
    }
    out: list[str] = []
    i = 0
    while i < len(fmt):
        if fmt[i] == "%" and i + 1 < len(fmt):
            out.append(values.get(fmt[i + 1], fmt[i : i + 2]))
            i += 2
        else:
            out.append(fmt[i])
            i += 1
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# The commands.
# ---------------------------------------------------------------------------------------------


class _Shell:
    """What every command shares: the configuration, one client (made on first use), and
    the count of failed paths that decides the exit status."""

    def __init__(self, conf_path: str | None) -> None:
        self.conf_path = conf_path
        self._fs: HaFsClient | None = None
        self.errors = 0

    @property
    def fs(self) -> HaFsClient:
        if self._fs is None:
            try:
                settings: Settings = load_settings(self.conf_path)
                self._fs = HaFsClient(settings)
            except ConfigError as exc:
                raise click.ClickException(f"bad configuration: {exc}") from None
        return self._fs

    def close(self) -> None:
        if self._fs is not None:
            self._fs.close()

    def fail(self, command: str, path: str | None, error: NamenodeError) -> None:
        """Print one error line on stderr and count it."""
        self.errors += 1
        phrase = _PHRASES.get(type(error))
        if phrase is not None and path is not None:
            click.echo(f"{command}: `{namespace_paths.printable(path)}': {phrase}", err=True)
        else:
            click.echo(f"{command}: {namespace_paths.printable(str(error))}", err=True)

    def utf8(self, command: str, paths: Sequence[str]) -> list[str]:
        """The arguments that are valid UTF-8; each other one is reported and counted (the
        shell receives undecodable bytes as lone surrogates, which no request can carry)."""
        valid: list[str] = []
        for path in paths:
            try:
                path.encode("utf-8")
            except UnicodeEncodeError:
                self.errors += 1
                shown = namespace_paths.printable(path)
                click.echo(f"{command}: `{shown}': not a valid UTF-8 argument", err=True)
            else:
                valid.append(path)
        return valid

    @contextmanager
    def reporting(self, command: str, path: str | None) -> Iterator[None]:
        """Report a ``NamenodeError`` raised in the block as a failure of ``path``."""
        try:
            yield
        except NamenodeError as exc:
            self.fail(command, path, exc)

    def finish(self) -> None:
        if self.errors:
            click.get_current_context().exit(1)


@click.group()
@click.option(
    "--conf",
    "conf_path",
    type=click.Path(dir_okay=False),
    default=None,
    help="Hadoop-style XML configuration (default: $HANAMENODE_CONF).",
)
@LOG_FORMAT_OPTION
@click.option(
    "--log-level",
    "log_level",
    type=click.Choice(LOG_LEVELS, case_sensitive=False),
    default="warning",
    show_default=True,
    help="Least severe level logged (info shows each failover).",
)
@click.pass_context
def main(ctx: click.Context, conf_path: str | None, log_format: str, log_level: str) -> None:
    """File system shell of the HA nameservice (in the habit of hdfs dfs)."""
    setup_logging(log_format, log_level)
    shell = _Shell(conf_path)
    ctx.obj = shell
    ctx.call_on_close(shell.close)


@main.command()
@click.option("-p", "parents", is_flag=True, help="Create missing parents; no error if it exists.")
@click.argument("paths", nargs=-1, required=True)
@click.pass_obj
def mkdir(shell: _Shell, parents: bool, paths: tuple[str, ...]) -> None:
    """Create directories."""
    for path in shell.utf8("mkdir", paths):
        with shell.reporting("mkdir", path):
            shell.fs.mkdirs(path, parents=parents)
    shell.finish()


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.pass_obj
def touch(shell: _Shell, paths: tuple[str, ...]) -> None:
    """Create empty files; an existing file is left unchanged."""
    for path in shell.utf8("touch", paths):
        # An existing file: nothing to do (a directory is PathIsDirectoryError).
        with shell.reporting("touch", path), contextlib.suppress(PathExistsError):
            shell.fs.create(path)
    shell.finish()


@main.command()
@click.option("-r", "-R", "recursive", is_flag=True, help="Delete directories and their content.")
@click.option("-f", "force", is_flag=True, help="No error for a path that does not exist.")
@click.argument("paths", nargs=-1, required=True)
@click.pass_obj
def rm(shell: _Shell, recursive: bool, force: bool, paths: tuple[str, ...]) -> None:
    """Delete files (and directories, with -r)."""
    for path in shell.utf8("rm", paths):
        try:
            # hdfs dfs -rm refuses every directory without -r, the empty ones too.
            if not recursive and shell.fs.stat(path).is_dir:
                shell.fail("rm", path, PathIsDirectoryError(path))
                continue
            shell.fs.delete(path, recursive=recursive)
        except PathNotFoundError as exc:
            if not force:
                shell.fail("rm", path, exc)
            continue
        except NamenodeError as exc:
            shell.fail("rm", path, exc)
            continue
        click.echo(f"Deleted {namespace_paths.printable(path)}")
    shell.finish()


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.pass_obj
def mv(shell: _Shell, paths: tuple[str, ...]) -> None:
    """Move SRC to DST, or SRC... into the directory DST."""
    if len(paths) < 2:
        raise click.UsageError("mv needs a source and a destination")
    if len(shell.utf8("mv", paths)) < len(paths):
        shell.finish()
    *sources, dst = paths
    if len(sources) > 1:
        try:
            into_directory = shell.fs.stat(dst).is_dir
        except NamenodeError as exc:
            shell.fail("mv", dst, exc)
            shell.finish()
        if not into_directory:
            shell.fail("mv", dst, ParentNotDirectoryError(dst))
            shell.finish()
    for src in sources:
        try:
            shell.fs.stat(src)
        except NamenodeError as exc:
            shell.fail("mv", src, exc)
            continue
        try:
            shell.fs.rename(src, dst)
        except (PathExistsError, PathNotFoundError, ParentNotDirectoryError) as exc:
            shell.fail("mv", dst, exc)  # the source exists: the destination is the problem
        except NamenodeError as exc:
            shell.fail("mv", None, exc)
    shell.finish()


@main.command()
@click.option("-R", "recursive", is_flag=True, help="List subdirectories recursively.")
@click.option("-d", "directory", is_flag=True, help="List directories as plain files.")
@click.argument("paths", nargs=-1)
@click.pass_obj
def ls(shell: _Shell, recursive: bool, directory: bool, paths: tuple[str, ...]) -> None:
    """List directories (/ by default)."""
    columns = Columns()

    def list_directory(path: str) -> None:
        items = shell.fs.list(path)
        if items and not recursive:
            click.echo(f"Found {len(items)} items")
        columns.widen(items)
        for st in items:
            click.echo(ls_line(st, columns))
            if recursive and st.is_dir:
                with shell.reporting("ls", st.path):
                    list_directory(st.path)

    for path in shell.utf8("ls", paths or (namespace_paths.ROOT,)):
        with shell.reporting("ls", path):
            st = shell.fs.stat(path)
            if st.is_dir and not directory:
                list_directory(path)
            else:
                columns.widen([st])
                click.echo(ls_line(st, columns))
    shell.finish()


@main.command()
@click.argument("args", nargs=-1, required=True, metavar="[FORMAT] PATH...")
@click.pass_obj
def stat(shell: _Shell, args: tuple[str, ...]) -> None:
    """Print attributes of paths in FORMAT (%a %A %b %F %g %n %o %r %u %y %Y; default %y)."""
    fmt = DEFAULT_STAT_FORMAT
    paths = list(args)
    if len(paths) > 1 and "%" in paths[0]:
        fmt = paths.pop(0)
    if len(shell.utf8("stat", [fmt])) < 1:
        shell.finish()
    for path in shell.utf8("stat", paths):
        with shell.reporting("stat", path):
            click.echo(format_stat(fmt, shell.fs.stat(path)))
    shell.finish()


if __name__ == "__main__":
    main()
