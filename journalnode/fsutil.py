"""Durable-file primitives for the JournalNode's on-disk storage (DESIGN.md section 4).

A JournalNode acknowledges an edit only once it is on disk, and promises an epoch only once
the promise survives a crash, so every file it keeps is written in one of two ways:

- replaced atomically (``atomic_write``): write a temp file beside the target, fsync it,
  rename it over the target, fsync the directory. A crash leaves either the old or the new
  content, plus at worst a temp file that ``is_temp_name`` recognizes and start-up removes;
- appended and fdatasync'ed (``write_all`` plus the caller's sync), for segment files.

Every ``OSError`` becomes a ``StorageError`` naming the path and the errno, so the servicer
reports one error type (UNAVAILABLE) and the operator reads which file failed and why.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import socket
from collections.abc import Iterator
from pathlib import Path

from journalnode.errors import InvalidRequestError, StorageError, StorageLockedError

LOCK_FILE = "in_use.lock"

# Temp files are hidden and end in ".tmp": no segment, epoch, VERSION or paxos file, and no
# moved-aside file (which keeps its segment name as prefix), can ever look like one.
_TEMP_PREFIX = "."
_TEMP_SUFFIX = ".tmp"

_JOURNAL_ID = re.compile(r"[A-Za-z0-9._-]{1,200}")


def validate_journal_id(journal_id: object) -> str:
    """Return ``journal_id`` if it is safe as one directory name, else raise InvalidRequestError.

    The id arrives from the network and becomes a path component under the storage root, so
    anything that could escape it ("..", "/", NUL) or surprise a shell is refused.
    """
    if not isinstance(journal_id, str) or not _JOURNAL_ID.fullmatch(journal_id):
        raise InvalidRequestError(
            f"invalid journal id {journal_id!r}: expected 1-200 characters from [A-Za-z0-9._-]"
        )
    if journal_id in (".", "..", "in_use.lock"):
        # in_use.lock is the storage root's own lock file (journalnode.server).
        raise InvalidRequestError(f"invalid journal id {journal_id!r}: reserved name")
    return journal_id


def storage_error(action: str, path: Path | str, exc: OSError) -> StorageError:
    """A StorageError that says what failed, on which file, and the errno (name and text)."""
    code = errno.errorcode.get(exc.errno, str(exc.errno)) if exc.errno is not None else "?"
    reason = exc.strerror or str(exc)
    return StorageError(f"cannot {action} {path}: {reason} [{code}]")


@contextlib.contextmanager
def storage_errors(action: str, path: Path | str) -> Iterator[None]:
    """Turn any OSError raised inside the block into a StorageError naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise storage_error(action, path, exc) from exc


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
        except OSError as exc:
            raise storage_error("create", path, exc) from exc
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
    with storage_errors("fsync directory", directory):
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
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
    one the rename itself could be lost.
    """
    fd, tmp = open_temp(path.parent, path.name)
    try:
        try:
            write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        remove_quietly(tmp)
        raise storage_error("write", path, exc) from exc
    except BaseException:
        remove_quietly(tmp)
        raise
    fsync_dir(path.parent)


def read_if_exists(path: Path) -> bytes | None:
    """The whole content of a small file, or None if it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise storage_error("read", path, exc) from exc


def ensure_dir(directory: Path) -> None:
    """Create ``directory`` (and missing parents) durably: each new entry's parent is fsynced."""
    if directory.is_dir():
        return
    parent = directory.parent
    if parent != directory:
        ensure_dir(parent)
    try:
        os.mkdir(directory, 0o755)
    except FileExistsError:
        if not directory.is_dir():
            raise StorageError(
                f"cannot create directory {directory}: a file is in the way"
            ) from None
        return
    except OSError as exc:
        raise storage_error("create directory", directory, exc) from exc
    fsync_dir(parent)


def lock_directory(directory: Path) -> int:
    """Take ``<directory>/in_use.lock`` (flock, exclusive, non-blocking) and return its fd.

    The lock lives as long as the fd stays open, and the kernel drops it when the process
    dies, so a ``kill -9`` never leaves a stale lock. The holder writes ``pid@host`` into the
    file so that the error seen by a second JournalNode says who holds it.
    """
    path = directory / LOCK_FILE
    with storage_errors("open lock file", path):
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _lock_holder(fd)
        os.close(fd)
        raise StorageLockedError(
            f"storage directory {directory} is in use: {path} is locked by another process"
            f" ({holder})"
        ) from None
    except OSError as exc:
        os.close(fd)
        raise storage_error("lock", path, exc) from exc
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}@{socket.gethostname()}\n".encode(), 0)
    except OSError as exc:
        os.close(fd)
        raise storage_error("write lock file", path, exc) from exc
    return fd


def _lock_holder(fd: int) -> str:
    """Describe the lock holder from what it wrote, for the error message only."""
    try:
        text = os.pread(fd, 256, 0).decode("utf-8", "replace").strip()
    except OSError:
        return "holder unknown"
    pid, _, host = text.partition("@")
    if not pid.isdigit():
        return "holder unknown"
    return f"pid {pid} on {host}" if host else f"pid {pid}"
