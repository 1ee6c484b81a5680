"""A JournalNode process that stalls (SIGSTOP) costs the asyncio QJM writer nothing while the
other two answer (issue 12; HDFS-3077 §2.2): every flush is acknowledged by the two running
JournalNodes while the stopped one has acknowledged none of it, the writer's event loop goes
on serving other work meanwhile, and after SIGCONT the stalled JournalNode's logger catches up
on the same stream, in order, without falling out of sync."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from hadev.journalnodes import JournalNodeProcessCluster
from proto import edits_pb2
from proto.values import NamespaceInfo
from qjm.journal_manager import QuorumJournalManager

pytestmark = pytest.mark.timeout(120)

JID = "ns1"
NS = NamespaceInfo("CID-stall", 1212)
FLUSHES = 50


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[JournalNodeProcessCluster]:
    with JournalNodeProcessCluster(3, tmp_path, journal_id=JID) as c:
        yield c


def mkdir(txid: int) -> edits_pb2.EditOp:
    return edits_pb2.EditOp(txid=txid, mkdir=edits_pb2.MkdirOp(path=f"/s{txid}", permission=0o755))


def test_a_stopped_journalnode_does_not_hold_the_quorum(
    cluster: JournalNodeProcessCluster,
) -> None:
    async def scenario() -> tuple[int, int, list[int], int]:
        qjm = QuorumJournalManager.connect(cluster.addresses, JID, NS, tls=cluster.harness_tls)
        try:
            return await write_through_a_stall(qjm)
        finally:
            await qjm.aclose()

    async def write_through_a_stall(qjm: QuorumJournalManager) -> tuple[int, int, list[int], int]:
        await qjm.aformat()
        await qjm.arecover_unfinalized_segments()
        out = await qjm.astart_log_segment(1)
        out.write(mkdir(1))
        await out.aflush()
        stalled = next(lg for lg in qjm.loggers.loggers if lg.address == cluster[2].address)
        # The flush returned on a majority: let the third acknowledge txid 1 too.
        for _ in range(1000):
            if all(lg.highest_acked_txid == 1 for lg in qjm.loggers.loggers):
                break
            await asyncio.sleep(0.01)
        ticks = 0

        async def other_work() -> None:  # the loop is never blocked by the stalled node
            nonlocal ticks
            while True:
                await asyncio.sleep(0.001)
                ticks += 1

        ticker = asyncio.get_running_loop().create_task(other_work())
        cluster.kill(2, signal.SIGSTOP)
        try:
            for txid in range(2, FLUSHES + 2):
                out.write(mkdir(txid))
                await out.aflush()  # acknowledged by the two running JournalNodes
            acked_while_stopped = stalled.highest_acked_txid
            running_acked = sorted(
                lg.highest_acked_txid for lg in qjm.loggers.loggers if lg is not stalled
            )
            ticks_while_stopped = ticks
        finally:
            cluster.kill(2, signal.SIGCONT)
            ticker.cancel()
        # The stalled node answers its queued batches in order, on the same stream.
        last = FLUSHES + 1
        for _ in range(1000):
            if stalled.highest_acked_txid == last:
                break
            await asyncio.sleep(0.01)
        assert not stalled.out_of_sync
        await qjm.afinalize_log_segment(1, last)
        return acked_while_stopped, ticks_while_stopped, running_acked, stalled.highest_acked_txid

    acked_while_stopped, ticks, running_acked, caught_up = asyncio.run(scenario())
    assert acked_while_stopped == 1  # only what it acknowledged before SIGSTOP
    assert running_acked == [FLUSHES + 1, FLUSHES + 1]
    assert ticks > 0
    assert caught_up == FLUSHES + 1
    reader = QuorumJournalManager.connect(cluster.addresses, JID, NS, tls=cluster.harness_tls)
    try:
        [stream] = reader.select_input_streams(1)
        assert [op.txid for op in stream] == list(range(1, FLUSHES + 2))
    finally:
        reader.close()
