"""``hafs``: the file system shell of the nameservice, in the habit of ``hdfs dfs``
(docs/architecture.md §1).

    hafs --conf C mkdir [-p] PATH...       silent; "mkdir: `/x': File exists"
    hafs --conf C touchz PATH...           an empty file; an existing empty file is left as it is
    hafs --conf C rm [-r] [-f] PATH...     "Deleted /x"; a directory needs -r
    hafs --conf C rmdir PATH...            an empty directory
    hafs --conf C mv SRC... DST            into DST when it is a directory
    hafs --conf C ls [-R] [-d] [-h] [PATH...]  "Found N items", then one line per entry
    hafs --conf C stat [FORMAT] PATH...    FORMAT as hdfs dfs -stat (%y by default)
    hafs --conf C test -e|-d|-f|-s|-z PATH exit status 0 when true, 1 when not
    hafs --conf C count [-q] [-h] PATH...  directories, files, bytes (and quotas: none)
    hafs --conf C find PATH... [-name|-iname GLOB]

Every command is also spelled as ``hdfs dfs`` spells it, with a dash (``hafs -ls -R /``), and
``touch`` is ``touchz``. Paths may hold globs (``/user/*/data``, ``{a,b}``), expanded by listing
(``hanamenode.client.globs``); a glob that matches nothing is "No such file or directory".
docs/operations.md §11 compares every command and flag with ``hdfs dfs``.

Each command works through every path it is given, prints one line on stderr for each that
fails (``ls: `/nope': No such file or directory``; an argument that is not valid UTF-8 is
such a failure, sent nowhere) and exits with status 1 if any did, 0 otherwise. Names are
printed with anything not printable escaped (``hanamenode.paths.printable``), so a name
cannot send commands to the terminal. The NameNode to talk to is found by ``HaFsClient``'s
failover proxy; when none answers as active the line names every NameNode's last answer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import click
import structlog
from click.shell_completion import BashComplete, CompletionItem, add_completion_class

from conf import ConfigError, Settings, load_settings
from conf.keys import parse_zk_quorum
from conf.logging import LOG_FORMAT_OPTION, LOG_LEVELS, setup_logging
from conf.settings import CONF_ENV
from hanamenode import paths as namespace_paths
from hanamenode.client.client import DeleteOp, HaFsClient, ListingsAhead, MkdirsOp
from hanamenode.client.failover_proxy import FailoverProxy, NameNodeAddress, RetryPolicy
from hanamenode.client.globs import GlobError, component_regex
from hanamenode.client.globs import expand as expand_glob
from hanamenode.client.zk_resolver import KAZOO_LOGGER
from hanamenode.errors import (
    DirectoryNotEmptyError,
    NamenodeError,
    ParentNotDirectoryError,
    PathExistsError,
    PathIsDirectoryError,
    PathNotFoundError,
)
from hanamenode.namespace import StatInfo
from hanamenode.peers import connect_address

__all__ = [
    "count_line",
    "format_stat",
    "human_size",
    "ls_line",
    "main",
    "normalize_argument",
    "passes_test",
    "permission_string",
]

log = structlog.get_logger(__name__)

MULTI_OPS = 1000
"""Most paths one command sends in one multi (the default dfs.namenode.multi.max-ops)."""

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

LS_WINDOW = 8
"""Directory listings ``ls -R`` asks ahead of what it prints (``ListingsAhead``)."""


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


def human_size(size: int) -> str:
    """A length as ``hdfs dfs -ls -h`` prints it (Hadoop's ``TraditionalBinaryPrefix
    .long2String(n, "", 1)``): ``0``, ``1023``, ``1 K`` for an exact multiple, else one
    decimal, ``1.5 M``."""
    if size < 1024:
        return str(size)
    shift = 10
    while shift < 60 and size >= 1 << (shift + 10):
        shift += 10
    symbol = "KMGTPE"[shift // 10 - 1]
    if size % (1 << shift) == 0:
        return f"{size >> shift} {symbol}"
    text = f"{size / (1 << shift):.1f}"
    if text.startswith("1024") and shift < 60:  # rounds up into the next prefix
        shift += 10
        symbol = "KMGTPE"[shift // 10 - 1]
        text = f"{size / (1 << shift):.1f}"
    return f"{text} {symbol}"


def ls_line(st: StatInfo, columns: Columns, *, human: bool = False) -> str:
    """One ``hdfs dfs -ls`` line::

        drwxr-xr-x   - hdfs supergroup          0 2026-11-22 12:00 /user
        -rw-r--r--   3 hdfs supergroup         42 2026-11-22 12:00 /user/f
    """
    kind = "d" if st.is_dir else "-"
    replication = "-" if st.is_dir else str(st.replication)
    owner = f"{st.owner:<{columns.owner}} " if columns.owner else st.owner
    group = f"{st.group:<{columns.group}} " if columns.group else st.group
    length = human_size(st.length) if human else str(st.length)
    return (
        f"{kind}{permission_string(st.permission)} {replication:>{columns.replication}} "
        f"{owner}{group}{length:>{columns.length}} {_local_minute(st.mtime_ms)} "
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


@dataclass(frozen=True)
class ContentSummary:
    """What ``count`` reports of a path: directories (itself included), files, bytes."""

    directories: int
    files: int
    length: int


def count_line(path: str, summary: ContentSummary, *, quotas: bool, human: bool) -> str:
    """One ``hdfs dfs -count [-q]`` line (Hadoop's ``ContentSummary.toString``). There are
    no quotas in this namespace, so ``-q`` prints HDFS's words for an unset quota."""
    size = human_size(summary.length) if human else str(summary.length)
    quota = f"{'none':>12} {'inf':>15} {'none':>15} {'inf':>15} " if quotas else ""
    return f"{quota}{summary.directories:>12} {summary.files:>12} {size:>18} {path}"


TEST_FLAGS = ("e", "d", "f", "s", "z")


def passes_test(flag: str, st: StatInfo | None) -> bool:
    """``hdfs dfs -test -FLAG``: -e exists, -d is a directory, -f is a file, -s is not
    empty (length > 0), -z is an empty file or a directory (length 0). A missing path
    fails every test."""
    if st is None:
        return False
    return {
        "e": True,
        "d": st.is_dir,
        "f": not st.is_dir,
        "s": st.length > 0,
        "z": st.length == 0,
    }[flag]


def normalize_argument(path: str) -> str:
    """An absolute path argument spelt as ``hdfs dfs`` takes it, in the one spelling the
    NameNode accepts: ``//`` and ``.`` components dropped, ``..`` resolved, no trailing ``/``
    (Hadoop's ``Path`` normalizes its URI the same way). The NameNode's rule stays strict
    (``hanamenode.paths.validate_path``); the shell does what a user means before asking it.
    Anything else is given back unchanged for the NameNode to refuse with its own message: a
    relative path, or a ``..`` above the root.

    >>> normalize_argument("/user/"), normalize_argument("//a/./b//c/"), normalize_argument("/a/..")
    ('/user', '/a/b/c', '/')
    >>> normalize_argument("relative/"), normalize_argument("/../etc")
    ('relative/', '/../etc')
    """
    if not path.startswith(namespace_paths.SEPARATOR):
        return path
    names: list[str] = []
    for name in path.split(namespace_paths.SEPARATOR):
        if name in ("", "."):
            continue
        if name == "..":
            if not names:
                return path
            names.pop()
        else:
            names.append(name)
    return namespace_paths.SEPARATOR + namespace_paths.SEPARATOR.join(names)


# ---------------------------------------------------------------------------------------------
# The commands.
# ---------------------------------------------------------------------------------------------


class _Shell:
    """What every command shares: the configuration, one client (made on first use), and
    the count of failed paths that decides the exit status."""

    def __init__(
        self,
        conf_path: str | None,
        *,
        namenode: str | None = None,
        fs_address: str | None = None,
        stale_ok: bool = False,
        zookeeper: str | None = None,
    ) -> None:
        self.conf_path = conf_path
        self.namenode = namenode
        self.fs_address = fs_address
        self.stale_ok = stale_ok
        self.zookeeper = zookeeper
        self._fs: HaFsClient | None = None
        self.errors = 0

    @property
    def fs(self) -> HaFsClient:
        if self._fs is None:
            try:
                self._fs = self._client()
            except ConfigError as exc:
                raise click.ClickException(f"bad configuration: {exc}") from None
        return self._fs

    def _client(self) -> HaFsClient:
        """Through the failover proxy of the configuration, or pinned to one NameNode
        (``--namenode``, ``-fs``): every call goes there alone, its answer is reported."""
        if self.fs_address is not None and self.conf_path is None and not os.environ.get(
            CONF_ENV
        ):
            proxy = FailoverProxy.pinned_to(self.fs_address)
            return HaFsClient(proxy, allow_stale_read=self.stale_ok)
        if self.zookeeper is not None:
            return HaFsClient(self._zookeeper_settings(), allow_stale_read=self.stale_ok)
        settings: Settings = load_settings(self.conf_path)
        if self.fs_address is None and self.namenode is None:
            return HaFsClient(settings, allow_stale_read=self.stale_ok)
        if self.namenode is not None:
            if self.namenode not in settings.namenode_ids:
                known = ", ".join(settings.namenode_ids) or "none"
                raise click.BadParameter(
                    f"no NameNode {self.namenode!r} in the configuration (known: {known})",
                    param_hint="--namenode",
                )
            address = NameNodeAddress(
                self.namenode, connect_address(settings.namenode(self.namenode).rpc_address)
            )
        else:
            assert self.fs_address is not None
            address = NameNodeAddress(self.fs_address, self.fs_address)
        proxy = FailoverProxy.pinned_to(
            address, RetryPolicy.from_settings(settings.client), tls=settings.tls
        )
        return HaFsClient(proxy, allow_stale_read=self.stale_ok)

    def _zookeeper_settings(self) -> Settings:
        """The configuration (none: every default, plaintext) with ``--zookeeper`` as
        ``dfs.client.failover.zookeeper.quorum`` (docs/operations.md §3.5)."""
        assert self.zookeeper is not None
        key = "dfs.client.failover.zookeeper.quorum"
        try:
            parse_zk_quorum(self.zookeeper)
        except (ValueError, ConfigError) as exc:
            raise click.BadParameter(str(exc), param_hint="--zookeeper") from None
        if self.conf_path is None and not os.environ.get(CONF_ENV):
            return Settings.from_mapping({key: self.zookeeper}, source="--zookeeper")
        settings = load_settings(self.conf_path)
        return Settings.from_mapping({**settings.raw, key: self.zookeeper}, settings.source)

    def close(self) -> None:
        if self._fs is not None:
            self._fs.close()

    def fail(self, command: str, path: str | None, error: NamenodeError) -> None:
        """Print one error line on stderr and count it."""
        phrase = _PHRASES.get(type(error))
        if phrase is not None and path is not None:
            self.refuse(command, path, phrase)
        else:
            self.errors += 1
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

    def refuse(self, command: str, path: str, phrase: str) -> None:
        """Print ``<command>: `<path>': <phrase>`` on stderr and count it."""
        self.errors += 1
        click.echo(f"{command}: `{namespace_paths.printable(path)}': {phrase}", err=True)

    def expand(self, command: str, path: str, *, quiet_missing: bool = False) -> list[str]:
        """The paths a glob matches (a plain path stands for itself); a glob that matches
        nothing (reported unless ``quiet_missing``) gives no paths; one that is not a readable
        pattern stands for itself."""

        def list_names(directory: str) -> list[str] | None:
            try:
                items = self.fs.list(directory)
            except (PathNotFoundError, ParentNotDirectoryError):
                return None
            if len(items) == 1 and items[0].path == directory:  # a file lists as itself
                return None
            return [namespace_paths.basename(st.path) for st in items]

        def exists(candidate: str) -> bool:
            try:
                self.fs.stat(candidate)
            except PathNotFoundError:
                return False
            return True

        path = normalize_argument(path)  # as hdfs dfs takes it; errors name this spelling
        try:
            matched = expand_glob(path, list_names, exists)
        except NamenodeError as exc:
            self.fail(command, path, exc)
            return []
        if not matched and not quiet_missing:
            self.fail(command, path, PathNotFoundError(path))
        return matched

    def expand_all(
        self, command: str, paths: Sequence[str], *, quiet_missing: bool = False
    ) -> list[str]:
        return [
            match
            for path in self.utf8(command, paths)
            for match in self.expand(command, path, quiet_missing=quiet_missing)
        ]

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


class DfsGroup(click.Group):
    """A command group that also takes the command as ``hdfs dfs`` spells it, with one
    dash: ``hafs -ls -R /`` runs ``ls -R /``. The first argument that names a command, with
    or without the dash, is the command; what precedes it are the group's options."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        args = list(args)
        for i, arg in enumerate(args):
            if arg in self.commands:
                break
            if arg.startswith("-") and arg[1:] in self.commands and not arg.startswith("--"):
                args[i] = arg[1:]
                break
        return super().parse_args(ctx, args)


@click.group(cls=DfsGroup)
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
@click.option(
    "--namenode",
    "namenode",
    metavar="NN_ID",
    default=None,
    help="Ask this configured NameNode alone: no failover, its answer (even a refusal).",
)
@click.option(
    "-fs",
    "--fs",
    "fs_address",
    metavar="HOST:PORT",
    default=None,
    help="Ask the NameNode at this address alone, as hdfs dfs -fs (no failover).",
)
@click.option(
    "--zookeeper",
    "zookeeper",
    metavar="HOST:PORT[,...][/CHROOT]",
    default=None,
    help="Find the NameNodes in this ZooKeeper's election znodes, not the configured list "
    "(dfs.client.failover.zookeeper.quorum).",
)
@click.option(
    "--stale-ok",
    "stale_ok",
    is_flag=True,
    help="Accept stale answers to ls and stat (a standby may answer; it may lag the active).",
)
@click.pass_context
def main(
    ctx: click.Context,
    conf_path: str | None,
    log_format: str,
    log_level: str,
    namenode: str | None,
    fs_address: str | None,
    zookeeper: str | None,
    stale_ok: bool,
) -> None:
    """File system shell of the HA nameservice (in the habit of hdfs dfs).

    Every answer is linearizable unless --stale-ok is given (docs/consistency.md §4)."""
    setup_logging(log_format, log_level)
    # The resolver's kazoo client warns at each reconnect attempt while ZooKeeper is
    # unreachable (--zookeeper); the resolver's own line says it once, naming the quorum.
    quiet = logging.getLevelName(log_level.upper()) >= logging.WARNING
    logging.getLogger(KAZOO_LOGGER).setLevel(logging.ERROR if quiet else logging.NOTSET)
    if namenode is not None and fs_address is not None:
        raise click.UsageError("give --namenode or -fs, not both")
    if zookeeper is not None and (namenode is not None or fs_address is not None):
        raise click.UsageError(
            "--zookeeper finds the NameNodes, --namenode and -fs ask one: give one, not both"
        )
    if fs_address is not None and ":" not in fs_address:
        raise click.BadParameter(f"{fs_address!r} is not host:port", param_hint="-fs")
    shell = _Shell(conf_path, namenode=namenode, fs_address=fs_address, stale_ok=stale_ok,
                   zookeeper=zookeeper)
    ctx.obj = shell
    ctx.call_on_close(shell.close)


@main.command()
@click.option("-p", "parents", is_flag=True, help="Create missing parents; no error if it exists.")
@click.argument("paths", nargs=-1, required=True)
@click.pass_obj
def mkdir(shell: _Shell, parents: bool, paths: tuple[str, ...]) -> None:
    """Create directories. Several are made in one atomic multi-op call when every one can
    be; when one cannot, each is tried alone and refused alone, as hdfs dfs does."""
    targets = shell.expand_all("mkdir", paths)
    if not _in_one_multi(shell, [MkdirsOp(p, parents=parents) for p in targets]):
        for path in targets:
            with shell.reporting("mkdir", path):
                shell.fs.mkdirs(path, parents=parents)
    shell.finish()


def _in_one_multi(shell: _Shell, ops: list[MkdirsOp | DeleteOp]) -> bool:
    """Apply ``ops`` in one multi (one round trip, all or none); False when there are fewer
    than two, more than one multi holds, or the multi was refused (nothing was changed:
    the caller then runs them one by one, so that each path gets its own answer)."""
    if not 2 <= len(ops) <= MULTI_OPS:
        return False
    try:
        shell.fs.multi(ops)
    except NamenodeError as exc:
        log.debug("multi refused; one call per path", error=str(exc))
        return False
    return True


@main.command()
@click.argument("paths", nargs=-1, required=True)
@click.pass_context
def touchz(ctx: click.Context, paths: tuple[str, ...]) -> None:
    """Create empty files; an existing empty file is left unchanged."""
    shell: _Shell = ctx.obj
    command = ctx.info_name or "touchz"
    for path in shell.expand_all(command, paths):
        # An existing file: nothing to do if it is empty (a directory is PathIsDirectoryError).
        with shell.reporting(command, path):
            try:
                shell.fs.create(path)
            except PathExistsError:
                if shell.fs.stat(path).length != 0:
                    shell.refuse(command, path, "Not a zero-length file")
    shell.finish()


main.add_command(touchz, "touch")


@main.command()
@click.option("-r", "-R", "recursive", is_flag=True, help="Delete directories and their content.")
@click.option("-f", "force", is_flag=True, help="No error for a path that does not exist.")
@click.argument("paths", nargs=-1, required=True)
@click.pass_obj
def rm(shell: _Shell, recursive: bool, force: bool, paths: tuple[str, ...]) -> None:
    """Delete files (and directories, with -r). With -r, several paths are deleted in one
    atomic multi-op call when every one can be; else each alone, as hdfs dfs does."""
    targets = shell.expand_all("rm", paths, quiet_missing=force)
    if recursive and _in_one_multi(shell, [DeleteOp(p, recursive=True) for p in targets]):
        for path in targets:
            click.echo(f"Deleted {namespace_paths.printable(path)}")
        shell.finish()
        return
    for path in targets:
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
    *patterns, dst_pattern = paths
    destinations = shell.expand("mv", dst_pattern)
    if len(destinations) > 1:
        shell.refuse("mv", dst_pattern, "matches more than one path")
    if len(destinations) != 1:
        shell.finish()
    dst = destinations[0]
    sources = shell.expand_all("mv", patterns)
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
@click.option("-h", "human", is_flag=True, help="Lengths as 1.5 K, 2 M, ...")
@click.argument("paths", nargs=-1)
@click.pass_obj
def ls(
    shell: _Shell, recursive: bool, directory: bool, human: bool, paths: tuple[str, ...]
) -> None:
    """List directories (/ by default)."""
    columns = Columns()
    ahead = ListingsAhead(shell.fs.list, LS_WINDOW if recursive else 1)

    def listing(path: str) -> list[StatInfo]:
        items = ahead.take(path)
        if items and not recursive:
            click.echo(f"Found {len(items)} items")
        columns.widen(items)
        if recursive:
            ahead.found(st.path for st in items if st.is_dir)
        return items

    def list_directory(path: str) -> None:
        # Depth first with a stack of the listings being printed, not recursion: a tree may
        # be 1000 directories deep (hanamenode.paths), past Python's recursion limit.
        stack = [iter(listing(path))]
        while stack:
            st = next(stack[-1], None)
            if st is None:
                stack.pop()
                continue
            click.echo(ls_line(st, columns, human=human))
            if recursive and st.is_dir:
                with shell.reporting("ls", st.path):
                    stack.append(iter(listing(st.path)))

    with ahead:
        for path in shell.expand_all("ls", paths or (namespace_paths.ROOT,)):
            with shell.reporting("ls", path):
                st = shell.fs.stat(path)
                if st.is_dir and not directory:
                    list_directory(path)
                else:
                    columns.widen([st])
                    click.echo(ls_line(st, columns, human=human))
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
    for path in shell.expand_all("stat", paths):
        with shell.reporting("stat", path):
            click.echo(format_stat(fmt, shell.fs.stat(path)))
    shell.finish()


@main.command()
@click.option(
    "--ignore-fail-on-non-empty",
    "ignore_non_empty",
    is_flag=True,
    help="No error for a directory that is not empty.",
)
@click.argument("paths", nargs=-1, required=True)
@click.pass_obj
def rmdir(shell: _Shell, ignore_non_empty: bool, paths: tuple[str, ...]) -> None:
    """Delete empty directories."""
    for path in shell.expand_all("rmdir", paths):
        with shell.reporting("rmdir", path):
            if not shell.fs.stat(path).is_dir:
                shell.refuse("rmdir", path, "Is not a directory")
                continue
            try:
                shell.fs.delete(path, recursive=False)
            except DirectoryNotEmptyError:
                if not ignore_non_empty:
                    shell.refuse("rmdir", path, "Directory is not empty")
    shell.finish()


@main.command(name="test")
@click.option("-e", "flags", flag_value="e", multiple=True, help="The path exists.")
@click.option("-d", "flags", flag_value="d", multiple=True, help="It is a directory.")
@click.option("-f", "flags", flag_value="f", multiple=True, help="It is a file.")
@click.option("-s", "flags", flag_value="s", multiple=True, help="Its length is not 0.")
@click.option("-z", "flags", flag_value="z", multiple=True, help="Its length is 0.")
@click.argument("path")
@click.pass_obj
def test_command(shell: _Shell, flags: tuple[str, ...], path: str) -> None:
    """Exit 0 when PATH passes the one test flag, 1 when it does not; print nothing."""
    if len(flags) != 1:
        raise click.UsageError("test needs exactly one of -e -d -f -s -z")
    matches = shell.expand_all("test", [path], quiet_missing=True)
    st: StatInfo | None = None
    if len(matches) == 1:
        with shell.reporting("test", path), contextlib.suppress(PathNotFoundError):
            st = shell.fs.stat(matches[0])
    if shell.errors or not passes_test(flags[0], st):
        click.get_current_context().exit(1)


def _summarize(fs: HaFsClient, root: StatInfo) -> ContentSummary:
    """Walk the tree under ``root`` by listing (there is no content-summary RPC)."""
    if not root.is_dir:
        return ContentSummary(0, 1, root.length)
    directories, files, length = 1, 0, 0
    pending = [root.path]
    while pending:
        for st in fs.list(pending.pop()):
            if st.is_dir:
                directories += 1
                pending.append(st.path)
            else:
                files += 1
                length += st.length
    return ContentSummary(directories, files, length)


@main.command()
@click.option("-q", "quotas", is_flag=True, help="Quota columns first (none: no quotas here).")
@click.option("-h", "human", is_flag=True, help="Sizes as 1.5 K, 2 M, ...")
@click.argument("paths", nargs=-1, required=True)
@click.pass_obj
def count(shell: _Shell, quotas: bool, human: bool, paths: tuple[str, ...]) -> None:
    """Count the directories, files and bytes under each path."""
    for path in shell.expand_all("count", paths):
        with shell.reporting("count", path):
            summary = _summarize(shell.fs, shell.fs.stat(path))
            shown = namespace_paths.printable(path)
            click.echo(count_line(shown, summary, quotas=quotas, human=human))
    shell.finish()


@main.command()
@click.option("-name", "name", default=None, help="Base names that match this glob.")
@click.option("-iname", "iname", default=None, help="The same, ignoring case.")
@click.option("-print", "print_", is_flag=True, help="Print each match (the default).")
@click.argument("paths", nargs=-1)
@click.pass_obj
def find(
    shell: _Shell, name: str | None, iname: str | None, print_: bool, paths: tuple[str, ...]
) -> None:
    """Print every path under PATH... (/ by default) whose name matches -name or -iname."""
    del print_  # printing is the only action
    if name is not None and iname is not None:
        raise click.UsageError("find takes one of -name and -iname")
    try:
        regex = component_regex(name) if name is not None else None
        if iname is not None:
            regex = re.compile(component_regex(iname.lower()).pattern, re.DOTALL)
    except GlobError as exc:
        raise click.UsageError(f"Illegal file pattern: {exc}") from None

    def wanted(st: StatInfo) -> bool:
        if regex is None:
            return True
        base = namespace_paths.basename(st.path) if st.path != namespace_paths.ROOT else ""
        return regex.fullmatch(base.lower() if iname is not None else base) is not None

    for path in shell.expand_all("find", paths or (namespace_paths.ROOT,)):
        with shell.reporting("find", path):
            pending = [shell.fs.stat(path)]
            while pending:
                st = pending.pop()
                if wanted(st):
                    click.echo(namespace_paths.printable(st.path))
                if st.is_dir:
                    with shell.reporting("find", st.path):
                        pending.extend(reversed(shell.fs.list(st.path)))
    shell.finish()


# ---------------------------------------------------------------------------------------------
# Tab completion: click's ``_HAFS_COMPLETE`` protocol (docs/operations.md §11).
# ---------------------------------------------------------------------------------------------


def complete_path(ctx: click.Context, incomplete: str) -> list[CompletionItem]:
    """The namespace's names that complete ``incomplete``, a directory with a trailing ``/``
    (to go on into it: ``hafs`` takes the ``/``) and a file without. Read from any NameNode
    (a stale read is enough to type a name), with the options given to ``hafs`` before the
    command."""
    if not incomplete.startswith(namespace_paths.SEPARATOR):
        return [CompletionItem(namespace_paths.SEPARATOR)] if not incomplete else []
    typed_dir, _, prefix = incomplete.rpartition(namespace_paths.SEPARATOR)
    directory = normalize_argument(typed_dir or namespace_paths.ROOT)
    options = ctx.find_root().params
    shell = _Shell(
        options.get("conf_path"),
        namenode=options.get("namenode"),
        fs_address=options.get("fs_address"),
        stale_ok=True,
    )
    try:
        items = shell.fs.list(directory)
    except (NamenodeError, click.ClickException):
        # A completion has no channel for an error: its output is the list of candidates
        # and the terminal line is being edited. No candidate is what the user sees.
        return []
    finally:
        shell.close()
    if len(items) == 1 and items[0].path == directory:  # a file lists as itself
        return []
    return [
        CompletionItem(f"{typed_dir}/{name}" + ("/" if st.is_dir else ""))
        for st in items
        if (name := namespace_paths.basename(st.path)).startswith(prefix)
    ]


class NamespacePath(click.ParamType):
    """A path argument of a ``hafs`` command: a string whose tab completion lists the
    namespace (``complete_path``)."""

    name = "path"

    def shell_complete(
        self, ctx: click.Context, param: click.Parameter, incomplete: str
    ) -> list[CompletionItem]:
        return complete_path(ctx, incomplete)


# Every argument of every command is a path (or, for stat, a FORMAT, where a path candidate
# does no harm); set here once so that a command added later completes too.
for _command in main.commands.values():
    for _param in _command.params:
        if isinstance(_param, click.Argument):
            _param.type = NamespacePath()


@add_completion_class
class _BashComplete(BashComplete):
    """click's bash completion, except that a lone candidate ending in ``/`` (a directory)
    gets no space after it, so that the next tab goes on into the directory."""

    source_template = BashComplete.source_template.replace(
        "    return 0\n}",
        "    if [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == */ ]]; then\n"
        "        compopt -o nospace\n"
        "    fi\n\n"
        "    return 0\n}",
        1,
    )


if __name__ == "__main__":
    main()
