"""The QuorumJournalManager end to end, against real JournalNode gRPC servers.

Every JournalNode is a real ``JournalNodeServer`` of a ``MiniJournalCluster`` (HDFS-3077
§7.2) writing real files; nothing of the JournalNode is mocked. Faults are injected in
two ways only: on the client side, by ``FaultInjectingChannel`` (it wraps the writer's
``GrpcJournalChannel`` to one JournalNode and makes chosen calls fail before they leave the
writer, hangs them, or holds back their answers), and by stopping, restarting or damaging
the files of real nodes.

This module also holds the small harness that tests/cluster/test_recovery_examples_e2e.py
builds its scenarios with: ``Writer`` (one QJM over fault-injecting channels), ``Timeouts``,
and the ``payload``/``write_batch``/file helpers. Each edit's payload names the writer epoch
and txid that wrote it, so a test can tell whose edits survived.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import re
import struct
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from hadev.minicluster import MiniJournalCluster
from journalnode.errors import (
    CorruptSegmentError,
    EpochError,
    JournalInUseError,
    JournalNotEmptyError,
    JournalUnavailableError,
    NamespaceMismatchError,
)
from proto import edits_pb2, journal_pb2, records
from proto.values import NamespaceInfo, SegmentState
from qjm.async_logger import AsyncLogger, AsyncLoggerSet
from qjm.channel import JOURNAL_RPCS, GrpcJournalChannel
from qjm.errors import QJMError, QuorumException, QuorumTimeout
from qjm.journal_manager import QuorumJournalManager, QuorumOutputStream, _DefaultTimeouts

JID = "ns1"
NS = NamespaceInfo("CID-cluster-test", 4242)


@dataclasses.dataclass(frozen=True)
class Timeouts:
    """The attributes of ``qjm.journal_manager._DefaultTimeouts`` (seconds), small enough for
    tests."""

    start_segment_timeout: float = 5.0
    prepare_recovery_timeout: float = 5.0
    accept_recovery_timeout: float = 5.0
    finalize_segment_timeout: float = 5.0
    select_input_streams_timeout: float = 5.0
    get_journal_state_timeout: float = 5.0
    new_epoch_timeout: float = 5.0
    write_txns_timeout: float = 5.0
    format_timeout: float = 5.0
    heartbeat_interval: float = 1.0
    queued_edits_limit_bytes: int = 64 * 1024 * 1024


FAST = Timeouts()


# ----------------------------------------------------------------------------- edits


def payload(epoch: int, txid: int, size: int = 0) -> bytes:
    """Bytes unique to (writer epoch, txid), padded to ``size``: tells whose edit survived."""
    return f"writer-epoch={epoch} txid={txid};".encode().ljust(size, b".")


def make_op(epoch: int, txid: int, size: int = 0) -> edits_pb2.EditOp:
    return edits_pb2.EditOp(txid=txid, noop=edits_pb2.NoOp(payload=payload(epoch, txid, size)))


def write_batch(
    out: QuorumOutputStream, epoch: int, first: int, last: int, *, size: int = 0
) -> None:
    """Write txids first..last as ONE batch (one journal RPC per JournalNode) and wait for a
    quorum to acknowledge it; raises QuorumException when no quorum does."""
    for txid in range(first, last + 1):
        out.write(make_op(epoch, txid, size))
    out.flush()


def assert_ops(ops: Sequence[edits_pb2.EditOp], first: int, epoch_of: Callable[[int], int]) -> None:
    """``ops`` are txids first, first+1, ... in order, each with the payload of ``epoch_of``."""
    assert [op.txid for op in ops] == list(range(first, first + len(ops)))
    for op in ops:
        assert op.noop.payload.startswith(payload(epoch_of(op.txid), op.txid)), op.txid


# ----------------------------------------------------------------------------- files


_FINALIZED = re.compile(r"edits_(\d{19})-(\d{19})")


def inprogress_path(cluster: MiniJournalCluster, index: int, start: int) -> Path:
    return cluster.journal_dir(index, JID) / f"edits_inprogress_{start:019d}"


def finalized_path(cluster: MiniJournalCluster, index: int, start: int, end: int) -> Path:
    return cluster.journal_dir(index, JID) / f"edits_{start:019d}-{end:019d}"


def finalized_segments(cluster: MiniJournalCluster, index: int) -> list[tuple[int, int]]:
    """(start, end) of every finalized segment file on a JournalNode, by name."""
    found = []
    for path in cluster.journal_dir(index, JID).iterdir():
        if m := _FINALIZED.fullmatch(path.name):
            found.append((int(m.group(1)), int(m.group(2))))
    return sorted(found)


def segment_file_names(cluster: MiniJournalCluster, index: int) -> list[str]:
    """Every ``edits_*`` segment file of a JournalNode (moved-aside ones included, the md5
    files beside finalized ones not: docs/protocol.md §8.7), sorted."""
    return sorted(
        p.name for p in cluster.journal_dir(index, JID).glob("edits_*")
        if not p.name.endswith(".md5")
    )


def accepted_in_epoch(cluster: MiniJournalCluster, index: int, segment_txid: int) -> int | None:
    """The epoch of the recovery a JournalNode accepted for a segment (its paxos/ file)."""
    path = cluster.journal_dir(index, JID) / "paxos" / str(segment_txid)
    if not path.exists():
        return None
    return journal_pb2.PersistedRecoveryPaxosData.FromString(path.read_bytes()).accepted_in_epoch


def file_ops(path: Path) -> list[edits_pb2.EditOp]:
    """The EditOps of a segment file; fails on a bad header or a bad record."""
    data = path.read_bytes()
    assert data[: records.HEADER_LEN] == records.SEGMENT_HEADER, path
    return records.decode_ops(data[records.HEADER_LEN :])


# ----------------------------------------------------------------------------- the harness


class FaultInjectingChannel:
    """A ``JournalChannel`` to one JournalNode that forwards to a real ``GrpcJournalChannel``
    unless told otherwise.

    ``drop(*methods)`` (no argument: every call) makes those calls raise
    ``JournalUnavailableError`` before anything is sent, exactly as if the node were
    unreachable: the JournalNode never acts on them. ``hang(*methods)`` makes them block until
    ``heal()``, then fail the same way (a node that accepted the connection and never answered).
    ``delay_answers(*methods)`` sends those calls at once but holds their answers until
    ``heal()`` (a slow network on the way back): it fixes which JournalNodes answer first.
    Rules apply when the logger's thread runs the call, not when the writer queues it.
    ``calls`` records every call as ``(method, args)``; ``stream_errors`` the exceptions
    that ended a ``get_segment`` stream.
    """

    def __init__(self, address: str, name: str) -> None:
        self.inner = GrpcJournalChannel(address)
        self.address = address
        self.name = name
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.stream_errors: list[BaseException] = []
        self._dropped: frozenset[str] = frozenset()
        self._hung: frozenset[str] = frozenset()
        self._delayed: frozenset[str] = frozenset()
        self._healed = threading.Event()

    def __repr__(self) -> str:
        return f"FaultInjectingChannel({self.name} {self.address})"

    def drop(self, *methods: str) -> None:
        unknown = set(methods) - JOURNAL_RPCS
        assert not unknown, unknown
        self._dropped = self._dropped | (frozenset(methods) or JOURNAL_RPCS)

    def hang(self, *methods: str) -> None:
        self._healed.clear()
        self._hung = self._hung | (frozenset(methods) or JOURNAL_RPCS)

    def delay_answers(self, *methods: str) -> None:
        self._healed.clear()
        self._delayed = self._delayed | (frozenset(methods) or JOURNAL_RPCS)

    def heal(self) -> None:
        self._dropped = self._hung = self._delayed = frozenset()
        self._healed.set()

    def count(self, method: str) -> int:
        return sum(1 for name, _ in self.calls if name == method)

    def __getattr__(self, method: str) -> Callable[..., Any]:
        if method not in JOURNAL_RPCS:
            raise AttributeError(method)

        def call(*args: Any) -> Any:
            self.calls.append((method, args))
            if method in self._hung:
                self._healed.wait(60)
                raise JournalUnavailableError(f"injected: {method} to {self.name} never answered")
            if method in self._dropped:
                raise JournalUnavailableError(f"injected: {method} to {self.name} dropped")
            if method == "get_segment":
                return self._observe(self.inner.get_segment(*args))
            if method not in self._delayed:
                return getattr(self.inner, method)(*args)
            try:
                return getattr(self.inner, method)(*args)
            finally:
                self._healed.wait(60)

        return call

    def _observe(self, chunks: Iterator[bytes]) -> Iterator[bytes]:
        try:
            yield from chunks
        except BaseException as exc:
            self.stream_errors.append(exc)
            raise

    def close(self) -> None:
        self.heal()
        self.inner.close()


class Writer:
    """One QuorumJournalManager (one would-be writer) whose channel to each JournalNode is a
    ``FaultInjectingChannel``; a context manager that closes the QJM::

        with Writer(cluster, ["JN1", "JN2", "JN3"]) as w:
            w.reach_only("JN2", "JN3")      # calls to JN1 fail before reaching it
            end = w.qjm.recover_unfinalized_segments()

    ``names`` name the cluster's nodes in order (default ``JN0``, ``JN1``, ...).
    """

    def __init__(
        self,
        cluster: MiniJournalCluster,
        names: Sequence[str] | None = None,
        *,
        ns: NamespaceInfo = NS,
        timeouts: Timeouts = FAST,
    ) -> None:
        names = list(names or [f"JN{i}" for i in range(len(cluster))])
        assert len(names) == len(cluster)
        self.channels = {
            name: FaultInjectingChannel(address, name)
            for name, address in zip(names, cluster.addresses, strict=True)
        }
        self.loggers = {
            name: AsyncLogger(
                channel,
                JID,
                ns,
                queue_limit_bytes=timeouts.queued_edits_limit_bytes,
                timeouts=timeouts,
            )
            for name, channel in self.channels.items()
        }
        self.qjm = QuorumJournalManager(AsyncLoggerSet(self.loggers.values()), JID, ns, timeouts)

    def __enter__(self) -> Writer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Let every call already sent land (quorum calls return once a majority answered),
        then close the QJM."""
        for channel in self.channels.values():
            channel.heal()  # let hung calls end, so the logger threads can finish
        try:
            self.settle()
        finally:
            self.qjm.close()

    def name_of(self, address: str) -> str:
        return next(n for n, ch in self.channels.items() if ch.address == address)

    def reach_only(self, *names: str) -> None:
        """From now on only ``names`` are reachable: calls to the others are dropped.

        "Now" is after every call already sent has landed: a quorum call returns once a
        majority answered, and a straggler must not be dropped by a rule made after it.
        """
        assert set(names) <= set(self.channels), names
        self.settle()
        for name, channel in self.channels.items():
            channel.heal()
            if name not in names:
                channel.drop()

    def settle(self, timeout: float = 10.0) -> None:
        """Wait until every call already queued for any JournalNode has finished.

        Each AsyncLogger runs its calls in order on one thread, so a call queued behind them
        finishes last. Needed after a quorum call failed fast: the writer "crashes" then, but
        the calls it already sent to reachable nodes must have landed before the next step.
        """
        barriers = [lg.is_formatted() for lg in self.loggers.values()]
        _, pending = concurrent.futures.wait(barriers, timeout)
        assert not pending, "a JournalNode call did not finish"


# A writer holds a journal (Format with force is refused) until it has been quiet this long;
# 30 s in production, short here so that a test can format after closing its writer.
HOLD = 0.5


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(3, tmp_path, writer_hold_seconds=HOLD) as c:
        yield c


def start_writer(w: Writer) -> int:
    """Format, become the writer (epoch 1 on a fresh journal) and return its epoch."""
    w.qjm.format()
    assert w.qjm.recover_unfinalized_segments() is None
    return w.qjm.epoch


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)


def test_timeouts_have_every_default_attribute() -> None:
    """The small Timeouts stand in for the real ones: no attribute may fall back silently."""
    defaults = {name for name in vars(_DefaultTimeouts) if not name.startswith("_")}
    assert defaults <= {f.name for f in dataclasses.fields(Timeouts)}


# ----------------------------------------------------------------------------- (a) write, read


def test_finalized_segments_read_back_through_select_input_streams(
    cluster: MiniJournalCluster,
) -> None:
    """What a standby relies on (HDFS-3077 §3): every finalized segment comes back
    from select_input_streams, readable from every JournalNode, with each op once, in order,
    byte for byte as written; an in-progress segment is not offered."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
        qjm = w.qjm
        out = qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 5)
        write_batch(out, epoch, 6, 20)
        assert out.last_txid == 20
        qjm.finalize_log_segment(1, 20)
        out = qjm.start_log_segment(21)
        write_batch(out, epoch, 21, 30)
        qjm.finalize_log_segment(21, 30)
        out = qjm.start_log_segment(31)
        write_batch(out, epoch, 31, 35)  # stays in progress

        streams = qjm.select_input_streams(1)
        assert [(s.start_txid, s.end_txid) for s in streams] == [(1, 20), (21, 30)]
        # Each segment is readable from every JournalNode that answered the manifest call
        # (at least a quorum: the call returns once a majority has answered).
        assert all(len(s.sources) >= 2 for s in streams)
        assert_ops([op for s in streams for op in s], 1, lambda _: epoch)
        assert [(s.start_txid, s.end_txid) for s in qjm.select_input_streams(21)] == [(21, 30)]
        assert qjm.select_input_streams(31) == []

    for start, end in ((1, 20), (21, 30)):
        copies = {finalized_path(cluster, i, start, end).read_bytes() for i in range(3)}
        assert len(copies) == 1


# ----------------------------------------------------------------------------- (b) one JN down


def test_stopped_journalnode_rejoins_at_the_next_segment(cluster: MiniJournalCluster) -> None:
    """HDFS-3077 §2.2, §2.11: one JournalNode down costs the writer nothing; its logger is out of
    sync for the rest of the segment and rejoins when the next segment starts. The segment it
    missed is never finalized on it."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
        qjm, jn2 = w.qjm, w.loggers["JN2"]
        out = qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 10)
        w.settle()  # every JournalNode has what was acknowledged
        cluster.stop(2)
        write_batch(out, epoch, 11, 20)
        assert out.last_txid == 20
        assert jn2.out_of_sync
        cluster.start(2)
        # Back, but out of sync until the next segment: the batch is not even sent to it.
        write_batch(out, epoch, 21, 30)
        assert jn2.out_of_sync
        assert w.channels["JN2"].count("journal") == 2  # 1-10 and the failed 11-20
        qjm.finalize_log_segment(1, 30)  # JN2 refuses (it holds 1-10 only); a quorum agrees
        wait_until(lambda: jn2.is_formatted().exception() is None, "JN2 to be reachable")
        out = qjm.start_log_segment(31)
        w.settle()
        assert not jn2.out_of_sync
        write_batch(out, epoch, 31, 40)
        qjm.finalize_log_segment(31, 40)

    assert finalized_segments(cluster, 2) == [(31, 40)]
    assert segment_file_names(cluster, 2) == [
        "edits_0000000000000000031-0000000000000000040",
        "edits_inprogress_0000000000000000001",
    ]
    assert [op.txid for op in file_ops(inprogress_path(cluster, 2, 1))] == list(range(1, 11))
    for i in (0, 1):
        assert finalized_segments(cluster, i) == [(1, 30), (31, 40)]
    copies = {finalized_path(cluster, i, 31, 40).read_bytes() for i in range(3)}
    assert len(copies) == 1


def test_a_refused_batch_after_a_failed_segment_start_names_that_failure(
    cluster: MiniJournalCluster,
) -> None:
    """A JournalNode that could not start the segment (down here; a full disk is the other
    case) refuses its batches for want of an open segment; its logger then goes out of sync
    with the failed start named as the cause, not only the refusal that hid it. The batches
    are still sent, as in Hadoop: a start whose answer alone was lost leaves the JournalNode
    able to take them."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
        qjm, jn2 = w.qjm, w.loggers["JN2"]
        out = qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 10)
        qjm.finalize_log_segment(1, 10)
        w.settle()
        cluster.stop(2)
        out = qjm.start_log_segment(11)  # a quorum starts it; JN2 cannot
        w.settle()
        cluster.start(2)
        wait_until(lambda: jn2.is_formatted().exception() is None, "JN2 to be reachable")
        journal_calls = w.channels["JN2"].count("journal")
        write_batch(out, epoch, 11, 20)
        w.settle()
        assert w.channels["JN2"].count("journal") == journal_calls + 1
        assert jn2.out_of_sync
        cause = jn2.out_of_sync_cause
        assert "its startLogSegment had failed: JournalUnavailableError" in cause, cause
        qjm.finalize_log_segment(11, 20)
        out = qjm.start_log_segment(21)
        w.settle()
        assert not jn2.out_of_sync and jn2.out_of_sync_cause == ""
        write_batch(out, epoch, 21, 30)
        qjm.finalize_log_segment(21, 30)
    assert finalized_segments(cluster, 2) == [(1, 10), (21, 30)]


# ----------------------------------------------------------------------------- (c) majority down


def test_majority_stopped_flush_fails_within_the_write_timeout(
    cluster: MiniJournalCluster,
) -> None:
    """With a majority down a flush raises QuorumException (no later than the configured write
    timeout) and nothing of the batch counts as written: the stream is aborted, neither the
    stream nor the writer advances its acknowledged txid, and no JournalNode learns it as
    committed."""
    timeouts = dataclasses.replace(FAST, write_txns_timeout=1.0)
    with Writer(cluster, timeouts=timeouts) as w:
        epoch = start_writer(w)
        out = w.qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 10)
        w.settle()  # every JournalNode has what was acknowledged
        cluster.stop(1)
        cluster.stop(2)
        started = time.monotonic()
        with pytest.raises(QuorumException) as info:
            write_batch(out, epoch, 11, 20)
        assert time.monotonic() - started < timeouts.write_txns_timeout + 0.5
        assert {w.name_of(lg.address) for lg in info.value.exceptions} == {"JN1", "JN2"}
        assert out.aborted and out.last_txid == 10
        assert w.qjm.committed_txid == 10
        with pytest.raises(QJMError):
            out.flush()
        w.settle()
        assert cluster.node(0).journal(JID).committed_txid <= 10


def test_unanswering_majority_times_out_after_the_write_timeout(
    cluster: MiniJournalCluster,
) -> None:
    """JournalNodes that never answer (calls hung client-side) make the flush raise
    QuorumTimeout once the write timeout has passed, not before and not much after."""
    timeouts = dataclasses.replace(FAST, write_txns_timeout=0.5)
    with Writer(cluster, timeouts=timeouts) as w:
        epoch = start_writer(w)
        out = w.qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 10)
        w.channels["JN1"].hang("journal")
        w.channels["JN2"].hang("journal")
        started = time.monotonic()
        with pytest.raises(QuorumTimeout) as info:
            write_batch(out, epoch, 11, 20)
        took = time.monotonic() - started
        assert timeouts.write_txns_timeout <= took < timeouts.write_txns_timeout + 1.0
        assert {w.name_of(lg.address) for lg in info.value.successes} == {"JN0"}
        assert out.aborted and out.last_txid == 10 and w.qjm.committed_txid == 10


# ----------------------------------------------------------------------------- (d) fencing


def test_fenced_writer_cannot_write_after_another_takes_over(
    cluster: MiniJournalCluster,
) -> None:
    """HDFS-3077 §2.3: once a second writer has a quorum of promises for a higher epoch, every
    write of the first fails with EpochError on every JournalNode, and the second writer's
    recovery kept everything the first had acknowledged."""
    with Writer(cluster) as old:
        old_epoch = start_writer(old)
        out = old.qjm.start_log_segment(1)
        write_batch(out, old_epoch, 1, 10)
        with Writer(cluster) as new:
            assert new.qjm.recover_unfinalized_segments() == 10
            assert new.qjm.epoch == old_epoch + 1
            with pytest.raises(QuorumException) as info:
                write_batch(out, old_epoch, 11, 12)
            # Fails as soon as a majority refused, every refusal an EpochError.
            assert len(info.value.exceptions) >= 2
            assert all(isinstance(e, EpochError) for e in info.value.exceptions.values())
            with pytest.raises(QuorumException) as info:
                old.qjm.start_log_segment(11)
            assert all(isinstance(e, EpochError) for e in info.value.exceptions.values())
            out2 = new.qjm.start_log_segment(11)
            write_batch(out2, new.qjm.epoch, 11, 12)
            new.qjm.finalize_log_segment(11, 12)
            ops = [op for s in new.qjm.select_input_streams(1) for op in s]
    assert_ops(ops, 1, lambda txid: old_epoch if txid <= 10 else old_epoch + 1)
    assert len(ops) == 12


# ----------------------------------------------------------------------------- (e) reader


BIG_TXNS = 4000
BIG_OP_BYTES = 4000  # 16 MB: far more than gRPC buffers ahead of a slow reader


@pytest.mark.parametrize("fault", ["stop", "corrupt"])
def test_reader_switches_journalnode_mid_segment(cluster: MiniJournalCluster, fault: str) -> None:
    """RedundantEditLogInputStream (HDFS-3077 §3): if the JournalNode serving a segment
    fails part-way (stopped, or a byte of its file damaged ahead of the reader), reading goes
    on from another JournalNode and every op still comes out exactly once, in order. The
    reader takes the whole segment before it returns an op (it checks the majority's md5
    first, docs/protocol.md §8.7), so the fault strikes after the first chunk arrived."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
        out = w.qjm.start_log_segment(1)
        for first in range(1, BIG_TXNS + 1, 500):
            write_batch(out, epoch, first, first + 499, size=BIG_OP_BYTES)
        w.qjm.finalize_log_segment(1, BIG_TXNS)

    with Writer(cluster) as reader:
        [stream] = reader.qjm.select_input_streams(1)
        first_source = reader.name_of(stream.sources[0].address)
        index = int(first_source.removeprefix("JN"))

        def inject_fault() -> None:
            if fault == "stop":
                cluster.stop(index)
            else:  # the JN streams its file lazily, 1 MB at a time: damage the last record
                path = finalized_path(cluster, index, 1, BIG_TXNS)
                with path.open("r+b") as f:
                    f.seek(path.stat().st_size - 10)
                    byte = f.read(1)
                    f.seek(-1, 1)
                    f.write(bytes([byte[0] ^ 0xFF]))

        first = stream.sources[0]
        serve = first.get_segment

        def failing_part_way(start: int, end: int | None) -> Iterator[bytes]:
            chunks = serve(start, end)
            yield next(chunks)
            inject_fault()
            yield from chunks

        first.get_segment = failing_part_way  # type: ignore[method-assign]
        txids: list[int] = []
        for op in stream:
            assert op.noop.payload == payload(epoch, op.txid, BIG_OP_BYTES)
            txids.append(op.txid)
        assert txids == list(range(1, BIG_TXNS + 1))
        assert reader.channels[first_source].stream_errors, "the first source did not fail"
        if fault == "corrupt":
            assert isinstance(reader.channels[first_source].stream_errors[0], CorruptSegmentError)
        second_source = reader.name_of(stream.sources[1].address)
        assert reader.channels[second_source].count("get_segment") == 1


def test_corrupt_finalized_copy_is_detected_and_another_journalnode_serves(
    cluster: MiniJournalCluster,
) -> None:
    """A finalized copy with one damaged byte is refused by its JournalNode (DATA_LOSS, seen
    by the reader as CorruptSegmentError) rather than served; the reader gets every op from
    another JournalNode."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
        out = w.qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 20)
        w.qjm.finalize_log_segment(1, 20)

    with Writer(cluster) as reader:
        [stream] = reader.qjm.select_input_streams(1)
        bad = reader.name_of(stream.sources[0].address)
        index = int(bad.removeprefix("JN"))
        path = finalized_path(cluster, index, 1, 20)
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x01
        path.write_bytes(bytes(data))

        assert_ops(list(stream), 1, lambda _: epoch)
        assert len(reader.channels[bad].stream_errors) == 1
        assert isinstance(reader.channels[bad].stream_errors[0], CorruptSegmentError)
        # The JournalNode moved its bad copy aside: it lists and serves it no more, and its
        # sync thread fetches the segment from a peer (docs/protocol.md §10.2).
        journal = cluster.node(index).journal(JID)
        assert journal.stats.corrupt_segments == 1
        assert not path.exists() and path.with_name(path.name + ".corrupt").is_file()
        assert journal.get_edit_log_manifest(NS.cluster_id, 1) == []


# ----------------------------------------------------------------------------- (f) torn tail


@pytest.mark.parametrize("responders", [("JN0", "JN1", "JN2"), ("JN0", "JN1")])
def test_restarted_journalnode_with_torn_tail_takes_part_in_recovery(
    cluster: MiniJournalCluster, responders: tuple[str, ...]
) -> None:
    """A JournalNode that crashed mid-write (its in-progress segment ends in a torn record)
    cuts the torn record when it restarts, reports the shorter segment to prepareRecovery,
    and is synchronized to the full recovered segment: afterwards every responder holds the
    same finalized bytes, nothing acknowledged lost."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
        out = w.qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 10)
        write_batch(out, epoch, 11, 20)
        # the writer crashes: segment 1 stays in progress everywhere

    cluster.stop(0)
    path = inprogress_path(cluster, 0, 1)
    torn_size = path.stat().st_size - 3
    with path.open("r+b") as f:
        f.truncate(torn_size)
    cluster.start(0)
    assert cluster.node(0).journal(JID).segments() == [SegmentState(1, 19, True)]
    assert path.stat().st_size < torn_size  # the torn record was cut off
    assert [op.txid for op in file_ops(path)] == list(range(1, 20))

    with Writer(cluster) as r:
        r.reach_only(*responders)
        assert r.qjm.recover_unfinalized_segments() == 20
        r.settle()
        [accept] = [args for m, args in r.channels["JN0"].calls if m == "accept_recovery"]
        assert r.name_of(accept[2]) != "JN0"  # synchronized from a node holding all of 1-20
        recovery_epoch = r.qjm.epoch

    # With two responders both are in every quorum, so both are finalized. With three, the
    # writer finalizes where acceptRecovery had succeeded when it reached its quorum
    # (qjm.journal_manager), and JN0's, which downloads the segment, may land later: then JN0 keeps
    # the recovered copy in progress, with the decision persisted.
    copies = set()
    finalized_on = []
    for name in responders:
        i = int(name.removeprefix("JN"))
        if finalized_path(cluster, i, 1, 20).exists():
            finalized_on.append(name)
            copies.add(finalized_path(cluster, i, 1, 20).read_bytes())
        else:
            assert name == "JN0" and len(responders) == 3
            assert accepted_in_epoch(cluster, i, 1) == recovery_epoch
            copies.add(inprogress_path(cluster, i, 1).read_bytes())
    assert len(finalized_on) >= 2
    assert len(copies) == 1
    assert_ops(records.decode_ops(copies.pop()[records.HEADER_LEN :]), 1, lambda _: epoch)


# ----------------------------------------------------------------------------- (g) format


def test_format_refuses_journalnodes_holding_data_unless_forced(
    cluster: MiniJournalCluster,
) -> None:
    """HDFS-3077 §4.2: format never erases a journal that holds data by accident; with force
    it erases it on every JournalNode and the next writer starts from an empty journal."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
        assert w.qjm.is_formatted() == dict.fromkeys(cluster.addresses, True)
        out = w.qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 5)
        w.qjm.finalize_log_segment(1, 5)
        with pytest.raises(QuorumException) as info:
            w.qjm.format()
        # format needs every JournalNode, so it fails at the first refusal.
        assert info.value.exceptions
        assert all(isinstance(e, JournalNotEmptyError) for e in info.value.exceptions.values())
        w.settle()
        assert all(finalized_segments(cluster, i) == [(1, 5)] for i in range(3))
        # Forced, but this writer is live: every JournalNode refuses (issue 10 row 3).
        with pytest.raises(QuorumException) as info:
            w.qjm.format(force=True)
        assert all(isinstance(e, JournalInUseError) for e in info.value.exceptions.values())
        assert all(finalized_segments(cluster, i) == [(1, 5)] for i in range(3))
    time.sleep(HOLD)  # the writer is closed; once it has been quiet long enough, force erases
    with Writer(cluster) as w:
        w.qjm.format(force=True)
    assert all(segment_file_names(cluster, i) == [] for i in range(3))
    with Writer(cluster) as w2:
        assert w2.qjm.recover_unfinalized_segments() is None
        assert w2.qjm.epoch == 1


def test_format_asks_a_journalnode_that_is_starting_again_until_it_answers(
    cluster: MiniJournalCluster,
) -> None:
    """Formatting needs every JournalNode. One that cannot be reached yet (still starting, or a
    connection that failed once) is asked again until ``format_timeout``, instead of failing
    the operator's ``hanamenode format`` at once; one that stays away is named in the error."""
    cluster.stop(2)
    with Writer(cluster) as w:
        back = threading.Timer(1.0, cluster.start, args=(2,))
        back.start()
        try:
            started = time.monotonic()
            assert w.qjm.is_formatted() == dict.fromkeys(cluster.addresses, False)
            assert time.monotonic() - started >= 0.5  # it did wait for the third one
        finally:
            back.join()
        w.qjm.format()
        assert w.qjm.is_formatted() == dict.fromkeys(cluster.addresses, True)
    cluster.stop(2)
    with Writer(cluster, timeouts=dataclasses.replace(FAST, format_timeout=1.0)) as w:
        with pytest.raises(QuorumException) as info:
            w.qjm.is_formatted()
        assert list(info.value.exceptions) == [w.loggers["JN2"]]
        assert isinstance(info.value.exceptions[w.loggers["JN2"]], JournalUnavailableError)
        assert len(info.value.successes) == 2


def test_format_sends_again_to_a_journalnode_that_was_unreachable(
    cluster: MiniJournalCluster,
) -> None:
    """Format itself, not only the question before it, asks an unreachable JournalNode again
    until ``format_timeout`` (it can be away between the two, as a JournalNode that had just
    answered a probe was in CI); one that stays away is named, and the others are formatted."""
    with Writer(cluster) as w:
        assert w.qjm.is_formatted() == dict.fromkeys(cluster.addresses, False)
        cluster.stop(2)
        back = threading.Timer(1.0, cluster.start, args=(2,))
        back.start()
        try:
            started = time.monotonic()
            w.qjm.format()
            assert time.monotonic() - started >= 0.5  # it did wait for the third one
        finally:
            back.join()
        assert w.qjm.is_formatted() == dict.fromkeys(cluster.addresses, True)
    cluster.stop(2)
    with Writer(cluster, timeouts=dataclasses.replace(FAST, format_timeout=1.0)) as w:
        with pytest.raises(QuorumException, match="could not format journal") as info:
            w.qjm.format(force=True)
        assert list(info.value.exceptions) == [w.loggers["JN2"]]
        assert isinstance(info.value.exceptions[w.loggers["JN2"]], JournalUnavailableError)
        assert len(info.value.successes) == 2


def test_journalnode_formatted_for_another_cluster_refuses_the_writer(
    cluster: MiniJournalCluster,
) -> None:
    """A JournalNode formatted with another cluster id answers the writer with
    NamespaceMismatchError and is left untouched; with one such node a quorum still writes,
    with two the writer cannot even get an epoch."""
    other = dataclasses.replace(NS, cluster_id="CID-another-cluster")
    with Writer(cluster) as w:
        w.qjm.format()
    with QuorumJournalManager.connect([cluster.addresses[2]], JID, other, FAST) as lone:
        lone.format(force=True)

    with Writer(cluster) as w:
        assert w.qjm.recover_unfinalized_segments() is None
        with pytest.raises(NamespaceMismatchError):
            w.loggers["JN2"].get_journal_state().result(5)
        out = w.qjm.start_log_segment(1)
        write_batch(out, w.qjm.epoch, 1, 3)
        with pytest.raises(NamespaceMismatchError):
            w.loggers["JN2"].start_log_segment(4).result(5)
    journal2 = cluster.node(2).journal(JID)
    assert journal2.namespace_info == other
    assert journal2.last_promised_epoch == 0 and segment_file_names(cluster, 2) == []

    time.sleep(HOLD)  # JN1's writer is gone: force may erase it
    with QuorumJournalManager.connect([cluster.addresses[1]], JID, other, FAST) as lone:
        lone.format(force=True)
    with Writer(cluster) as w, pytest.raises(QuorumException) as info:
        w.qjm.recover_unfinalized_segments()
    mismatched = {
        w.name_of(lg.address)
        for lg, e in info.value.exceptions.items()
        if isinstance(e, NamespaceMismatchError)
    }
    assert mismatched == {"JN1", "JN2"}


# ----------------------------------------------------------------------------- (h) purge


def test_purge_removes_old_finalized_segments_on_every_journalnode(
    cluster: MiniJournalCluster,
) -> None:
    """purge_logs_older_than(N) removes every finalized segment ending below N on every
    JournalNode and keeps the rest readable."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
        for start in (1, 11, 21):
            out = w.qjm.start_log_segment(start)
            write_batch(out, epoch, start, start + 9)
            w.qjm.finalize_log_segment(start, start + 9)
        w.qjm.purge_logs_older_than(21)
        assert all(finalized_segments(cluster, i) == [(21, 30)] for i in range(3))
        streams = w.qjm.select_input_streams(21)
        assert_ops([op for s in streams for op in s], 21, lambda _: epoch)


# ----------------------------------------------------------------------------- (i) five JNs


def test_five_journalnodes_keep_writing_with_two_stopped(tmp_path: Path) -> None:
    """With 5 JournalNodes the writer tolerates 2 down (one before it starts, one mid-segment):
    writes, finalize and reads work on the 3 left, which hold identical copies. A third down
    is one too many."""
    with MiniJournalCluster(5, tmp_path) as cluster, Writer(cluster) as w:
        w.qjm.format()
        cluster.stop(3)
        assert w.qjm.recover_unfinalized_segments() is None
        epoch = w.qjm.epoch
        out = w.qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 10)
        w.settle()  # every JournalNode has what was acknowledged
        cluster.stop(4)
        write_batch(out, epoch, 11, 20)
        w.qjm.finalize_log_segment(1, 20)
        assert_ops([op for s in w.qjm.select_input_streams(1) for op in s], 1, lambda _: epoch)
        copies = {finalized_path(cluster, i, 1, 20).read_bytes() for i in range(3)}
        assert len(copies) == 1
        assert segment_file_names(cluster, 3) == []
        assert segment_file_names(cluster, 4) == ["edits_inprogress_0000000000000000001"]
        assert [op.txid for op in file_ops(inprogress_path(cluster, 4, 1))] == list(range(1, 11))

        out = w.qjm.start_log_segment(21)
        w.settle()  # every JournalNode has what was acknowledged
        cluster.stop(2)
        with pytest.raises(QuorumException):
            write_batch(out, epoch, 21, 22)


# ----------------------------------------------------------------------------- (j) heartbeats


def test_heartbeat_carries_the_committed_txid_to_idle_journalnodes(
    cluster: MiniJournalCluster,
) -> None:
    """An idle writer's heartbeats tell every JournalNode the committed txid (the lag metrics
    and recovery's sanity check rely on it), persisted in current/committed-txid; loggers
    that were busy recently get no heartbeat."""
    with Writer(cluster) as w:
        epoch = start_writer(w)
        out = w.qjm.start_log_segment(1)
        write_batch(out, epoch, 1, 10)
        assert w.qjm.committed_txid == 10
        journals = [cluster.node(i).journal(JID) for i in range(3)]
        assert [j.committed_txid for j in journals] == [0, 0, 0]  # only told on the next call

        w.qjm.heartbeat_idle_loggers(3600)
        w.settle()
        assert all(ch.count("heartbeat") == 0 for ch in w.channels.values())

        w.qjm.heartbeat_idle_loggers(0)
        w.settle()
        assert [j.committed_txid for j in journals] == [10, 10, 10]
        for i in range(3):
            data = (cluster.journal_dir(i, JID) / "committed-txid").read_bytes()
            assert struct.unpack(">Q", data[:8]) == (10,)


def test_heartbeat_fences_through_a_journalnode_that_missed_new_epoch(
    cluster: MiniJournalCluster,
) -> None:
    """A JournalNode that was down when the writer got its epoch learns the epoch from the
    writer's first heartbeat, and from then on refuses the older writer."""
    with Writer(cluster) as old:
        start_writer(old)
        old.settle()  # every JournalNode has what was acknowledged
        cluster.stop(2)
        with Writer(cluster) as new:
            new.qjm.recover_unfinalized_segments()
            cluster.start(2)
            assert cluster.node(2).journal(JID).last_promised_epoch == old.qjm.epoch
            wait_until(
                lambda: new.loggers["JN2"].is_formatted().exception() is None,
                "JN2 to be reachable",
            )
            new.qjm.heartbeat_idle_loggers(0)
            new.settle()
            assert cluster.node(2).journal(JID).last_promised_epoch == new.qjm.epoch
            with pytest.raises(EpochError):
                old.loggers["JN2"].heartbeat().result(5)


# ----------------------------------------------------------------------------- in-progress reads


def test_in_progress_edits_are_read_only_when_a_majority_holds_them_in_one_epoch(
    cluster: MiniJournalCluster,
) -> None:
    """GetJournaledEdits end to end: the open segment's edits come from the JournalNodes'
    caches once a majority holds them; an old writer's tail that only one node got (and that
    the next writer's recovery dropped) is never read, even while that node still caches it."""
    with Writer(cluster) as w1:
        start_writer(w1)
        out = w1.qjm.start_log_segment(1)
        write_batch(out, 1, 1, 10)
        w1.settle()
        assert_ops(w1.qjm.read_journaled_edits(1, 100), 1, lambda t: 1)
        assert_ops(w1.qjm.read_journaled_edits(4, 3), 4, lambda t: 1)
        assert w1.qjm.read_journaled_edits(11, 100) == []

        w1.reach_only("JN0")
        with pytest.raises(QuorumException):
            write_batch(out, 1, 11, 12)  # only JN0 writes 11-12: never acknowledged
        w1.settle()

    with Writer(cluster) as reader:
        assert reader.qjm.read_journaled_edits(11, 100) == []  # on JN0 alone

    with Writer(cluster) as w2:
        w2.reach_only("JN1", "JN2")
        assert w2.qjm.recover_unfinalized_segments() == 10
        assert w2.qjm.epoch == 2
        out = w2.qjm.start_log_segment(11)
        write_batch(out, 2, 11, 15)
        w2.settle()

    with Writer(cluster) as reader:
        # JN0 still caches epoch 1's 11-12; JN1 and JN2 hold epoch 2's 11-15.
        assert_ops(reader.qjm.read_journaled_edits(11, 100), 11, lambda t: 2)
        reader.reach_only("JN0", "JN1")
        assert reader.qjm.read_journaled_edits(11, 100) == []  # one node per epoch: neither
