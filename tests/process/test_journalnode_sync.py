"""JournalNodes that heal themselves (issue 14 §3; docs/protocol.md §10), with real processes.

Three ``journalnode run`` processes on loopback (``JournalNodeProcessCluster``), a QJM writer
in this process rolling segments over real gRPC, real fsyncs, and the sync thread every
250 ms:

* a JournalNode down while four segments are finalized (one of which it held in progress: a
  stale copy) fetches them after its restart, and its files are byte-equal to a peer's;
* a JournalNode whose storage is wiped waits while only one peer answers, then formats
  itself from its two peers, adopts their promise,
  refuses to vote until it holds the segment that was open when it was wiped, then syncs
  and votes in a new writer's recovery;
* a peer whose copy of a segment fails its checksums is skipped (and, told so by the read,
  moves its copy aside and syncs it again), and a peer whose copy has valid checksums but
  other records (an md5 mismatch with the other peer) makes the node refuse that segment:
  logged, counted, nothing installed.
"""

from __future__ import annotations

import hashlib
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from hadev.journalnodes import JournalNodeProcess, JournalNodeProcessCluster
from journalnode.errors import JournalSyncingError
from journalnode.segment_names import FINALIZED
from proto import edits_pb2, records
from qjm.channel import GrpcJournalChannel
from qjm.journal_manager import QuorumJournalManager, QuorumOutputStream
from tests.cluster.test_qjm_cluster import write_batch
from tests.process.test_journalnode_process import NS

pytestmark = pytest.mark.timeout(120)

JID = "ns1"
SYNC_CONF = {
    "dfs.journalnode.sync.interval": "250ms",
    "dfs.journalnode.enable.sync.format": True,
}
WAIT = 20.0


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[JournalNodeProcessCluster]:
    with JournalNodeProcessCluster(3, tmp_path, journal_id=JID, extra_conf=SYNC_CONF) as c:
        yield c


@pytest.fixture
def qjm(cluster: JournalNodeProcessCluster) -> Iterator[QuorumJournalManager]:
    tls = cluster.harness_tls
    with QuorumJournalManager.connect(cluster.addresses, JID, NS, tls=tls) as writer:
        writer.format()
        assert writer.recover_unfinalized_segments() is None
        yield writer


def roll(
    qjm: QuorumJournalManager, first: int, last: int, *, finalize: bool = True
) -> QuorumOutputStream:
    out = qjm.start_log_segment(first)
    write_batch(out, qjm.epoch, first, last, size=64)
    if finalize:
        qjm.finalize_log_segment(first, last)
    return out


def finalized_files(cluster: JournalNodeProcessCluster, index: int) -> dict[str, bytes]:
    current = cluster.journal_dir(index)
    if not current.is_dir():
        return {}
    return {
        p.name: p.read_bytes() for p in sorted(current.iterdir()) if FINALIZED.fullmatch(p.name)
    }


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        time.sleep(0.1)


def metric(jn: JournalNodeProcess, name: str) -> float:
    with urllib.request.urlopen(jn.metrics_url, timeout=10) as response:
        text = response.read().decode()
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels.get("journal") == JID:
                return float(sample.value)
    raise AssertionError(f"{name} not served by {jn.jn_id}")


def test_a_journalnode_down_across_rolls_catches_up(
    cluster: JournalNodeProcessCluster, qjm: QuorumJournalManager
) -> None:
    out = roll(qjm, 1, 3, finalize=False)
    open_copies = [cluster.journal_dir(i) / "edits_inprogress_0000000000000000001" for i in (0, 2)]
    wait_for(  # a quorum acknowledged 1-3; jn3 may still be writing it
        lambda: all(p.exists() for p in open_copies)
        and len({p.stat().st_size for p in open_copies}) == 1,
        "jn3 to hold 1-3",
    )
    cluster.stop(2)  # with 1-3 in progress: a stale copy once the others finalize 1-5
    write_batch(out, qjm.epoch, 4, 5, size=64)
    qjm.finalize_log_segment(1, 5)
    roll(qjm, 6, 10)
    roll(qjm, 11, 20)
    roll(qjm, 21, 23)
    roll(qjm, 24, 26, finalize=False)  # open: never fetched
    assert not finalized_files(cluster, 2)
    cluster.start(2)
    wait_for(
        lambda: finalized_files(cluster, 2) == finalized_files(cluster, 0),
        "jn3's finalized segments to be byte-equal to jn1's",
    )
    synced = finalized_files(cluster, 0)
    assert sorted(synced) == [
        "edits_0000000000000000001-0000000000000000005",
        "edits_0000000000000000006-0000000000000000010",
        "edits_0000000000000000011-0000000000000000020",
        "edits_0000000000000000021-0000000000000000023",
    ]
    assert finalized_files(cluster, 1) == synced
    assert metric(cluster[2], "journalnode_sync_segments_total") == 4
    assert metric(cluster[2], "journalnode_sync_bytes_total") == sum(map(len, synced.values()))
    # Its in-progress copy of 1-5 was stale: moved aside, never deleted (docs/protocol.md §3.9).
    assert (cluster.journal_dir(2) / "edits_inprogress_0000000000000000001.stale").is_file()
    assert metric(cluster[2], "journalnode_sync_lacking_segments") == 0
    assert not (cluster.journal_dir(2) / "edits_inprogress_0000000000000000024").exists()


def test_a_wiped_journalnode_rejoins_votes_only_after_syncing(
    cluster: JournalNodeProcessCluster, qjm: QuorumJournalManager
) -> None:
    roll(qjm, 1, 5)
    roll(qjm, 6, 9, finalize=False)  # open on all three when jn3 loses its disk
    epoch = qjm.epoch
    cluster.stop(2)
    shutil.rmtree(cluster[2].edits_dir)
    cluster.stop(1)  # jn1 alone is no majority of three: jn3 must not format from it
    cluster.start(2)
    wait_for(
        lambda: "1 formatted peer(s) answered of the 2 needed" in cluster[2].log_path.read_text(),
        "jn3 to say it waits for a majority",
    )
    assert not is_formatted(cluster[2])
    cluster.start(1)
    wait_for(lambda: is_formatted(cluster[2]), "jn3 to format itself from its peers")
    assert (cluster.journal_dir(2) / "last-promised-epoch").read_text() == f"{epoch}\n"
    wait_for(
        lambda: "edits_0000000000000000001-0000000000000000005" in finalized_files(cluster, 2),
        "jn3 to sync the finalized segment",
    )
    assert metric(cluster[2], "journalnode_rejoining") == 1
    channel = GrpcJournalChannel(cluster[2].address, cluster.harness_tls)
    try:
        # It acknowledged 6-9 before it was wiped: it must not answer a recovery without it.
        with pytest.raises(JournalSyncingError, match="through txid 9"):
            channel.new_epoch(JID, NS, epoch + 1, 10.0)
    finally:
        channel.close()
    qjm.finalize_log_segment(6, 9)
    out = roll(qjm, 10, 12, finalize=False)  # jn3 takes part from this segment on
    wait_for(
        lambda: finalized_files(cluster, 2) == finalized_files(cluster, 0),
        "jn3 to sync the segment that was open when it was wiped",
    )
    wait_for(lambda: metric(cluster[2], "journalnode_rejoining") == 0, "the rejoin to complete")
    write_batch(out, qjm.epoch, 13, 14, size=64)
    qjm.close()
    # jn1 is gone: a new writer recovers from jn2 and the rejoined jn3.
    cluster.stop(0)
    tls = cluster.harness_tls
    with QuorumJournalManager.connect(cluster.addresses, JID, NS, tls=tls) as second:
        assert second.recover_unfinalized_segments() == 14  # the recovered end
        assert second.epoch == epoch + 1
    files = finalized_files(cluster, 2)
    assert "edits_0000000000000000010-0000000000000000014" in files
    assert files == finalized_files(cluster, 1)


def test_corrupt_copies_on_a_peer_are_refused_and_logged(
    cluster: JournalNodeProcessCluster, qjm: QuorumJournalManager
) -> None:
    cluster.stop(2)
    roll(qjm, 1, 5)
    roll(qjm, 6, 10)
    roll(qjm, 11, 15)
    jn2 = cluster.journal_dir(1)
    # 1-5 on jn2: a flipped byte, which its checksums catch (jn2 is then no source).
    flipped = jn2 / "edits_0000000000000000001-0000000000000000005"
    data = bytearray(flipped.read_bytes())
    data[-3] ^= 0xFF
    flipped.write_bytes(bytes(data))
    # 6-10 on jn2: other records with valid checksums; only the md5 tells them apart. The
    # digest recorded beside it is rewritten too, so that jn2 itself cannot tell (the copy
    # with only its records changed is tests/process/test_tampered_journal_copy.py's case).
    rewritten = jn2 / "edits_0000000000000000006-0000000000000000010"
    body = memoryview(rewritten.read_bytes())[records.HEADER_LEN :]
    ops = [edits_pb2.EditOp.FromString(bytes(op)) for _, op in records.iter_records(body)]
    ops[2].noop.payload = b"not what the quorum wrote"
    forged = records.frame_ops(ops)
    rewritten.write_bytes(records.SEGMENT_HEADER + forged)
    (jn2 / f"{rewritten.name}.md5").write_text(hashlib.md5(forged).hexdigest() + "\n")
    cluster.restart(1)  # digests are read at start

    cluster.start(2)
    good = finalized_files(cluster, 0)
    wait_for(
        lambda: finalized_files(cluster, 2)
        == {n: d for n, d in good.items() if not n.startswith("edits_0000000000000000006-")},
        "jn3 to sync 1-5 (from jn1 alone) and 11-15",
    )
    wait_for(lambda: metric(cluster[2], "journalnode_sync_failures_total") == 1, "the refusal")
    log = cluster[2].log_path.read_text()
    assert "peer holds a corrupt copy of a finalized segment" in log
    assert "md5 mismatch" in log and "nothing installed" in log
    time.sleep(0.6)  # two more rounds: still refused, logged and counted once
    assert metric(cluster[2], "journalnode_sync_failures_total") == 1
    assert cluster[2].log_path.read_text().count("md5 mismatch") == 1
    current = cluster.journal_dir(2)
    assert not [p.name for p in current.iterdir() if "0000000000000000006" in p.name]
    assert not [p.name for p in current.iterdir() if p.name.endswith(".tmp")]
    assert metric(cluster[2], "journalnode_sync_lacking_segments") == 1
    # jn2 learned from jn3's question that its 1-5 is corrupt: it moved the copy aside and
    # fetched the segment again from its peers.
    name = "edits_0000000000000000001-0000000000000000005"
    wait_for(
        lambda: finalized_files(cluster, 1).get(name) == good[name],
        "jn2 to replace its corrupt copy of 1-5 from a peer",
    )
    assert (jn2 / f"{name}.corrupt").is_file()
    assert metric(cluster[1], "journalnode_corrupt_segments_total") == 1
    assert "finalized segment is corrupt here" in cluster[1].log_path.read_text()


def is_formatted(jn: JournalNodeProcess) -> bool:
    channel = GrpcJournalChannel(jn.address, jn.harness_tls)
    try:
        return channel.is_formatted(JID, 5.0)[0]
    finally:
        channel.close()
