"""``hapipe analyze``: an fsimage plus edit segments turned into tables and the reports an
operator asks for (docs/architecture.md §8.5).

The image (``hanamenode.fsimage.load_image``) and the edit segments (a JournalNode's
``current`` directory, or any directory of ``edits_*`` files, decoded with ``proto.records``)
are read on the driver; the edits after the image are replayed onto it with the NameNode's own
``Namespace.apply``, so the ``inodes`` table is the namespace as of the last edit, exactly as
a NameNode loading the same files would hold it. Spark then holds three tables, written as
Parquet under ``--out``:

* ``inodes``: path, parent, name, is_dir, depth, children, length, replication, mtime,
  permission, owner, group;
* ``edit_ops``: txid, op_type, path (a rename's source), dst, parent, mtime, time;
* ``ops_per_minute``: minute, op_type, ops.

and the reports are Spark SQL over them: namespace size by type and by depth, the largest
directories (by children), edit ops per type per minute, the busiest directories (parents of
the paths the ops touched). With ``charts``, ``ops_per_minute.png`` plots the time series
when matplotlib is installed::

    loaded = load(Path("name/fsimage_0000000000000000000.db"), Path("jn1/ns1/current"))
    report = run_analyze(spark, loaded, out=Path("analysis"))
    print(format_report(report))
"""

from __future__ import annotations

import datetime as dt
import importlib
import importlib.util
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from hanamenode import fsimage, paths
from hanamenode.errors import EditLogReplayError, FSImageError
from hanamenode.namespace import INodeDirectory, INodeFile, Namespace
from pipeline.errors import PipelineError
from pipeline.report import format_table
from proto import edits_pb2, records

__all__ = [
    "AnalyzeReport",
    "EditSegment",
    "Loaded",
    "find_segments",
    "format_report",
    "inode_rows",
    "load",
    "load_edits",
    "op_rows",
    "run_analyze",
]

log = structlog.get_logger(__name__)

_FINALIZED = re.compile(r"edits_(\d{19})-(\d{19})")
_IN_PROGRESS = re.compile(r"edits_inprogress_(\d{19})")
TOP = 10
# Minutes printed in the per-minute table; the Parquet table has them all.
SHOWN_MINUTES = 30
OP_TYPES = ("mkdir", "create", "delete", "rename", "start_log_segment", "end_log_segment", "noop")

INODE_COLUMNS = (
    "path",
    "parent",
    "name",
    "is_dir",
    "depth",
    "children",
    "length",
    "replication",
    "mtime_ms",
    "mtime",
    "permission",
    "owner",
    "group",
)
OP_COLUMNS = ("txid", "op_type", "path", "dst", "parent", "mtime_ms", "time", "segment")


# ---------------------------------------------------------------------------------------------
# Reading edits and replaying them (driver, pure Python).
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class EditSegment:
    """A segment file: finalized (``last_txid`` from its name) or in progress (None)."""

    first_txid: int
    in_progress: bool
    path: Path = field(compare=False)
    last_txid: int | None = field(default=None, compare=False)


def _edits_dir(path: Path) -> Path:
    """The directory holding ``edits_*`` files: ``path`` itself, its ``current``, or the
    ``current`` of the one journal under a JournalNode storage root."""
    if not path.is_dir():
        raise PipelineError(f"{path} is not a directory")
    for candidate in (path, path / "current"):
        if candidate.is_dir() and any(candidate.glob("edits_*")):
            return candidate
    journals = [p / "current" for p in sorted(path.iterdir()) if (p / "current").is_dir()]
    with_edits = [j for j in journals if any(j.glob("edits_*"))]
    if len(with_edits) == 1:
        return with_edits[0]
    if len(with_edits) > 1:
        names = ", ".join(j.parent.name for j in with_edits)
        raise PipelineError(f"{path} holds several journals ({names}); give one of them")
    raise PipelineError(f"no edit segments (edits_*) in {path}")


def find_segments(path: Path) -> list[EditSegment]:
    """Every segment file of an edits directory, by first txid, finalized before in-progress;
    moved-aside files (``.stale``, ``.corrupt``, ...) are left out."""
    directory = _edits_dir(Path(path))
    segments = []
    for entry in directory.iterdir():
        if m := _FINALIZED.fullmatch(entry.name):
            segments.append(EditSegment(int(m.group(1)), False, entry, int(m.group(2))))
        elif m := _IN_PROGRESS.fullmatch(entry.name):
            segments.append(EditSegment(int(m.group(1)), True, entry))
    return sorted(segments)


def read_segment(segment: EditSegment) -> tuple[list[edits_pb2.EditOp], str | None]:
    """The ops of one segment file, and a note when it ends early: an in-progress segment
    may end in a torn record (a crash), a finalized one must not."""
    data = segment.path.read_bytes()
    if not data.startswith(records.SEGMENT_HEADER):
        if segment.in_progress and len(data) < records.HEADER_LEN:
            return [], None  # created, crashed before its header was whole
        raise PipelineError(f"{segment.path} is not an edit segment (bad header)")
    body = memoryview(data)[records.HEADER_LEN :]
    scan = records.scan(body, expected_first_txid=segment.first_txid, base=records.HEADER_LEN)
    ops = [
        edits_pb2.EditOp.FromString(op_bytes)
        for _, op_bytes in records.iter_records(body[: scan.valid_len], base=records.HEADER_LEN)
    ]
    note = None
    if scan.error is not None:
        if not segment.in_progress:
            raise PipelineError(f"{segment.path} is corrupt: {scan.error}")
        note = f"{segment.path.name}: read up to txid {scan.last_txid} ({scan.error})"
    elif segment.last_txid is not None and scan.last_txid != segment.last_txid:
        raise PipelineError(
            f"{segment.path} holds txids up to {scan.last_txid}, its name says {segment.last_txid}"
        )
    return ops, note


def load_edits(path: Path) -> tuple[list[edits_pb2.EditOp], dict[int, int], list[str]]:
    """Every op of an edits directory once, by txid; the first txid of the segment each came
    from; and notes for a person."""
    notes: list[str] = []
    by_txid: dict[int, edits_pb2.EditOp] = {}
    segment_of: dict[int, int] = {}
    for segment in find_segments(path):
        ops, note = read_segment(segment)
        if note:
            notes.append(note)
        for op in ops:
            seen = by_txid.setdefault(op.txid, op)
            if seen is op:
                segment_of[op.txid] = segment.first_txid
            elif seen.SerializeToString() != op.SerializeToString():
                notes.append(f"txid {op.txid} differs between segments; kept the first read")
    return [by_txid[t] for t in sorted(by_txid)], segment_of, notes


def replay(namespace: Namespace, ops: Sequence[edits_pb2.EditOp]) -> list[str]:
    """Apply the ops after the namespace's last txid, in order, as a NameNode loading its
    image would; stop (with a note) at a gap or at an op that does not apply."""
    notes = []
    for op in ops:
        if op.txid <= namespace.last_applied_txid:
            continue
        if op.txid != namespace.last_applied_txid + 1:
            notes.append(
                f"edits jump from txid {namespace.last_applied_txid} to {op.txid}: the "
                f"namespace is as of txid {namespace.last_applied_txid}"
            )
            break
        try:
            namespace.apply(op)
        except EditLogReplayError as exc:
            notes.append(f"replay stopped: {exc}")
            break
    return notes


def _utc(mtime_ms: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(mtime_ms / 1000, tz=dt.UTC)


def inode_rows(namespace: Namespace) -> Iterator[tuple[Any, ...]]:
    """One row per inode (``INODE_COLUMNS``), in pre-order."""
    with namespace.lock:
        for path, node in namespace.walk():
            is_dir = isinstance(node, INodeDirectory)
            length, replication = (
                (node.length, node.replication) if isinstance(node, INodeFile) else (0, 0)
            )
            yield (
                path,
                paths.parent(path),
                node.name,
                is_dir,
                len(paths.components(path)),
                len(node.children) if isinstance(node, INodeDirectory) else 0,
                length,
                replication,
                node.mtime_ms,
                _utc(node.mtime_ms),
                f"{node.permission:o}",
                node.owner,
                node.group,
            )


def op_rows(
    ops: Sequence[edits_pb2.EditOp], segment_of: dict[int, int]
) -> Iterator[tuple[Any, ...]]:
    """One row per op (``OP_COLUMNS``); ``segment_of`` maps txid to its segment's first txid.
    A multi (one transaction, docs/consistency.md §11) gives one row per change it made, each
    with the multi's txid and the change's own type (an unchanged entry gives none)."""
    for op in ops:
        kind = op.WhichOneof("op") or "empty"
        if kind == "multi":
            for entry in op.multi.entries:
                entry_kind = entry.WhichOneof("op")
                if entry_kind in ("mkdir", "create", "delete", "rename"):
                    yield _op_row(op.txid, entry_kind, entry, segment_of)
            continue
        yield _op_row(op.txid, kind, op, segment_of)


def _op_row(txid: int, kind: str, op: Any, segment_of: dict[int, int]) -> tuple[Any, ...]:
    path: str | None = None
    dst: str | None = None
    mtime_ms: int | None = None
    if kind == "mkdir":
        path, mtime_ms = op.mkdir.path, op.mkdir.mtime_ms
    elif kind == "create":
        path, mtime_ms = op.create.path, op.create.mtime_ms
    elif kind == "delete":
        path, mtime_ms = op.delete.path, op.delete.mtime_ms
    elif kind == "rename":
        path, dst, mtime_ms = op.rename.src, op.rename.dst, op.rename.mtime_ms
    return (
        txid,
        kind,
        path,
        dst,
        paths.parent(path) if path and path.startswith("/") else None,
        mtime_ms,
        _utc(mtime_ms) if mtime_ms else None,
        segment_of.get(txid),
    )


# ---------------------------------------------------------------------------------------------
# The Spark tables and reports.
# ---------------------------------------------------------------------------------------------


def inode_schema() -> StructType:
    types = {
        "is_dir": BooleanType(),
        "depth": IntegerType(),
        "children": IntegerType(),
        "length": LongType(),
        "replication": IntegerType(),
        "mtime_ms": LongType(),
        "mtime": TimestampType(),
    }
    return StructType(
        [StructField(c, types.get(c, StringType()), c == "parent") for c in INODE_COLUMNS]
    )


def op_schema() -> StructType:
    types = {
        "txid": LongType(),
        "mtime_ms": LongType(),
        "time": TimestampType(),
        "segment": LongType(),
    }
    return StructType(
        [
            StructField(c, types.get(c, StringType()), c not in ("txid", "op_type"))
            for c in OP_COLUMNS
        ]
    )


@dataclass(frozen=True)
class AnalyzeReport:
    """Every figure the printed report shows (``format_report``)."""

    image: str
    image_txid: int
    last_txid: int
    edit_ops: int
    first_edit_txid: int | None
    dirs: int
    files: int
    total_bytes: int
    by_depth: tuple[tuple[int, int, int], ...]
    """(depth, directories, files)."""
    largest_dirs: tuple[tuple[str, int], ...]
    ops_by_type: tuple[tuple[str, int], ...]
    per_minute: tuple[tuple[str, dict[str, int]], ...]
    """(minute "YYYY-MM-DD HH:MM" UTC, {op type: ops}), oldest first."""
    busiest: tuple[tuple[str, int], ...]
    """(parent directory, ops on paths inside it)."""
    out: str | None
    chart: str | None
    notes: tuple[str, ...]


@dataclass
class Loaded:
    """An image with the edits after it replayed onto it: the namespace as of ``last_txid``,
    every op read (``segment_of``: txid -> first txid of its segment), notes for a person."""

    image: Path
    image_txid: int
    namespace: Namespace
    ops: list[edits_pb2.EditOp]
    segment_of: dict[int, int]
    notes: list[str]


def load(image: Path, edits: Path | None = None) -> Loaded:
    """Read the image (a file, or the newest one in a name directory) and the edits, and
    replay them; no Spark yet, so bad input is refused before a JVM starts."""
    image = Path(image)
    if image.is_dir():
        newest = fsimage.latest_image(image)
        if newest is None:
            raise PipelineError(f"no fsimage_<txid>.db in {image}")
        image = newest
    try:
        namespace, image_txid, _ = fsimage.load_image(image)
    except (FSImageError, OSError) as exc:
        raise PipelineError(f"cannot load {image}: {exc}") from exc
    loaded = Loaded(image, image_txid, namespace, [], {}, [])
    if edits is not None:
        loaded.ops, loaded.segment_of, read_notes = load_edits(Path(edits))
        loaded.notes.extend(read_notes)
        loaded.notes.extend(replay(namespace, loaded.ops))
    log.info(
        "analyze: loaded",
        image=str(image),
        image_txid=image_txid,
        ops=len(loaded.ops),
        last_txid=namespace.last_applied_txid,
    )
    return loaded


TABLES = ("inodes.parquet", "edit_ops.parquet", "ops_per_minute.parquet")


def check_out(out: Path) -> None:
    """Refuse an output directory that already holds this job's tables."""
    taken = [name for name in TABLES if (Path(out) / name).exists()]
    if taken:
        raise PipelineError(f"{out} already holds {', '.join(taken)}; give another --out")


def run_analyze(
    spark: SparkSession, loaded: Loaded, *, out: Path | None = None, charts: bool = False
) -> AnalyzeReport:
    """Build the tables (Parquet under ``out`` when given) and compute the reports."""
    if out is not None:
        check_out(out)
    notes = list(loaded.notes)
    namespace, ops = loaded.namespace, loaded.ops
    inodes = spark.createDataFrame(list(inode_rows(namespace)), inode_schema()).cache()
    edit_ops = spark.createDataFrame(list(op_rows(ops, loaded.segment_of)), op_schema()).cache()
    per_minute_df = ops_per_minute(edit_ops).cache()
    try:
        figures = _reports(inodes, edit_ops, per_minute_df, namespace.last_applied_txid)
        if out is not None:
            _write(out, inodes, edit_ops, per_minute_df)
    finally:
        for frame in (inodes, edit_ops, per_minute_df):
            frame.unpersist()
    chart = None
    if charts and out is None:
        notes.append("charts are written under --out; none given")
    elif charts and out is not None:
        chart, why_not = write_chart(figures["per_minute"], out / "ops_per_minute.png")
        if why_not:
            notes.append(why_not)
    return AnalyzeReport(
        image=str(loaded.image),
        image_txid=loaded.image_txid,
        edit_ops=len(ops),
        first_edit_txid=ops[0].txid if ops else None,
        out=str(out) if out is not None else None,
        chart=chart,
        notes=tuple(notes),
        **figures,
    )


def ops_per_minute(edit_ops: DataFrame) -> DataFrame:
    """(minute, op_type, ops) for every op with a time (segment markers have none)."""

    return (
        edit_ops.where(F.col("time").isNotNull())
        .groupBy(F.date_trunc("minute", "time").alias("minute"), "op_type")
        .agg(F.count("*").alias("ops"))
        .orderBy("minute", "op_type")
    )


def _reports(
    inodes: DataFrame, edit_ops: DataFrame, per_minute_df: DataFrame, last_txid: int
) -> dict[str, Any]:
    """The figures of ``AnalyzeReport`` that Spark SQL computes."""

    # One pass over the inodes for size by type and by depth.
    depth_rows = (
        inodes.groupBy("depth")
        .agg(
            F.sum(F.col("is_dir").cast("int")).alias("dirs"),
            F.sum((~F.col("is_dir")).cast("int")).alias("files"),
            F.sum("length").alias("bytes"),
        )
        .orderBy("depth")
        .collect()
    )
    by_depth = tuple((r["depth"], r["dirs"], r["files"]) for r in depth_rows)
    largest = tuple(
        (r["path"], r["children"])
        for r in inodes.where("is_dir").orderBy(F.desc("children"), "path").limit(TOP).collect()
    )
    by_type = tuple(
        (r["op_type"], r["count"])
        for r in edit_ops.groupBy("op_type").count().orderBy(F.desc("count"), "op_type").collect()
    )
    minutes: dict[str, dict[str, int]] = {}
    for r in per_minute_df.collect():
        minutes.setdefault(r["minute"].strftime("%Y-%m-%d %H:%M"), {})[r["op_type"]] = r["ops"]
    busiest = tuple(
        (r["parent"], r["count"])
        for r in edit_ops.where(F.col("parent").isNotNull())
        .groupBy("parent")
        .count()
        .orderBy(F.desc("count"), "parent")
        .limit(TOP)
        .collect()
    )
    return {
        "last_txid": last_txid,
        "dirs": sum(r["dirs"] for r in depth_rows),
        "files": sum(r["files"] for r in depth_rows),
        "total_bytes": sum(r["bytes"] for r in depth_rows),
        "by_depth": by_depth,
        "largest_dirs": largest,
        "ops_by_type": by_type,
        "per_minute": tuple(sorted(minutes.items())),
        "busiest": busiest,
    }


def _write(out: Path, inodes: DataFrame, edit_ops: DataFrame, per_minute_df: DataFrame) -> None:
    tables = dict(
        zip(
            TABLES,
            (inodes, edit_ops.orderBy("txid"), per_minute_df),
            strict=True,
        )
    )
    out.mkdir(parents=True, exist_ok=True)
    for name, frame in tables.items():
        frame.coalesce(1).write.parquet(str(out / name))


def write_chart(
    per_minute: Sequence[tuple[str, dict[str, int]]], path: Path
) -> tuple[str | None, str | None]:
    """Plot edit ops per type per minute as a PNG: (its path, None), or (None, why not)."""
    if importlib.util.find_spec("matplotlib") is None:
        return None, "charts skipped: matplotlib is not installed (pip install matplotlib)"
    if not per_minute:
        return None, "charts skipped: no timed edit ops"
    matplotlib: Any = importlib.import_module("matplotlib")
    matplotlib.use("Agg")  # files only, never a window
    plt: Any = importlib.import_module("matplotlib.pyplot")

    counted = {dt.datetime.strptime(m, "%Y-%m-%d %H:%M"): c for m, c in per_minute}
    # Every minute from the first to the last, quiet ones at zero, so lines do not bridge gaps.
    first, last = min(counted), max(counted)
    minutes = [
        first + dt.timedelta(minutes=i)
        for i in range(int((last - first).total_seconds() // 60) + 1)
    ]
    kinds = [k for k in OP_TYPES if any(k in c for c in counted.values())]
    fig, ax = plt.subplots(figsize=(10, 4))
    try:
        for kind in kinds:
            values = [counted.get(m, {}).get(kind, 0) for m in minutes]
            ax.plot(minutes, values, label=kind, marker="o" if len(minutes) < 60 else None)
        ax.set_title("edit ops per minute (UTC)")
        ax.set_ylabel("ops")
        ax.legend()
        fig.autofmt_xdate()
        fig.savefig(path, dpi=100)
    finally:
        plt.close(fig)
    return str(path), None


def format_report(report: AnalyzeReport) -> str:
    """The reports a person reads."""
    r = report
    replayed = (
        f"{r.edit_ops} edit ops (txids {r.first_edit_txid}..)" if r.edit_ops else "no edit ops"
    )
    lines = [
        f"analyze: {r.image} (txid {r.image_txid}) + {replayed}; namespace as of txid "
        f"{r.last_txid}",
        f"  namespace: {r.dirs} directories (root included), {r.files} files, "
        f"{r.total_bytes:,} bytes declared",
        "  by depth:",
        format_table(["depth", "directories", "files"], list(r.by_depth), indent="    "),
        f"  largest directories (top {TOP}, by children):",
        format_table(["directory", "children"], list(r.largest_dirs), indent="    "),
    ]
    if r.ops_by_type:
        lines.append("  edit ops by type:")
        lines.append(format_table(["op", "count"], list(r.ops_by_type), indent="    "))
    if r.per_minute:
        kinds = [k for k in OP_TYPES if any(k in c for _, c in r.per_minute)]
        shown = r.per_minute[-SHOWN_MINUTES:]
        more = len(r.per_minute) - len(shown)
        lines.append(
            "  edit ops per minute (UTC)"
            + (f", last {len(shown)} of {len(r.per_minute)} minutes:" if more else ":")
        )
        lines.append(
            format_table(
                ["minute", *kinds],
                [[m, *(c.get(k, 0) for k in kinds)] for m, c in shown],
                indent="    ",
            )
        )
    if r.busiest:
        lines.append(f"  busiest directories (top {TOP}, by ops on their entries):")
        lines.append(format_table(["directory", "ops"], list(r.busiest), indent="    "))
    lines.extend(f"  note: {n}" for n in r.notes)
    if r.out:
        lines.append(f"  tables: {r.out}/{{inodes,edit_ops,ops_per_minute}}.parquet")
    if r.chart:
        lines.append(f"  chart: {r.chart}")
    return "\n".join(lines)
