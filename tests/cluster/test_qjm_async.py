"""The QJM's awaitable API (issue 12) on real in-process JournalNodes: the whole writer's life
awaited on one event loop, and the blocking bridge's rules (``qjm.bridge``): a blocking call
from the manager's own loop is refused instead of deadlocking, and a manager used from one
loop is not driven from another."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from hadev.minicluster import MiniJournalCluster
from proto import edits_pb2
from proto.values import NamespaceInfo, RemoteEditLog
from qjm.errors import QJMError

pytestmark = pytest.mark.timeout(60)

NS = NamespaceInfo("CID-async-test", 12)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(3, tmp_path) as cluster:
        yield cluster


def mkdir(txid: int) -> edits_pb2.EditOp:
    return edits_pb2.EditOp(txid=txid, mkdir=edits_pb2.MkdirOp(path=f"/d{txid}", permission=0o755))


def test_a_writer_awaits_every_step_on_one_loop(journal: MiniJournalCluster) -> None:
    async def life() -> tuple[list[RemoteEditLog], list[int], list[int], int | None]:
        qjm = journal.qjm("ns1", NS)
        try:
            await qjm.aformat()
            assert await qjm.ais_formatted() == {a: True for a in journal.addresses}
            assert await qjm.arecover_unfinalized_segments() is None
            out = await qjm.astart_log_segment(1)
            for txid in range(1, 11):
                out.write(mkdir(txid))
                if txid % 3 == 0:
                    await out.aflush()
            await out.aflush()
            assert out.last_txid == 10 and qjm.committed_txid == 10
            tailed = [op.txid for op in await qjm.aread_journaled_edits(1, 100)]
            await qjm.afinalize_log_segment(1, 10)
            streams = await qjm.aselect_input_streams(1)
            logs = [RemoteEditLog(s.start_txid, s.end_txid, False) for s in streams]
            read = await asyncio.to_thread(lambda: [op.txid for s in streams for op in s])
        finally:
            await qjm.aclose()
        # A second writer, awaited too, fences the first and finds the log ending at 10.
        second = journal.qjm("ns1", NS)
        try:
            recovered = await second.arecover_unfinalized_segments()
        finally:
            await second.aclose()
        return logs, tailed, read, recovered

    logs, tailed, read, recovered = asyncio.run(life())
    assert logs == [RemoteEditLog(1, 10, False)]
    assert tailed == list(range(1, 11))
    assert read == list(range(1, 11))
    assert recovered == 10


def test_blocking_from_the_managers_own_loop_is_refused(journal: MiniJournalCluster) -> None:
    async def main() -> None:
        qjm = journal.qjm("ns1", NS)
        try:
            await qjm.aformat()
            with pytest.raises(QJMError, match="await the async method instead"):
                qjm.recover_unfinalized_segments()
            # Nothing was sent: the awaitable call still takes the first epoch.
            assert await qjm.arecover_unfinalized_segments() is None
            assert qjm.epoch == 1
        finally:
            await qjm.aclose()

    asyncio.run(main())


def test_blocking_callers_share_the_qjm_loop_thread(journal: MiniJournalCluster) -> None:
    """The blocking API drives the same coroutines on the ``qjm-loop`` thread; the manager is
    then bound to that loop, and an awaitable call from another loop is refused."""
    with journal.qjm("ns1", NS) as qjm:
        qjm.format()
        qjm.recover_unfinalized_segments()
        out = qjm.start_log_segment(1)
        out.write(mkdir(1))
        out.flush()
        assert qjm.committed_txid == 1

        async def elsewhere() -> None:
            await qjm.afinalize_log_segment(1, 1)

        with pytest.raises(QJMError, match="another event loop"):
            asyncio.run(elsewhere())
        qjm.finalize_log_segment(1, 1)
        assert [(s.start_txid, s.end_txid) for s in qjm.select_input_streams(1)] == [(1, 1)]
