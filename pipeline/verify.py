"""``hapipe verify``: HDFS-3077's system-test check (§7.4.1) at cluster scale, as a Spark
job (docs/architecture.md §8.5).

Two properties, after LogTesters (or NameNodes) have fenced each other for hours:

* every finalized segment is bytewise identical on every JournalNode that holds it: each
  copy's (journal, first txid, last txid, length, md5) is collected, grouped by
  (journal, first txid) in Spark, and every group with more than one version is a finding
  naming which JournalNode holds which version;
* no txid was acknowledged to two writers: the LogTesters' ``*.acked`` files ("txid md5"
  lines) are read by Spark and grouped by txid; every txid claimed more than once is a finding.

Copies come from live JournalNodes over RPC (``IsFormatted`` for the cluster id,
``GetEditLogManifest`` for the finalized segments, ``GetSegment`` streamed into md5; no RPC
lists a JournalNode's journals, so RPC mode names the journal ids) or from storage
directories (``<dir>/<journal>/current/edits_<first>-<last>``, every journal found; reading
never locks or changes anything, so it works beside running JournalNodes). Listing happens on
the driver, hashing in Spark tasks (a few per core, each hashing its share of the copies; in
directory mode every record is also checked, so a corrupt copy is named as such)::

    report = run_verify(spark, VerifySources(dirs=("/data/jn1", "/data/jn2", "/data/jn3")))
    print(format_report(report))
    sys.exit(0 if report.ok else 1)
"""

from __future__ import annotations

import hashlib
import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from conf import TLSSettings
from conf.rpc_failures import TLS_MISMATCHES, failure_cause, peer_name
from journalnode.errors import JournalUnavailableError
from pipeline.errors import PipelineError
from pipeline.report import format_table
from proto import records
from qjm.channel import GrpcJournalChannel

__all__ = [
    "COPY_COLUMNS",
    "Finding",
    "SegmentTask",
    "VerifyReport",
    "VerifySources",
    "find_acked_files",
    "format_report",
    "group_findings",
    "hash_segment",
    "list_dir_segments",
    "list_rpc_segments",
    "run_verify",
]

log = structlog.get_logger(__name__)

_FINALIZED = re.compile(r"edits_(\d{19})-(\d{19})")
_ACKED_LINE = r"^\d+ [0-9a-f]{32}$"
RPC_TIMEOUT = 30.0
# Printed per kind; the Parquet output (--out) and the report object hold every finding.
SHOWN_PER_KIND = 50

COPY_COLUMNS = ("journal", "first_txid", "last_txid", "node", "length", "md5", "error", "source")
"""One row per copy of a finalized segment on one JournalNode (``hash_segment``)."""


@dataclass(frozen=True)
class VerifySources:
    """Where the copies and the acknowledgements are. Exactly one of ``journalnodes``
    (host:port, with ``journal_ids``) and ``dirs`` (JournalNode storage roots).
    ``names``: (address, configured id) of the JournalNodes a configuration names, so that
    findings say ``JournalNode jn1 at 127.0.0.1:8485``."""

    journalnodes: tuple[str, ...] = ()
    journal_ids: tuple[str, ...] = ()
    dirs: tuple[str, ...] = ()
    logtester_dirs: tuple[str, ...] = ()
    tls: TLSSettings | None = None
    timeout: float = RPC_TIMEOUT
    names: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if bool(self.journalnodes) == bool(self.dirs):
            raise PipelineError("give either JournalNode addresses or storage directories")
        if self.journalnodes and not self.journal_ids:
            raise PipelineError(
                "over RPC the journal ids must be named (--journal-id): no RPC lists them"
            )


@dataclass(frozen=True)
class SegmentTask:
    """One copy to hash: plain values only, shipped to an executor as they are."""

    journal: str
    first_txid: int
    last_txid: int
    node: str
    source: str
    """The file's path, or the JournalNode's address for RPC."""
    cluster_id: str | None = None
    """Set for RPC: GetSegment names the cluster."""
    tls: TLSSettings | None = None
    timeout: float = RPC_TIMEOUT


@dataclass(frozen=True)
class Finding:
    """Something wrong. ``kind`` is one of segment-mismatch, segment-unreadable,
    duplicate-txid, journalnode-unreachable, tls-mismatch (a JournalNode whose TLS this
    client's does not match), journal-unformatted, journal-rpc-failed, cluster-id-mismatch."""

    kind: str
    journal: str | None
    txid: int | None
    detail: str

    def line(self) -> str:
        where = " ".join(
            part
            for part in (
                f"journal={self.journal}" if self.journal is not None else "",
                f"txid={self.txid}" if self.txid is not None else "",
            )
            if part
        )
        return f"{self.kind} {where}: {self.detail}" if where else f"{self.kind}: {self.detail}"


@dataclass(frozen=True)
class VerifyReport:
    """The figures and every finding of one verification."""

    nodes: int
    journals: tuple[str, ...]
    segments: int
    copies: int
    single_copy_segments: int
    acked_files: int
    acked_txids: int
    findings: tuple[Finding, ...]
    notes: tuple[str, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return not self.findings


# ---------------------------------------------------------------------------------------------
# Listing (driver).
# ---------------------------------------------------------------------------------------------


def list_dir_segments(dirs: Sequence[str]) -> list[SegmentTask]:
    """Every finalized segment file under ``<dir>/<journal>/current/`` of each storage root;
    the node is named by its directory as given. Moved-aside files (``.stale``, ``.corrupt``)
    and in-progress segments are no finalized copies and are left out."""
    tasks = []
    for root in dirs:
        root_path = Path(root)
        if not root_path.is_dir():
            raise PipelineError(f"{root} is not a directory")
        journals = sorted(p for p in root_path.iterdir() if (p / "current").is_dir())
        if not journals:
            raise PipelineError(
                f"{root} holds no journal (no <journal>/current directory): give a "
                "JournalNode's storage directory (dfs.journalnode.edits.dir)"
            )
        for journal_dir in journals:
            for path in sorted((journal_dir / "current").iterdir()):
                if m := _FINALIZED.fullmatch(path.name):
                    tasks.append(
                        SegmentTask(
                            journal_dir.name, int(m.group(1)), int(m.group(2)), root, str(path)
                        )
                    )
    return tasks


def list_rpc_segments(
    addresses: Sequence[str],
    journal_ids: Sequence[str],
    tls: TLSSettings | None = None,
    timeout: float = RPC_TIMEOUT,
    names: Mapping[str, str] | None = None,
) -> tuple[list[SegmentTask], list[Finding]]:
    """Each JournalNode's finalized segments of each journal, from its manifest; a JournalNode
    that does not answer (refused, TLS, timeout: named with its cause, ``conf.rpc_failures``),
    a journal it does not have formatted or refuses to list, and cluster ids that differ
    between JournalNodes are findings. ``names`` maps addresses to configured ids. When no
    JournalNode answers at all there is nothing to verify: PipelineError naming each."""
    tasks: list[SegmentTask] = []
    findings: list[Finding] = []
    unanswered: list[str] = []
    cluster_ids: dict[str, dict[str, str]] = defaultdict(dict)
    speaks_tls = tls is not None and tls.enabled
    for address in addresses:
        peer = peer_name("JournalNode", (names or {}).get(address, ""), address)
        channel = GrpcJournalChannel(address, tls)
        try:
            for journal in journal_ids:
                try:
                    formatted, ns = channel.is_formatted(journal, timeout)
                    if not formatted or ns is None:
                        findings.append(
                            Finding(
                                "journal-unformatted",
                                journal,
                                None,
                                f"{address} has journal {journal!r} unformatted",
                            )
                        )
                        continue
                    cluster_ids[journal][address] = ns.cluster_id
                    logs, _ = channel.get_edit_log_manifest(
                        journal, ns.cluster_id, 0, False, timeout
                    )
                except JournalUnavailableError as exc:
                    # Down or unreachable: asking about its other journals would only wait.
                    cause = failure_cause(exc, tls=speaks_tls) or str(exc)
                    kind = "tls-mismatch" if cause in TLS_MISMATCHES else (
                        "journalnode-unreachable"
                    )
                    findings.append(Finding(kind, None, None, f"{peer}: {cause}"))
                    unanswered.append(f"{peer}: {cause}")
                    break
                except Exception as exc:
                    refused = failure_cause(exc, tls=speaks_tls)  # a role it lacks, say
                    detail = f"{type(exc).__name__}: {exc}" if refused is None else refused
                    findings.append(
                        Finding("journal-rpc-failed", journal, None, f"{peer}: {detail}")
                    )
                    continue
                tasks.extend(
                    SegmentTask(
                        journal,
                        entry.start_txid,
                        entry.end_txid,
                        address,
                        address,
                        cluster_id=ns.cluster_id,
                        tls=tls,
                        timeout=timeout,
                    )
                    for entry in logs
                    if not entry.is_in_progress
                )
        finally:
            channel.close()
    if addresses and len(unanswered) == len(addresses):
        raise PipelineError(f"no JournalNode answered: {'; '.join(unanswered)}")
    for journal, by_node in sorted(cluster_ids.items()):
        if len(set(by_node.values())) > 1:
            seen = ", ".join(f"{a}={cid}" for a, cid in sorted(by_node.items()))
            findings.append(
                Finding("cluster-id-mismatch", journal, None, f"JournalNodes disagree: {seen}")
            )
    return tasks, findings


def find_acked_files(dirs: Sequence[str]) -> list[str]:
    """Every ``*.acked`` file under the LogTester output directories."""
    files: list[str] = []
    for d in dirs:
        path = Path(d)
        if not path.is_dir():
            raise PipelineError(f"{d} is not a directory")
        files.extend(str(p) for p in sorted(path.rglob("*.acked")) if p.is_file())
    return files


# ---------------------------------------------------------------------------------------------
# Hashing (executors).
# ---------------------------------------------------------------------------------------------


def hash_segment(task: SegmentTask) -> tuple[Any, ...]:
    """One copy's row (``COPY_COLUMNS``): its length and md5, and ``error`` when the copy is
    not a valid segment holding exactly its name's txids (a file) or could not be read (RPC;
    a JournalNode refuses to stream a corrupt segment)."""
    if task.cluster_id is None:
        length, md5, error = _hash_file(task)
    else:
        length, md5, error = _hash_rpc(task)
    return (
        task.journal,
        task.first_txid,
        task.last_txid,
        task.node,
        length,
        md5,
        error,
        task.source,
    )


def _hash_file(task: SegmentTask) -> tuple[int | None, str | None, str | None]:
    try:
        data = Path(task.source).read_bytes()
    except OSError as exc:
        return None, None, f"cannot read {task.source}: {exc.strerror or exc}"
    md5 = hashlib.md5(data).hexdigest()
    error = None
    if not data.startswith(records.SEGMENT_HEADER):
        error = "bad segment header"
    else:
        scan = records.scan(
            memoryview(data)[records.HEADER_LEN :],
            expected_first_txid=task.first_txid,
            base=records.HEADER_LEN,
        )
        if scan.error is not None:
            error = f"corrupt: {scan.error}"
        elif scan.last_txid != task.last_txid:
            error = f"holds txids up to {scan.last_txid}, its name says {task.last_txid}"
    return len(data), md5, error


def _hash_rpc(task: SegmentTask) -> tuple[int | None, str | None, str | None]:
    assert task.cluster_id is not None
    digest = hashlib.md5()
    length = 0
    channel = GrpcJournalChannel(task.source, task.tls)
    try:
        for chunk in channel.get_segment(
            task.journal, task.cluster_id, task.first_txid, None, task.timeout
        ):
            digest.update(chunk)
            length += len(chunk)
    except Exception as exc:
        # No answer (refused, TLS, timeout: conf.rpc_failures) is said as such; a refusal
        # (a corrupt copy) by its class.
        tls = task.tls is not None and task.tls.enabled
        why = failure_cause(exc, tls=tls) or f"{type(exc).__name__}: {exc}"
        return None, None, f"GetSegment failed: {why}"
    finally:
        channel.close()
    return length, digest.hexdigest(), None


# ---------------------------------------------------------------------------------------------
# The job.
# ---------------------------------------------------------------------------------------------


def copy_schema() -> StructType:
    types = {"first_txid": LongType(), "last_txid": LongType(), "length": LongType()}
    return StructType(
        [
            StructField(c, types.get(c, StringType()), c in ("length", "md5", "error"))
            for c in COPY_COLUMNS
        ]
    )


def segment_copies(spark: SparkSession, tasks: Sequence[SegmentTask]) -> DataFrame:
    """The copies' table, hashed by Spark tasks (a few per core, each hashing its share)."""
    sc = spark.sparkContext
    slices = max(1, min(len(tasks), 4 * sc.defaultParallelism))
    rdd = sc.parallelize(list(tasks), numSlices=slices).map(hash_segment)
    return spark.createDataFrame(rdd, copy_schema())


def segment_groups(copies: DataFrame) -> DataFrame:
    """One row per (journal, first txid): how many copies, how many distinct versions
    (last txid, length, md5) among the readable ones, and every copy."""
    return (
        copies.groupBy("journal", "first_txid")
        .agg(
            F.count("*").alias("copies"),
            F.countDistinct("last_txid", "length", "md5").alias("versions"),
            F.collect_list(F.struct("node", "last_txid", "length", "md5", "error", "source")).alias(
                "held"
            ),
        )
        .orderBy("journal", "first_txid")
    )


def group_findings(group: Any) -> list[Finding]:
    """The findings of one ``segment_groups`` row: a mismatch naming which node holds which
    version, and every copy that could not be read or is not a valid segment."""
    findings = []
    journal, first = group["journal"], group["first_txid"]
    if group["versions"] > 1:
        versions: dict[tuple[int, int, str], list[str]] = defaultdict(list)
        for copy in group["held"]:
            if copy["md5"] is not None:
                versions[(copy["last_txid"], copy["length"], copy["md5"])].append(copy["node"])
        described = "; ".join(
            f"{', '.join(sorted(nodes))}: last txid {last}, {length} bytes, md5 {md5}"
            for (last, length, md5), nodes in sorted(
                versions.items(), key=lambda kv: (-len(kv[1]), sorted(kv[1]))
            )
        )
        findings.append(
            Finding(
                "segment-mismatch",
                journal,
                first,
                f"{len(versions)} versions of the segment starting here: {described}",
            )
        )
    for copy in sorted(group["held"], key=lambda c: c["node"]):
        if copy["error"] is not None:
            findings.append(
                Finding(
                    "segment-unreadable",
                    journal,
                    first,
                    f"{copy['node']}: segment {first}-{copy['last_txid']} ({copy['source']}): "
                    f"{copy['error']}",
                )
            )
    return findings


def acked_claims(spark: SparkSession, files: Sequence[str]) -> DataFrame:
    """(txid, md5, file) for every well-formed line of the ``*.acked`` files."""

    lines = spark.read.text(list(files)).select(
        F.col("value"), F.col("_metadata.file_path").alias("path")
    )
    parts = F.split(F.col("value"), " ")
    return lines.where(F.col("value").rlike(_ACKED_LINE)).select(
        parts.getItem(0).cast("long").alias("txid"),
        parts.getItem(1).alias("md5"),
        F.element_at(F.split(F.col("path"), "/"), -1).alias("file"),
    )


def txid_claims(claims: DataFrame) -> DataFrame:
    """One row per acknowledged txid: how many times, by which files, how many digests."""
    return claims.groupBy("txid").agg(
        F.count("*").alias("claims"),
        F.sort_array(F.collect_list("file")).alias("files"),
        F.countDistinct("md5").alias("digests"),
    )


def duplicate_txids(per_txid: DataFrame) -> list[Finding]:
    """Every txid acknowledged more than once, with the files that claim it."""
    findings = []
    for r in per_txid.where(F.col("claims") > 1).orderBy("txid").collect():
        same = "the same bytes" if r["digests"] == 1 else f"{r['digests']} different digests"
        findings.append(
            Finding(
                "duplicate-txid",
                None,
                r["txid"],
                f"acknowledged {r['claims']} times ({', '.join(r['files'])}); {same}",
            )
        )
    return findings


def run_verify(
    spark: SparkSession,
    sources: VerifySources,
    *,
    out: Path | None = None,
    listed: tuple[list[SegmentTask], list[Finding]] | None = None,
) -> VerifyReport:
    """Collect, group and compare; with ``out``, also write the copies (and acknowledgement
    claims) as Parquet there for a closer look. ``listed``: what ``list_rpc_segments`` of
    these sources gave already (``hapipe verify`` lists before it starts Spark, so that a
    cluster it cannot reach costs no JVM)."""

    if out is not None:
        taken = [
            n for n in ("segment_copies.parquet", "acked_claims.parquet") if (out / n).exists()
        ]
        if taken:
            raise PipelineError(f"{out} already holds {', '.join(taken)}; give another --out")
    findings: list[Finding] = []
    notes: list[str] = []
    if sources.dirs:
        tasks = list_dir_segments(sources.dirs)
        nodes = len(sources.dirs)
    else:
        tasks, found = listed if listed is not None else list_rpc_segments(
            sources.journalnodes,
            sources.journal_ids,
            sources.tls,
            sources.timeout,
            dict(sources.names),
        )
        findings.extend(found)
        nodes = len(sources.journalnodes)
    log.info("verify: segment copies listed", copies=len(tasks), nodes=nodes)

    segments = single = 0
    journals: tuple[str, ...] = ()
    if tasks:
        copies = segment_copies(spark, tasks)
        if out is not None:
            copies = copies.cache()  # hashed once for both the groups and the table
        groups = segment_groups(copies).collect()
        for group in groups:
            findings.extend(group_findings(group))
        segments = len(groups)
        single = sum(1 for g in groups if g["copies"] == 1)
        journals = tuple(sorted({g["journal"] for g in groups}))
        if out is not None:
            copies.orderBy("journal", "first_txid", "node").coalesce(1).write.parquet(
                str(out / "segment_copies.parquet")
            )
            copies.unpersist()
    else:
        notes.append("no finalized segment found")
    if single and nodes > 1:
        notes.append(
            f"{single} segment(s) are held by one JournalNode only (one that was down or out of "
            "sync when they were finalized may lack them; not an error)"
        )

    acked_files = find_acked_files(sources.logtester_dirs) if sources.logtester_dirs else []
    acked_txids = 0
    if sources.logtester_dirs and not acked_files:
        notes.append("no *.acked file in the LogTester directories")
    if acked_files:
        claims = acked_claims(spark, acked_files)
        per_txid = txid_claims(claims).cache()
        try:
            findings.extend(duplicate_txids(per_txid))
            acked_txids = per_txid.count()
            if out is not None:
                claims.coalesce(1).write.parquet(str(out / "acked_claims.parquet"))
        finally:
            per_txid.unpersist()

    return VerifyReport(
        nodes=nodes,
        journals=journals,
        segments=segments,
        copies=len(tasks),
        single_copy_segments=single,
        acked_files=len(acked_files),
        acked_txids=acked_txids,
        findings=tuple(findings),
        notes=tuple(notes),
    )


def format_report(report: VerifyReport) -> str:
    """The report a person reads: what was checked, then every finding by kind."""
    r = report
    lines = [
        f"verify: {r.nodes} JournalNode(s), journals {', '.join(r.journals) or '-'}: "
        f"{r.segments} finalized segments, {r.copies} copies",
    ]
    if r.acked_files:
        lines.append(
            f"  LogTester acknowledgements: {r.acked_txids} txids in {r.acked_files} files"
        )
    lines.extend(f"  note: {n}" for n in r.notes)
    by_kind: dict[str, list[Finding]] = defaultdict(list)
    for f in r.findings:
        by_kind[f.kind].append(f)
    if by_kind:
        lines.append(
            format_table(["finding", "count"], [[k, len(v)] for k, v in sorted(by_kind.items())])
        )
    for kind, found in sorted(by_kind.items()):
        lines.append(f"  {kind}:")
        lines.extend(f"    {f.line()}" for f in found[:SHOWN_PER_KIND])
        if len(found) > SHOWN_PER_KIND:
            lines.append(f"    ... and {len(found) - SHOWN_PER_KIND} more")
    lines.append("OK: every copy agrees" if r.ok else f"FAILED: {len(r.findings)} finding(s)")
    return "\n".join(lines)
