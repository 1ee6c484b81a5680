"""The JournalNode's view of ``durable.files`` (docs/protocol.md §7.1, HDFS-3077 §4): the same
crash-safe primitives the NameNode uses, with every ``OSError`` turned into a
``StorageError`` naming the path and the errno, so that the servicer reports one error type
(UNAVAILABLE) and the operator reads which file failed and why; plus the check that a
journal id from the network is safe as a directory name.

A JournalNode acknowledges an edit only once it is on disk, and promises an epoch only once
the promise survives a crash, so every file it keeps is either replaced atomically
(``atomic_write``) or appended and fdatasync'ed (segment files).
"""

from __future__ import annotations

import contextlib
import errno
import re
from collections.abc import Iterator
from pathlib import Path

from durable import files
from durable.files import LOCK_FILE, is_temp_name, remove_quietly, write_all
from journalnode.errors import InvalidRequestError, StorageError, StorageLockedError

__all__ = [
    "LOCK_FILE",
    "atomic_write",
    "ensure_dir",
    "fsync_dir",
    "is_temp_name",
    "lock_directory",
    "open_temp",
    "read_if_exists",
    "remove_quietly",
    "storage_error",
    "storage_errors",
    "validate_journal_id",
    "write_all",
]

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
    return StorageError(f"cannot {action} {path}: {reason} [{code}]", exc.errno)


@contextlib.contextmanager
def storage_errors(action: str, path: Path | str) -> Iterator[None]:
    """Turn any OSError raised inside the block into a StorageError naming ``path``."""
    try:
        yield
    except OSError as exc:
        raise storage_error(action, path, exc) from exc


def open_temp(directory: Path, target_name: str) -> tuple[int, Path]:
    """``durable.files.open_temp``: a new temp file beside ``target_name``, (fd, path)."""
    with storage_errors("create a temp file in", directory):
        return files.open_temp(directory, target_name)


def fsync_dir(directory: Path) -> None:
    """fsync a directory, making the creations, renames and unlinks inside it durable."""
    with storage_errors("fsync directory", directory):
        files.fsync_dir(directory)


def atomic_write(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data``: a crash leaves the old or the new content."""
    with storage_errors("write", path):
        files.atomic_write(path, data)


def read_if_exists(path: Path) -> bytes | None:
    """The whole content of a small file, or None if it does not exist."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise storage_error("read", path, exc) from exc


def ensure_dir(directory: Path) -> None:
    """Create ``directory`` (and missing parents) durably."""
    try:
        files.ensure_dir(directory)
    except FileExistsError:
        raise StorageError(f"cannot create directory {directory}: a file is in the way") from None
    except OSError as exc:
        raise storage_error("create directory", directory, exc) from exc


def lock_directory(directory: Path) -> int:
    """Take ``<directory>/in_use.lock`` (``durable.files.lock_directory``) and return its fd;
    StorageLockedError naming the holder when another process has it."""
    path = directory / LOCK_FILE
    try:
        return files.lock_directory(directory)
    except files.DirectoryLockedError as exc:
        raise StorageLockedError(
            f"storage directory {directory} is in use: {path} is locked by another process"
            f" ({exc.holder})"
        ) from None
    except OSError as exc:
        raise storage_error("lock", path, exc) from exc
