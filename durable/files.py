"""Durable-file primitives: how a file is replaced so that a crash leaves the old or the new
content, how a directory entry is made durable, and the ``in_use.lock`` that keeps a second
process off a storage directory.

Everything here raises plain ``OSError`` (with the path set), so that each caller can turn it
into its own error type: the JournalNode's ``StorageError`` (``journalnode.fsutil``), the
NameNode's ``NameDirError``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import secrets
import socket
from pathlib import Path

LOCK_FILE = "in_use.lock"

# Temp files are hidden and end in ".tmp", so that no data file name (segment, epoch, VERSION,
# paxos, fsimage) can ever look like one, and start-up can remove them without a second look.
_TEMP_PREFIX = "."
_TEMP_SUFFIX = ".tmp"


class DirectoryLockedError(OSError):
    """``in_use.lock`` is held by another process; ``holder`` describes it ("pid 12 on h")."""

    def __init__(self, directory: Path, holder: str) -> None:
        super().__init__(errno.EWOULDBLOCK, f"locked by another process ({holder})")
        self.filename = str(directory / LOCK_FILE)
        self.directory = directory
        self.holder = holder


def is_temp_name(name: str) -> bool:
    """True for a file name that ``open_temp`` may have made (a crash leftover at start-up)."""
    return name.startswith(_TEMP_PREFIX) and name.endswith(_TEMP_SUFFIX) and name != _TEMP_SUFFIX


def open_temp(directory: Path, target_name: str) -> tuple[int, Path]:
    """Create a new, empty temp file in ``directory`` for an eventual rename to ``target_name``.

    The temp lives in the target's directory so that the rename is atomic (same filesystem).
    Returns the write-only fd and the path; the caller closes the fd and renames or unlinks.
    """
    while True:
        path = directory / f"{_TEMP_PREFIX}{target_name}.{secrets.token_hex(6)}{_TEMP_SUFFIX}"
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
        except FileExistsError:
            continue
        return fd, path


def write_all(fd: int, data: bytes | memoryview) -> None:
    """os.write until every byte is written: a write may be short (signals, disk nearly full)."""
    written = os.write(fd, data)
    if written == len(data):
        return
    view = memoryview(data)[written:]
    while view:
        view = view[os.write(fd, view) :]


def fsync_dir(directory: Path) -> None:
    """fsync a directory, making the creations, renames and unlinks inside it durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_file(path: Path) -> None:
    """fsync a file written through another descriptor (a database engine's, for example)."""
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def remove_quietly(path: Path) -> None:
    """Unlink a temp file while another error is already on its way up (that one matters)."""
    with contextlib.suppress(OSError):
        os.unlink(path)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` so that a crash leaves the old or the new content.

    Temp file, fsync, rename over, fsync the directory: without the first fsync the rename
    could reach the disk before the data (an empty file after a crash); without the last
    one the rename itself could be lost. A failure leaves no temp file behind.
    """
    fd, tmp = open_temp(path.parent, path.name)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        remove_quietly(tmp)
        raise
    fsync_dir(path.parent)


def ensure_dir(directory: Path) -> None:
    """Create ``directory`` (and missing parents) durably: each new entry's parent is fsynced.

    A directory that exists already has its parent fsynced too: it may have been made by a
    process killed between its mkdir and that fsync (or by hand), and then everything made
    durable below it would hang from a name a power cut can still drop (issue 26).
    A file in the way is a ``FileExistsError``.
    """
    parent = directory.parent
    if directory.is_dir():
        if parent != directory:
            fsync_dir(parent)
        return
    if parent != directory:
        ensure_dir(parent)
    try:
        os.mkdir(directory, 0o755)
    except FileExistsError:
        if not directory.is_dir():
            raise FileExistsError(errno.EEXIST, "a file is in the way", str(directory)) from None
        return
    fsync_dir(parent)


def lock_directory(directory: Path) -> int:
    """Take ``<directory>/in_use.lock`` (flock, exclusive, non-blocking) and return its fd.

    The lock lives as long as the fd stays open, and the kernel drops it when the process
    dies, so a ``kill -9`` never leaves a stale lock. The holder writes ``pid@host`` into the
    file so that the error a second process gets (``DirectoryLockedError``) says who holds it.
    """
    path = directory / LOCK_FILE
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = lock_holder(fd)
        os.close(fd)
        raise DirectoryLockedError(directory, holder) from None
    except BaseException:
        os.close(fd)
        raise
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}@{socket.gethostname()}\n".encode(), 0)
    except BaseException:
        os.close(fd)
        raise
    return fd


def lock_holder(fd: int) -> str:
    """Describe the lock holder from what it wrote, for error messages only."""
    try:
        text = os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
    except OSError:
        return "holder unknown"
    pid, _, host = text.partition("@")
    if not pid.isdigit():
        return "holder unknown"
    return f"pid {pid} on {host}" if host else f"pid {pid}"
