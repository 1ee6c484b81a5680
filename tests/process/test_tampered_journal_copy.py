"""One tampered JournalNode copy cannot rewrite history (issue 25 item 1; docs/protocol.md
§8.7), with real JournalNode processes and real NameNodes.

Three ``journalnode run`` processes (their sync thread every 300 ms) and two
``NameNodeServer``s over real gRPC. The active makes directories across several rolls. The
standby stops; on the JournalNode whose address sorts first (the one a reader tries first),
two finalized segments are rewritten as an attacker with the disk would: one mkdir's path is
changed inside its record and the record's crc32c recomputed, so every record check passes.

* ``edits_<a>``: only the records change; the md5 recorded at finalize stays.
* ``edits_<b>``: the records change and the ``.md5`` file beside them is rewritten to match
  (the JournalNode is restarted to load it), so that node cannot tell; only its peers can.

The standby restarts with nothing but its first image, so it replays every segment from
the JournalNodes, while one of the two untouched JournalNodes is down: the answers it gets
come from the tampered node and one good one, and the tampered node is the first source of
every segment. ``edits_<a>`` is refused by the tampered node itself (its records lost their
recorded md5), so the reader takes the good copy. ``edits_<b>`` has no majority md5 among
two disagreeing answers, so the standby applies nothing from it until the third node is
back and two agree. Then it becomes active. It never applies a forged path; every
acknowledged path survives the failover; the tampered node moves both copies aside, fetches
the majority's and counts both.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from hadev.journalnodes import JournalNodeProcessCluster
from journalnode.segment_names import FINALIZED
from proto import edits_pb2, records
from tests.namenode.cluster import JOURNAL_ID, NameNodeCluster
from tests.process.test_journalnode_sync import finalized_files, metric, wait_for

pytestmark = pytest.mark.timeout(180)

SYNC_CONF = {"dfs.journalnode.sync.interval": "300ms"}
PATHS_PER_SEGMENT = 4
SEGMENTS = 4


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NameNodeCluster]:
    c = NameNodeCluster(tmp_path)
    # The JournalNodes are processes with their sync thread, not the in-process servers.
    c.journal = JournalNodeProcessCluster(  # type: ignore[assignment]
        3, tmp_path / "journal", journal_id=JOURNAL_ID, extra_conf=SYNC_CONF,
        tls=False,  # plaintext: the in-process NameNodes of tests.namenode.cluster speak no TLS
    )
    with c:
        c.transition_to_active("nn1")
        yield c


def forge_mkdir(path: Path, old: str, new: str) -> bytes:
    """Rewrite the mkdir of ``old`` in the finalized segment ``path`` into a mkdir of ``new``,
    with the record's length and crc32c made right again; return the new records."""
    body = memoryview(path.read_bytes())[records.HEADER_LEN :]
    ops = [edits_pb2.EditOp.FromString(bytes(b)) for _, b in records.iter_records(body)]
    hits = [op for op in ops if op.WhichOneof("op") == "mkdir" and op.mkdir.path == old]
    assert len(hits) == 1, f"{path.name} holds no mkdir of {old}"
    hits[0].mkdir.path = new
    forged = records.frame_ops(ops)
    assert records.scan(forged, ops[0].txid).error is None  # every record check passes
    path.write_bytes(records.SEGMENT_HEADER + forged)
    return forged


def txids(name: str) -> tuple[int, int]:
    """First and last txid of a finalized segment's file name."""
    m = FINALIZED.fullmatch(name)
    assert m is not None, name
    return int(m.group(1)), int(m.group(2))


def holding(files: dict[str, bytes], path: str) -> str:
    """The name of the finalized segment whose records hold a mkdir of ``path``."""
    needle = path.encode()
    (name,) = [n for n, data in files.items() if needle in data]
    return name


def test_a_tampered_copy_is_never_applied_and_is_repaired(cluster: NameNodeCluster) -> None:
    jns = cluster.journal
    assert isinstance(jns, JournalNodeProcessCluster)
    acked: list[str] = []
    for segment in range(SEGMENTS):
        for i in range(PATHS_PER_SEGMENT):
            path = f"/ack-{segment}{i}"
            cluster.mkdir("nn1", path)
            acked.append(path)
        last = cluster.roll("nn1") - 1  # the segment holding these is finalized
    cluster.wait_caught_up("nn2", last, timeout=30)
    cluster.stop_nn("nn2")

    # The JournalNode a reader tries first: sources are read in address order.
    tampered = min(range(3), key=lambda i: jns.addresses[i])
    good_copy, away = (tampered + 1) % 3, (tampered + 2) % 3
    # Away before the tampered node restarts: with two peers agreeing, its first sync round
    # would repair edits_<b> at once, before the standby could try it.
    jns.stop(away)
    current = jns.journal_dir(tampered)
    original = finalized_files(jns, tampered)
    assert original == finalized_files(jns, good_copy)
    seg_a, seg_b = holding(original, "/ack-10"), holding(original, "/ack-20")
    forge_mkdir(current / seg_a, "/ack-10", "/bad-10")
    forged_b = forge_mkdir(current / seg_b, "/ack-20", "/bad-20")
    (current / f"{seg_b}.md5").write_text(hashlib.md5(forged_b).hexdigest() + "\n")
    jns.restart(tampered)  # it loads the forged digest of seg_b: it cannot tell that copy

    # The standby restarts from its first image and replays every segment, with one good
    # JournalNode away: every answer it gets comes from the tampered node and one good one.
    cluster.start_nn("nn2")
    node = jns[tampered]
    wait_for(
        lambda: metric(node, "journalnode_segment_digest_mismatches_total") == 1,
        "the tampered node to refuse serving its changed copy of edits_<a>",
        timeout=30,
    )

    def standby_paths() -> set[str]:
        return {s.path for s in cluster.fsn("nn2").get_listing("/", allow_stale_read=True)}

    # It fetches the majority's copy of edits_<a> from the one peer that holds it.
    wait_for(
        lambda: metric(node, "journalnode_segment_digest_repairs_total") == 1,
        "the tampered node to fetch edits_<a> again",
        timeout=30,
    )
    # edits_<b>: two answers, two md5s, no majority: the standby applies nothing of it (nor,
    # as its rounds go, anything read in the same round before it).
    time.sleep(1.0)  # twenty tail periods
    assert not {"/bad-10", "/bad-20"} & standby_paths()
    assert cluster.fsn("nn2").last_applied_txid < txids(seg_b)[0]
    jns.start(away)
    cluster.wait_caught_up("nn2", last, timeout=60)
    on_standby = standby_paths()
    assert "/bad-10" not in on_standby and "/bad-20" not in on_standby
    assert on_standby == set(acked)

    cluster.transition_to_standby("nn1")
    cluster.transition_to_active("nn2")
    after = cluster.mkdir("nn2", "/after-failover")
    assert after.txid > last
    on_active = {s.path for s in cluster.fsn("nn2").get_listing("/")}
    assert on_active == {*acked, "/after-failover"}

    # The tampered node moved both copies aside and holds the majority's again.
    wait_for(
        lambda: {n: d for n, d in finalized_files(jns, tampered).items() if n in original}
        == original,
        "the tampered JournalNode to hold the majority's copies again",
        timeout=30,
    )
    aside = sorted(p.name for p in current.iterdir() if ".mismatch" in p.name)
    assert aside == [f"{seg_a}.mismatch", f"{seg_a}.mismatch.md5",
                     f"{seg_b}.mismatch", f"{seg_b}.mismatch.md5"]
    assert b"/bad-10" in (current / f"{seg_a}.mismatch").read_bytes()  # kept, not deleted
    assert not [p for p in current.iterdir() if FINALIZED.fullmatch(p.name) and b"/bad-" in
                p.read_bytes()]
    assert metric(node, "journalnode_segment_digest_mismatches_total") == 2
    assert metric(node, "journalnode_segment_digest_repairs_total") == 2
    log = node.log_path.read_text()
    # edits_<a>: refused when served, both md5s logged; edits_<b>: the sync's comparison.
    recorded_a = hashlib.md5(original[seg_a][records.HEADER_LEN :]).hexdigest()
    forged_a = hashlib.md5((current / f"{seg_a}.mismatch").read_bytes()[records.HEADER_LEN :])
    assert f"recorded={recorded_a}" in log and f"actual={forged_a.hexdigest()}" in log
    recorded_b = hashlib.md5(original[seg_b][records.HEADER_LEN :]).hexdigest()
    assert f"recorded={hashlib.md5(forged_b).hexdigest()}" in log
    assert f"majority={recorded_b}" in log
