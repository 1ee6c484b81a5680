"""The JournalNodes' edits wire (docs/protocol.md §13.8): a writer's batches on a plain
asyncio connection instead of a gRPC JournalStream, with the same outcomes.

In-process ``JournalNodeServer``s on loopback, an ``AioJournalChannel`` (the NameNode's
``AsyncLogger`` path) on the test's event loop, and raw sockets for what no writer sends.
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from conf.guard import Role
from conf.settings import RPCSettings
from conf.wire import KIND_JOURNAL, KIND_SUBSCRIBE, client_ssl_context, frame
from hadev.minicluster import MiniJournalCluster
from hadev.pki import make_pki
from journalnode.errors import AccessDeniedError, EpochError, NamespaceMismatchError
from journalnode.server import JournalNodeServer
from proto import journal_pb2
from proto.values import NamespaceInfo, RemoteEditLog, RequestInfo
from qjm.channel import AioJournalChannel
from qjm.wire import WireJournalStream, WireStateCalls
from tests.cluster.test_edit_subscription import PushReader, wait_until
from tests.cluster.test_journal_stream import batch
from tests.cluster.test_qjm_cluster import HOLD, assert_ops, start_writer, write_batch
from tests.cluster.test_qjm_cluster import NS as QJM_NS
from tests.cluster.test_qjm_cluster import Writer as QjmWriter

pytestmark = pytest.mark.timeout(60)

JID = "ns1"
NS = NamespaceInfo("CID-wire", 5)
NS_CLUSTER = QJM_NS.cluster_id  # the journal the QJM writer formats
TIMEOUT = 10.0


def unused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Writer:
    """Epoch 2, segment 1 open, on one AioJournalChannel; ``learn`` asks GetJournalState,
    which tells the channel the edits wire's port."""

    def __init__(self, address: str, tls: object = None) -> None:
        self.channel = AioJournalChannel(address, tls)  # type: ignore[arg-type]
        self.serial = 0
        self.next_txid = 1

    def req(self, epoch: int = 2) -> RequestInfo:
        self.serial += 1
        return RequestInfo(JID, NS.cluster_id, epoch, self.serial)

    async def open(self) -> None:
        await self.channel.format(JID, NS, True, TIMEOUT)
        await self.channel.new_epoch(JID, NS, 2, TIMEOUT)
        await self.channel.start_log_segment(self.req(), 1, TIMEOUT)

    async def learn(self) -> int:
        await self.channel.get_journal_state(JID, NS.cluster_id, TIMEOUT)
        return self.channel.edits_port

    def send(self, count: int = 1, epoch: int = 2) -> asyncio.Future[None]:
        first = self.next_txid
        future: asyncio.Future[None] = self.channel.send_journal(
            self.req(epoch), 1, first, count, batch(first, count), TIMEOUT
        )
        if epoch == 2:
            self.next_txid += count
        return future

    async def manifest(self) -> list[RemoteEditLog]:
        logs, _ = await self.channel.get_edit_log_manifest(JID, NS.cluster_id, 0, True, TIMEOUT)
        return list(logs)


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(1, tmp_path) as c:
        yield c


def test_batches_go_on_the_wire_in_order_and_a_refused_one_is_answered_with_its_error(
    cluster: MiniJournalCluster,
) -> None:
    node = cluster.node(0)

    async def scenario() -> None:
        writer = Writer(cluster.addresses[0])
        await writer.open()
        assert await writer.learn() == node.edits_port != 0
        sent = [writer.send(count) for count in (1, 7, 1, 30) * 10]
        assert await asyncio.gather(*sent) == [None] * len(sent)
        assert isinstance(writer.channel._stream, WireJournalStream)
        assert writer.channel._stream.on_wire
        assert node.edits_wire is not None and len(node.edits_wire.connections) == 1
        # A batch of a deposed writer's epoch gets the unary call's own error, and the
        # connection goes on carrying the next batch.
        with pytest.raises(EpochError, match="less than the last promised epoch 2"):
            await writer.send(1, epoch=1)
        await writer.send(2)
        assert len(node.edits_wire.connections) == 1
        await writer.channel.finalize_log_segment(writer.req(), 1, writer.next_txid - 1, TIMEOUT)
        assert await writer.manifest() == [RemoteEditLog(1, 392, False)]
        await writer.channel.aclose()

    asyncio.run(scenario())


def test_a_wire_that_cannot_be_reached_falls_back_to_the_journalstream(
    cluster: MiniJournalCluster,
) -> None:
    node = cluster.node(0)
    closed_port = unused_port()

    async def scenario() -> None:
        writer = Writer(cluster.addresses[0])
        await writer.open()
        writer.channel.edits_port = closed_port
        sent = [writer.send(3) for _ in range(20)]
        assert await asyncio.gather(*sent) == [None] * 20
        stream = writer.channel._stream
        assert isinstance(stream, WireJournalStream) and not stream.on_wire
        assert node.edits_wire is not None and not node.edits_wire.connections
        await writer.channel.finalize_log_segment(writer.req(), 1, 60, TIMEOUT)
        assert await writer.manifest() == [RemoteEditLog(1, 60, False)]
        await writer.channel.aclose()

    asyncio.run(scenario())


def test_a_journalnode_without_a_wire_announces_none_and_batches_take_the_journalstream(
    tmp_path: Path,
) -> None:
    with JournalNodeServer(tmp_path / "jn", "127.0.0.1:0", edits_address=None) as node:
        assert node.edits_port == 0

        async def scenario() -> None:
            writer = Writer(node.address)
            await writer.open()
            assert await writer.learn() == 0
            await writer.send(4)
            assert not isinstance(writer.channel._stream, WireJournalStream)
            await writer.channel.aclose()

        asyncio.run(scenario())


def _answers(sock: socket.socket) -> list[journal_pb2.JournalStreamResponse]:
    """Every answer frame until the JournalNode closes the connection."""
    data = b""
    sock.settimeout(TIMEOUT)
    while chunk := sock.recv(65536):
        data += chunk
    out = []
    while data:
        (length,) = struct.unpack(">I", data[:4])
        out.append(journal_pb2.JournalStreamResponse.FromString(data[4 : 4 + length]))
        data = data[4 + length :]
    return out


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (struct.pack(">I", 1 << 30), "above the limit"),
        (frame(b"\xff\xff\xff"), "undecodable"),
        (
            frame(
                journal_pb2.JournalRequest(
                    req_info=journal_pb2.RequestInfo(journal_id="x" * 5000)
                ).SerializeToString()
            ),
            "journal_id",
        ),
    ],
    ids=["oversized-frame", "undecodable", "out-of-bounds"],
)
def test_bad_bytes_get_invalid_argument_naming_what_was_wrong_and_the_connection_ends(
    cluster: MiniJournalCluster, payload: bytes, why: str
) -> None:
    node = cluster.node(0)
    with socket.create_connection(("127.0.0.1", node.edits_port), TIMEOUT) as sock:
        sock.sendall(KIND_JOURNAL + payload)
        answers = _answers(sock)
    assert len(answers) == 1
    assert answers[0].code == 3  # INVALID_ARGUMENT
    assert why in answers[0].details
    assert node.edits_wire is not None and node.edits_wire.refused == 1


def test_with_mutual_tls_only_the_namenode_role_may_write(tmp_path: Path) -> None:
    pki = make_pki(
        tmp_path / "pki",
        {
            "jn": [Role.JOURNALNODE],
            "nn": [Role.NAMENODE, Role.ADMIN],  # admin: to Format
            "client": [Role.CLIENT],
        },
    )
    with JournalNodeServer(tmp_path / "jn", "127.0.0.1:0", tls=pki.tls("jn")) as node:

        async def scenario() -> None:
            writer = Writer(node.address, pki.tls("nn"))
            await writer.open()
            assert await writer.learn() == node.edits_port
            await writer.send(2)
            stream = writer.channel._stream
            assert isinstance(stream, WireJournalStream) and stream.on_wire
            await writer.channel.aclose()

            # A client certificate reaches the wire (the CA signed it) but may not write.
            stranger = AioJournalChannel(node.address, pki.tls("client"))
            stranger.edits_port = node.edits_port
            with pytest.raises(AccessDeniedError, match="needs the role namenode"):
                await stranger.send_journal(
                    RequestInfo(JID, NS.cluster_id, 2, 99), 1, 3, 1, batch(3, 1), TIMEOUT
                )
            await stranger.aclose()

            # Nor subscribe: that needs the namenode or admin role.
            context = client_ssl_context(pki.tls("client"))
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", node.edits_port, ssl=context, server_hostname="127.0.0.1"
            )
            request = journal_pb2.SubscribeEditsRequest(
                journal_id=JID, cluster_id=NS.cluster_id, since_txid=1
            )
            writer.write(KIND_SUBSCRIBE + frame(request.SerializeToString()))
            (length,) = struct.unpack(">I", await reader.readexactly(4))
            push = journal_pb2.WirePush.FromString(await reader.readexactly(length))
            assert push.refused.code == 7  # PERMISSION_DENIED
            assert "needs the role admin or namenode" in push.refused.details
            assert await reader.read() == b""  # and the connection is closed
            writer.close()

        asyncio.run(scenario())
        assert node.edits_wire is not None and node.edits_wire.refused == 2


# ---------------------------------------------------------------------- subscriptions


@pytest.fixture
def three(tmp_path: Path) -> Iterator[MiniJournalCluster]:
    with MiniJournalCluster(3, tmp_path, writer_hold_seconds=HOLD) as c:
        yield c


def test_a_reader_follows_the_log_on_the_wire(three: MiniJournalCluster) -> None:
    with QjmWriter(three) as w:
        # Formatted before the reader starts: a reader that asks an unformatted journal for
        # its wire is refused and subscribes on gRPC (correct, but not what is tested here).
        start_writer(w)
        with PushReader(three) as reader:
            wait_until(lambda: len(reader.subscriber.subscribed) == 3, "three subscriptions")
            assert reader.subscriber.on_wire == set(three.addresses)
            out = w.qjm.start_log_segment(1)
            for first in range(1, 200, 10):
                write_batch(out, 1, first, first + 9)
            wait_until(lambda: reader.last == 200, "txids 1-200 applied from pushes")
            assert_ops(reader.applied, 1, lambda t: 1)
    pushed = sum(
        node.existing_journal(JID).stats.edits_pushed  # type: ignore[union-attr]
        for node in (three.node(i) for i in range(3))
    )
    assert pushed >= 400  # at least a majority pushed every txid


def test_a_reader_that_cannot_reach_the_wire_subscribes_on_grpc(
    three: MiniJournalCluster,
) -> None:
    closed_port = unused_port()
    reader = PushReader(three)
    for address in three.addresses:
        reader.subscriber._wire_ports[address] = closed_port
    with QjmWriter(three) as w:
        start_writer(w)  # formatted first: the reader's first subscription is held
        with reader:
            wait_until(lambda: len(reader.subscriber.subscribed) == 3, "three subscriptions")
            assert reader.subscriber.on_wire == set()
            out = w.qjm.start_log_segment(1)
            write_batch(out, 1, 1, 10)
            wait_until(lambda: reader.last == 10, "txids 1-10 applied from gRPC pushes")


def _wire_subscribe(port: int, since: int, cluster_id: str, journal_id: str = JID) -> Any:
    """The first WirePush a raw subscription on the wire gets."""
    request = journal_pb2.SubscribeEditsRequest(
        journal_id=journal_id, cluster_id=cluster_id, since_txid=since
    )
    with socket.create_connection(("127.0.0.1", port), TIMEOUT) as sock:
        sock.settimeout(TIMEOUT)
        sock.sendall(KIND_SUBSCRIBE + frame(request.SerializeToString()))
        data = b""
        while len(data) < 4 or len(data) < 4 + struct.unpack(">I", data[:4])[0]:
            chunk = sock.recv(65536)
            assert chunk, "the JournalNode closed the subscription without a frame"
            data += chunk
    (length,) = struct.unpack(">I", data[:4])
    return journal_pb2.WirePush.FromString(data[4 : 4 + length])


def test_a_subscription_on_the_wire_checks_its_request(three: MiniJournalCluster) -> None:
    with QjmWriter(three) as w:
        start_writer(w)
    port = three.node(0).edits_port
    cases = [
        ((1, "other-journal", NS_CLUSTER), 9, "journal 'other-journal' is not formatted"),
        ((0, JID, NS_CLUSTER), 3, "since_txid must be positive, got 0"),
        ((1, JID, "CID-other"), 7, "request is for cluster 'CID-other'"),
    ]
    for (since, jid, cid), code, message in cases:
        push = _wire_subscribe(port, since, cid, jid)
        assert push.WhichOneof("kind") == "refused", (since, jid, cid)
        assert push.refused.code == code, push.refused
        assert message in push.refused.details
    held = _wire_subscribe(port, 1, NS_CLUSTER)
    assert held.WhichOneof("kind") == "subscribed_since" and held.subscribed_since == 1


# ---------------------------------------------------------------------- the read-index question


def test_the_read_index_question_goes_on_the_wire_and_sees_a_new_promise(
    cluster: MiniJournalCluster,
) -> None:
    node = cluster.node(0)

    async def scenario() -> None:
        writer = Writer(cluster.addresses[0])
        await writer.open()
        assert await writer.learn() == node.edits_port  # the first answer comes from gRPC
        epoch, from_url = await writer.channel.get_journal_state(JID, NS.cluster_id, TIMEOUT)
        assert (epoch, from_url) == (2, node.address)
        wire = writer.channel._state_wire
        assert isinstance(wire, WireStateCalls) and wire.on_wire
        # Another writer's promise is seen by the next question on the wire.
        rival = Writer(cluster.addresses[0])
        await rival.channel.new_epoch(JID, NS, 3, TIMEOUT)
        await rival.channel.aclose()
        assert (await writer.channel.get_journal_state(JID, NS.cluster_id, TIMEOUT))[0] == 3
        # An error is the unary call's own, and the connection goes on.
        with pytest.raises(NamespaceMismatchError, match="CID-other"):
            await writer.channel.get_journal_state(JID, "CID-other", TIMEOUT)
        assert (await writer.channel.get_journal_state(JID, NS.cluster_id, TIMEOUT))[0] == 3
        assert writer.channel._state_wire is wire and wire.on_wire
        await writer.channel.aclose()

    asyncio.run(scenario())


def test_the_read_index_question_falls_back_to_grpc(cluster: MiniJournalCluster) -> None:
    closed_port = unused_port()

    async def scenario() -> None:
        writer = Writer(cluster.addresses[0])
        await writer.open()
        writer.channel.edits_port = closed_port
        answers = await asyncio.gather(
            *(writer.channel.get_journal_state(JID, NS.cluster_id, TIMEOUT) for _ in range(5))
        )
        assert [epoch for epoch, _ in answers] == [2] * 5
        wire = writer.channel._state_wire
        assert isinstance(wire, WireStateCalls) and not wire.on_wire
        # The gRPC answers announced the real port again: the next wire is opened there.
        assert writer.channel.edits_port == cluster.node(0).edits_port
        await writer.channel.aclose()

    asyncio.run(scenario())


def test_an_idle_flood_without_a_certificate_neither_blocks_the_writer_nor_stays(
    tmp_path: Path,
) -> None:
    """Connections that never complete their TLS handshake are not counted against the
    wire's limit (only a handshake's end makes a connection), and they are closed after the
    handshake timeout: 300 of them leave the writer's wire up."""
    pki = make_pki(tmp_path / "pki", {"jn": [Role.JOURNALNODE], "nn": [Role.NAMENODE, Role.ADMIN]})
    bounds = RPCSettings(handshake_timeout=0.5)
    with JournalNodeServer(
        tmp_path / "jn", "127.0.0.1:0", tls=pki.tls("jn"), connection_bounds=bounds
    ) as node:
        flood = [socket.create_connection(("127.0.0.1", node.edits_port)) for _ in range(300)]
        try:

            async def scenario() -> None:
                writer = Writer(node.address, pki.tls("nn"))
                await writer.open()
                await writer.learn()
                assert await asyncio.gather(*(writer.send(2) for _ in range(10))) == [None] * 10
                stream = writer.channel._stream
                assert isinstance(stream, WireJournalStream) and stream.on_wire
                await writer.channel.aclose()

            asyncio.run(scenario())
            for sock in flood:
                sock.settimeout(TIMEOUT)
                assert sock.recv(1) == b""  # closed by the JournalNode
        finally:
            for sock in flood:
                sock.close()
