"""The JournalNode on grpc.aio (issue 12): a journal whose call is stuck in its disk work does
not hold up the server. The Journal's work runs in the ``journal-io`` pool, off the event loop,
so while one journal's batch waits (here: its Journal's lock held, as by a long fdatasync),
another journal's stream is written and answered, and calls that take no journal lock are
answered too; the stuck batch is answered, in order, once the journal is free. With two
``journal-io`` threads: a thread per open stream (the threaded server's handlers) would leave
no thread for the unary calls."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from journalnode.server import JournalNodeServer
from proto import edits_pb2, records
from proto.values import NamespaceInfo, RequestInfo
from qjm.channel import GrpcJournalChannel

pytestmark = pytest.mark.timeout(60)

NS = NamespaceInfo("CID-aio-jn", 7)
TIMEOUT = 10.0


@pytest.fixture
def jn(tmp_path: Path) -> Iterator[JournalNodeServer]:
    with JournalNodeServer(tmp_path / "jn", "127.0.0.1:0", handler_count=2) as server:
        yield server


def batch(first: int, count: int) -> bytes:
    ops = range(first, first + count)
    return records.frame_ops(edits_pb2.EditOp(txid=t, noop=edits_pb2.NoOp()) for t in ops)


def open_segment(channel: GrpcJournalChannel, journal_id: str) -> None:
    channel.format(journal_id, NS, False, TIMEOUT)
    channel.new_epoch(journal_id, NS, 1, TIMEOUT)
    channel.start_log_segment(RequestInfo(journal_id, NS.cluster_id, 1, 0), 1, TIMEOUT)


def test_a_stuck_journal_does_not_hold_other_journals_or_streams(jn: JournalNodeServer) -> None:
    channel_a, channel_b = GrpcJournalChannel(jn.address), GrpcJournalChannel(jn.address)
    try:
        open_segment(channel_a, "a")
        open_segment(channel_b, "b")
        stuck_lock = jn.journal("a")._lock
        with stuck_lock:  # journal a's next call waits, as behind a long fdatasync
            stuck = channel_a.send_journal(
                RequestInfo("a", NS.cluster_id, 1, 1), 1, 1, 1, batch(1, 1), TIMEOUT
            )
            answers = [
                channel_b.send_journal(
                    RequestInfo("b", NS.cluster_id, 1, serial), 1, serial, 1, batch(serial, 1),
                    TIMEOUT,
                )
                for serial in range(1, 21)
            ]
            assert [f.result(TIMEOUT) for f in answers] == [None] * 20
            assert channel_b.is_formatted("b", TIMEOUT)[0]
            assert channel_a.is_formatted("a", TIMEOUT)[0]  # takes no journal lock
            assert not stuck.done()
        assert stuck.result(TIMEOUT) is None
        assert jn.journal("a").stats.last_written_txid == 1
        assert jn.journal("b").stats.last_written_txid == 20
    finally:
        channel_a.close()
        channel_b.close()
