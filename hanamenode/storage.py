"""The NameNode's local name directory: ``VERSION``, the lock, and its fsimage checkpoints
(docs/protocol.md §7.4, "NameNode").

::

    <name_dir>/in_use.lock              fcntl lock held by the running NameNode (its pid inside)
    <name_dir>/VERSION                  namespaceID, clusterID, cTime, layoutVersion (key=value)
    <name_dir>/fsimage_<txid 19>.db     checkpoints, each with its .md5 (hanamenode.fsimage)

``hanamenode format`` writes VERSION and an empty image at txid 0; ``bootstrap-standby``
writes VERSION and the image it copied from another NameNode; ``hanamenode run`` refuses a
directory without VERSION. The images themselves are ``hanamenode.fsimage``'s business.

    name_dir = NameDirectory(path)
    with name_dir.locked():
        ns_info = name_dir.read_version()
        namespace, txid, _ = name_dir.load_newest_image(retry_cache)
"""

from __future__ import annotations

import os
import secrets
import shutil
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import structlog

from conf import clock
from durable import files, version
from hanamenode import fsimage
from hanamenode.errors import CorruptImageError, FSImageError, NameDirError
from hanamenode.namespace import Namespace
from hanamenode.retry_cache import RetryCache
from proto.values import NamespaceInfo

log = structlog.get_logger(__name__)

VERSION_FILE = "VERSION"
LOCK_FILE = files.LOCK_FILE
LAYOUT_VERSION = 1


def new_namespace_info() -> NamespaceInfo:
    """A fresh identity for ``format``: ``CID-<uuid>`` and a random positive namespace id."""
    return NamespaceInfo(
        cluster_id=f"CID-{uuid.uuid4()}",
        namespace_id=secrets.randbelow(2**31 - 1) + 1,
        ctime=clock.time_ns() // 1_000_000,
        layout_version=LAYOUT_VERSION,
    )


def format_version(ns_info: NamespaceInfo) -> str:
    """The text of a VERSION file (the keys HDFS's VERSION uses; ``durable.version``)."""
    try:
        data = version.format_version(ns_info, version.NAME_NODE, title="hanamenode NameNode")
    except version.VersionFileError as exc:
        raise NameDirError(str(exc)) from None
    return data.decode()


def parse_version(text: str, source: str) -> NamespaceInfo:
    """A VERSION file's NamespaceInfo; a NameDirError naming ``source`` when malformed."""
    try:
        return version.parse_version(
            text.encode(), source, version.NAME_NODE, layout_version=LAYOUT_VERSION
        )
    except version.VersionFileError as exc:
        raise NameDirError(str(exc)) from None


class NameDirectory:
    """One NameNode's name dir. Not thread-safe on its own: the NameNode writes images from
    one thread at a time (the checkpointer, or an upload on the active)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock_fd: int | None = None

    def __repr__(self) -> str:
        return f"NameDirectory({str(self.path)!r})"

    @property
    def version_path(self) -> Path:
        return self.path / VERSION_FILE

    # -- lock ----------------------------------------------------------------------------------

    def lock(self) -> None:
        """Take ``in_use.lock``; a NameDirError names the pid of a live holder."""
        if self._lock_fd is not None:
            return
        try:
            files.ensure_dir(self.path)
            self._lock_fd = files.lock_directory(self.path)
        except files.DirectoryLockedError as exc:
            raise NameDirError(
                f"name directory {self.path} is in use by another NameNode ({exc.holder})"
            ) from None
        except OSError as exc:
            raise NameDirError(f"cannot lock name directory {self.path}: {exc}") from None

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    @contextmanager
    def locked(self) -> Iterator[NameDirectory]:
        self.lock()
        try:
            yield self
        finally:
            self.unlock()

    # -- VERSION -------------------------------------------------------------------------------

    def is_formatted(self) -> bool:
        return self.version_path.is_file()

    def has_data(self) -> bool:
        """VERSION or any image present: what ``format`` must not erase without consent."""
        return self.is_formatted() or (self.path.is_dir() and bool(self.images()))

    def read_version(self) -> NamespaceInfo:
        """This directory's NamespaceInfo; a NameDirError when it is not formatted."""
        try:
            text = self.version_path.read_text("utf-8")
        except FileNotFoundError:
            raise NameDirError(
                f"name directory {self.path} is not formatted (no {VERSION_FILE}): run "
                "`hanamenode format` on the first NameNode or `hanamenode bootstrap-standby` "
                "on the others"
            ) from None
        except (OSError, UnicodeDecodeError) as exc:
            raise NameDirError(f"cannot read {self.version_path}: {exc}") from None
        return parse_version(text, str(self.version_path))

    def write_version(self, ns_info: NamespaceInfo) -> None:
        text = format_version(ns_info)
        files.ensure_dir(self.path)
        files.atomic_write(self.version_path, text.encode())

    def clear(self) -> None:
        """Remove VERSION and every image file (format): the lock file stays."""
        if not self.path.is_dir():
            return
        for entry in os.scandir(self.path):
            if entry.name == LOCK_FILE:
                continue
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path)
            else:
                os.unlink(entry.path)
        files.fsync_dir(self.path)

    # -- images --------------------------------------------------------------------------------

    def images(self) -> list[tuple[int, Path]]:
        """``(txid, path)`` of every complete image, oldest first."""
        return fsimage.list_images(self.path)

    def newest_image(self) -> tuple[int, Path] | None:
        images = self.images()
        return images[-1] if images else None

    def newest_image_txid(self) -> int | None:
        newest = self.newest_image()
        return None if newest is None else newest[0]

    def load_newest_image(
        self, retry_cache: RetryCache | None = None
    ) -> tuple[Namespace, int, fsimage.ImageInfo]:
        """Load the newest image whose md5 checks out. A corrupt image is logged and the next
        older one tried (HDFS does the same); none usable is an FSImageError."""
        images = self.images()
        if not images:
            raise FSImageError(f"name directory {self.path} holds no fsimage")
        failures: list[str] = []
        ns_info = self.read_version()
        for txid, path in reversed(images):
            try:
                namespace, loaded_txid, info = fsimage.load_image(path, retry_cache=retry_cache)
            except CorruptImageError as exc:
                log.error(
                    "fsimage is corrupt, trying an older one", image=str(path), error=str(exc)
                )
                failures.append(str(exc))
                continue
            if (info.cluster_id, info.namespace_id) != (ns_info.cluster_id, ns_info.namespace_id):
                raise FSImageError(
                    f"image {path} belongs to cluster {info.cluster_id} namespace "
                    f"{info.namespace_id}, but {self.version_path} names cluster "
                    f"{ns_info.cluster_id} namespace {ns_info.namespace_id}"
                )
            if failures:
                log.warning("loaded an older fsimage", image=str(path), txid=txid)
            return namespace, loaded_txid, info
        raise FSImageError(f"no usable fsimage in {self.path}: " + "; ".join(failures))
