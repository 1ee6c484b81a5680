"""A FUSE filesystem that loses what a power cut loses, for the power-cut tests (issue 26,
docs/protocol.md §14). Harness only: no product package imports it.

``CrashMount`` mounts a backing directory at a mount point through a server process of its
own (``python -m hadev.crashfs serve``, on libfuse3 through ``mfusepy``). Every operation
passes through to the backing directory, and the server tracks what a disk would not hold
yet:

- a file's data and size since the last fsync or fdatasync of that file;
- a directory's entries (creates, mkdirs, renames, unlinks) since the last fsync of that
  directory.

``cut`` is the power cut. The caller has killed the processes on the mount with SIGKILL first
(``cut_power`` does both); the server then stops answering (EIO), rolls every file back to
its last synced content, rebuilds the tree from the entries each directory last synced, and
optionally leaves a torn write: a proper prefix of the last unsynced write of one file that
continues its durable content. The backing directory then holds what the disk would::

    with CrashMount(backing, mountpoint) as mount:      # mounted
        run_daemon_on(mountpoint)
        report = cut_power([mount], pids=[daemon_pid], torn=True, seed=7)
        mount.remount()                                 # power back on: a fresh server
        ...

How: a file is rolled back through an undo log. The first time a byte of the synced content
is overwritten or truncated away after a sync, its old value is saved; appends cost nothing.
Rolling back writes the saved bytes back in reverse order and truncates to the synced size.
Files are known by an id of the server's own (a backing inode number can be reused once the
file is gone), and an unlinked or replaced file that a synced directory still names is
moved to a graveyard beside the backing directory, not removed, so that the cut can bring
it back. Hard links are refused (no daemon makes them).

Not modelled: metadata (modes, times) is always durable; a file renamed between two
directories may come back under both names or neither, depending on which directory was
synced (a journaling filesystem would keep one); the backing directory itself is never
fsynced (it is not the disk under test).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import random
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = [
    "CrashFSError",
    "CrashMount",
    "CutReport",
    "cut_power",
    "fuse_available",
]

MOUNT_TIMEOUT = 15.0
COMMAND_TIMEOUT = 60.0
UNMOUNT_TIMEOUT = 10.0


class CrashFSError(RuntimeError):
    """The crash filesystem could not mount, answer or unmount; the message says which."""


def fuse_available() -> str | None:
    """None when this machine can mount a crash filesystem, else why not (one line)."""
    if not os.path.exists("/dev/fuse"):
        return "no /dev/fuse"
    if shutil.which("fusermount3") is None:
        return "no fusermount3 (apt-get install fuse3)"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:
        return f"mfusepy cannot load libfuse3: {exc}"
    return None


# -------------------------------------------------------------------------------------------
# The server: runs in the mount's own process.
# -------------------------------------------------------------------------------------------


@dataclass
class _Undo:
    """How to bring one file back to its synced content: ``synced_size`` and the synced bytes
    that later writes overwrote or truncations cut away (oldest first); the last unsynced
    write, for a torn one."""

    synced_size: int
    saved: list[tuple[int, bytes]] = field(default_factory=list)
    last_write: tuple[int, bytes] | None = None


def _fuse_error(code: int) -> OSError:
    from mfusepy import FuseOSError

    return FuseOSError(code)


class CrashFS:
    """The FUSE operations (mfusepy's high-level API): pass-through to ``backing`` plus the
    bookkeeping of what is durable (module docstring). ``cut`` is called by the control
    thread of ``serve``."""

    use_ns = True

    def __init__(self, backing: Path, state_dir: Path) -> None:
        self.backing = backing
        self.grave = state_dir / "grave"
        self.staging = state_dir / "staging"
        for directory in (self.grave, self.staging):
            if directory.exists():
                shutil.rmtree(directory)
            directory.mkdir(parents=True)
        self._mutex = threading.RLock()
        self.dead = False
        self.hold_pattern: str | None = None
        self.held = threading.Event()
        self._next_fid = 0
        self.fid_of_ino: dict[int, int] = {}
        self.kind: dict[int, str] = {}  # "f", "d" or "l"
        self.link_target: dict[int, str] = {}
        self.undo: dict[int, _Undo] = {}
        self.durable: dict[int, dict[str, int]] = {}  # directory fid -> name -> fid
        self.refs: Counter[int] = Counter()  # how many durable entries name each fid
        self.in_grave: set[int] = set()
        self.root = self._scan(backing)

    # -- ids -----------------------------------------------------------------------------------

    def _new_fid(self, st: os.stat_result) -> int:
        self._next_fid += 1
        fid = self._next_fid
        self.fid_of_ino[st.st_ino] = fid
        mode = st.st_mode
        self.kind[fid] = "d" if stat.S_ISDIR(mode) else "l" if stat.S_ISLNK(mode) else "f"
        return fid

    def _fid(self, st: os.stat_result) -> int:
        fid = self.fid_of_ino.get(st.st_ino)
        return fid if fid is not None else self._new_fid(st)

    def _scan(self, directory: Path) -> int:
        """Register ``directory`` and everything below it as durable as it is."""
        st = os.lstat(directory)
        fid = self._fid(st)
        entries: dict[str, int] = {}
        for entry in os.scandir(directory):
            child_st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(child_st.st_mode):
                child = self._scan(Path(entry.path))
            else:
                child = self._fid(child_st)
                if stat.S_ISLNK(child_st.st_mode):
                    self.link_target[child] = os.readlink(entry.path)
            entries[entry.name] = child
        self._set_durable(fid, entries)
        return fid

    def _set_durable(self, dir_fid: int, entries: dict[str, int]) -> None:
        old = self.durable.get(dir_fid, {})
        self.refs.subtract(old.values())
        self.refs.update(entries.values())
        self.durable[dir_fid] = entries
        for fid in list(self.in_grave):
            if self.refs[fid] <= 0:  # no synced directory names it any more: truly gone
                self.in_grave.discard(fid)
                self.undo.pop(fid, None)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.grave / str(fid))
        self.refs += Counter()  # drop zero and negative counts

    # -- helpers -------------------------------------------------------------------------------

    def _path(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    def _alive(self) -> None:
        if self.dead:
            raise _fuse_error(errno.EIO)

    def _undo_for(self, fid: int, fd: int) -> _Undo:
        undo = self.undo.get(fid)
        if undo is None:
            undo = self.undo[fid] = _Undo(os.fstat(fd).st_size)
        return undo

    def _save(self, undo: _Undo, fd: int, offset: int, length: int) -> None:
        """Save the live bytes of [offset, offset+length) that lie within the synced size."""
        end = min(offset + length, undo.synced_size)
        if offset < end:
            old = os.pread(fd, end - offset, offset)
            if old:
                undo.saved.append((offset, old))

    def _to_grave(self, backing_path: str, st: os.stat_result) -> bool:
        """Move a file that a synced directory still names aside instead of removing it."""
        fid = self.fid_of_ino.get(st.st_ino)
        if fid is None or self.refs[fid] <= 0 or stat.S_ISDIR(st.st_mode):
            return False
        os.rename(backing_path, self.grave / str(fid))
        self.in_grave.add(fid)
        return True

    # -- pass-through with bookkeeping ---------------------------------------------------------

    def init(self, path: str) -> None:
        print(json.dumps({"ready": True}), flush=True)

    def getattr(self, path: str, fh: int | None = None) -> dict[str, Any]:
        self._alive()
        st = os.fstat(fh) if fh is not None else os.lstat(self._path(path))
        keys = ("st_atime", "st_ctime", "st_gid", "st_mode", "st_mtime", "st_nlink", "st_size",
                "st_uid", "st_ino", "st_blocks")
        attrs: dict[str, Any] = {key: getattr(st, key) for key in keys}
        for key in ("st_atime", "st_ctime", "st_mtime"):
            attrs[key] = getattr(st, key + "_ns")
        return attrs

    def access(self, path: str, amode: int) -> int:
        self._alive()
        if not os.access(self._path(path), amode):
            raise _fuse_error(errno.EACCES)
        return 0

    def readdir(self, path: str, fh: int) -> list[str]:
        self._alive()
        return [".", "..", *os.listdir(self._path(path))]

    def readlink(self, path: str) -> str:
        self._alive()
        return os.readlink(self._path(path))

    def statfs(self, path: str) -> dict[str, int]:
        st = os.statvfs(self._path(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files",
                "f_flag", "f_frsize", "f_namemax")
        return {key: getattr(st, key) for key in keys}

    def chmod(self, path: str, mode: int) -> int:
        self._alive()
        os.chmod(self._path(path), mode)
        return 0

    def chown(self, path: str, uid: int, gid: int) -> int:
        self._alive()
        os.chown(self._path(path), uid, gid)
        return 0

    def utimens(self, path: str, times: tuple[int, int] | None = None) -> int:
        self._alive()
        if times is None:
            os.utime(self._path(path))
        else:
            os.utime(self._path(path), ns=times)
        return 0

    def _open_flags(self, flags: int) -> int:
        # Every backing fd reads and writes, so that an overwrite can save the old bytes;
        # O_APPEND is dropped because the kernel already placed the write (its offset), and
        # O_TRUNC is done by ``_truncate`` so that the cut can undo it.
        flags &= ~(os.O_ACCMODE | os.O_APPEND | os.O_TRUNC | os.O_CREAT | os.O_EXCL)
        return flags | os.O_RDWR | os.O_CLOEXEC

    def open(self, path: str, flags: int) -> int:
        with self._mutex:
            self._alive()
            fd = os.open(self._path(path), self._open_flags(flags))
            if flags & os.O_TRUNC:
                self._truncate(fd, 0)
            return fd

    def create(self, path: str, mode: int, flags: int = os.O_WRONLY) -> int:
        with self._mutex:
            self._alive()
            full = self._path(path)
            try:
                fd = os.open(full, self._open_flags(flags) | os.O_CREAT | os.O_EXCL, mode)
            except FileExistsError:
                if flags & os.O_EXCL:
                    raise
                return self.open(path, flags)
            fid = self._new_fid(os.fstat(fd))
            self.undo[fid] = _Undo(0)  # a new file's synced content is empty
            return fd

    def mknod(self, path: str, mode: int, dev: int) -> int:
        if not stat.S_ISREG(mode):
            raise _fuse_error(errno.EPERM)
        os.close(self.create(path, mode & 0o7777, os.O_WRONLY | os.O_EXCL))
        return 0

    def read(self, path: str, size: int, offset: int, fh: int) -> bytes:
        self._alive()
        return os.pread(fh, size, offset)

    def write(self, path: str, data: bytes, offset: int, fh: int) -> int:
        with self._mutex:
            self._alive()
            fid = self._fid(os.fstat(fh))
            undo = self._undo_for(fid, fh)
            self._save(undo, fh, offset, len(data))
            written = os.pwrite(fh, data, offset)
            undo.last_write = (offset, bytes(data[:written]))
            hold = (self.hold_pattern is not None and self.hold_pattern in path
                    and bool(_sector_cuts(offset, data[:written])))
            if hold:
                self.hold_pattern = None  # one write only
        if hold:
            # The write is on the disk's cache, and its caller waits for the answer (it
            # cannot fsync yet): the moment for a cut that can tear it (``hold``).
            self.held.set()
            while not self.dead:
                time.sleep(0.002)
            raise _fuse_error(errno.EIO)
        return written

    def _truncate(self, fd: int, length: int) -> None:
        fid = self._fid(os.fstat(fd))
        undo = self._undo_for(fid, fd)
        if length < undo.synced_size:
            self._save(undo, fd, length, undo.synced_size - length)
        os.ftruncate(fd, length)

    def truncate(self, path: str, length: int, fh: int | None = None) -> int:
        with self._mutex:
            self._alive()
            if fh is not None:
                self._truncate(fh, length)
                return 0
            fd = os.open(self._path(path), os.O_RDWR | os.O_CLOEXEC)
            try:
                self._truncate(fd, length)
            finally:
                os.close(fd)
            return 0

    def fallocate(self, path: str, mode: int, offset: int, size: int, fh: int) -> int:
        if mode != 0:
            raise _fuse_error(errno.EOPNOTSUPP)
        with self._mutex:
            self._alive()
            self._undo_for(self._fid(os.fstat(fh)), fh)  # grows the size only: undone by it
            os.posix_fallocate(fh, offset, size)
            return 0

    def flush(self, path: str, fh: int) -> int:
        return 0

    def release(self, path: str, fh: int) -> int:
        os.close(fh)
        return 0

    def fsync(self, path: str, datasync: int, fh: int) -> int:
        # The file's data and size are on the disk now: nothing of it is to be undone. (The
        # backing disk is not the one under test, so it is not fsynced itself.)
        with self._mutex:
            self._alive()
            self.undo.pop(self._fid(os.fstat(fh)), None)
            return 0

    def opendir(self, path: str) -> int:
        self._alive()
        return 0

    def releasedir(self, path: str, fh: int) -> int:
        return 0

    def fsyncdir(self, path: str, datasync: int, fh: int) -> int:
        with self._mutex:
            self._alive()
            full = self._path(path)
            entries: dict[str, int] = {}
            for entry in os.scandir(full):
                st = entry.stat(follow_symlinks=False)
                fid = self._fid(st)
                if self.kind[fid] == "d":
                    self.durable.setdefault(fid, {})
                elif self.kind[fid] == "l":
                    self.link_target.setdefault(fid, os.readlink(entry.path))
                entries[entry.name] = fid
            self._set_durable(self._fid(os.lstat(full)), entries)
            return 0

    def mkdir(self, path: str, mode: int) -> int:
        with self._mutex:
            self._alive()
            full = self._path(path)
            os.mkdir(full, mode)
            fid = self._new_fid(os.lstat(full))
            self.durable[fid] = {}
            return 0

    def rmdir(self, path: str) -> int:
        with self._mutex:
            self._alive()
            os.rmdir(self._path(path))
            return 0

    def symlink(self, target: str, source: str) -> int:
        with self._mutex:
            self._alive()
            full = self._path(target)
            os.symlink(source, full)
            fid = self._new_fid(os.lstat(full))
            self.link_target[fid] = source
            return 0

    def link(self, target: str, source: str) -> int:
        raise _fuse_error(errno.EPERM)  # hard links are not modelled (module docstring)

    def unlink(self, path: str) -> int:
        with self._mutex:
            self._alive()
            full = self._path(path)
            if not self._to_grave(full, os.lstat(full)):
                os.unlink(full)
            return 0

    def rename(self, old: str, new: str) -> int:
        with self._mutex:
            self._alive()
            src, dst = self._path(old), self._path(new)
            os.lstat(src)  # ENOENT before anything moves
            buried = None
            if src != dst:
                with contextlib.suppress(FileNotFoundError):
                    st = os.lstat(dst)
                    if self._to_grave(dst, st):
                        buried = self.fid_of_ino[st.st_ino]
            try:
                os.rename(src, dst)
            except OSError:
                if buried is not None:  # a failed rename changes nothing
                    os.rename(self.grave / str(buried), dst)
                    self.in_grave.discard(buried)
                raise
            return 0

    # -- the power cut -------------------------------------------------------------------------

    def cut(self, torn: bool, seed: int) -> dict[str, Any]:
        """Discard everything not durable and rebuild the backing directory (module
        docstring); from now on every operation fails with EIO. Returns what was lost."""
        with self._mutex:
            self.dead = True
            live = self._live_paths()
            rolled_back = []
            for fid, undo in sorted(self.undo.items()):
                if self.kind.get(fid) != "f" or fid not in live:
                    continue
                if undo.saved or os.lstat(live[fid]).st_size != undo.synced_size:
                    rolled_back.append(live[fid].relative_to(self.backing).as_posix()
                                       if fid not in self.in_grave else f"(unlinked {fid})")
                fd = os.open(live[fid], os.O_RDWR | os.O_CLOEXEC)
                try:
                    for offset, old in reversed(undo.saved):
                        os.pwrite(fd, old, offset)
                    os.ftruncate(fd, undo.synced_size)
                finally:
                    os.close(fd)
            torn_write = self._tear(live, seed) if torn else None
            before = self._names(self.backing)
            self._rebuild(live)
            after = self._names(self.backing)
            return {
                "rolled_back": rolled_back,
                "lost_names": sorted(before - after),
                "revived_names": sorted(after - before),
                "torn": torn_write,
            }

    def _live_paths(self) -> dict[int, Path]:
        """Where each known file is now: in the backing tree or in the graveyard."""
        found: dict[int, Path] = {}
        for root, dirs, files in os.walk(self.backing):
            for name in dirs + files:
                path = Path(root, name)
                fid = self.fid_of_ino.get(os.lstat(path).st_ino)
                if fid is not None:
                    found.setdefault(fid, path)
        for fid in self.in_grave:
            found[fid] = self.grave / str(fid)
        return found

    def _tear(self, live: dict[int, Path], seed: int) -> dict[str, Any] | None:
        """Leave a proper prefix of the last unsynced write of one file whose synced content
        it continues (so no hole opens before it), cut at a sector boundary: the sectors
        that reached the disk. A write within one sector is never torn (a disk writes a
        sector whole)."""
        candidates = sorted(
            fid for fid, undo in self.undo.items()
            if undo.last_write is not None and _sector_cuts(*undo.last_write)
            and undo.last_write[0] <= undo.synced_size and self.refs[fid] > 0 and fid in live
        )
        if not candidates:
            return None
        rng = random.Random(seed)
        fid = rng.choice(candidates)
        last_write = self.undo[fid].last_write
        assert last_write is not None
        offset, data = last_write
        keep = rng.choice(_sector_cuts(offset, data))
        fd = os.open(live[fid], os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.pwrite(fd, data[:keep], offset)
        finally:
            os.close(fd)
        return {"file": str(live[fid]), "offset": offset, "kept": keep, "of": len(data)}

    def _rebuild(self, live: dict[int, Path]) -> None:
        shutil.rmtree(self.staging)
        self.staging.mkdir()
        linked: set[int] = set()

        def build(dir_fid: int, target: Path) -> None:
            for name, fid in sorted(self.durable.get(dir_fid, {}).items()):
                path = target / name
                kind = self.kind.get(fid)
                if kind == "d":
                    path.mkdir()
                    build(fid, path)
                elif kind == "l":
                    os.symlink(self.link_target[fid], path)
                elif fid not in live:
                    raise CrashFSError(f"crashfs lost track of the file durably named {path}")
                elif fid in linked:
                    shutil.copyfile(live[fid], path)  # named durably twice: a copy each
                else:
                    os.link(live[fid], path)
                    linked.add(fid)

        build(self.root, self.staging)
        for child in list(self.backing.iterdir()):
            if child.is_dir() and not child.is_symlink():
                shutil.rmtree(child)
            else:
                child.unlink()
        for child in list(self.grave.iterdir()):
            child.unlink()
        for child in list(self.staging.iterdir()):
            os.rename(child, self.backing / child.name)

    @staticmethod
    def _names(root: Path) -> set[str]:
        names = set()
        for base, dirs, files in os.walk(root):
            for name in dirs + files:
                names.add(Path(base, name).relative_to(root).as_posix())
        return names

    def status(self) -> dict[str, Any]:
        with self._mutex:
            return {
                "dead": self.dead,
                "unsynced_files": len(self.undo),
                "directories": len(self.durable),
            }


SECTOR = 512


def _sector_cuts(offset: int, data: bytes) -> list[int]:
    """The lengths of the proper prefixes of a write at ``offset`` that end on a sector
    boundary (only the first few hundred: a long write offers plenty)."""
    first = (offset // SECTOR + 1) * SECTOR - offset
    return list(range(first, len(data), SECTOR))[:256]


def _control(fs: CrashFS, mountpoint: str) -> None:
    """Answer the commands the parent writes on stdin, one JSON line each; on EOF (the
    parent is gone, or ``unmount``) unmount and exit, so that no mount outlives its test.
    The exit does not wait for the FUSE loop to end: a copy of the mount in another mount
    namespace (a daemon started with ``ip netns exec`` by ``hachaos``) keeps the connection,
    and so the loop, alive after the unmount here; the exit aborts it there too."""
    for line in sys.stdin:
        try:
            command = json.loads(line)
            if command["cmd"] == "cut":
                reply: dict[str, Any] = fs.cut(bool(command["torn"]), int(command["seed"]))
            elif command["cmd"] == "status":
                reply = fs.status()
            elif command["cmd"] == "off":
                with fs._mutex:  # after the operation in progress, none reaches the disk
                    fs.dead = True
                reply = {}
            elif command["cmd"] == "hold":
                fs.held.clear()
                fs.hold_pattern = str(command["pattern"])
                reply = {}
            elif command["cmd"] == "wait_held":
                reply = {"held": fs.held.wait(float(command["seconds"]))}
            else:
                reply = {"error": f"unknown command {command['cmd']!r}"}
        except Exception as exc:  # the parent gets it as the answer, not a dead channel
            reply = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(reply), flush=True)
    subprocess.run(["fusermount3", "-uz", mountpoint], check=False, timeout=UNMOUNT_TIMEOUT)
    os._exit(0)  # nothing to flush: every change reached the backing directory already


def serve(backing: Path, mountpoint: Path, state_dir: Path) -> None:
    """Run the filesystem in this process until it is unmounted."""
    import mfusepy

    fs = CrashFS(backing.resolve(), state_dir.resolve())
    threading.Thread(
        target=_control, args=(fs, str(mountpoint)), name="crashfs-control", daemon=True
    ).start()
    # hard_remove: an unlinked open file is not renamed to .fuse_hidden* (a rename the
    # model would have to track); the kernel's attribute cache stays, since every change to
    # the backing directory comes through this mount until the cut, and a cut remounts.
    mfusepy.FUSE(fs, str(mountpoint), foreground=True, fsname="crashfs", hard_remove=True)


# -------------------------------------------------------------------------------------------
# The client side: the test process.
# -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CutReport:
    """What one mount lost in a cut: files rolled back to their synced content, names
    that are gone or came back (relative to the mount), and the torn write left, if any."""

    mount: Path
    rolled_back: tuple[str, ...]
    lost_names: tuple[str, ...]
    revived_names: tuple[str, ...]
    torn: dict[str, Any] | None

    def describe(self) -> str:
        torn = (f", torn {Path(self.torn['file']).name} at {self.torn['offset']} "
                f"({self.torn['kept']} of {self.torn['of']} bytes)") if self.torn else ""
        return (f"{self.mount.name}: {len(self.rolled_back)} files rolled back, "
                f"{len(self.lost_names)} names lost, {len(self.revived_names)} revived{torn}")


class CrashMount:
    """``backing`` mounted at ``mountpoint`` through a crash filesystem server of its own
    (module docstring); its bookkeeping lives in ``state_dir`` (default: beside
    ``backing``, on the same filesystem). A context manager: leaving unmounts."""

    def __init__(
        self, backing: Path, mountpoint: Path, state_dir: Path | None = None,
        log_path: Path | None = None,
    ) -> None:
        self.backing = Path(backing).absolute()
        self.mountpoint = Path(mountpoint).absolute()
        self.state_dir = (Path(state_dir) if state_dir is not None
                          else self.backing.with_name(self.backing.name + ".crashfs"))
        self.log_path = log_path if log_path is not None else self.state_dir / "crashfs.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.cuts = 0

    def __repr__(self) -> str:
        return f"CrashMount({self.backing} at {self.mountpoint})"

    def mount(self, timeout: float = MOUNT_TIMEOUT) -> CrashMount:
        if self.proc is not None:
            raise CrashFSError(f"{self.mountpoint} is mounted already")
        for directory in (self.backing, self.mountpoint, self.state_dir):
            directory.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "hadev.crashfs", "serve", str(self.backing),
                 str(self.mountpoint), str(self.state_dir)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log,
                env=env, start_new_session=True,
            )
        try:
            reply = self._read_reply(timeout)
            if not reply.get("ready"):
                raise CrashFSError(f"crashfs on {self.mountpoint} said {reply}")
            deadline = time.monotonic() + timeout
            while not os.path.ismount(self.mountpoint):
                if time.monotonic() > deadline:
                    raise CrashFSError(f"{self.mountpoint} not mounted within {timeout:g}s")
                time.sleep(0.01)
        except BaseException:
            self.unmount()
            raise
        return self

    def _read_reply(self, timeout: float) -> dict[str, Any]:
        assert self.proc is not None and self.proc.stdout is not None
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        if not line:
            code = self.proc.poll()
            tail = self.log_path.read_text(errors="replace") if self.log_path.exists() else ""
            raise CrashFSError(
                f"crashfs on {self.mountpoint} did not answer within {timeout:g}s "
                f"(exit status {code}); log {self.log_path}: {tail.strip().splitlines()[-1:]}"
            )
        reply: dict[str, Any] = json.loads(line)
        if "error" in reply:
            raise CrashFSError(f"crashfs on {self.mountpoint}: {reply['error']}")
        return reply

    def command(self, timeout: float = COMMAND_TIMEOUT, **command: Any) -> dict[str, Any]:
        if self.proc is None or self.proc.stdin is None:
            raise CrashFSError(f"{self.mountpoint} is not mounted")
        self.proc.stdin.write(json.dumps(command).encode() + b"\n")
        self.proc.stdin.flush()
        return self._read_reply(timeout)

    def cut(self, *, torn: bool = False, seed: int = 0) -> CutReport:
        """The power cut of this mount (the processes on it must be dead already): the
        backing directory holds what the disk would; the mount answers EIO until
        ``remount``."""
        reply = self.command(cmd="cut", torn=torn, seed=seed)
        self.cuts += 1
        return CutReport(
            self.mountpoint, tuple(reply["rolled_back"]), tuple(reply["lost_names"]),
            tuple(reply["revived_names"]), reply["torn"],
        )

    def status(self) -> dict[str, Any]:
        return self.command(cmd="status")

    def power_off(self) -> None:
        """Stop answering (EIO) at once, before the cut rolls the disk back: a process in a
        held write (``hold_next_write``) can die only once its write is answered."""
        self.command(cmd="off")

    def hold_next_write(self, pattern: str) -> None:
        """Hold the next write to a file whose path contains ``pattern`` (one that a cut
        can tear: it crosses a sector boundary) unanswered, after it reached the backing
        directory, until the cut: the writer cannot fsync it, so a cut then loses it or,
        with ``torn``, keeps part of it. ``wait_held`` says when it came."""
        self.command(cmd="hold", pattern=pattern)

    def wait_held(self, timeout: float) -> bool:
        """Whether the write ``hold_next_write`` asked for is held (waits up to
        ``timeout``)."""
        reply = self.command(timeout + COMMAND_TIMEOUT, cmd="wait_held", seconds=timeout)
        return bool(reply["held"])

    def unmount(self, timeout: float = UNMOUNT_TIMEOUT) -> None:
        """``fusermount3 -u`` (lazily, ``-uz``, if busy), then wait for the server to exit
        (SIGKILL after ``timeout``)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if os.path.ismount(self.mountpoint):
            done = subprocess.run(["fusermount3", "-u", str(self.mountpoint)],
                                  capture_output=True, timeout=timeout, check=False)
            if done.returncode != 0:
                subprocess.run(["fusermount3", "-uz", str(self.mountpoint)],
                               capture_output=True, timeout=timeout, check=False)
        if proc.stdin is not None:
            with contextlib.suppress(OSError):
                proc.stdin.close()
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout)
        if proc.stdout is not None:
            proc.stdout.close()

    def remount(self) -> CrashMount:
        """Power back on: unmount and mount again; everything in the backing directory is
        durable to the new server."""
        self.unmount()
        return self.mount()

    def __enter__(self) -> CrashMount:
        return self.mount()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.unmount()


def _wait_dead(pid: int, timeout: float) -> None:
    """Wait until ``pid`` is gone or a zombie: then no request of it is left in flight."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, IndexError):
            return
        if state in ("Z", "X"):
            return
        if time.monotonic() > deadline:
            raise CrashFSError(f"pid {pid} still alive {timeout:g}s after SIGKILL")
        time.sleep(0.005)


def cut_power(
    mounts: Iterable[CrashMount], pids: Sequence[int] = (), *, torn: bool = False,
    seed: int = 0, kill: Callable[[], None] | None = None, timeout: float = 10.0,
) -> list[CutReport]:
    """Cut the power of ``mounts`` at once: SIGKILL ``pids``, stop every mount answering
    (``power_off``), call ``kill`` (a launcher's own kill that reaps its processes), wait
    until they are dead, then ``cut`` every mount (a torn write on each, drawn from
    ``seed``, when ``torn``)."""
    mounts = list(mounts)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for mount in mounts:
        mount.power_off()  # a request still in flight fails: its process can die
    if kill is not None:
        kill()
    for pid in pids:
        _wait_dead(pid, timeout)
    return [mount.cut(torn=torn, seed=seed + index) for index, mount in enumerate(mounts)]


def main(argv: Sequence[str]) -> int:
    if len(argv) != 4 or argv[0] != "serve":
        print("usage: python -m hadev.crashfs serve BACKING MOUNTPOINT STATE_DIR",
              file=sys.stderr)
        return 2
    serve(Path(argv[1]), Path(argv[2]), Path(argv[3]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
