"""AsyncLogger over a JournalStream: ordering, failures, deadlines, rejoining.

Edits go on one long-lived ``JournalStream`` per logger, straight from the writer's thread;
every other call goes through the logger's worker. These tests hold the logger to what the
unary design promised (HDFS-3077 §2.2, §5.1.1): the JournalNode sees one logger's calls in the
order they were made; a batch that fails, or is not answered in time, marks the logger out of
sync until the next segment; a stream that broke is replaced by a new one when the logger
rejoins. JournalNodes are in-process ``JournalNodeServer``s on loopback.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc
import pytest

from conf.rpc import bind, make_server
from hadev.minicluster import MiniJournalCluster
from journalnode.errors import EpochError, JournalUnavailableError
from proto import edits_pb2, journal_pb2_grpc, records
from proto.values import NamespaceInfo, RemoteEditLog, RequestInfo
from qjm.async_logger import AsyncLogger, LoggerOutOfSyncError
from qjm.channel import GrpcJournalChannel

JID = "ns1"
NS = NamespaceInfo("CID-stream", 3)
TIMEOUT = 10.0


def batch(first: int, count: int) -> bytes:
    return records.frame_ops(
        edits_pb2.EditOp(txid=t, noop=edits_pb2.NoOp(payload=b"x" * (t % 50)))
        for t in range(first, first + count)
    )


class Writer:
    """One AsyncLogger over gRPC with epoch 1 and segment 1 open; sends contiguous batches."""

    def __init__(self, address: str) -> None:
        self.logger = AsyncLogger(GrpcJournalChannel(address), JID, NS)
        self.logger.format(NS, False).result(TIMEOUT)
        self.logger.new_epoch(1).result(TIMEOUT)
        self.logger.set_epoch(1)
        self.segment = 1
        self.next_txid = 1
        self.logger.start_log_segment(1).result(TIMEOUT)

    def send(self, count: int = 1) -> Future[None]:
        first, self.next_txid = self.next_txid, self.next_txid + count
        return self.logger.send_edits(self.segment, first, count, batch(first, count))

    def roll(self) -> None:
        """Finalize the segment through the last txid sent, start the next one."""
        self.logger.finalize_log_segment(self.segment, self.next_txid - 1).result(TIMEOUT)
        self.segment = self.next_txid
        self.logger.start_log_segment(self.segment).result(TIMEOUT)

    def manifest(self) -> list[RemoteEditLog]:
        logs, _ = self.logger.get_edit_log_manifest(0, True).result(TIMEOUT)
        return logs

    def close(self) -> None:
        self.logger.close()


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(1, tmp_path) as c:
        yield c


@pytest.fixture
def writer(cluster: MiniJournalCluster) -> Iterator[Writer]:
    w = Writer(cluster.addresses[0])
    try:
        yield w
    finally:
        w.close()


def test_calls_after_pipelined_edits_reach_the_journalnode_after_them(writer: Writer) -> None:
    sent = [writer.send(count) for count in (1, 5, 1, 30, 2) * 20]
    # Queued right behind the edits, without waiting for them: the worker holds it back
    # until every batch sent before it is answered, so the JournalNode finalizes all 780.
    writer.roll()
    assert all(future.result(TIMEOUT) is None for future in sent)
    assert writer.manifest() == [RemoteEditLog(1, 780, False)]
    assert writer.logger.highest_acked_txid == 780
    # And edits sent while other calls wait in the worker go after them, in order.
    heartbeat = writer.logger.heartbeat()
    behind = [writer.send(3) for _ in range(10)]
    heartbeat.result(TIMEOUT)
    assert all(future.result(TIMEOUT) is None for future in behind)
    assert writer.manifest()[-1] == RemoteEditLog(781, 810, True)


def test_serials_stay_ordered_with_a_concurrent_heartbeat_thread(writer: Writer) -> None:
    failures: list[BaseException] = []

    def heartbeats() -> None:
        for _ in range(200):
            exc = writer.logger.heartbeat().exception(TIMEOUT)
            if exc is not None:
                failures.append(exc)

    thread = threading.Thread(target=heartbeats, name="test-heartbeats")
    thread.start()
    for _ in range(300):
        exc = writer.send().exception(TIMEOUT)
        if exc is not None:
            failures.append(exc)
    thread.join(TIMEOUT)
    assert failures == []
    assert not writer.logger.out_of_sync


def test_a_failed_batch_raises_the_journalnodes_error_and_marks_out_of_sync(
    writer: Writer, cluster: MiniJournalCluster
) -> None:
    writer.send(3).result(TIMEOUT)
    newer = GrpcJournalChannel(cluster.addresses[0])
    try:
        newer.new_epoch(JID, NS, 2, TIMEOUT)
    finally:
        newer.close()
    with pytest.raises(EpochError, match="less than the last promised epoch 2"):
        writer.send().result(TIMEOUT)
    assert writer.logger.out_of_sync
    with pytest.raises(LoggerOutOfSyncError):
        writer.send().result(TIMEOUT)
    # A new segment would let it rejoin, but the fenced writer cannot start one: the edits
    # queued behind the failed start are failed here, never sent.
    start = writer.logger.start_log_segment(4)
    writer.segment, writer.next_txid = 4, 4
    behind = writer.send()
    with pytest.raises(EpochError):
        start.result(TIMEOUT)
    with pytest.raises(LoggerOutOfSyncError):
        behind.result(TIMEOUT)


def test_broken_stream_fails_the_next_batch_and_the_logger_rejoins_at_the_next_segment(
    writer: Writer, cluster: MiniJournalCluster
) -> None:
    for _ in range(3):
        writer.send(2).result(TIMEOUT)
    cluster.stop(0)  # the JournalNode goes away between two batches: the stream breaks
    with pytest.raises(JournalUnavailableError):
        writer.send().result(TIMEOUT)
    assert writer.logger.out_of_sync
    cluster.start(0)  # same directory, same port
    wait_until_reachable(writer.logger)
    # Still out of sync for the rest of the segment: nothing is sent.
    with pytest.raises(LoggerOutOfSyncError):
        writer.send().result(TIMEOUT)
    # The segment holds what was acknowledged (1-6); finalize it there and start the next.
    # Edits sent as soon as the start is queued belong to the new segment: they wait behind
    # the start instead of being refused as out of sync.
    writer.logger.finalize_log_segment(1, 6).result(TIMEOUT)
    start = writer.logger.start_log_segment(7)
    writer.segment, writer.next_txid = 7, 7
    sent = [writer.send(4) for _ in range(5)]  # on a new stream
    start.result(TIMEOUT)
    assert all(future.result(TIMEOUT) is None for future in sent)
    assert not writer.logger.out_of_sync
    assert writer.logger.highest_acked_txid == 26
    assert writer.manifest() == [RemoteEditLog(1, 6, False), RemoteEditLog(7, 26, True)]


def wait_until_reachable(logger: AsyncLogger, timeout: float = TIMEOUT) -> None:
    """Until a heartbeat gets through: the channel's reconnect backoff may still run."""
    deadline = time.monotonic() + timeout
    while logger.heartbeat().exception(timeout) is not None:
        assert time.monotonic() < deadline, f"{logger.address} did not come back"
        time.sleep(0.05)


# ---------------------------------------------------------------------------------------------
# A JournalNode that takes batches and never answers: the deadline is the client's
# ---------------------------------------------------------------------------------------------


class SilentJournalNode(journal_pb2_grpc.QJournalServiceServicer):
    """Reads every JournalStream to its end without answering; counts the streams."""

    def __init__(self) -> None:
        self.streams = 0
        self.requests: list[int] = []

    def JournalStream(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
        self.streams += 1
        for request in request_iterator:
            self.requests.append(request.first_txid)
        return iter(())


@pytest.fixture
def silent() -> Iterator[tuple[SilentJournalNode, str]]:
    servicer = SilentJournalNode()
    server: grpc.Server = make_server(max_workers=4)
    journal_pb2_grpc.add_QJournalServiceServicer_to_server(servicer, server)
    port = bind(server, "127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def request_info(serial: int) -> RequestInfo:
    return RequestInfo(JID, NS.cluster_id, 1, serial)


def test_an_unanswered_batch_fails_at_its_deadline_and_the_stream_is_replaced(
    silent: tuple[SilentJournalNode, str],
) -> None:
    servicer, address = silent
    channel = GrpcJournalChannel(address)
    try:
        started = time.monotonic()
        first = channel.send_journal(request_info(1), 1, 1, 1, batch(1, 1), 0.3)
        second = channel.send_journal(request_info(2), 1, 2, 1, batch(2, 1), 30.0)
        exc = first.exception(TIMEOUT)
        assert isinstance(exc, JournalUnavailableError)
        assert "DEADLINE_EXCEEDED" in str(exc)
        assert 0.25 < time.monotonic() - started < 3.0
        # The batch behind it is in the same unknown state: failed too, at once.
        assert isinstance(second.exception(1.0), JournalUnavailableError)
        assert servicer.requests == [1, 2]

        third = channel.send_journal(request_info(3), 1, 3, 1, batch(3, 1), 0.3)
        assert isinstance(third.exception(TIMEOUT), JournalUnavailableError)
        assert servicer.streams == 2
    finally:
        channel.close()


def test_closing_the_channel_fails_unanswered_batches(
    silent: tuple[SilentJournalNode, str],
) -> None:
    _, address = silent
    channel = GrpcJournalChannel(address)
    pending = channel.send_journal(request_info(1), 1, 1, 1, batch(1, 1), 30.0)
    channel.close()
    exc = pending.exception(TIMEOUT)
    assert isinstance(exc, JournalUnavailableError)
    assert "closed" in str(exc)
    after = channel.send_journal(request_info(2), 1, 2, 1, batch(2, 1), 30.0)
    assert isinstance(after.exception(TIMEOUT), JournalUnavailableError)


def test_a_close_racing_the_answer_that_drains_the_stream_still_stops_the_logger(
    silent: tuple[SilentJournalNode, str],
) -> None:
    """The step-down closes the writer's loggers while a queued call may wait for the stream
    to drain. When the answer that drains it lands in the same turn of the loop as the close,
    Python 3.11's ``asyncio.wait_for`` returns that answer and drops the cancellation; the
    logger's task must stop all the same, or the close (and the NameNode's transition to
    standby, with its election lock) waits for ever."""
    _, address = silent
    logger = AsyncLogger(GrpcJournalChannel(address), JID, NS)
    logger.set_epoch(1)
    unanswered = logger.send_edits(1, 1, 1, batch(1, 1))  # on the stream; never answered
    queued = logger.heartbeat()  # waits in the logger's task for the stream to drain
    loop = logger.loop
    assert loop is not None

    async def close_as_the_answer_lands() -> bool:
        await asyncio.sleep(0.2)  # the task is waiting for the stream now
        closing = asyncio.get_running_loop().create_task(logger.aclose())
        logger._drained()  # the answer's wake-up, in the same turn as the close's cancel
        done, _ = await asyncio.wait({closing}, timeout=3.0)
        if not done:
            closing.cancel()
        return bool(done)

    closed = asyncio.run_coroutine_threadsafe(close_as_the_answer_lands(), loop).result(TIMEOUT)
    assert closed, "the logger's task did not stop: its close waited for it"
    assert isinstance(queued.exception(TIMEOUT), BaseException)
    assert isinstance(unanswered.exception(TIMEOUT), JournalUnavailableError)


def test_a_batch_is_written_on_the_event_loop_unless_the_disk_is_slow_or_the_journal_busy(
    writer: Writer, cluster: MiniJournalCluster
) -> None:
    """docs/protocol.md §13.7: a stream's batch is written on the JournalNode's event loop
    (no hop to the pool and back) while appends are fast and no other call holds the
    journal; after an append slower than ``SLOW_APPEND_SECONDS`` the next batches go to the
    ``journal-io`` pool until one is fast again, and a batch never waits on the loop for a
    journal another call holds. The storage is the real one, wrapped to note the thread of
    each append and to make the disk slow on demand."""
    journal = cluster.node(0).loaded_journal(JID)
    assert journal is not None
    storage = journal.storage
    real_append = storage.append
    threads: list[str] = []
    delay = [0.0]

    def append(segment_txid: int, framed: bytes) -> None:
        threads.append(threading.current_thread().name)
        time.sleep(delay[0])
        real_append(segment_txid, framed)

    storage.append = append  # type: ignore[method-assign]
    # Slow means 50 ms here, not 2: a busy test machine's real fdatasync can take a few ms.
    journal.slow_append_seconds = 0.05
    loop, pool = "journalnode-loop", "journal-io"
    for _ in range(5):
        writer.send().result(TIMEOUT)
    assert threads == [loop] * 5

    threads.clear()
    delay[0] = 0.1
    for _ in range(4):
        writer.send().result(TIMEOUT)
    assert threads[0] == loop and all(t.startswith(pool) for t in threads[1:]), threads

    threads.clear()
    delay[0] = 0.0
    for _ in range(3):
        writer.send().result(TIMEOUT)
    assert threads[0].startswith(pool) and threads[1:] == [loop] * 2, threads

    threads.clear()
    with journal._lock:  # another call (a finalize, a recovery) holds the journal
        held = writer.send()
        time.sleep(0.2)
        assert not held.done()
        # The loop is free meanwhile: a read-index question is answered at once.
        reader = GrpcJournalChannel(cluster.addresses[0])
        try:
            assert reader.get_journal_state(JID, NS.cluster_id, TIMEOUT)[0] == 1
        finally:
            reader.close()
    held.result(TIMEOUT)
    assert len(threads) == 1 and threads[0].startswith(pool), threads
    assert writer.manifest() == [RemoteEditLog(1, 13, True)]
