"""``python -m journalnode.demo``: three JournalNode processes and a Quorum Journal Manager.

What ``make demo`` runs until the NameNode exists (README.md). In a temporary directory (or
``--dir``) it writes one Hadoop-style configuration for three JournalNodes on free loopback
ports, starts them as real processes (``python -m journalnode run --conf C --id jnN``, through
``journalnode.process.JournalNodeProcessCluster``), and then, through
``QuorumJournalManager`` (DESIGN.md section 3):

1. formats the journal on every JournalNode and fences with a new epoch
   (``recover_unfinalized_segments``);
2. writes a segment of mkdir edits and finalizes it;
3. starts a second segment, ``kill -9``s one JournalNode half-way and keeps writing on the
   two left (a quorum), restarts it, and rolls the segment so that it rejoins;
4. reads every finalized edit back through ``select_input_streams``;
5. prints metrics scraped from each JournalNode's ``/metrics``, stops the JournalNodes with
   SIGTERM, and prints each one's on-disk layout and the md5 of every finalized segment
   (each verified record by record), which must match across JournalNodes.

Exit status 0 on success; 1 with a one-line reason otherwise. The processes it started are
always stopped (SIGTERM, then SIGKILL).
"""

from __future__ import annotations

import argparse
import importlib
import shutil
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from conf import load_settings
from conf.logging import setup_logging
from journalnode.errors import JournalUnavailableError
from journalnode.file_storage import FileJournalStorage
from journalnode.process import JournalNodeProcessCluster
from proto import edits_pb2
from proto.values import NamespaceInfo
from qjm.logger import AsyncLogger
from qjm.manager import QuorumJournalManager, QuorumOutputStream, connect_from_settings

JOURNAL_ID = "demo"
JN_IDS = ("jn1", "jn2", "jn3")
NAMESPACE = NamespaceInfo("CID-demo", 2024)
BATCH = 50
SHARED_EDITS_DIR = "dfs.namenode.shared.edits.dir"
# A demo should fail in seconds, not in Hadoop's minutes.
DEMO_TIMEOUTS = {
    f"dfs.qjournal.{op}.timeout.ms": "10s"
    for op in (
        "write-txns",
        "start-segment",
        "finalize-segment",
        "new-epoch",
        "prepare-recovery",
        "accept-recovery",
        "get-journal-state",
        "format",
    )
}
METRICS = (
    ("journalnode_txns_written_total", "txns written"),
    ("journalnode_batches_written_total", "batches"),
    ("journalnode_last_written_txid", "last txid"),
    ("journalnode_committed_txid", "committed txid"),
    ("journalnode_last_promised_epoch", "promised epoch"),
    ("journalnode_last_writer_epoch", "writer epoch"),
)


class DemoError(Exception):
    """A step of the demo did not do what it should; the message says which and why."""


# ---------------------------------------------------------------------------------------------
# Output: rich when installed, plain aligned text otherwise.
# ---------------------------------------------------------------------------------------------


class Printer:
    """Steps, notes and tables for a person reading a terminal."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        try:
            console_mod: Any = importlib.import_module("rich.console")
            self._table_mod: Any = importlib.import_module("rich.table")
            self._console: Any = console_mod.Console(highlight=False)
        except ImportError:
            self._console = None

    def _print(self, text: str, style: str = "") -> None:
        if self._console is not None:
            self._console.print(text, style=style or None, markup=False)
        else:
            print(text, flush=True)

    def step(self, text: str) -> None:
        self._print(f"[{time.monotonic() - self._started:5.1f}s] {text}", "bold")

    def note(self, text: str) -> None:
        self._print(f"         {text}")

    def table(self, title: str, headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
        cells = [[str(c) for c in row] for row in rows]
        if self._console is not None:
            table = self._table_mod.Table(title=title, title_justify="left")
            for header in headers:
                table.add_column(header)
            for row in cells:
                table.add_row(*row)
            self._console.print(table)
            return
        widths = [len(h) for h in headers]
        for row in cells:
            widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
        print(f"\n{title}")
        print("  " + "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
        print("  " + "  ".join("-" * w for w in widths))
        for row in cells:
            print("  " + "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)))
        print(flush=True)


# ---------------------------------------------------------------------------------------------
# The writer's side
# ---------------------------------------------------------------------------------------------


class EditWriter:
    """Writes realistic edits through one QuorumOutputStream at a time, counting txids."""

    def __init__(self, qjm: QuorumJournalManager) -> None:
        self.qjm = qjm
        self.next_txid = 1
        self.dirs = 0
        self.out: QuorumOutputStream | None = None

    def start_segment(self) -> int:
        self.out = self.qjm.start_log_segment(self.next_txid)
        self._write(edits_pb2.EditOp(start_log_segment=edits_pb2.StartLogSegmentOp()))
        return self.out.segment_txid

    def mkdirs(self, count: int) -> None:
        """``count`` mkdir edits, flushed to a quorum every BATCH edits."""
        now_ms = int(time.time() * 1000)
        for i in range(count):
            self.dirs += 1
            op = edits_pb2.MkdirOp(
                path=f"/demo/dir-{self.dirs}",
                mtime_ms=now_ms,
                permission=0o755,
                owner="demo",
                group="supergroup",
            )
            self._write(edits_pb2.EditOp(mkdir=op, client_id=b"demo", call_id=self.dirs))
            if (i + 1) % BATCH == 0:
                self._stream().flush()
        self._stream().flush()

    def finalize(self) -> tuple[int, int]:
        """End the segment with OP_END_LOG_SEGMENT and finalize it on a quorum."""
        out = self._stream()
        self._write(edits_pb2.EditOp(end_log_segment=edits_pb2.EndLogSegmentOp()))
        out.flush()
        self.qjm.finalize_log_segment(out.segment_txid, out.last_txid)
        self.out = None
        return out.segment_txid, out.last_txid

    def _stream(self) -> QuorumOutputStream:
        if self.out is None:
            raise DemoError("no segment is open")
        return self.out

    def _write(self, op: edits_pb2.EditOp) -> None:
        op.txid = self.next_txid
        self._stream().write(op)
        self.next_txid += 1


def name(segment: tuple[int, int]) -> str:
    return f"edits_{segment[0]}-{segment[1]}"


def logger_for(qjm: QuorumJournalManager, address: str) -> AsyncLogger:
    for lg in qjm.loggers.loggers:
        if lg.address == address:
            return lg
    raise DemoError(f"the QJM has no logger for {address}")


def wait_reconnected(lg: AsyncLogger, timeout: float = 10.0) -> None:
    """Until the writer's own channel reaches the restarted JournalNode (a heartbeat succeeds):
    its reconnect backoff may still be running when the JournalNode is back."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            lg.heartbeat().result(timeout)
            return
        except JournalUnavailableError as exc:
            if time.monotonic() > deadline:
                raise DemoError(f"the writer could not reach {lg.address} again: {exc}") from exc
            time.sleep(0.1)


# ---------------------------------------------------------------------------------------------
# Inspection
# ---------------------------------------------------------------------------------------------


def scrape(url: str) -> dict[str, float]:
    """The journal's samples from one /metrics page: {metric name: value}."""
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("journal") == JOURNAL_ID and "le" not in sample.labels:
                values[sample.name] = sample.value
    return values


@dataclass(frozen=True)
class JournalOnDisk:
    """What one stopped JournalNode holds: files with sizes, md5 of verified finalized segments."""

    files: list[tuple[str, int]]
    finalized_md5: dict[str, str]


def inspect_storage(edits_dir: Path) -> JournalOnDisk:
    """Open the (stopped) JournalNode's storage, list it, and hash each finalized segment,
    verifying it record by record (CorruptSegmentError names file and offset on a bad one)."""
    with FileJournalStorage(edits_dir, JOURNAL_ID) as storage:
        files = [(f"{JOURNAL_ID}/{rel}", size) for rel, size in storage.describe()]
        digests = storage.finalized_md5s()
    root_files = [(p.name, p.stat().st_size) for p in sorted(edits_dir.iterdir()) if p.is_file()]
    return JournalOnDisk(root_files + files, digests)


# ---------------------------------------------------------------------------------------------
# The demo
# ---------------------------------------------------------------------------------------------


def start_cluster(workdir: Path, out: Printer) -> JournalNodeProcessCluster:
    """Write one configuration for the three JournalNodes and the writer (a qjournal:// URI)
    and start them as processes; the caller stops them (``close``)."""
    cluster = JournalNodeProcessCluster(
        len(JN_IDS), workdir, journal_id=JOURNAL_ID, extra_conf=DEMO_TIMEOUTS
    )
    cluster.start()
    out.step(f"configuration {cluster.conf_path}")
    out.note(f"dfs.namenode.shared.edits.dir = {cluster.properties()[SHARED_EDITS_DIR]}")
    for jn in cluster:
        out.step(f"{jn.jn_id} serving on {jn.address} (pid {jn.pid}), {jn.metrics_url}")
    return cluster


def run_demo(workdir: Path, out: Printer, segment_edits: int) -> None:
    cluster = start_cluster(workdir, out)
    try:
        with connect_from_settings(load_settings(cluster.conf_path), NAMESPACE) as qjm:
            demo_writes(qjm, cluster, out, segment_edits)
        show_metrics(cluster, out)
        out.step("stopping the JournalNodes with SIGTERM")
        for jn, status in zip(cluster, cluster.stop(), strict=True):
            if status != 0:
                raise DemoError(f"{jn.jn_id} exited with status {status} after SIGTERM")
        show_storage(cluster, out)
    finally:
        cluster.close()


def demo_writes(
    qjm: QuorumJournalManager, cluster: JournalNodeProcessCluster, out: Printer, n: int
) -> None:
    qjm.format()
    out.step(f"formatted journal {JOURNAL_ID!r} on all 3 JournalNodes ({NAMESPACE.cluster_id})")
    recovered = qjm.recover_unfinalized_segments()
    what = "nothing to recover" if recovered is None else f"log recovered up to txid {recovered}"
    out.step(f"recover_unfinalized_segments(): writer epoch {qjm.epoch}, {what}")

    w = EditWriter(qjm)
    first = w.start_segment()
    w.mkdirs(n)
    seg1 = w.finalize()
    out.step(f"segment {first}: wrote {n} mkdirs (/demo/dir-1 ...), finalized {name(seg1)}")

    victim = cluster[2]
    lg = logger_for(qjm, victim.address)
    first = w.start_segment()
    w.mkdirs(n // 2)
    out.step(f"segment {first}: wrote {n // 2} mkdirs on all 3")
    pid = victim.pid
    victim.kill()
    out.step(f"kill -9 jn3 (pid {pid})")
    w.mkdirs(n // 2)
    if not lg.out_of_sync:
        raise DemoError("jn3 is down but its logger is not out of sync")
    out.step(f"wrote {n // 2} more mkdirs with 2 of 3 JournalNodes: a quorum acknowledged each")
    out.note(f"jn3's logger is out of sync, last acknowledged txid {lg.highest_acked_txid}")

    victim.restart()
    wait_reconnected(lg)
    out.step(f"restarted jn3 (pid {victim.pid}); it stays out of sync until the next segment")
    seg2 = w.finalize()
    first = w.start_segment()
    out.step(f"rolled: finalized {name(seg2)} on the quorum, started segment {first}")
    out.note(f"jn3 keeps its partial copy of segment {seg2[0]} in progress: never finalized there")
    w.mkdirs(n // 2)
    seg3 = w.finalize()
    # The quorum may have answered without jn3; a logger's calls are answered in order, so
    # once a heartbeat after them is, jn3 has answered every batch of the segment.
    lg.heartbeat().result(10)
    if lg.out_of_sync or lg.highest_acked_txid != seg3[1]:
        raise DemoError(f"jn3 did not rejoin: acknowledged up to {lg.highest_acked_txid}")
    out.step(f"segment {first}: jn3 rejoined and acknowledged every batch; finalized {name(seg3)}")

    streams = qjm.select_input_streams(1)
    ops = [op for stream in streams for op in stream]
    mkdirs = [op.mkdir.path for op in ops if op.WhichOneof("op") == "mkdir"]
    if [op.txid for op in ops] != list(range(1, seg3[1] + 1)):
        raise DemoError(f"read back txids {ops[0].txid}..{ops[-1].txid}, expected 1..{seg3[1]}")
    if mkdirs != [f"/demo/dir-{i}" for i in range(1, w.dirs + 1)]:
        raise DemoError("the mkdir edits read back differ from those written")
    out.step(
        f"read back txids 1-{seg3[1]} ({len(mkdirs)} mkdirs) from {len(streams)} finalized "
        "segments with select_input_streams()"
    )


def show_metrics(cluster: JournalNodeProcessCluster, out: Printer) -> None:
    rows = []
    for jn in cluster:
        values = scrape(jn.metrics_url)
        count = values.get("journalnode_sync_seconds_count", 0.0)
        total = values.get("journalnode_sync_seconds_sum", 0.0)
        mean = f"{total / count * 1e6:,.0f} us" if count else "-"
        rows.append([jn.jn_id, *(f"{values.get(m, 0):.0f}" for m, _ in METRICS), mean])
    out.table(
        f"/metrics of each JournalNode, journal {JOURNAL_ID!r} (jn3's counters restarted with it)",
        ["jn", *(label for _, label in METRICS), "mean fdatasync"],
        rows,
    )


def show_storage(cluster: JournalNodeProcessCluster, out: Printer) -> None:
    disks = {jn.jn_id: inspect_storage(jn.edits_dir) for jn in cluster}
    for jn in cluster:
        out.table(
            f"{jn.jn_id}: {jn.edits_dir}",
            ["file", "bytes"],
            [[name, f"{size:,}"] for name, size in disks[jn.jn_id].files],
        )
    segments = sorted({seg for disk in disks.values() for seg in disk.finalized_md5})
    rows = []
    mismatched = []
    for seg in segments:
        digests = {jn_id: disk.finalized_md5.get(seg) for jn_id, disk in disks.items()}
        present = {d for d in digests.values() if d is not None}
        if len(present) != 1:
            mismatched.append(seg)
        verdict = "identical" if len(present) == 1 else "DIFFERENT"
        cells = [d[:12] if d else "(not finalized here)" for d in digests.values()]
        rows.append([seg, *cells, verdict])
    out.table(
        "md5 of each finalized segment (each verified record by record)",
        ["segment", *disks, ""],
        rows,
    )
    if mismatched:
        raise DemoError(f"finalized segments differ between JournalNodes: {mismatched}")
    holders = [sum(seg in d.finalized_md5 for d in disks.values()) for seg in segments]
    if min(holders, default=0) < 2:
        raise DemoError("a finalized segment is on fewer than a quorum of JournalNodes")
    out.step("every finalized segment is identical on every JournalNode that holds it")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m journalnode.demo", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--dir", type=Path, help="work directory (new or empty; kept afterwards)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")
    parser.add_argument("--edits", type=int, default=300, help="mkdir edits in the first segment")
    parser.add_argument("--verbose", action="store_true", help="show the writer's log")
    args = parser.parse_args(argv)
    if args.edits < 2:
        parser.error("--edits must be at least 2")
    setup_logging("console", "info" if args.verbose else "critical")
    return run_in_workdir(
        "hanamenode JournalNode demo",
        args.dir,
        args.keep,
        lambda workdir, out: run_demo(workdir, out, args.edits),
    )


def run_in_workdir(
    title: str, directory: Path | None, keep: bool, demo: Callable[[Path, Printer], object]
) -> int:
    """Run ``demo(workdir, printer)`` in ``directory`` (new or empty; kept) or in a temporary
    directory (removed unless ``keep`` or the demo failed); the exit status: 0, or 1 after
    one line on stderr saying what failed."""
    if directory is not None:
        workdir = directory.absolute()
        if workdir.exists() and any(workdir.iterdir()):
            print(f"demo: {workdir} is not empty; give a new or empty --dir", file=sys.stderr)
            return 1
        workdir.mkdir(parents=True, exist_ok=True)
    else:
        workdir = Path(tempfile.mkdtemp(prefix="hanamenode-demo-"))
    out = Printer()
    out.step(f"{title} in {workdir}")
    ok = False
    try:
        demo(workdir, out)
        ok = True
    except Exception as exc:  # DemoError, a QuorumException, a JournalError: one line
        print(f"demo failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        if directory is not None or keep or not ok:
            out.note(f"files and logs kept in {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)
    if ok:
        out.step("demo finished")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
