"""``hapipe analyze`` on local Spark over what a real NameNode wrote.

One NameNode process and three JournalNode processes (``NameNodeProcessCluster``): the
NameNode is made active, a known sequence of mkdirs, creates, renames and deletes goes
through ``HaFsClient``, and the namespace reports its own size (a recursive listing, and its
``hanamenode_inodes`` and ``hanamenode_last_applied_txid`` gauges). Then the NameNode steps
down (finalizing its segment) and analyze reads the image written at format (txid 0) plus
every segment of one JournalNode: its tables and reports must give the same counts.
"""

from __future__ import annotations

import urllib.request
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from prometheus_client.parser import text_string_to_metric_families
from pyspark.sql import SparkSession

from hadev.namenodes import NameNodeProcessCluster
from hanamenode.client import HaFsClient
from hanamenode.fsimage import image_name
from pipeline.analyze import (
    AnalyzeReport,
    format_report,
    load,
    load_edits,
    run_analyze,
    write_chart,
)
from pipeline.cli import main
from proto import edits_pb2, records

pytestmark = pytest.mark.timeout(180)

FAST_CONF: dict[str, str | int | float | bool] = {
    "dfs.ha.tail-edits.period": "0.1",
    "dfs.ha.log-roll.period": "0.5",
    "dfs.qjournal.heartbeat.interval.ms": "200",
}


@dataclass
class Written:
    """What the NameNode holds and says about itself after the workload."""

    cluster: NameNodeProcessCluster
    ops: Counter[str]
    dirs: int
    files: int
    bytes: int
    inodes: int
    last_applied_txid: int
    children: dict[str, int]

    @property
    def image(self) -> Path:
        return self.cluster.name_dir("nn1") / image_name(0)

    @property
    def edits(self) -> Path:
        return self.cluster.journal.journal_dir(0, "ns1")


def gauges(url: str) -> dict[str, float]:
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}


def workload(fs: HaFsClient) -> Counter[str]:
    """A fixed sequence of namespace changes; the ops each one logs (refusals log none)."""
    ops: Counter[str] = Counter()
    for path in ("/user/alice/data", "/user/bob", "/tmp", "/logs/2024/01", "/logs/2024/02"):
        assert fs.mkdirs(path, parents=True)
        ops["mkdir"] += 1
    assert not fs.mkdirs("/user/alice/data", parents=True)  # exists: no op
    for i in range(12):
        fs.create(f"/user/alice/data/part-{i:04d}", length=1000 + i)
        ops["create"] += 1
    for name in ("a", "b", "c"):
        fs.create(f"/tmp/{name}", length=7)
        ops["create"] += 1
    for day in range(4):
        fs.create(f"/logs/2024/01/day{day}.log", length=100)
        ops["create"] += 1
    assert fs.rename("/tmp/a", "/user/bob") == "/user/bob/a"
    assert fs.rename("/logs/2024/02", "/logs/2024/03") == "/logs/2024/03"
    ops["rename"] += 2
    assert fs.delete("/tmp/b")
    assert fs.delete("/user/alice/data/part-0011")
    assert fs.delete("/logs/2024/01", recursive=True)
    ops["delete"] += 3
    return ops


def walk(fs: HaFsClient) -> tuple[int, int, int, dict[str, int]]:
    """(directories with the root, files, bytes, {dir: children}) by listing from the root."""
    dirs, files, size, children = 1, 0, 0, {}
    todo = ["/"]
    while todo:
        path = todo.pop()
        entries = fs.list(path)
        children[path] = len(entries)
        for st in entries:
            if st.is_dir:
                dirs += 1
                todo.append(st.path)
            else:
                files += 1
                size += st.length
    return dirs, files, size, children


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Written]:
    base = tmp_path_factory.mktemp("analyze")
    with NameNodeProcessCluster(base, namenodes=1, extra_conf=FAST_CONF) as c:
        c.transition_to_active("nn1")
        with HaFsClient(c.settings()) as fs:
            ops = workload(fs)
            dirs, files, size, children = walk(fs)
        metrics_url = c["nn1"].metrics_url
        assert metrics_url is not None
        active = gauges(metrics_url)
        # Stepping down ends and finalizes the open segment.
        c.transition_to_standby("nn1")
        standby = gauges(metrics_url)
        yield Written(
            c,
            ops,
            dirs,
            files,
            size,
            int(active["hanamenode_inodes"]),
            int(standby["hanamenode_last_applied_txid"]),
            children,
        )


def test_analyze_gives_the_counts_the_namespace_reports(
    spark: SparkSession, written: Written, tmp_path: Path
) -> None:
    w = written
    assert (w.dirs, w.files) == (9, 13)  # the workload's arithmetic, checked once
    report = run_analyze(spark, load(w.image, w.edits), out=tmp_path / "out", charts=True)
    print(format_report(report))

    assert report.image_txid == 0
    assert (report.dirs, report.files, report.total_bytes) == (w.dirs, w.files, w.bytes)
    assert report.dirs + report.files == w.inodes
    assert report.last_txid == w.last_applied_txid == report.edit_ops
    assert report.first_edit_txid == 1

    by_type = dict(report.ops_by_type)
    for kind in ("mkdir", "create", "rename", "delete"):
        assert by_type.pop(kind) == w.ops[kind], kind
    # What remains are the segment markers the NameNode writes around its edits.
    assert set(by_type) <= {"start_log_segment", "end_log_segment"}
    assert by_type["start_log_segment"] >= 1

    # Every timed op is in some minute; the busiest directory is where the creates went.
    timed = Counter[str]()
    for _, counts in report.per_minute:
        timed.update(counts)
    assert timed == w.ops
    assert report.busiest[0] == ("/user/alice/data", 13)  # 12 creates + 1 delete
    largest = dict(report.largest_dirs)
    assert largest["/user/alice/data"] == w.children["/user/alice/data"] == 11
    assert report.by_depth[0] == (0, 1, 0)
    assert sum(d for _, d, _ in report.by_depth) == w.dirs

    check_tables(spark, tmp_path / "out", report, w)


def check_tables(spark: SparkSession, out: Path, report: AnalyzeReport, w: Written) -> None:
    inodes = {r["path"]: r for r in spark.read.parquet(str(out / "inodes.parquet")).collect()}
    assert len(inodes) == w.inodes
    assert sum(r["is_dir"] for r in inodes.values()) == w.dirs
    moved = inodes["/user/bob/a"]
    assert not moved["is_dir"] and moved["length"] == 7
    assert moved["parent"] == "/user/bob" and moved["depth"] == 3

    ops = spark.read.parquet(str(out / "edit_ops.parquet")).collect()
    assert [r["txid"] for r in ops] == list(range(1, report.last_txid + 1))
    rename = next(r for r in ops if r["op_type"] == "rename" and r["path"] == "/tmp/a")
    assert rename["dst"] == "/user/bob/a" and rename["parent"] == "/tmp"
    assert rename["time"] is not None and rename["segment"] >= 1
    per_minute = spark.read.parquet(str(out / "ops_per_minute.parquet")).collect()
    assert sum(r["ops"] for r in per_minute) == sum(w.ops.values())
    if report.chart is None:
        assert any("charts skipped: matplotlib is not installed" in n for n in report.notes)
    else:
        assert Path(report.chart).stat().st_size > 0


def test_analyze_cli_on_the_name_directory(
    spark: SparkSession, written: Written, tmp_path: Path
) -> None:
    """The image may be named by its directory (the newest image in it); exit status 0."""
    result = CliRunner().invoke(
        main,
        [
            "analyze",
            "--image",
            str(written.cluster.name_dir("nn1")),
            "--edits",
            str(written.edits.parent.parent),  # the JournalNode's storage root, one journal
            "--out",
            str(tmp_path / "cli"),
        ],
    )
    assert result.exit_code == 0, result.output
    assert f"namespace: {written.dirs} directories (root included), {written.files} files" in (
        result.stdout
    )
    assert (tmp_path / "cli" / "inodes.parquet").is_dir()


def test_analyze_refuses_what_is_not_an_image(tmp_path: Path) -> None:
    bogus = tmp_path / "fsimage_0000000000000000000.db"
    bogus.write_bytes(b"not sqlite")
    result = CliRunner().invoke(main, ["analyze", "--image", str(bogus)])
    assert result.exit_code == 2
    assert result.stderr.startswith(f"hapipe: error: cannot load {bogus}: ")
    assert len(result.stderr.strip().splitlines()) == 1


def test_edits_are_read_from_finalized_and_torn_in_progress_segments(tmp_path: Path) -> None:
    """No Spark: the segment reader keeps the valid prefix of an in-progress segment (a crash
    may tear its last record), ignores moved-aside files and notes what it cut."""
    current = tmp_path / "ns1" / "current"
    current.mkdir(parents=True)

    def mkdir(txid: int) -> edits_pb2.EditOp:
        return edits_pb2.EditOp(txid=txid, mkdir=edits_pb2.MkdirOp(path=f"/d{txid}", mtime_ms=1))

    (current / "edits_0000000000000000001-0000000000000000003").write_bytes(
        records.SEGMENT_HEADER + records.frame_ops(mkdir(t) for t in (1, 2, 3))
    )
    torn = records.SEGMENT_HEADER + records.frame_ops(mkdir(t) for t in (4, 5))
    (current / "edits_inprogress_0000000000000000004").write_bytes(torn[:-3])
    (current / "edits_inprogress_0000000000000000002.stale").write_bytes(b"junk")

    ops, segment_of, notes = load_edits(tmp_path)  # a storage root with one journal
    assert [op.txid for op in ops] == [1, 2, 3, 4]
    assert segment_of == {1: 1, 2: 1, 3: 1, 4: 4}
    assert len(notes) == 1 and "read up to txid 4" in notes[0]


def test_the_chart_plots_every_minute(tmp_path: Path) -> None:
    per_minute = [("2026-01-01 10:00", {"mkdir": 2}), ("2026-01-01 10:03", {"create": 5})]
    chart, why_not = write_chart(per_minute, tmp_path / "c.png")
    assert why_not is None and chart is not None
    assert (tmp_path / "c.png").read_bytes().startswith(b"\x89PNG")


def test_a_multi_gives_one_row_per_change_with_its_txid() -> None:
    """A multi is one transaction: analyze replays it whole and lists each change it made
    under the multi's txid (an unchanged entry, mkdir -p of an existing directory, none)."""
    from hanamenode.namespace import Namespace
    from pipeline.analyze import op_rows

    ns = Namespace(root_mtime_ms=0)
    op = ns.prepare_multi([
        lambda n: n.prepare_mkdir("/m", mtime_ms=60_000),
        lambda n: n.prepare_create("/m/f", mtime_ms=60_000),
        lambda n: n.prepare_mkdir("/", parents=True, mtime_ms=60_000),
        lambda n: n.prepare_rename("/m/f", "/m/g", mtime_ms=60_000),
    ])
    op.txid = 7
    rows = list(op_rows([op], {7: 1}))
    assert [(r[0], r[1], r[2], r[3]) for r in rows] == [
        (7, "mkdir", "/m", None), (7, "create", "/m/f", None), (7, "rename", "/m/f", "/m/g"),
    ]
    assert all(r[7] == 1 for r in rows)
