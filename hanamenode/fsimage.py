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
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import os
import re
import sqlite3
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from durable.files import atomic_write, fsync_dir, fsync_file
from hanamenode.errors import CheckpointCancelledError, CorruptImageError, FSImageError
from hanamenode.namespace import INode, INodeDirectory, INodeFile, Namespace, StatInfo
from hanamenode.retry_cache import CacheEntry, RetryCache
from proto.values import NamespaceInfo

IMAGE_LAYOUT_VERSION = 3
READABLE_LAYOUT_VERSIONS = (1, 2, 3)
_IMAGE_NAME = re.compile(r"fsimage_(\d{19})\.db")
# Every file a save may leave behind: the image, its md5, and either one's temp file.
# A crashed save leaves "fsimage_<txid>.db.tmp", a crashed md5 write
# ".fsimage_<txid>.db.md5.<hex>.tmp" (durable.files.atomic_write's temp name).
_IMAGE_FILE = re.compile(r"\.?fsimage_(\d{19})\.db(?:\.md5)?(?:\.[0-9a-f]{12})?(?:\.tmp)?")
_MD5_LINE = re.compile(r"([0-9a-f]{32}) [ *](.+)\n?")
_BATCH = 20_000

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


IMAGE_SLICE_ROWS = 2000
"""Rows a checkpoint reads from the namespace between two turns of the loop
(``collect_image_in_slices``): a few milliseconds of work each."""


@dataclass(frozen=True)
class ImageContent:
    """What an image at ``txid`` holds, read from a namespace: the inode rows in pre-order and
    the retry cache's logged successes with the seconds each had left when read."""

    txid: int
    rows: list[dict[str, Any]]
    logged: list[tuple[CacheEntry, float]]


def _logged(namespace: Namespace, txid: int) -> list[tuple[CacheEntry, float]]:
    return namespace.retry_cache.logged_entries(txid) if namespace.retry_cache is not None else []


def collect_image(namespace: Namespace, txid: int | None = None) -> ImageContent:
    """The namespace's rows, read under its lock at once. ``txid`` is the last transaction the
    namespace reflects (None: its ``last_applied_txid``); it may exceed ``last_applied_txid``
    (segment markers need not pass through ``apply``) but not fall below it, or loading the
    image and replaying from ``txid + 1`` would apply ops twice."""
    with namespace.lock:
        if txid is None:
            txid = namespace.last_applied_txid
        elif txid < namespace.last_applied_txid:
            raise FSImageError(
                f"cannot save an image at txid {txid}: the namespace has applied up to "
                f"txid {namespace.last_applied_txid}"
            )
        return ImageContent(txid, list(_inode_rows(namespace)), _logged(namespace, txid))


async def collect_image_in_slices(
    namespace: Namespace,
    should_stop: Callable[[], bool],
    slice_rows: int | None = None,
) -> ImageContent:
    """The namespace's rows at its ``last_applied_txid``, read on the event loop that alone
    changes it (a standby's or an observer's, whose tailer applies on that loop), in slices
    of ``slice_rows`` (None: ``IMAGE_SLICE_ROWS``) with a turn of the loop between them:
    reads, pushed edits, health checks and status pages are answered meanwhile, where
    reading the whole tree under the lock would stop the loop for as long (0.3 s for
    200,000 inodes on the development machine).
    The namespace is ``frozen`` while the rows are read: ``apply`` refuses and the tailer
    holds its ops until it thaws, so the rows are one txid's tree. CheckpointCancelledError
    when ``should_stop()`` turns true between slices (the namespace thaws either way)."""
    if namespace.frozen:
        raise FSImageError("another checkpoint is reading the namespace")
    per_slice = slice_rows or IMAGE_SLICE_ROWS
    namespace.frozen = True
    try:
        txid = namespace.last_applied_txid
        rows: list[dict[str, Any]] = []
        for count, row in enumerate(_inode_rows(namespace), 1):
            rows.append(row)
            if count % per_slice == 0:
                await asyncio.sleep(0)
                if should_stop():
                    raise CheckpointCancelledError(
                        f"checkpoint at txid {txid} cancelled after {count} rows: the "
                        "NameNode is leaving the standby state"
                    )
        return ImageContent(txid, rows, _logged(namespace, txid))
    finally:
        namespace.frozen = False


def save_image(
    namespace: Namespace,
    name_dir: Path,
    txid: int | None,
    ns_info: NamespaceInfo,
    *,
    now_ms: int | None = None,
) -> Path:
    """Write the namespace as ``name_dir/fsimage_<txid>.db`` with its md5; return the path.

    ``txid`` as for ``collect_image`` (None: the namespace's ``last_applied_txid``, read
    under the lock together with the rows). The namespace lock is held only while the rows
    are collected, not while they are written.
    """
    if txid is not None and (name_dir / image_name(txid)).exists():
        existing = name_dir / image_name(txid)
        raise FSImageError(f"an image for txid {txid} already exists: {existing}")
    return write_image(collect_image(namespace, txid), name_dir, ns_info, now_ms=now_ms)


def write_image(
    content: ImageContent, name_dir: Path, ns_info: NamespaceInfo, *, now_ms: int | None = None
) -> Path:
    """Write ``content`` as ``name_dir/fsimage_<txid>.db``, fsynced, with its md5 file, and
    return the path; nothing of the namespace is read here."""
    txid = content.txid
    wall_ms = time.time() * 1000
    retry_rows = [
        {
            "client_id": entry.client_id,
            "call_id": entry.call_id,
            "txid": entry.txid,
            "result": encode_result(entry.result),
            "expires_ms": int(wall_ms + remaining * 1000),
            "op": entry.op,
        }
        for entry, remaining in content.logged
    ]
    final = name_dir / image_name(txid)
    if final.exists():
        raise FSImageError(f"an image for txid {txid} already exists: {final}")
    info = ImageInfo(
        txid=txid,
        namespace_id=ns_info.namespace_id,
        cluster_id=ns_info.cluster_id,
        layout_version=IMAGE_LAYOUT_VERSION,
        created_ms=time.time_ns() // 1_000_000 if now_ms is None else now_ms,
        inode_count=len(content.rows),
    )
    tmp = final.with_name(final.name + ".tmp")
    tmp.unlink(missing_ok=True)  # left by a save that crashed
    try:
        _write_database(tmp, info, content.rows, retry_rows)
        fsync_file(tmp)
        digest = _md5_of(tmp)
        atomic_write(md5_path(final), f"{digest}  {final.name}\n".encode())
        os.replace(tmp, final)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(name_dir)
    return final


def _inode_rows(namespace: Namespace) -> Iterator[dict[str, Any]]:
    """Pre-order rows with ids from 1, so a parent is always written before its children."""
    ids: dict[int, int] = {}  # id(INodeDirectory) -> image id
    parent_of: dict[int, int | None] = {id(namespace.root): None}
    next_id = 1
    for _path, node in namespace.walk():
        node_id = next_id
        next_id += 1
        parent_id = parent_of.pop(id(node))
        if isinstance(node, INodeDirectory):
            ids[id(node)] = node_id
            for child in node.children:
                parent_of[id(child)] = node_id
            length, replication = 0, 0
        else:
            assert isinstance(node, INodeFile)
            length, replication = node.length, node.replication
        yield {
            "id": node_id,
            "parent_id": parent_id,
            "name": node.name,
            "is_dir": isinstance(node, INodeDirectory),
            "mtime_ms": node.mtime_ms,
            "permission": node.permission,
            "owner": node.owner,
            "group": node.group,
            "length": length,
            "replication": replication,
        }


def _engine(path: Path, *, read_only: bool) -> Engine:
    """An engine on one SQLite file. Writing skips SQLite's journal and syncs: the file is a
    temp that becomes the image only after it is complete and fsynced as a whole."""
    uri = "file:" + urllib.parse.quote(str(path.absolute())) + ("?mode=ro" if read_only else "")

    def connect() -> sqlite3.Connection:
        conn = sqlite3.connect(uri, uri=True)
        if not read_only:
            conn.execute("PRAGMA journal_mode=OFF")
            conn.execute("PRAGMA synchronous=OFF")
        return conn

    return sa.create_engine("sqlite://", creator=connect, poolclass=sa.pool.NullPool)


def _write_database(
    path: Path, info: ImageInfo, rows: list[dict[str, Any]], retry_rows: list[dict[str, Any]]
) -> None:
    engine = _engine(path, read_only=False)
    try:
        with engine.begin() as conn:
            metadata.create_all(conn)
            conn.execute(image_info.insert(), dataclasses.asdict(info))
            for start in range(0, len(rows), _BATCH):
                conn.execute(inodes.insert(), rows[start : start + _BATCH])
            if retry_rows:
                conn.execute(retry_entries.insert(), retry_rows)
    finally:
        engine.dispose()


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
    try:
        with engine.connect() as conn:
            info = _read_info(path, conn)
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
    return Namespace.from_root(root, info.txid, retry_cache=retry_cache), info.txid, info


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
    wall_ms = time.time() * 1000
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


def _read_tree(path: Path, conn: sa.Connection, info: ImageInfo) -> INodeDirectory:
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
