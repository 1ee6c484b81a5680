"""FSImage: the namespace as a SQLite checkpoint, written through SQLAlchemy Core
(docs/protocol.md §7.4, "NameNode").

A checkpoint ``fsimage_<txid 19 digits>.db`` holds the namespace after transaction ``txid``;
loading it and applying the edits from ``txid + 1`` rebuilds the namespace exactly. Beside it,
``fsimage_<txid>.db.md5`` holds its md5 in md5sum's format (``<hex>  <file name>``), checked
before the image is read, so a flipped byte is a ``CorruptImageError`` naming the file rather
than a wrong namespace.

Writing is crash-safe in the order HDFS uses (``FSImage.saveFSImage``): the database goes to
``fsimage_<txid>.db.tmp`` and is fsynced; the md5 file is written atomically; the temp file is
renamed to its final name; the directory is fsynced. A crash leaves either no image for
``txid`` (at most a temp or an md5 file, which ``purge_old_images`` removes later) or a
complete one with its md5.

Tables: ``image_info`` (one row: txid, namespace_id, cluster_id, layout_version, created_ms,
inode_count) and ``inodes`` (id, parent_id, name, is_dir, mtime_ms, permission, owner,
group, length, replication). Ids are local to one image: the tree is written in pre-order, so
every parent's id is below its children's and the loader builds the tree in one pass.

Since layout version 2 the image also keeps the retry cache's answers to logged calls
(``retry_cache``: client_id, call_id, txid, the answer as JSON, and the wall-clock deadline
of the entry), unlike HDFS: a NameNode that restarts from an image then still answers a retry
of a call logged before it, instead of running it again (issue 11). The edits after the
image rebuild the rest, as before. Version 1 images (without the table) still load.

Since layout version 3 each retry entry also names its call (``op``: mkdir, create, delete,
rename), so that a call id reused for a different call is refused after a restart as before
it (``RetryCallMismatchError``). Entries of a version 2 image load without a name and are
answered as before.

Since layout version 4 (issue 27; docs/architecture.md §5.7) the tree is no longer a row per
inode: ``inode_sections`` holds it in pre-order as columns (kinds, names, mtimes, attribute
ids into ``inode_attrs``, and child counts or lengths), ``SECTION_INODES`` inodes a row, so a
save is one pass appending to arrays and a load decodes each column in C. Images of layouts
1-3 (the ``inodes`` table above) still load. A serving NameNode's checkpoint is written by a
forked child (``fork_save_image``) from its copy-on-write view of the namespace.
"""

from __future__ import annotations

import array
import contextlib
import ctypes
import dataclasses
import gc
import hashlib
import json
import os
import re
import select
import signal
import sqlite3
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from conf import clock
from durable.files import atomic_write, fsync_dir, fsync_file
from hanamenode.errors import CheckpointCancelledError, CorruptImageError, FSImageError
from hanamenode.namespace import (
    Attrs,
    INode,
    INodeDirectory,
    INodeFile,
    Namespace,
    StatInfo,
    intern_attrs,
)
from hanamenode.retry_cache import CacheEntry, RetryCache
from proto.values import NamespaceInfo

IMAGE_LAYOUT_VERSION = 4
READABLE_LAYOUT_VERSIONS = (1, 2, 3, 4)
_IMAGE_NAME = re.compile(r"fsimage_(\d{19})\.db")
# Every file a save may leave behind: the image, its md5, and either one's temp file.
# A crashed save leaves "fsimage_<txid>.db.tmp", a crashed md5 write
# ".fsimage_<txid>.db.md5.<hex>.tmp" (durable.files.atomic_write's temp name).
_IMAGE_FILE = re.compile(r"\.?fsimage_(\d{19})\.db(?:\.md5)?(?:\.[0-9a-f]{12})?(?:\.tmp)?")
_MD5_LINE = re.compile(r"([0-9a-f]{32}) [ *](.+)\n?")
_BATCH = 20_000
_DOT_NAMES = frozenset({".", ".."})

metadata = sa.MetaData()

image_info = sa.Table(
    "image_info",
    metadata,
    sa.Column("txid", sa.BigInteger, nullable=False),
    sa.Column("namespace_id", sa.BigInteger, nullable=False),
    sa.Column("cluster_id", sa.String, nullable=False),
    sa.Column("layout_version", sa.Integer, nullable=False),
    sa.Column("created_ms", sa.BigInteger, nullable=False),
    sa.Column("inode_count", sa.BigInteger, nullable=False),
)

inodes = sa.Table(
    "inodes",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("parent_id", sa.Integer, nullable=True),  # NULL for the root only
    sa.Column("name", sa.String, nullable=False),
    sa.Column("is_dir", sa.Boolean, nullable=False),
    sa.Column("mtime_ms", sa.BigInteger, nullable=False),
    sa.Column("permission", sa.Integer, nullable=False),
    sa.Column("owner", sa.String, nullable=False),
    sa.Column("group", sa.String, nullable=False),
    sa.Column("length", sa.BigInteger, nullable=False),
    sa.Column("replication", sa.Integer, nullable=False),
)


retry_entries = sa.Table(
    "retry_cache",
    metadata,
    sa.Column("client_id", sa.LargeBinary, nullable=False),
    sa.Column("call_id", sa.BigInteger, nullable=False),
    sa.Column("txid", sa.BigInteger, nullable=False),
    sa.Column("result", sa.String, nullable=False),  # JSON: encode_result
    sa.Column("expires_ms", sa.BigInteger, nullable=False),  # wall clock, ms since the epoch
    sa.Column("op", sa.String, nullable=False),  # since layout version 3
    sa.PrimaryKeyConstraint("client_id", "call_id"),
)


inode_attrs = sa.Table(
    "inode_attrs",
    metadata,
    sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("permission", sa.Integer, nullable=False),
    sa.Column("owner", sa.String, nullable=False),
    sa.Column("group", sa.String, nullable=False),
    sa.Column("replication", sa.Integer, nullable=False),  # 0 for directories
)
"""Since layout 4: every distinct (permission, owner, group, replication), once."""

inode_sections = sa.Table(
    "inode_sections",
    metadata,
    sa.Column("seq", sa.Integer, primary_key=True, autoincrement=False),
    sa.Column("inode_count", sa.Integer, nullable=False),
    sa.Column("kinds", sa.LargeBinary, nullable=False),  # 1 byte each: 1 directory, 0 file
    sa.Column("names", sa.LargeBinary, nullable=False),  # UTF-8, separated by NUL
    sa.Column("mtimes", sa.LargeBinary, nullable=False),  # int64 little-endian each
    sa.Column("attrs", sa.LargeBinary, nullable=False),  # uint32 LE: an inode_attrs id
    sa.Column("sizes", sa.LargeBinary, nullable=False),  # int64 LE: children, or length
)
"""Since layout 4: the tree in pre-order as columns, ``SECTION_INODES`` inodes a row."""

LAYOUT_4_TABLES = [image_info, inode_attrs, inode_sections, retry_entries]


def encode_result(result: object) -> str:
    """A retry-cache answer as JSON: True/False, a StatInfo (create), a path (rename), or the
    list of a multi's answers."""
    return json.dumps(_encode_value(result))


def _encode_value(result: object) -> dict[str, object]:
    if isinstance(result, bool) or result is None:
        return {"bool": result}
    if isinstance(result, StatInfo):
        return {"stat": dataclasses.asdict(result)}
    if isinstance(result, str):
        return {"path": result}
    if isinstance(result, list):
        return {"multi": [_encode_value(item) for item in result]}
    raise FSImageError(f"cannot keep a {type(result).__name__} answer in the image: {result!r}")


def decode_result(text: str) -> object:
    try:
        return _decode_value(json.loads(text))
    except (ValueError, TypeError, AttributeError) as exc:
        raise FSImageError(f"bad retry cache answer {text[:100]!r} in the image: {exc}") from exc


def _decode_value(value: object) -> object:
    if not isinstance(value, dict):
        raise TypeError(f"an answer is a JSON object, not {type(value).__name__}")
    (kind, body), = value.items()
    if kind == "bool":
        return body
    if kind == "stat":
        return StatInfo(**body)
    if kind == "path":
        return str(body)
    if kind == "multi":
        return [_decode_value(item) for item in body]
    raise ValueError(f"unknown answer kind {kind!r}")


@dataclass(frozen=True, slots=True)
class ImageInfo:
    """The ``image_info`` row: which transaction the image ends at and whose namespace it is."""

    txid: int
    namespace_id: int
    cluster_id: str
    layout_version: int
    created_ms: int
    inode_count: int


def image_name(txid: int) -> str:
    return f"fsimage_{txid:019d}.db"


def md5_path(image: Path) -> Path:
    return image.with_name(image.name + ".md5")


def list_images(name_dir: Path) -> list[tuple[int, Path]]:
    """Complete images (final name, not temp) in ``name_dir`` as ``(txid, path)``, oldest first."""
    found = []
    for entry in os.scandir(name_dir):
        match = _IMAGE_NAME.fullmatch(entry.name)
        if match:
            found.append((int(match.group(1)), Path(entry.path)))
    return sorted(found)


def latest_image(name_dir: Path) -> Path | None:
    """The image with the highest txid, or None. Whether it is intact is ``load_image``'s
    question: a caller that wants to fall back to an older image uses ``list_images``."""
    images = list_images(name_dir)
    return images[-1][1] if images else None


# ---------------------------------------------------------------------------------------------
# Saving.
# ---------------------------------------------------------------------------------------------


def image_txid(image: Path) -> int:
    """The txid in an image's file name (``fsimage_<txid>.db``)."""
    match = _IMAGE_NAME.fullmatch(image.name)
    if match is None:
        raise FSImageError(f"{image} is not named like an image (fsimage_<19 digits>.db)")
    return int(match.group(1))


SECTION_INODES = 1 << 20
"""Inodes per ``inode_sections`` row: the saver holds one section's columns at a time."""


def _little_endian(values: array.array[int]) -> bytes:
    if sys.byteorder == "big":
        values = array.array(values.typecode, values)
        values.byteswap()
    return values.tobytes()


def _from_little_endian(typecode: str, data: bytes) -> array.array[int]:
    values = array.array(typecode)
    values.frombytes(data)
    if sys.byteorder == "big":
        values.byteswap()
    return values


def _sections(root: INodeDirectory, attr_ids: dict[Attrs, int]) -> Iterator[dict[str, Any]]:
    """The tree in pre-order, children by name, as ``inode_sections`` rows of at most
    ``SECTION_INODES`` inodes each; ``attr_ids`` receives every distinct ``Attrs`` met, with
    the id the rows use for it. A directory's ``sizes`` entry is its number of children, so
    the loader rebuilds the tree from the order alone."""
    seq = 0
    kinds = bytearray()
    names: list[str] = []
    mtimes = array.array("q")
    attrs = array.array("I")
    sizes = array.array("q")
    stack: list[INode] = [root]
    pop, extend, ids = stack.pop, stack.extend, attr_ids.get
    directory = INodeDirectory
    while stack:
        node = pop()
        attr_id = ids(node.attrs)
        if attr_id is None:
            attr_id = attr_ids[node.attrs] = len(attr_ids)
        names.append(node.name)
        mtimes.append(node.mtime_ms)
        attrs.append(attr_id)
        if type(node) is directory:
            children = node.children
            kinds.append(1)
            sizes.append(len(children))
            extend(reversed(children))
        else:
            kinds.append(0)
            sizes.append(node.length)  # type: ignore[attr-defined]
        if len(names) == SECTION_INODES or not stack:
            yield {
                "seq": seq,
                "inode_count": len(names),
                "kinds": bytes(kinds),
                "names": "\0".join(names).encode("utf-8", "surrogatepass"),
                "mtimes": _little_endian(mtimes),
                "attrs": _little_endian(attrs),
                "sizes": _little_endian(sizes),
            }
            seq += 1
            kinds, names = bytearray(), []
            mtimes, attrs, sizes = array.array("q"), array.array("I"), array.array("q")


def _retry_rows(logged: list[tuple[CacheEntry, float]]) -> list[dict[str, Any]]:
    wall_ms = clock.time() * 1000
    return [
        {
            "client_id": entry.client_id,
            "call_id": entry.call_id,
            "txid": entry.txid,
            "result": encode_result(entry.result),
            "expires_ms": int(wall_ms + remaining * 1000),
            "op": entry.op,
        }
        for entry, remaining in logged
    ]


def _logged(namespace: Namespace, txid: int) -> list[tuple[CacheEntry, float]]:
    return namespace.retry_cache.logged_entries(txid) if namespace.retry_cache is not None else []


def _check_txid(namespace: Namespace, txid: int | None, name_dir: Path) -> int:
    """``txid`` as ``save_image`` takes it, checked: the image's txid."""
    if txid is None:
        txid = namespace.last_applied_txid
    elif txid < namespace.last_applied_txid:
        raise FSImageError(
            f"cannot save an image at txid {txid}: the namespace has applied up to "
            f"txid {namespace.last_applied_txid}"
        )
    final = name_dir / image_name(txid)
    if final.exists():
        raise FSImageError(f"an image for txid {txid} already exists: {final}")
    return txid


def save_image(
    namespace: Namespace,
    name_dir: Path,
    txid: int | None,
    ns_info: NamespaceInfo,
    *,
    now_ms: int | None = None,
) -> Path:
    """Write the namespace as ``name_dir/fsimage_<txid>.db`` with its md5; return the path.

    ``txid`` is the last transaction the namespace reflects (None: its
    ``last_applied_txid``); it may exceed ``last_applied_txid`` (segment markers need not pass
    through ``apply``) but not fall below it, or loading the image and replaying from
    ``txid + 1`` would apply ops twice. The namespace lock is held while the file is written:
    this is for a namespace nothing else changes (format, tools, tests). A serving
    NameNode's checkpoint writes from a forked child instead (``fork_save_image``).
    """
    with namespace.lock:
        txid = _check_txid(namespace, txid, name_dir)
        final = name_dir / image_name(txid)
        tmp = final.with_name(final.name + ".tmp")
        tmp.unlink(missing_ok=True)  # left by a save that crashed
        try:
            digest = _write_image_file(namespace, txid, tmp, ns_info, now_ms, _logged)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
    return _install_written(tmp, final, digest)


def _write_image_file(
    namespace: Namespace,
    txid: int,
    tmp: Path,
    ns_info: NamespaceInfo,
    now_ms: int | None,
    logged: Callable[[Namespace, int], list[tuple[CacheEntry, float]]],
) -> str:
    """Write the image database as ``tmp``, fsynced; its md5."""
    created_ms = clock.time_ns() // 1_000_000 if now_ms is None else now_ms
    retry_rows = _retry_rows(logged(namespace, txid))
    engine = _engine(tmp, read_only=False)
    attr_ids: dict[Attrs, int] = {}
    try:
        with engine.begin() as conn:
            metadata.create_all(conn, tables=LAYOUT_4_TABLES)
            count = 0
            for section in _sections(namespace.root, attr_ids):
                conn.execute(inode_sections.insert(), section)
                count += section["inode_count"]
            conn.execute(
                inode_attrs.insert(),
                [
                    {"id": i, "permission": p, "owner": o, "group": g, "replication": r}
                    for (p, o, g, r), i in attr_ids.items()
                ],
            )
            info = ImageInfo(
                txid=txid,
                namespace_id=ns_info.namespace_id,
                cluster_id=ns_info.cluster_id,
                layout_version=IMAGE_LAYOUT_VERSION,
                created_ms=created_ms,
                inode_count=count,
            )
            conn.execute(image_info.insert(), dataclasses.asdict(info))
            if retry_rows:
                conn.execute(retry_entries.insert(), retry_rows)
    finally:
        engine.dispose()
    fsync_file(tmp)
    return _md5_of(tmp)


def _install_written(tmp: Path, final: Path, digest: str) -> Path:
    """The crash-safe end of a save: md5 file, rename, directory fsync."""
    try:
        atomic_write(md5_path(final), f"{digest}  {final.name}\n".encode())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(final.parent)
    return final


# -- a checkpoint written by a forked child ---------------------------------------------------


def _logged_in_child(namespace: Namespace, txid: int) -> list[tuple[CacheEntry, float]]:
    cache = namespace.retry_cache
    if cache is None:
        return []
    # The child has one thread: a lock another thread of the parent held at the fork would
    # never be released here. Nothing else runs in the child, so a fresh lock is safe.
    cache._lock = threading.Lock()
    return cache.logged_entries(txid)


@dataclass
class ForkedImageSave:
    """An image being written by a child process from its copy-on-write view of the
    namespace (``fork_save_image``); ``wait`` finishes it in the parent."""

    pid: int
    txid: int
    final: Path
    tmp: Path
    fork_seconds: float
    """How long the fork itself took: all the time the namespace was held still."""
    fork_cpu_seconds: float
    """The CPU the forking thread spent in it (copying the page tables): what the fork
    costs on a machine whose other processes make the thread wait for a core."""
    _reader: int
    _done: bool = False

    def wait(self, should_stop: Callable[[], bool], poll: float = 0.05) -> Path:
        """Wait for the child; on success write the md5 file and rename the image into
        place, as ``save_image`` does, and return its path. CheckpointCancelledError when
        ``should_stop()`` turns true first: the child is killed, its temp file removed.
        FSImageError naming the child's error when it failed."""
        if self._done:
            raise FSImageError(f"the image save for txid {self.txid} was already waited for")
        self._done = True
        report = b""
        try:
            while True:
                ready, _, _ = select.select([self._reader], [], [], poll)
                if ready:
                    chunk = os.read(self._reader, 65536)
                    if not chunk:
                        break  # the child closed its end: it is exiting
                    report += chunk
                elif should_stop():
                    self._kill()
                    raise CheckpointCancelledError(
                        f"checkpoint at txid {self.txid} cancelled while its child (pid "
                        f"{self.pid}) wrote the image: the NameNode is leaving the standby state"
                    )
            _, status = os.waitpid(self.pid, 0)
        except BaseException:
            self._kill()
            raise
        finally:
            os.close(self._reader)
        code = os.waitstatus_to_exitcode(status)
        try:
            answer = json.loads(report.decode("utf-8", "replace") or "{}")
        except ValueError:
            answer = {}
        if code != 0 or "md5" not in answer:
            self.tmp.unlink(missing_ok=True)
            why = answer.get("error") or f"it said {report[:200]!r}"
            raise FSImageError(
                f"the child (pid {self.pid}) writing the image for txid {self.txid} exited "
                f"with {code}: {why}"
            )
        return _install_written(self.tmp, self.final, str(answer["md5"]))

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.tmp.unlink(missing_ok=True)


_PR_SET_PDEATHSIG = 1


def _leave_parents_signals() -> None:
    """In the child: die of the signals that stop the NameNode (its handlers write to the
    parent's loop, whose wakeup fd the child shares), and of SIGKILL when the thread that
    forked it ends, so that a killed NameNode leaves no writer behind."""
    signal.set_wakeup_fd(-1)
    for stopping in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(stopping, signal.SIG_DFL)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl(PR_SET_PDEATHSIG): {os.strerror(errno)}")


def fork_save_image(
    namespace: Namespace, name_dir: Path, ns_info: NamespaceInfo, *, now_ms: int | None = None
) -> ForkedImageSave:
    """Start writing the namespace as it is now, at its ``last_applied_txid``, from a forked
    child; ``ForkedImageSave.wait`` finishes it. The caller must be the only one changing
    the namespace (the NameNode's loop) and is held only for the fork: the child writes from
    its copy-on-write view while the parent goes on applying edits. The child touches
    nothing but the namespace and the temp file and leaves with ``os._exit``."""
    txid = _check_txid(namespace, None, name_dir)
    final = name_dir / image_name(txid)
    tmp = final.with_name(final.name + ".tmp")
    tmp.unlink(missing_ok=True)
    reader, writer = os.pipe()
    began, began_cpu = time.perf_counter(), time.thread_time()
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            os.close(reader)
            # A collection would write to every object's header and copy the whole heap.
            gc.disable()
            try:
                _leave_parents_signals()
                digest = _write_image_file(
                    namespace, txid, tmp, ns_info, now_ms, _logged_in_child
                )
                answer = {"md5": digest}
                code = 0
            except BaseException as exc:
                answer = {"error": f"{type(exc).__name__}: {exc}"}
            os.write(writer, json.dumps(answer).encode())
        finally:
            os._exit(code)
    fork_seconds = time.perf_counter() - began
    fork_cpu_seconds = time.thread_time() - began_cpu
    os.close(writer)
    return ForkedImageSave(pid, txid, final, tmp, fork_seconds, fork_cpu_seconds, reader)


def _engine(path: Path, *, read_only: bool) -> Engine:
    """An engine on one SQLite file. Writing skips SQLite's journal and syncs: the file is a
    temp that becomes the image only after it is complete and fsynced as a whole."""
    uri = "file:" + urllib.parse.quote(str(path.absolute())) + ("?mode=ro" if read_only else "")

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True)
        if not read_only:
            # Large pages: a section's columns are blobs of megabytes, kept in chains of
            # overflow pages; 64 KiB pages make the chains 16 times shorter.
            conn.execute("PRAGMA page_size=65536")
            conn.execute("PRAGMA journal_mode=OFF")
            conn.execute("PRAGMA synchronous=OFF")
        return conn

    return sa.create_engine("sqlite://", creator=connect, poolclass=sa.pool.NullPool)


# ---------------------------------------------------------------------------------------------
# Loading.
# ---------------------------------------------------------------------------------------------


def verify_md5(image: Path) -> str:
    """Check ``image`` against its ``.md5`` file; return the md5 or raise CorruptImageError."""
    md5_file = md5_path(image)
    try:
        text = md5_file.read_text("utf-8")
    except FileNotFoundError:
        raise CorruptImageError(f"image {image} has no md5 file ({md5_file.name})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise CorruptImageError(f"cannot read md5 file {md5_file}: {exc}") from exc
    match = _MD5_LINE.fullmatch(text)
    if match is None:
        raise CorruptImageError(f"md5 file {md5_file} is malformed: {text[:100]!r}")
    expected, named = match.groups()
    if named != image.name:
        raise CorruptImageError(f"md5 file {md5_file} is for {named!r}, not {image.name!r}")
    try:
        actual = _md5_of(image)
    except OSError as exc:
        raise FSImageError(f"cannot read image {image}: {exc}") from exc
    if actual != expected:
        raise CorruptImageError(
            f"image {image} is corrupt: its md5 is {actual}, but {md5_file.name} records {expected}"
        )
    return actual


def load_image(
    path: Path, *, retry_cache: RetryCache | None = None
) -> tuple[Namespace, int, ImageInfo]:
    """Read an image written by ``save_image``: ``(namespace, txid, info)``.

    The md5 is checked first; then the tree is checked as it is built (one root, every parent
    a directory written before its children, valid unique names), so a damaged or foreign
    database is an FSImageError naming the file, never a half-built namespace. The namespace's
    ``last_applied_txid`` is the image's txid: replay continues at ``txid + 1``.
    """
    verify_md5(path)
    engine = _engine(path, read_only=True)
    counts: tuple[int, int] | None = None
    try:
        with engine.connect() as conn, _collection_paused():
            info = _read_info(path, conn)
            if info.layout_version >= 4:
                root, counts = _read_sections(path, conn, info)
            else:
                root = _read_tree(path, conn, info)
            if retry_cache is not None and info.layout_version >= 2:
                _read_retry_entries(conn, retry_cache, with_op=info.layout_version >= 3)
    except sa.exc.SQLAlchemyError as exc:
        raise FSImageError(f"cannot read image {path}: {exc.__class__.__name__}: {exc}") from exc
    finally:
        engine.dispose()
    named = _IMAGE_NAME.fullmatch(path.name)
    if named and int(named.group(1)) != info.txid:
        raise FSImageError(f"image {path} holds txid {info.txid}, not the one in its name")
    namespace = Namespace.from_root(root, info.txid, retry_cache=retry_cache, counts=counts)
    return namespace, info.txid, info


@contextlib.contextmanager
def _collection_paused() -> Iterator[None]:
    """No cyclic garbage collection while a tree is built: the collector would run every
    700 new inodes and its older generations walk everything built so far, which made a
    load of a million inodes a fifth slower. Nothing built here is garbage."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _read_info(path: Path, conn: sa.Connection) -> ImageInfo:
    rows = conn.execute(sa.select(image_info)).all()
    if len(rows) != 1:
        raise FSImageError(f"image {path} has {len(rows)} image_info rows, expected 1")
    info = ImageInfo(**rows[0]._asdict())
    if info.layout_version not in READABLE_LAYOUT_VERSIONS:
        raise FSImageError(
            f"image {path} has layout version {info.layout_version}; this NameNode reads "
            f"versions {', '.join(map(str, READABLE_LAYOUT_VERSIONS))}"
        )
    return info


def _read_retry_entries(conn: sa.Connection, cache: RetryCache, *, with_op: bool) -> None:
    """Put the image's retry entries back with what is left of their lifetime (and the name
    of their call, from a version 3 image)."""
    wall_ms = clock.time() * 1000
    c = retry_entries.c
    op_column = c.op if with_op else sa.literal("")
    for client_id, call_id, txid, result, expires_ms, op in conn.execute(
        sa.select(c.client_id, c.call_id, c.txid, c.result, c.expires_ms, op_column).order_by(
            c.txid
        )
    ):
        cache.restore(
            bytes(client_id),
            int(call_id),
            decode_result(result),
            txid=int(txid),
            remaining=(expires_ms - wall_ms) / 1000,
            op=str(op),
        )


def _read_attrs(path: Path, conn: sa.Connection) -> list[Attrs]:
    c = inode_attrs.c
    table: list[Attrs] = []
    rows = conn.execute(
        sa.select(c.id, c.permission, c.owner, c.group, c.replication).order_by(c.id)
    )
    for attr_id, permission, owner, group, replication in rows:
        if attr_id != len(table):
            raise FSImageError(f"image {path} is invalid: inode_attrs ids skip {len(table)}")
        table.append(intern_attrs(permission, owner, group, replication))
    return table


def _read_sections(
    path: Path, conn: sa.Connection, info: ImageInfo
) -> tuple[INodeDirectory, tuple[int, int]]:
    """The tree of a layout-4 image: its sections in order, each inode attached to the
    directory on top of the stack, checked as it is attached (one root, names valid and
    strictly increasing in each directory, as many inodes as the directories count), and
    how many directories and files it holds."""
    table = _read_attrs(path, conn)

    def bad(index: int, why: str) -> FSImageError:
        return FSImageError(f"image {path} is invalid: inode {index} {why}")

    new = object.__new__
    directory, file = INodeDirectory, INodeFile
    root: INodeDirectory | None = None
    stack: list[tuple[list[INode], int]] = []
    siblings: list[INode] = []  # the children of the directory being filled
    left = 0  # how many more children it has
    index = 0
    dirs = 0
    s = inode_sections.c
    query = sa.select(s.seq, s.inode_count, s.kinds, s.names, s.mtimes, s.attrs, s.sizes)
    for seq, count, kinds, names_blob, mtimes_blob, attrs_blob, sizes_blob in conn.execute(
        query.order_by(s.seq)
    ):
        names_text = bytes(names_blob).decode("utf-8", "surrogatepass")
        if "/" in names_text:
            where = names_text[: names_text.index("/")].count("\0")
            raise bad(index + where, "has a name with a '/'")
        names = names_text.split("\0")
        mtimes = _from_little_endian("q", mtimes_blob)
        attr_ids = _from_little_endian("I", attrs_blob)
        sizes = _from_little_endian("q", sizes_blob)
        if not count == len(kinds) == len(names) == len(mtimes) == len(attr_ids) == len(sizes):
            raise FSImageError(
                f"image {path} is invalid: section {seq} has columns of different lengths"
            )
        try:
            attrs_of = [table[i] for i in attr_ids]
        except IndexError:
            raise FSImageError(
                f"image {path} is invalid: section {seq} names an attribute id above "
                f"{len(table) - 1}"
            ) from None
        for kind, name, mtime, attrs, size in zip(
            kinds, names, mtimes, attrs_of, sizes, strict=True
        ):
            node: INode
            if kind:
                made = new(directory)
                made.children = []
                node = made
                dirs += 1
            else:
                made_file = new(file)
                made_file.length = size
                node = made_file
            node.name = name
            node.mtime_ms = mtime
            node.attrs = attrs
            if root is None:
                if not kind or name != "":
                    raise bad(index, "is the root but not an unnamed directory")
                root = made
            else:
                while not left:
                    if not stack:
                        raise bad(index, "is beyond the tree: every directory is full")
                    siblings, left = stack.pop()
                if not name or name in _DOT_NAMES:
                    raise bad(index, f"has an invalid name {name!r}")
                if siblings and siblings[-1].name >= name:
                    raise bad(index, f"repeats or misorders the name {name!r} in its directory")
                siblings.append(node)
                left -= 1
            if kind and size:
                stack.append((siblings, left))
                siblings, left = made.children, size
            index += 1
    if root is None:
        raise FSImageError(f"image {path} is invalid: no root directory")
    if left or any(more for _, more in stack):
        raise FSImageError(
            f"image {path} is invalid: its directories count more children than it holds"
        )
    if index != info.inode_count:
        raise FSImageError(
            f"image {path} is invalid: {index} inodes, image_info says {info.inode_count}"
        )
    return root, (dirs, index - dirs)


def _read_tree(path: Path, conn: sa.Connection, info: ImageInfo) -> INodeDirectory:
    """The tree of a layout 1-3 image: one row per inode with its parent's id."""

    def bad(row_id: int, why: str) -> FSImageError:
        return FSImageError(f"image {path} is invalid: inode {row_id} {why}")

    root: INodeDirectory | None = None
    dirs: dict[int, INodeDirectory] = {}
    count = 0
    result = conn.execute(sa.select(inodes).order_by(inodes.c.id))
    # Rows unpacked in batches: named access on a Row per column costs more than the rest of
    # the load together.
    for batch in result.partitions(_BATCH):
        for (
            row_id,
            parent_id,
            name,
            is_dir,
            mtime_ms,
            permission,
            owner,
            group,
            length,
            repl,
        ) in batch:
            count += 1
            node: INode
            if is_dir:
                node = INodeDirectory(name, mtime_ms, permission, owner, group)
            else:
                node = INodeFile(name, mtime_ms, permission, owner, group, length, repl)
            if parent_id is None:
                if root is not None:
                    raise bad(row_id, "is a second root")
                if not isinstance(node, INodeDirectory) or name != "":
                    raise bad(row_id, "is the root but not an unnamed directory")
                root = node
            else:
                parent = dirs.get(parent_id)
                if parent is None:
                    raise bad(row_id, f"has parent {parent_id}, not a directory before it")
                if not name or "/" in name or name in (".", ".."):
                    raise bad(row_id, f"has an invalid name {name!r}")
                if parent.add_child(node) is not None:
                    raise bad(row_id, f"repeats the name {name!r} in its directory")
            # Registered only now, so no row can be its own parent (a cycle, not a tree).
            if isinstance(node, INodeDirectory):
                dirs[row_id] = node
    if root is None:
        raise FSImageError(f"image {path} is invalid: no root directory")
    if count != info.inode_count:
        raise FSImageError(
            f"image {path} is invalid: {count} inodes, image_info says {info.inode_count}"
        )
    return root


# ---------------------------------------------------------------------------------------------
# Transfer between NameNodes.
# ---------------------------------------------------------------------------------------------


def install_image(name_dir: Path, txid: int, chunks: Iterable[bytes], md5: str) -> Path:
    """Write an image received from another NameNode (bootstrap-standby, a checkpoint
    upload) as ``name_dir/fsimage_<txid>.db`` with its md5, the way ``save_image`` writes one:
    temp file, fsync, check the md5 the sender announced, md5 file, rename, fsync the
    directory. A transfer that does not match ``md5`` is a CorruptImageError and leaves
    nothing behind. An image already installed for ``txid`` is kept as it is.
    """
    final = name_dir / image_name(txid)
    if final.exists():
        return final
    tmp = final.with_name(final.name + ".tmp")
    tmp.unlink(missing_ok=True)
    digest = hashlib.md5()
    try:
        with open(tmp, "wb") as f:
            for chunk in chunks:
                digest.update(chunk)
                f.write(chunk)
            f.flush()
            os.fsync(f.fileno())
        if digest.hexdigest() != md5:
            raise CorruptImageError(
                f"image transfer for txid {txid} is corrupt: received md5 {digest.hexdigest()}, "
                f"the sender announced {md5}"
            )
        atomic_write(md5_path(final), f"{md5}  {final.name}\n".encode())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(name_dir)
    return final


# ---------------------------------------------------------------------------------------------
# Retention.
# ---------------------------------------------------------------------------------------------


def purge_old_images(name_dir: Path, keep: int) -> list[Path]:
    """Keep the ``keep`` newest images; remove every image file (image, md5, temp) with a
    lower txid than the oldest one kept, and return what was removed.

    Temp and md5 files of a crashed save are removed once a newer image exists; a save in
    progress writes a txid above every kept image, so it is never touched.
    """
    if keep < 1:
        raise ValueError(f"must keep at least one image, not {keep}")
    images = list_images(name_dir)
    if len(images) <= keep:
        return []
    oldest_kept = images[-keep][0]
    removed = []
    for entry in sorted(os.scandir(name_dir), key=lambda e: e.name):
        match = _IMAGE_FILE.fullmatch(entry.name)
        if match and int(match.group(1)) < oldest_kept:
            os.unlink(entry.path)
            removed.append(Path(entry.path))
    if removed:
        fsync_dir(name_dir)
    return removed


# ---------------------------------------------------------------------------------------------
# Checksums.
# ---------------------------------------------------------------------------------------------


def _md5_of(path: Path) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()
