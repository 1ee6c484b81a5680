"""``GrpcJournalChannel`` and ``AioJournalChannel`` are one implementation of the
JournalChannel calls (``qjm.channel._JournalCalls``) over two gRPC stacks: every call, the
streamed batch included, puts the same bytes on the wire through either, and an answer
becomes the same return value. A recording JournalNode on loopback answers each call with
the message it was built for and keeps what it received."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from conf.rpc import bind, make_server
from journalnode.edits_cache import CachedEdits
from journalnode.errors import JournalUnavailableError
from proto import journal_pb2, journal_pb2_grpc
from proto.values import NamespaceInfo, RemoteEditLog, RequestInfo, SegmentState
from qjm.channel import JOURNAL_RPCS, AioJournalChannel, GrpcJournalChannel

pytestmark = pytest.mark.timeout(60)

NS = NamespaceInfo("CID-wire", 7)
REQ = RequestInfo("ns1", NS.cluster_id, 3, 11)
TIMEOUT = 10.0

# What the recording JournalNode answers, so that each parse has something to turn.
ANSWERS: dict[str, Any] = {
    "IsFormatted": journal_pb2.IsFormattedResponse(is_formatted=True, namespace_info=NS.to_pb()),
    "GetJournalState": journal_pb2.GetJournalStateResponse(
        last_promised_epoch=5, from_url="http://jn1"
    ),
    "NewEpoch": journal_pb2.NewEpochResponse(last_segment_txid=42),
    "GetEditLogManifest": journal_pb2.GetEditLogManifestResponse(
        logs=[RemoteEditLog(1, 9, False).to_pb()], committed_txid=9
    ),
    "GetJournaledEdits": journal_pb2.GetJournaledEditsResponse(
        writer_epoch=3, txn_count=2, records=b"rr"
    ),
    "PrepareRecovery": journal_pb2.PrepareRecoveryResponse(accepted_in_epoch=2),
}

# Every call of the JournalChannel interface but get_segment (a blocking iterator both serve
# through GrpcJournalChannel), with its arguments.
CALLS: list[tuple[str, tuple[Any, ...]]] = [
    ("is_formatted", ("ns1", TIMEOUT)),
    ("format", ("ns1", NS, True, TIMEOUT)),
    ("get_journal_state", ("ns1", NS.cluster_id, TIMEOUT)),
    ("new_epoch", ("ns1", NS, 4, TIMEOUT)),
    ("start_log_segment", (REQ, 10, TIMEOUT)),
    ("journal", (REQ, 10, 10, 2, b"framed", TIMEOUT)),
    ("heartbeat", (REQ, TIMEOUT)),
    ("finalize_log_segment", (REQ, 10, 11, TIMEOUT, b"m" * 16)),
    ("purge_logs", (REQ, 5, TIMEOUT)),
    ("get_edit_log_manifest", ("ns1", NS.cluster_id, 1, True, TIMEOUT)),
    ("get_journaled_edits", ("ns1", NS.cluster_id, 10, 100, TIMEOUT)),
    ("prepare_recovery", (REQ, 10, TIMEOUT)),
    ("accept_recovery", (REQ, SegmentState(10, 11, False), "http://jn2", TIMEOUT)),
]
STREAMED = (REQ, 10, 12, 1, b"batch", TIMEOUT)


class RecordingJournalNode(journal_pb2_grpc.QJournalServiceServicer):
    """Answers every unary call with ``ANSWERS`` (or its empty response) and every streamed
    batch with success; keeps (method, request bytes) in the order received."""

    def __init__(self) -> None:
        self.received: list[tuple[str, bytes]] = []

    def JournalStream(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
        for request in request_iterator:
            self.received.append(("JournalStream", request.SerializeToString()))
            yield journal_pb2.JournalStreamResponse(code=0)


def _unary(name: str, response_class: Any) -> Any:
    def handler(self: RecordingJournalNode, request: Any, context: Any) -> Any:
        self.received.append((name, request.SerializeToString()))
        return ANSWERS.get(name, response_class())

    return handler


for _method in journal_pb2.DESCRIPTOR.services_by_name["QJournalService"].methods:
    if not (_method.client_streaming or _method.server_streaming):
        response = getattr(journal_pb2, _method.output_type.name)
        setattr(RecordingJournalNode, _method.name, _unary(_method.name, response))


@pytest.fixture
def node() -> Iterator[tuple[RecordingJournalNode, str]]:
    servicer = RecordingJournalNode()
    server: grpc.Server = make_server(max_workers=4)
    journal_pb2_grpc.add_QJournalServiceServicer_to_server(servicer, server)
    port = bind(server, "127.0.0.1:0")
    server.start()
    try:
        yield servicer, f"127.0.0.1:{port}"
    finally:
        server.stop(None)


def test_the_calls_cover_the_interface() -> None:
    assert {name for name, _ in CALLS} == JOURNAL_RPCS - {"get_segment"}


def test_both_channels_send_the_same_bytes_and_return_the_same_values(
    node: tuple[RecordingJournalNode, str],
) -> None:
    servicer, address = node
    blocking = GrpcJournalChannel(address)
    try:
        blocking_answers = [getattr(blocking, name)(*args) for name, args in CALLS]
        assert blocking.send_journal(*STREAMED).result(TIMEOUT) is None
    finally:
        blocking.close()
    blocking_wire, servicer.received = servicer.received, []

    async def over_aio() -> list[Any]:
        channel = AioJournalChannel(address)
        try:
            answers = [await getattr(channel, name)(*args) for name, args in CALLS]
            assert await asyncio.wait_for(channel.send_journal(*STREAMED), TIMEOUT) is None
            return answers
        finally:
            await channel.aclose()

    aio_answers = asyncio.run(over_aio())
    assert servicer.received == blocking_wire
    assert [method for method, _ in blocking_wire] == [
        "IsFormatted", "Format", "GetJournalState", "NewEpoch", "StartLogSegment", "Journal",
        "Heartbeat", "FinalizeLogSegment", "PurgeLogs", "GetEditLogManifest",
        "GetJournaledEdits", "PrepareRecovery", "AcceptRecovery", "JournalStream",
    ]
    assert aio_answers == blocking_answers
    answers = dict(zip((name for name, _ in CALLS), blocking_answers, strict=True))
    assert answers["is_formatted"] == (True, NS)
    assert answers["get_journal_state"] == (5, "http://jn1")
    assert answers["new_epoch"] == 42
    assert answers["get_edit_log_manifest"] == ([RemoteEditLog(1, 9, False)], 9)
    assert answers["get_journaled_edits"] == CachedEdits(3, 2, b"rr")
    assert answers["prepare_recovery"].accepted_in_epoch == 2


def test_a_closed_channel_refuses_a_batch_with_its_own_kind_of_future(
    node: tuple[RecordingJournalNode, str],
) -> None:
    _, address = node
    blocking = GrpcJournalChannel(address)
    blocking.close()
    with pytest.raises(JournalUnavailableError, match="closed"):
        blocking.send_journal(*STREAMED).result(TIMEOUT)

    async def over_aio() -> None:
        channel = AioJournalChannel(address)
        await channel.aclose()
        refused = channel.send_journal(*STREAMED)
        assert isinstance(refused, asyncio.Future)
        with pytest.raises(JournalUnavailableError, match="closed"):
            await refused

    asyncio.run(over_aio())
