"""Issue 12 on real processes: the NameNode's asynchronous write path (HDFS-7964).

JournalNode and NameNode processes on loopback, real gRPC, real fdatasync, real signals. The
calls come from a grpc.aio client in the test, so that hundreds can be in flight from one
thread. What is checked:

- one sync carries more edits than the 16 handler threads that used to bound a batch (the
  NameNode's own histogram of edits per sync says so);
- a client that gives up on its call while the edit waits for its sync loses nothing and
  duplicates nothing: the edit is made once, and a retry of the call gets its answer;
- a majority of JournalNodes stopped with SIGSTOP does not stop the NameNode's loop: the HA
  calls and the status page answer while a mutation waits for the quorum
  (docs/operations.md §15.1), and the mutation completes once they resume.
"""

from __future__ import annotations

import asyncio
import json
import signal
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families

from conf.rpc import make_aio_channel, make_channel
from hadev.namenodes import NameNodeProcessCluster
from hadev.pki import CLIENT
from proto import namenode_pb2, namenode_pb2_grpc
from tests.namenode.cluster import header

pytestmark = pytest.mark.timeout(180)

CONF: dict[str, str | int | float | bool] = {
    "dfs.ha.tail-edits.period": "0.1",
    # No roll during a test: the txids below are the test's own edits.
    "dfs.ha.log-roll.period": "600",
    "dfs.qjournal.write-txns.timeout.ms": "20000",
}


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[NameNodeProcessCluster]:
    with NameNodeProcessCluster(tmp_path, extra_conf=CONF) as c:
        c.transition_to_active("nn1")
        yield c


def metric_samples(url: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(url, timeout=10) as answer:
        text = answer.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def batch_histogram(url: str) -> dict[str, float]:
    """``le`` -> cumulative count of hanamenode_edit_log_sync_batch_txns."""
    return {
        dict(labels)["le"]: value
        for (name, labels), value in metric_samples(url).items()
        if name == "hanamenode_edit_log_sync_batch_txns_bucket"
    }


def txns_synced(url: str) -> float:
    return metric_samples(url)[("hanamenode_edit_log_txns_synced_total", ())]


def test_one_sync_carries_more_edits_than_the_old_handler_count(
    cluster: NameNodeProcessCluster,
) -> None:
    # A JournalNode majority is held with SIGSTOP while the creates arrive, so the one sync in
    # flight waits and every later edit queues behind it; once they resume, the next sync
    # takes what queued. (Without the hold the batches depend on how the creates and the
    # syncs interleave, and on a quiet machine a sync of 1-2 ms can keep them small.)
    nn1 = cluster["nn1"]
    url = nn1.metrics_url
    assert url is not None and nn1.http_address is not None
    paused = [cluster.journal[0], cluster.journal[1]]
    before = batch_histogram(url)
    calls = 400

    def written_txid() -> int:
        with urllib.request.urlopen(f"http://{nn1.http_address}/status.json", timeout=5) as r:
            return int(json.loads(r.read())["namespace"]["last_written_txid"])

    first = written_txid()

    async def creates() -> None:
        async with make_aio_channel(nn1.address, cluster.tls_for(CLIENT)) as channel:
            stub = namenode_pb2_grpc.ClientProtocolStub(channel)
            for jn in paused:
                jn.kill(signal.SIGSTOP)
            try:
                answers = asyncio.gather(
                    *(
                        stub.Create(
                            namenode_pb2.CreateRequest(header=header(), path=f"/f{i}"), timeout=60
                        )
                        for i in range(calls)
                    )
                )
                # Every create is applied (and waits for its sync) before the quorum returns.
                await wait_until(lambda: written_txid() >= first + calls)
            finally:
                for jn in paused:
                    jn.kill(signal.SIGCONT)
            done = await answers
        assert len({a.txid for a in done}) == calls

    asyncio.run(creates())
    after = batch_histogram(url)
    # Syncs of more than 16 edits: all syncs less those of at most 16.
    larger = (after["+Inf"] - before["+Inf"]) - (after["16.0"] - before["16.0"])
    print(f"{calls} creates: {after['+Inf'] - before['+Inf']:.0f} syncs, {larger:.0f} of > 16")
    assert larger >= 1, (before, after)


def test_a_call_cancelled_while_its_sync_waits_is_made_once(
    cluster: NameNodeProcessCluster,
) -> None:
    url = cluster["nn1"].metrics_url
    assert url is not None
    paused = [cluster.journal[0], cluster.journal[1]]
    client_id, call_id = b"cancelling-client", 7

    async def scenario() -> tuple[int, int, float]:
        async with make_aio_channel(cluster["nn1"].address, cluster.tls_for(CLIENT)) as channel:
            stub = namenode_pb2_grpc.ClientProtocolStub(channel)
            request = namenode_pb2.MkdirsRequest(
                header=header(client_id, call_id), path="/cancelled"
            )
            synced_before = txns_synced(url)
            for jn in paused:
                jn.kill(signal.SIGSTOP)
            try:
                call = stub.Mkdirs(request, timeout=60)
                # The edit is logged and waits for a quorum that cannot answer.
                await wait_until(lambda: "/cancelled" in namespace_paths(cluster))
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call
            finally:
                for jn in paused:
                    jn.kill(signal.SIGCONT)
            # The retry of the same call (same client and call id) gets the first answer.
            first = await stub.Mkdirs(request, timeout=60)
            again = await stub.Mkdirs(request, timeout=60)
            assert first.created and again.created
            return first.txid, again.txid, txns_synced(url) - synced_before

    first_txid, again_txid, synced = asyncio.run(scenario())
    assert first_txid == again_txid > 0
    assert synced == 1, f"{synced} edits synced for one mkdir"
    listing = namespace_paths(cluster)
    assert listing.count("/cancelled") == 1


def namespace_paths(cluster: NameNodeProcessCluster) -> list[str]:
    """The top-level paths of nn1's namespace, from a stale GetListing (which needs no
    JournalNode: it answers during the stall)."""
    stub = namenode_pb2_grpc.ClientProtocolStub(
        make_channel(cluster["nn1"].address, cluster.tls_for(CLIENT))
    )
    answer = stub.GetListing(
        namenode_pb2.GetListingRequest(header=header(stale=True), path="/"), timeout=10
    )
    return [entry.path for entry in answer.entries]


async def wait_until(predicate: Callable[[], bool], timeout: float = 20.0) -> None:
    """Poll ``predicate`` (blocking: run in a thread) until true."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        if await asyncio.to_thread(predicate):
            return
        if loop.time() > deadline:
            raise AssertionError("condition not reached")
        await asyncio.sleep(0.05)


def test_a_stalled_journal_majority_does_not_stop_the_loop(
    cluster: NameNodeProcessCluster,
) -> None:
    nn1 = cluster["nn1"]
    assert nn1.http_address is not None
    paused = [cluster.journal[0], cluster.journal[1]]

    async def scenario() -> None:
        async with make_aio_channel(nn1.address, cluster.tls_for(CLIENT)) as channel:
            client = namenode_pb2_grpc.ClientProtocolStub(channel)
            ha = namenode_pb2_grpc.HAServiceProtocolStub(channel)
            for jn in paused:
                jn.kill(signal.SIGSTOP)
            try:
                write = asyncio.ensure_future(
                    client.Mkdirs(
                        namenode_pb2.MkdirsRequest(header=header(), path="/during-stall"),
                        timeout=60,
                    )
                )
                await wait_until(lambda: "/during-stall" in namespace_paths(cluster))
                # Answered while the write waits for the quorum: none of these needs one.
                for _ in range(5):
                    status = await ha.GetServiceStatus(namenode_pb2.HAEmpty(), timeout=5)
                    assert status.state == namenode_pb2.ACTIVE
                    await ha.MonitorHealth(namenode_pb2.HAEmpty(), timeout=5)
                page = await asyncio.to_thread(
                    lambda: urllib.request.urlopen(
                        f"http://{nn1.http_address}/status.json", timeout=5
                    ).read()
                )
                assert json.loads(page)["ha_state"] == "active"
                assert not write.done(), "the write was answered without a JournalNode quorum"
            finally:
                for jn in paused:
                    jn.kill(signal.SIGCONT)
            answer = await write
            assert answer.created and answer.txid > 0

    try:
        asyncio.run(scenario())
    except grpc.aio.AioRpcError as exc:
        raise AssertionError(f"{exc.code()}: {exc.details()}") from None
