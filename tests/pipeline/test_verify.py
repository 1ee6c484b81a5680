"""``hapipe verify`` on local Spark against real JournalNode processes.

A short loggers-in-isolation run (HDFS-3077 §7.4.1; tests/process/test_logtester.py has the
long one): three JournalNode processes, LogTester processes started so that each takes over
from the one before while it still writes (fencing it), then a fault-free writer finalizes
the log. On that healthy cluster verify finds nothing, from the storage directories and over
RPC; then it must find a planted mismatch (one byte changed in one JournalNode's copy of a
finalized segment; another JournalNode serving a different but valid version of a segment)
and a planted duplicate txid (an acknowledgement copied from one LogTester's file to
another's).
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from pyspark.sql import SparkSession

from hadev.daemon import child_environment
from hadev.journalnodes import JournalNodeProcessCluster
from journalnode.segment_names import FINALIZED
from pipeline.cli import main
from pipeline.verify import VerifyReport, VerifySources, format_report, run_verify
from proto import records
from proto.values import NamespaceInfo
from qjm.journal_manager import QuorumJournalManager

pytestmark = pytest.mark.timeout(180)

JID = "lt"
NS = NamespaceInfo("CID-verify", 11)
# (start after seconds, run for seconds): each LogTester fences the one before it.
LOGTESTERS = ((0.0, 3.0), (0.8, 2.5), (1.6, 1.5))


@dataclass
class Healthy:
    cluster: JournalNodeProcessCluster
    acked_dir: Path
    returncodes: list[int]

    @property
    def dirs(self) -> list[str]:
        return [str(node.edits_dir) for node in self.cluster]

    def finalized(self, index: int) -> list[Path]:
        return finalized_segments(self.cluster.journal_dir(index))


def finalized_segments(current: Path) -> list[Path]:
    """The finalized segment files of a journal's current/ directory (not the md5 files
    beside them, docs/protocol.md §8.7)."""
    return sorted(p for p in current.glob("edits_*-*") if FINALIZED.fullmatch(p.name))


def logtester(
    addresses: list[str], name: str, out: Path, seconds: float, conf: Path
) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "hadev.logtester",
            "--journalnodes",
            ",".join(addresses),
            "--journal-id",
            JID,
            "--cluster-id",
            NS.cluster_id,
            "--namespace-id",
            str(NS.namespace_id),
            "--name",
            name,
            "--out",
            str(out),
            "--seed",
            "7",
            "--max-seconds",
            str(seconds),
            "--conf",
            str(conf),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=child_environment(),
    )


@pytest.fixture(scope="module")
def healthy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Healthy]:
    base = tmp_path_factory.mktemp("verify")
    acked_dir = base / "logtesters"
    acked_dir.mkdir()
    # No JournalNode sync (docs/protocol.md §10): the tests compare what the copies hold at
    # two moments and change copies by hand, and a sync round between the two would fetch a
    # copy a JournalNode lacked (a fresh-clone run counted 35 copies, then 36 over RPC).
    with JournalNodeProcessCluster(
        3, base / "jns", journal_id=JID, extra_conf={"dfs.journalnode.enable.sync": False}
    ) as cluster:
        with QuorumJournalManager.connect(
            cluster.addresses, JID, NS, tls=cluster.harness_tls
        ) as qjm:
            qjm.format()
        began = time.monotonic()
        procs = []
        for i, (start, seconds) in enumerate(LOGTESTERS, start=1):
            time.sleep(max(0.0, began + start - time.monotonic()))
            procs.append(
                logtester(
                    cluster.addresses, f"lt{i}", acked_dir / f"lt{i}.acked", seconds,
                    cluster.conf_path,
                )
            )
        returncodes = [proc.wait(60) for proc in procs]
        with QuorumJournalManager.connect(
            cluster.addresses, JID, NS, tls=cluster.harness_tls
        ) as qjm:
            qjm.recover_unfinalized_segments()
        yield Healthy(cluster, acked_dir, returncodes)


def verify(spark: SparkSession, **sources: Any) -> VerifyReport:
    report = run_verify(spark, VerifySources(**sources))
    print(format_report(report))
    return report


def test_a_healthy_cluster_has_no_finding(spark: SparkSession, healthy: Healthy) -> None:
    # The run was a real one: writers fenced each other, and several segments were finalized.
    assert 1 in healthy.returncodes[:-1], f"no LogTester was fenced: {healthy.returncodes}"
    segments = len(healthy.finalized(0))
    assert segments >= 3
    logtester_dirs = (str(healthy.acked_dir),)

    from_dirs = verify(spark, dirs=tuple(healthy.dirs), logtester_dirs=logtester_dirs)
    assert from_dirs.ok, from_dirs.findings
    assert from_dirs.journals == (JID,)
    assert from_dirs.segments >= segments
    assert from_dirs.copies >= 2 * from_dirs.segments
    assert from_dirs.acked_files == 3 and from_dirs.acked_txids > 100

    over_rpc = CliRunner().invoke(
        main,
        ["verify", "--journalnodes", ",".join(healthy.cluster.addresses), "--journal-id", JID,
         "--conf", str(healthy.cluster.conf_path)],
    )
    assert over_rpc.exit_code == 0, over_rpc.output
    assert f"{from_dirs.segments} finalized segments, {from_dirs.copies} copies" in (
        over_rpc.stdout
    )
    assert over_rpc.stdout.rstrip().endswith("OK: every copy agrees")


def test_one_changed_byte_in_one_copy_is_a_mismatch(
    spark: SparkSession, healthy: Healthy, tmp_path: Path
) -> None:
    copies = []
    for node in healthy.cluster:
        copy = tmp_path / node.jn_id
        shutil.copytree(node.edits_dir / JID, copy / JID, ignore=shutil.ignore_patterns("*.lock"))
        copies.append(str(copy))
    victim = finalized_segments(tmp_path / "jn2" / JID / "current")[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0x01
    victim.write_bytes(bytes(data))
    first_txid = int(victim.name.split("_")[1].split("-")[0])

    report = verify(spark, dirs=tuple(copies))
    assert not report.ok
    kinds = {(f.kind, f.journal, f.txid) for f in report.findings}
    assert kinds == {
        ("segment-mismatch", JID, first_txid),
        ("segment-unreadable", JID, first_txid),
    }
    mismatch = next(f for f in report.findings if f.kind == "segment-mismatch")
    assert "2 versions" in mismatch.detail
    # The odd copy out is named apart from the two that agree.
    assert f"{copies[1]}: last txid" in mismatch.detail
    assert f"{copies[0]}, {copies[2]}: last txid" in mismatch.detail


def test_a_different_valid_version_on_a_live_journalnode_is_refused_by_it(
    spark: SparkSession, healthy: Healthy
) -> None:
    """A copy every record of which is valid, but which holds another writer's version of a
    txid (what HDFS-3845 would leave behind): no record check sees it. Its JournalNode does,
    by the md5 it recorded at finalize, and refuses to serve it (docs/protocol.md §8.7)."""
    victim = healthy.finalized(2)[0]
    original = victim.read_bytes()
    ops = records.decode_ops(original[records.HEADER_LEN :])
    changed = next(op for op in ops if op.WhichOneof("op") == "mkdir")
    changed.mkdir.path += "-other-epoch"
    forged = records.SEGMENT_HEADER + records.frame_ops(ops)
    assert records.scan(forged[records.HEADER_LEN :], ops[0].txid).error is None
    victim.write_bytes(forged)
    try:
        report = verify(
            spark, journalnodes=tuple(healthy.cluster.addresses), journal_ids=(JID,),
            tls=healthy.cluster.harness_tls,
        )
    finally:
        # jn3 moved the changed copy aside: put the original back (without its digest file,
        # which jn3 computes again on first use) and restart jn3 so that it lists it again.
        for aside in victim.parent.glob(f"{victim.name}.*"):
            aside.unlink()
        victim.write_bytes(original)
        healthy.cluster.restart(2)
    assert [(f.kind, f.txid) for f in report.findings] == [("segment-unreadable", ops[0].txid)]
    jn3 = healthy.cluster.addresses[2]
    detail = report.findings[0].detail
    assert detail.startswith(f"{jn3}: ") and "SegmentDigestError" in detail
    assert hashlib.md5(forged[records.HEADER_LEN :]).hexdigest() in detail
    assert hashlib.md5(original[records.HEADER_LEN :]).hexdigest() in detail


def test_a_txid_acked_to_two_logtesters_is_found(
    spark: SparkSession, healthy: Healthy, tmp_path: Path
) -> None:
    """Through the command line, as an operator runs it (exit status 1)."""
    shutil.copytree(healthy.acked_dir, tmp_path / "acked")
    lt1 = (tmp_path / "acked" / "lt1.acked").read_text().splitlines()
    stolen = lt1[len(lt1) // 2]
    with open(tmp_path / "acked" / "lt2.acked", "a") as f:
        f.write(stolen + "\n")
    txid = int(stolen.split()[0])

    result = CliRunner().invoke(
        main,
        [
            "verify",
            "--dirs",
            ",".join(healthy.dirs),
            "--logtester-dirs",
            str(tmp_path / "acked"),
        ],
    )
    assert result.exit_code == 1, result.output
    assert (
        f"duplicate-txid txid={txid}: acknowledged 2 times (lt1.acked, lt2.acked); the same bytes"
        in result.stdout
    )
    assert result.stdout.rstrip().endswith("FAILED: 1 finding(s)")


def test_rpc_mode_names_its_journals_and_an_unreachable_node_is_a_finding(
    spark: SparkSession, healthy: Healthy
) -> None:
    result = CliRunner().invoke(main, ["verify", "--journalnodes", "127.0.0.1:1"])
    assert result.exit_code == 2
    assert "--journal-id" in result.stderr

    dead = "127.0.0.1:1"
    report = verify(
        spark,
        journalnodes=(*healthy.cluster.addresses, dead),
        journal_ids=(JID,),
        timeout=2.0,
        tls=healthy.cluster.harness_tls,
    )
    assert [f.kind for f in report.findings] == ["journalnode-unreachable"]
    assert dead in report.findings[0].detail
