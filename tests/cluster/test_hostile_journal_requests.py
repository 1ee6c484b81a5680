"""Requests a careless client or an attacker could send to a running journal cluster
(issue 10), against real JournalNodeServers over real gRPC, with a QJM writer active.

Each is sent on a raw stub, as an anonymous client would, and the test then checks that no
writer is stuck: the active writer keeps writing and a new writer can still take an epoch.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from structlog.testing import capture_logs

from hadev.minicluster import MiniJournalCluster
from journalnode.epochs import EPOCH_WINDOW
from proto import journal_pb2, journal_pb2_grpc
from tests.cluster.test_qjm_cluster import (
    JID,
    NS,
    Writer,
    finalized_segments,
    segment_file_names,
    start_writer,
    wait_until,
    write_batch,
)

U64_MAX = 2**64 - 1


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(3, tmp_path) as c:
        yield c


def stub(address: str) -> journal_pb2_grpc.QJournalServiceStub:
    return journal_pb2_grpc.QJournalServiceStub(grpc.insecure_channel(address))


def req_info(epoch: int, serial: int = 1 << 40) -> journal_pb2.RequestInfo:
    return journal_pb2.RequestInfo(
        journal_id=JID, cluster_id=NS.cluster_id, epoch=epoch, ipc_serial_number=serial
    )


def promises(cluster: MiniJournalCluster) -> list[int]:
    return [cluster.node(i).journal(JID).last_promised_epoch for i in range(len(cluster))]


@pytest.mark.parametrize("rpc", ["Heartbeat", "NewEpoch", "StartLogSegment", "Journal"])
def test_a_huge_epoch_to_two_of_three_journalnodes_leaves_every_writer_able(
    cluster: MiniJournalCluster, rpc: str
) -> None:
    """Issue 10 row 1: one call with epoch 2^64-1 to two JournalNodes used to fence the
    active at once and leave no epoch for any NameNode after it (newEpoch overflowed)."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
        out = w.qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 3)
        for address in cluster.addresses[:2]:
            s = stub(address)
            with pytest.raises(grpc.RpcError) as info:
                if rpc == "Heartbeat":
                    s.Heartbeat(journal_pb2.HeartbeatRequest(req_info=req_info(U64_MAX)))
                elif rpc == "NewEpoch":
                    s.NewEpoch(
                        journal_pb2.NewEpochRequest(
                            journal_id=JID, namespace_info=NS.to_pb(), epoch=U64_MAX
                        )
                    )
                elif rpc == "StartLogSegment":
                    s.StartLogSegment(
                        journal_pb2.StartLogSegmentRequest(req_info=req_info(U64_MAX), txid=50)
                    )
                else:
                    s.Journal(
                        journal_pb2.JournalRequest(
                            req_info=req_info(U64_MAX), segment_txid=1, first_txid=4, num_txns=1
                        )
                    )
            assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
            assert "above the largest epoch" in (info.value.details() or "")
            # Just past the window is refused too: no election could have produced it.
            with pytest.raises(grpc.RpcError, match="no election could have produced it"):
                s.Heartbeat(
                    journal_pb2.HeartbeatRequest(req_info=req_info(epoch + EPOCH_WINDOW + 1))
                )
        assert promises(cluster) == [epoch] * 3
        write_batch(out, epoch, 4, 6)  # the active was not fenced
        w.qjm.finalize_log_segment(1, 6)
    with Writer(cluster) as w2:
        w2.qjm.recover_unfinalized_segments()
        assert w2.qjm.epoch == epoch + 1
        out = w2.qjm.start_log_segment(7)
        write_batch(out, w2.qjm.epoch, 7, 9)
        w2.qjm.finalize_log_segment(7, 9)
    assert all(finalized_segments(cluster, i) == [(1, 6), (7, 9)] for i in range(3))


def test_forced_format_of_the_live_journal_is_refused(cluster: MiniJournalCluster) -> None:
    """Issue 10 row 3: Format(force=True) with no epoch used to delete every segment file of
    a JournalNode while the active was writing."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
        out = w.qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 5)
        # The batch is acknowledged by a majority; let the third JournalNode catch up so the
        # picture below is every JournalNode's.
        wait_until(
            lambda: all(segment_file_names(cluster, i) for i in range(3)),
            "every JournalNode has the open segment",
        )
        before = [segment_file_names(cluster, i) for i in range(3)]
        for address in cluster.addresses:
            with pytest.raises(grpc.RpcError) as info:
                stub(address).Format(
                    journal_pb2.FormatRequest(journal_id=JID, namespace_info=NS.to_pb(), force=True)
                )
            assert info.value.code() is grpc.StatusCode.FAILED_PRECONDITION
            assert "is in use: a writer in epoch 1" in (info.value.details() or "")
        assert [segment_file_names(cluster, i) for i in range(3)] == before
        write_batch(out, epoch, 6, 8)
        w.qjm.finalize_log_segment(1, 8)


def test_journal_ids_are_bounded_and_only_format_creates_one(
    cluster: MiniJournalCluster,
) -> None:
    """Issue 10 row 4, the bound: new ids past dfs.journalnode.max-journals are refused with
    an error naming the setting, and no call but Format creates anything."""
    node = cluster.node(0)
    s = stub(cluster.addresses[0])
    ghost = journal_pb2.RequestInfo(journal_id="ghost", cluster_id=NS.cluster_id, epoch=1)
    with pytest.raises(grpc.RpcError, match="'ghost' is not formatted"):
        s.Heartbeat(journal_pb2.HeartbeatRequest(req_info=ghost))
    with pytest.raises(grpc.RpcError, match="'ghost' is not formatted"):
        s.GetJournalState(
            journal_pb2.GetJournalStateRequest(journal_id="ghost", cluster_id=NS.cluster_id)
        )
    assert not (node.root / "ghost").exists()
    limit = 100
    for i in range(limit):
        s.Format(journal_pb2.FormatRequest(journal_id=f"j{i}", namespace_info=NS.to_pb()))
    with pytest.raises(grpc.RpcError) as info:
        s.Format(journal_pb2.FormatRequest(journal_id="one-more", namespace_info=NS.to_pb()))
    assert info.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    assert "dfs.journalnode.max-journals (100)" in (info.value.details() or "")
    assert not (node.root / "one-more").exists()
    # An existing journal may still be formatted again.
    s.Format(journal_pb2.FormatRequest(journal_id="j0", namespace_info=NS.to_pb()))


def test_refused_calls_are_logged_with_journal_epoch_and_cause_once_per_window(
    cluster: MiniJournalCluster,
) -> None:
    """Every refusal leaves a trace (issue 10 row 6), and a flood of the same refusal costs
    one line in full plus a count, not one line each."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
    node = cluster.node(0)
    s = stub(cluster.addresses[0])
    with capture_logs() as logs:
        for serial in range(200):
            with pytest.raises(grpc.RpcError):
                s.Heartbeat(journal_pb2.HeartbeatRequest(req_info=req_info(epoch - 1, serial)))
    refused = [e for e in logs if e["event"] == "journal RPC refused"]
    assert len(refused) == 1, refused
    assert refused[0]["rpc"] == "Heartbeat" and refused[0]["journal"] == JID
    assert refused[0]["epoch"] == epoch - 1 and refused[0]["error"] == "EpochError"
    assert "less than the last promised epoch" in refused[0]["cause"]
    value = node.registry.get_sample_value(
        "journalnode_refused_calls_total", {"rpc": "Heartbeat", "error": "EpochError"}
    )
    assert value is not None and value >= 200
