"""QJournalService over real gRPC on loopback, against in-process JournalNodeServers.

Each JournalError crosses the wire as its status code (checked on the raw stub) and comes
back from ``GrpcJournalChannel`` as the same exception class, with a message that names the
problem: malformed requests are INVALID_ARGUMENT, a stale epoch FAILED_PRECONDITION/EpochError,
a foreign cluster id NamespaceMismatchError, a corrupt finalized segment DATA_LOSS naming
file and offset. acceptRecovery downloads a segment from another JournalNode over gRPC.
Batches pipelined on a JournalStream are answered in order, each with exactly the exception
the unary Journal call raises for the same request.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import grpc
import pytest

from journalnode.errors import (
    CorruptSegmentError,
    EpochError,
    InvalidRequestError,
    JournalNotFormattedError,
    JournalOutOfSyncError,
    JournalUnavailableError,
    NamespaceMismatchError,
)
from journalnode.file_storage import finalized_name, in_progress_name
from journalnode.server import JournalNodeServer
from proto import edits_pb2, journal_pb2, journal_pb2_grpc, records
from proto.values import NamespaceInfo, RemoteEditLog, RequestInfo, SegmentState
from qjm.channel import GrpcJournalChannel

JID = "ns1"
NS = NamespaceInfo("CID-rpc", 77)
TIMEOUT = 10.0


def noop(txid: int) -> edits_pb2.EditOp:
    return edits_pb2.EditOp(txid=txid, noop=edits_pb2.NoOp(payload=f"edit {txid}".encode()))


def batch(first: int, count: int) -> bytes:
    return records.frame_ops(noop(t) for t in range(first, first + count))


class Client:
    """A writer over one GrpcJournalChannel, plus the raw stub to see status codes."""

    def __init__(self, address: str) -> None:
        self.channel = GrpcJournalChannel(address)
        self._raw = grpc.insecure_channel(address)
        self.stub = journal_pb2_grpc.QJournalServiceStub(self._raw)
        self.epoch = 0
        self.serial = 0

    def req(self, epoch: int | None = None) -> RequestInfo:
        self.serial += 1
        return RequestInfo(JID, NS.cluster_id, self.epoch if epoch is None else epoch, self.serial)

    def setup_writer(self, epoch: int = 1, segment: int = 1) -> None:
        """Format, promise ``epoch``, open a segment at ``segment``."""
        self.channel.format(JID, NS, False, TIMEOUT)
        self.new_epoch(epoch)
        self.channel.start_log_segment(self.req(), segment, TIMEOUT)

    def new_epoch(self, epoch: int) -> int | None:
        last = self.channel.new_epoch(JID, NS, epoch, TIMEOUT)
        self.epoch, self.serial = epoch, 0
        return last

    def journal(self, segment: int, first: int, count: int, framed: bytes | None = None) -> None:
        framed = batch(first, count) if framed is None else framed
        self.channel.journal(self.req(), segment, first, count, framed, TIMEOUT)

    def send(
        self, segment: int, first: int, count: int, framed: bytes | None = None
    ) -> Future[None]:
        """The same batch as ``journal``, on the channel's JournalStream."""
        framed = batch(first, count) if framed is None else framed
        return self.channel.send_journal(self.req(), segment, first, count, framed, TIMEOUT)

    def raw_journal(self, journal_id: str, first: int, count: int, framed: bytes) -> None:
        req = self.req().to_pb()
        req.journal_id = journal_id
        request = journal_pb2.JournalRequest(
            req_info=req, segment_txid=1, first_txid=first, num_txns=count, records=framed
        )
        self.stub.Journal(request, timeout=TIMEOUT)

    def close(self) -> None:
        self.channel.close()
        self._raw.close()


@pytest.fixture
def jn(tmp_path: Path) -> Iterator[JournalNodeServer]:
    with JournalNodeServer(tmp_path / "jn0", "127.0.0.1:0") as server:
        yield server


@pytest.fixture
def client(jn: JournalNodeServer) -> Iterator[Client]:
    c = Client(jn.address)
    try:
        yield c
    finally:
        c.close()


def rpc_error(call: Callable[[], Any]) -> Any:
    """The grpc.RpcError (also a grpc.Call: code(), details()) that ``call`` raises."""
    with pytest.raises(grpc.RpcError) as info:
        call()
    return info.value


# ---------------------------------------------------------------------------------------------
# Malformed requests: INVALID_ARGUMENT, naming the problem
# ---------------------------------------------------------------------------------------------


def test_garbage_records_are_invalid_argument(client: Client) -> None:
    client.setup_writer()
    garbage = b"\x00\x00\x00\x05\xde\xad\xbe\xefhello"  # a frame whose checksum is wrong
    err = rpc_error(lambda: client.raw_journal(JID, 1, 1, garbage))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert err.details() == "malformed batch 1-1: record checksum mismatch at offset 0"

    with pytest.raises(InvalidRequestError, match="implausible record length"):
        client.journal(1, 1, 1, b"\xff" * 16)
    # Nothing was written: the batch can still be sent whole.
    client.journal(1, 1, 3)
    logs, _ = client.channel.get_edit_log_manifest(JID, NS.cluster_id, 0, True, TIMEOUT)
    assert logs == [RemoteEditLog(1, 3, True)]


def test_count_that_disagrees_with_records_is_invalid_argument(client: Client) -> None:
    client.setup_writer()
    err = rpc_error(lambda: client.raw_journal(JID, 1, 3, batch(1, 2)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "2 records where 3 were announced" in err.details()

    with pytest.raises(InvalidRequestError, match="txid 5 where 2 was expected"):
        client.journal(1, 1, 2, batch(1, 1) + batch(5, 1))
    with pytest.raises(InvalidRequestError, match="at least one transaction"):
        client.journal(1, 1, 0, b"")


@pytest.mark.parametrize("journal_id", ["../x", "a/b", "..", "", "in_use.lock"])
def test_unsafe_journal_id_is_invalid_argument(
    client: Client, jn: JournalNodeServer, journal_id: str
) -> None:
    err = rpc_error(
        lambda: client.stub.IsFormatted(
            journal_pb2.IsFormattedRequest(journal_id=journal_id), timeout=TIMEOUT
        )
    )
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert f"invalid journal id {journal_id!r}" in err.details()
    err = rpc_error(lambda: client.raw_journal(journal_id, 1, 1, batch(1, 1)))
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT
    with pytest.raises(InvalidRequestError, match="invalid journal id"):
        client.channel.format(journal_id, NS, False, TIMEOUT)
    # Nothing was created outside (or inside) the storage root.
    assert not (jn.root.parent / "x").exists()
    assert sorted(p.name for p in jn.root.iterdir()) == ["in_use.lock"]


# ---------------------------------------------------------------------------------------------
# Verdicts of the Journal, mapped back to the same exception classes
# ---------------------------------------------------------------------------------------------


def test_stale_epoch_is_failed_precondition_and_epoch_error(client: Client) -> None:
    client.setup_writer(epoch=1)
    client.journal(1, 1, 2)
    newer = Client(client.channel.address)
    try:
        newer.new_epoch(2)
    finally:
        newer.close()

    request = journal_pb2.HeartbeatRequest(req_info=client.req().to_pb())
    err = rpc_error(lambda: client.stub.Heartbeat(request, timeout=TIMEOUT))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "epoch 1 is less than the last promised epoch 2" in err.details()

    with pytest.raises(EpochError, match="less than the last promised epoch 2"):
        client.journal(1, 3, 1)
    with pytest.raises(EpochError, match="proposed epoch 2 <= last promise 2"):
        client.new_epoch(2)


def test_wrong_cluster_id_is_namespace_mismatch(client: Client) -> None:
    client.channel.format(JID, NS, False, TIMEOUT)
    with pytest.raises(NamespaceMismatchError, match="belongs to cluster 'CID-rpc'"):
        client.channel.get_journal_state(JID, "CID-other", TIMEOUT)
    with pytest.raises(NamespaceMismatchError):
        client.channel.new_epoch(JID, NamespaceInfo("CID-other", 77), 1, TIMEOUT)
    with pytest.raises(NamespaceMismatchError):
        client.channel.get_edit_log_manifest(JID, "CID-other", 0, True, TIMEOUT)
    err = rpc_error(
        lambda: client.stub.GetJournalState(
            journal_pb2.GetJournalStateRequest(journal_id=JID, cluster_id="CID-other"),
            timeout=TIMEOUT,
        )
    )
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED


def test_the_read_index_question_is_answered_while_a_sync_holds_the_journal(
    client: Client, jn: JournalNodeServer
) -> None:
    """A linearizable read on the active asks every JournalNode its promised epoch. The
    answer must not wait behind a batch's fdatasync, which holds the Journal's lock (a slow
    disk on one JournalNode would otherwise slow every read): it comes from the event loop.
    A call that needs the lock still waits for it."""
    client.setup_writer(epoch=3)
    journal = jn.journals()[JID]
    with journal._lock:  # what a batch's write and fdatasync hold
        assert client.channel.get_journal_state(JID, NS.cluster_id, 2.0)[0] == 3
        with pytest.raises(NamespaceMismatchError):
            client.channel.get_journal_state(JID, "CID-other", 2.0)
        with pytest.raises(JournalUnavailableError, match="DEADLINE_EXCEEDED"):
            client.channel.new_epoch(JID, NS, 4, 0.5)
    # The timed-out NewEpoch(4) still runs once the lock is free; a later epoch wins anyway.
    client.new_epoch(5)
    assert client.channel.get_journal_state(JID, NS.cluster_id, TIMEOUT)[0] == 5


def test_is_formatted_of_an_unknown_journal_creates_nothing(
    client: Client, jn: JournalNodeServer
) -> None:
    before = sorted(p.name for p in jn.root.iterdir())
    assert client.channel.is_formatted("mistyped-journal", TIMEOUT) == (False, None)
    assert sorted(p.name for p in jn.root.iterdir()) == before
    assert "mistyped-journal" not in jn.journals()


@pytest.mark.parametrize(
    "ns, problem",
    [
        (NamespaceInfo("CID-rpc", 0), "invalid namespace id 0"),
        (NamespaceInfo("CID\x1b[2J", 77), "invalid cluster id"),
        (NamespaceInfo(" CID", 77), "invalid cluster id"),
    ],
)
def test_a_refused_format_creates_nothing(
    client: Client, jn: JournalNodeServer, ns: NamespaceInfo, problem: str
) -> None:
    before = sorted(p.name for p in jn.root.iterdir())
    with pytest.raises(InvalidRequestError, match=problem):
        client.channel.format("new-journal", ns, False, TIMEOUT)
    assert sorted(p.name for p in jn.root.iterdir()) == before
    assert "new-journal" not in jn.journals()


def test_unformatted_journal(client: Client) -> None:
    assert client.channel.is_formatted(JID, TIMEOUT) == (False, None)
    with pytest.raises(JournalNotFormattedError, match=f"journal {JID!r} is not formatted"):
        client.channel.get_journal_state(JID, NS.cluster_id, TIMEOUT)
    with pytest.raises(JournalNotFormattedError):
        client.new_epoch(1)
    client.channel.format(JID, NS, False, TIMEOUT)
    assert client.channel.is_formatted(JID, TIMEOUT) == (True, NS)


def test_corrupt_finalized_segment_is_data_loss_naming_file_and_offset(
    client: Client, jn: JournalNodeServer
) -> None:
    client.setup_writer()
    client.journal(1, 1, 10)
    client.journal(1, 11, 10)
    client.channel.finalize_log_segment(client.req(), 1, 20, TIMEOUT)
    path = jn.root / JID / "current" / finalized_name(1, 20)
    data = bytearray(path.read_bytes())
    # Flip one byte inside the body of the 13th record.
    record_13 = records.HEADER_LEN + len(batch(1, 12))
    data[record_13 + records.FRAME_LEN + 2] ^= 0x40
    path.write_bytes(bytes(data))

    with pytest.raises(CorruptSegmentError) as info:
        b"".join(client.channel.get_segment(JID, NS.cluster_id, 1, None, TIMEOUT))
    message = str(info.value)
    assert str(path) in message
    assert f"byte offset {record_13}" in message
    assert "checksum mismatch" in message

    assert CorruptSegmentError.code is grpc.StatusCode.DATA_LOSS
    # The bad copy is moved aside, no longer listed or served: the sync thread fetches the
    # segment from a peer (docs/protocol.md §10.2).
    assert not path.exists() and path.with_name(path.name + ".corrupt").is_file()
    assert jn.journal(JID).stats.corrupt_segments == 1
    request = journal_pb2.GetSegmentRequest(journal_id=JID, cluster_id=NS.cluster_id, start_txid=1)
    err = rpc_error(lambda: b"".join(c.data for c in client.stub.GetSegment(request)))
    assert err.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "no segment starting at txid 1" in (err.details() or "")
    logs, _ = client.channel.get_edit_log_manifest(JID, NS.cluster_id, 1, False, TIMEOUT)
    assert logs == []


# ---------------------------------------------------------------------------------------------
# acceptRecovery downloads from another JournalNode
# ---------------------------------------------------------------------------------------------


def test_accept_recovery_downloads_the_segment_from_another_journalnode(tmp_path: Path) -> None:
    with (
        JournalNodeServer(tmp_path / "source", "127.0.0.1:0") as source,
        JournalNodeServer(tmp_path / "behind", "127.0.0.1:0") as behind,
    ):
        a, b = Client(source.address), Client(behind.address)
        try:
            # Epoch 1 wrote txids 1-30 to the source, but only 1-4 reached the other node.
            a.setup_writer(epoch=1)
            b.setup_writer(epoch=1)
            a.journal(1, 1, 4)
            b.journal(1, 1, 4)
            a.journal(1, 5, 26)

            # A new writer, epoch 2, recovers segment 1: the source has the longer copy.
            for c in (a, b):
                assert c.new_epoch(2) == 1
            prepared = a.channel.prepare_recovery(a.req(), 1, TIMEOUT)
            chosen = prepared.segment_state
            assert chosen is not None
            assert (chosen.start_txid, chosen.end_txid, chosen.is_in_progress) == (1, 30, True)
            assert chosen.md5 == hashlib.md5(batch(1, 30)).digest()
            behind_before = b.channel.prepare_recovery(b.req(), 1, TIMEOUT).segment_state
            assert behind_before == SegmentState(1, 4, True)

            b.channel.accept_recovery(b.req(), chosen, source.address, TIMEOUT)

            after = b.channel.prepare_recovery(b.req(), 1, TIMEOUT)
            assert after.segment_state == chosen
            assert after.segment_state is not None and after.segment_state.md5 == chosen.md5
            assert after.accepted_in_epoch == 2
            name = in_progress_name(1)
            copied = (behind.root / JID / "current" / name).read_bytes()
            assert copied == (source.root / JID / "current" / name).read_bytes()
            paxos = behind.root / JID / "current" / "paxos" / "1"
            assert paxos.is_file()

            for c in (a, b):
                c.channel.finalize_log_segment(c.req(), 1, 30, TIMEOUT, chosen.md5)
            assert not paxos.exists()  # finalizing is the decision; the paxos file is moot
            finalized = b"".join(b.channel.get_segment(JID, NS.cluster_id, 1, None, TIMEOUT))
            assert finalized == records.SEGMENT_HEADER + batch(1, 30)
        finally:
            a.close()
            b.close()


def test_accept_recovery_from_an_unreachable_source_fails_without_changes(
    tmp_path: Path,
) -> None:
    with JournalNodeServer(tmp_path / "jn", "127.0.0.1:0") as jn:
        c = Client(jn.address)
        try:
            c.setup_writer(epoch=1)
            c.journal(1, 1, 3)
            c.new_epoch(2)
            wanted = SegmentState(1, 9, True)
            with pytest.raises(JournalUnavailableError) as info:
                c.channel.accept_recovery(c.req(), wanted, "127.0.0.1:1", TIMEOUT)
            assert "downloading segment 1-9 of journal 'ns1' from 127.0.0.1:1 failed" in str(
                info.value
            )
            state = c.channel.prepare_recovery(c.req(), 1, TIMEOUT)
            assert state.segment_state == SegmentState(1, 3, True)
            assert state.accepted_in_epoch is None
        finally:
            c.close()


# ---------------------------------------------------------------------------------------------
# JournalStream: the unary Journal's checks and answers, pipelined
# ---------------------------------------------------------------------------------------------


def test_journal_stream_answers_pipelined_batches_in_order(client: Client) -> None:
    client.setup_writer()
    rng = random.Random(5)
    sent: list[bytes] = []
    futures: list[Future[None]] = []
    answered: list[int] = []

    def note(i: int) -> Callable[[Future[None]], None]:
        return lambda _: answered.append(i)

    first = 1
    for i in range(200):  # none waits for the previous answer
        count = rng.randint(1, 20)
        sent.append(batch(first, count))
        futures.append(client.send(1, first, count, sent[-1]))
        futures[-1].add_done_callback(note(i))
        first += count
    for future in futures:
        assert future.result(TIMEOUT) is None
    assert answered == list(range(200))
    segment = b"".join(client.channel.get_segment(JID, NS.cluster_id, 1, first - 1, TIMEOUT))
    assert segment == records.SEGMENT_HEADER + b"".join(sent)


def _wrong_cluster(c: Client) -> dict[str, Any]:
    req = c.req()
    return {"req": RequestInfo(req.journal_id, "CID-other", req.epoch, req.ipc_serial_number)}


def _unformatted_journal(c: Client) -> dict[str, Any]:
    req = c.req()
    return {"req": RequestInfo("other", req.cluster_id, req.epoch, req.ipc_serial_number)}


def _unsafe_journal_id(c: Client) -> dict[str, Any]:
    req = c.req()
    return {"req": RequestInfo("../x", req.cluster_id, req.epoch, req.ipc_serial_number)}


# Each case: the Journal arguments that break one rule (a fresh IPC serial each time), and
# the exception class both forms of the call must raise.
STREAM_ERROR_CASES: dict[str, tuple[Callable[[Client], dict[str, Any]], type[Exception]]] = {
    "gap": (lambda c: {"first": 9}, JournalOutOfSyncError),
    "garbage": (lambda c: {"framed": b"\xff" * 16}, InvalidRequestError),
    "count-mismatch": (lambda c: {"count": 3}, InvalidRequestError),
    "no-transactions": (lambda c: {"count": 0, "framed": b""}, InvalidRequestError),
    "wrong-cluster": (_wrong_cluster, NamespaceMismatchError),
    "unformatted-journal": (_unformatted_journal, JournalNotFormattedError),
    "unsafe-journal-id": (_unsafe_journal_id, InvalidRequestError),
    "old-ipc-serial": (
        lambda c: {"req": RequestInfo(JID, NS.cluster_id, c.epoch, 0)},
        JournalOutOfSyncError,
    ),
}


@pytest.mark.parametrize("case", sorted(STREAM_ERROR_CASES))
def test_journal_stream_raises_what_the_unary_call_raises_and_goes_on(
    client: Client, case: str
) -> None:
    client.setup_writer()
    client.journal(1, 1, 2)
    change, expected = STREAM_ERROR_CASES[case]

    def arguments() -> tuple[RequestInfo, int, int, int, bytes, float]:
        call = {"req": client.req(), "first": 3, "count": 1, "framed": None, **change(client)}
        framed = batch(call["first"], 1) if call["framed"] is None else call["framed"]
        return call["req"], 1, call["first"], call["count"], framed, TIMEOUT

    with pytest.raises(expected) as unary:
        client.channel.journal(*arguments())
    streamed = client.channel.send_journal(*arguments()).exception(TIMEOUT)
    assert type(streamed) is expected
    assert str(streamed) == str(unary.value)
    # The stream is still usable: the next good batch is written.
    client.send(1, 3, 4).result(TIMEOUT)
    logs, _ = client.channel.get_edit_log_manifest(JID, NS.cluster_id, 0, True, TIMEOUT)
    assert logs == [RemoteEditLog(1, 6, True)]


def test_journal_stream_of_a_fenced_writer_raises_epoch_error(client: Client) -> None:
    client.setup_writer(epoch=1)
    client.send(1, 1, 2).result(TIMEOUT)
    newer = Client(client.channel.address)
    try:
        newer.new_epoch(2)
    finally:
        newer.close()
    with pytest.raises(EpochError) as unary:
        client.journal(1, 3, 1)
    streamed = client.send(1, 3, 1).exception(TIMEOUT)
    assert type(streamed) is EpochError
    assert str(streamed) == str(unary.value)
