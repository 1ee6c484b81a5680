"""The JournalNode on grpc.aio (issue 12): a journal whose call is stuck in its disk work does
not hold up the server. The Journal's work runs in the ``journal-io`` pool, off the event loop,
so while one journal's batch waits (here: its Journal's lock held, as by a long fdatasync),
another journal's stream is written and answered, and calls that take no journal lock are
answered too; the stuck batch is answered, in order, once the journal is free. With two
``journal-io`` threads: a thread per open stream (the threaded server's handlers) would leave
no thread for the unary calls."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog.testing

from journalnode import server as server_module
from journalnode.server import JournalNodeServer
from proto import edits_pb2, records
from proto.values import NamespaceInfo, RequestInfo
from qjm.channel import GrpcJournalChannel
from tests.namenode.cluster import wait_for

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


def test_stop_lets_running_calls_end_but_does_not_wait_for_a_stuck_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A call stuck in the pool (a recovery's download from a stopped peer, here a held
    Journal lock) cannot keep the JournalNode from stopping: ``stop`` waits
    ``IO_STOP_SECONDS`` for it, says so, and goes on."""
    monkeypatch.setattr(server_module, "IO_STOP_SECONDS", 0.2)
    jn = JournalNodeServer(tmp_path / "jn", "127.0.0.1:0", handler_count=2).start()
    channel = GrpcJournalChannel(jn.address)
    stuck_lock = jn.journal("a")._lock
    try:
        open_segment(channel, "a")
        with stuck_lock, structlog.testing.capture_logs() as logs:
            stuck = channel.send_journal(
                RequestInfo("a", NS.cluster_id, 1, 1), 1, 1, 1, batch(1, 1), TIMEOUT
            )
            wait_for(lambda: jn._in_flight.count == 1, timeout=TIMEOUT, what="the stuck call")
            stopper = threading.Thread(target=jn.stop, kwargs={"grace": None})
            stopper.start()
            stopper.join(TIMEOUT)
            assert not stopper.is_alive()
        assert [e["running"] for e in logs if e["event"].startswith("journal calls still")] == [1]
        assert stuck.exception(TIMEOUT) is not None  # never acknowledged
    finally:
        channel.close()
        jn.stop()
