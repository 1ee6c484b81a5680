"""Tailing by subscription: every JournalNode pushes the edits it writes (SubscribeEdits,
docs/protocol.md §11), and the reader applies what a majority holds in one writer epoch
(docs/architecture.md §5.4).

``PushedFeeds`` is the pure part: what each JournalNode pushed from the reader's next txid
on, and ``decide``, which asks ``qjm.reader.journaled_edits_quorum`` (the rule the polling
reader uses, the one place it is written) which txids are safe and returns those ops.
``EditSubscriber`` is the I/O shell: one subscription per JournalNode on the caller's event
loop, on the node's edits wire when it has one (docs/protocol.md §13.8) and on a grpc.aio
stream otherwise, re-subscribing from the reader's next txid whenever a stream ends, and
telling its owner (``hanamenode.tailer``) after each push, and why a stream ended.

    feeds = PushedFeeds(["jn0", "jn1", "jn2"])
    feeds.reset("jn0", since_txid=11)
    feeds.add("jn0", PushedEdits(epoch=2, segment_txid=1, first_txid=11, count=1, framed=...))
    feeds.decide(11)          # [] until a second JournalNode pushed txid 11 in epoch 2
"""

from __future__ import annotations

import asyncio
import collections
import io
from collections.abc import AsyncIterator, Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import grpc
import grpc.aio
import structlog

from conf import TLSSettings
from conf.rpc import make_aio_channel
from conf.wire import HEADER, KIND_SUBSCRIBE, client_ssl_context, frame, open_within
from journalnode.edits_cache import NOTHING, CachedEdits
from journalnode.errors import JournalUnavailableError, from_rpc_error, from_status, status_code
from journalnode.subscriptions import SUBSCRIBED_KEY, PushedEdits
from proto import edits_pb2, journal_pb2, journal_pb2_grpc
from qjm.errors import describe_exception
from qjm.reader import EditLogReadError, holders_needed, safe_journaled_ops

log = structlog.get_logger(__name__)

K = TypeVar("K", bound=Hashable)

STOP_SECONDS = 2.0
"""How long ``EditSubscriber.stop`` waits for its subscriptions to end."""

WIRE_CONNECT_SECONDS = 5.0
"""How long opening a subscription on the edits wire may take before gRPC is used."""

MAX_PUSH_BYTES = 64 << 20
"""The largest push frame a reader takes from the edits wire."""

DEFAULT_MAX_HELD_TXNS = 100_000
"""Pushed txids one feed holds at most, not yet safe to apply; past it the feed is dropped
and its stream ends (the reader falls back), so a lone JournalNode running ahead of the
others cannot grow the reader's memory without bound."""


class FeedError(EditLogReadError):
    """A JournalNode pushed something that does not follow what it pushed before."""


class _Feed:
    """The batches one JournalNode pushed on its current subscription, contiguous."""

    def __init__(self, since_txid: int) -> None:
        self.next_txid = since_txid
        self.batches: collections.deque[PushedEdits] = collections.deque()
        self.held_txns = 0

    def add(self, batch: PushedEdits) -> None:
        if batch.first_txid != self.next_txid or batch.count <= 0:
            raise FeedError(
                f"pushed txids {batch.first_txid}-{batch.last_txid} where {self.next_txid} "
                "was due"
            )
        self.batches.append(batch)
        self.next_txid = batch.last_txid + 1
        self.held_txns += batch.count

    def trim(self, txid: int) -> None:
        """Forget every txid before ``txid``."""
        while self.batches and self.batches[0].last_txid < txid:
            self.held_txns -= self.batches.popleft().count

    def cached_from(self, txid: int) -> CachedEdits:
        """The run from ``txid`` in the epoch that wrote ``txid`` (NOTHING if not held)."""
        self.trim(txid)
        if not self.batches or self.batches[0].first_txid > txid:
            return NOTHING
        epoch = self.batches[0].epoch
        parts: list[bytes] = []
        count = 0
        for batch in self.batches:
            if batch.epoch != epoch:
                break
            part = batch.from_txid(txid) if not parts else batch
            parts.append(part.framed)
            count += part.count
        return CachedEdits(epoch, count, b"".join(parts))


class PushedFeeds(Generic[K]):
    """The pushes of every JournalNode of the cluster (``sources``), and the quorum rule."""

    def __init__(self, sources: Sequence[K], max_held_txns: int = DEFAULT_MAX_HELD_TXNS) -> None:
        self.sources = list(sources)
        self.max_held_txns = max_held_txns
        self._feeds: dict[K, _Feed] = {}

    def reset(self, source: K, since_txid: int) -> None:
        """A new subscription to ``source`` from ``since_txid``: forget what it pushed."""
        self._feeds[source] = _Feed(since_txid)

    def drop(self, source: K) -> None:
        self._feeds.pop(source, None)

    def add(self, source: K, batch: PushedEdits) -> None:
        """Record a push; FeedError when it does not follow the previous one, or when the
        feed would hold more than ``max_held_txns`` (the feed is dropped then)."""
        feed = self._feeds.get(source)
        if feed is None:
            raise FeedError(f"{source} pushed edits without a subscription")
        try:
            feed.add(batch)
        except FeedError:
            self.drop(source)
            raise
        if feed.held_txns > self.max_held_txns:
            self.drop(source)
            raise FeedError(
                f"{source} pushed {feed.held_txns} txids no majority holds yet, more than "
                f"{self.max_held_txns}"
            )

    def held_txns(self, source: K) -> int:
        feed = self._feeds.get(source)
        return feed.held_txns if feed is not None else 0

    def answers(self, next_txid: int) -> dict[K, CachedEdits]:
        """What each subscribed source pushed from ``next_txid`` on, in one epoch, as the
        polling reader's answers look (forgetting what came before ``next_txid``)."""
        return {source: feed.cached_from(next_txid) for source, feed in self._feeds.items()}

    def decide(self, next_txid: int) -> list[edits_pb2.EditOp]:
        """The ops from ``next_txid`` on that a majority of all sources pushed in one writer
        epoch (``journaled_edits_quorum``), checked to be those txids in order.

        Each batch is pushed by every JournalNode, so most calls come when fewer than a
        majority of feeds reach ``next_txid`` (the first push of a batch, and those after
        it was applied): they return at once, before any answer is assembled."""
        need = holders_needed(len(self._feeds), len(self.sources))
        if sum(feed.next_txid > next_txid for feed in self._feeds.values()) < need:
            for feed in self._feeds.values():
                feed.trim(next_txid)  # what was applied is forgotten all the same
            return []
        return safe_journaled_ops(
            self.answers(next_txid),
            cluster_size=len(self.sources),
            since_txid=next_txid,
            what=lambda source: f"edits pushed by {source} from txid {next_txid}",
        )


@dataclass(frozen=True, slots=True)
class SubscriptionTarget:
    """One JournalNode to subscribe to."""

    address: str
    journal_id: str
    cluster_id: str
    tls: TLSSettings | None = None


def pushed_edits(message: journal_pb2.SubscribedEdits) -> PushedEdits:
    return PushedEdits(
        message.writer_epoch,
        message.segment_txid,
        message.first_txid,
        message.txn_count,
        message.records,
    )


class EditSubscriber:
    """One subscription per JournalNode, held open on the running event loop.

    ``next_txid`` says where a (re)subscription starts (the reader's last applied + 1);
    ``on_push`` is called on the loop after every push (the owner calls ``feeds.decide``);
    ``on_end(address, reason)`` after every stream's end, with the JournalNode's
    ``SubscriptionEnd`` in lower case or a reader-side reason (``stream_error``,
    ``bad_push``). A stream that ended for any reason but a finalized segment is opened
    again after ``retry_delay``.
    """

    def __init__(
        self,
        targets: Sequence[SubscriptionTarget],
        next_txid: Callable[[], int],
        on_push: Callable[[], None],
        on_end: Callable[[str, str], None],
        *,
        max_held_txns: int = DEFAULT_MAX_HELD_TXNS,
        retry_delay: float = 0.5,
    ) -> None:
        self.targets = list(targets)
        self.feeds: PushedFeeds[str] = PushedFeeds(
            [t.address for t in targets], max_held_txns
        )
        self._next_txid = next_txid
        self._on_push = on_push
        self._on_end = on_end
        self.retry_delay = retry_delay
        self.subscribed: set[str] = set()
        """Addresses whose JournalNode holds a subscription of ours now (it said so in the
        stream's initial metadata), not those merely asked."""
        self.pushed_txns = 0
        self.on_wire: set[str] = set()
        """Addresses whose subscription is held on the edits wire now."""
        self._wire_ports: dict[str, int] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._channels: list[grpc.aio.Channel] = []

    def start(self) -> None:
        """Open every subscription (on the loop)."""
        if self._tasks:
            return
        for target in self.targets:
            channel = make_aio_channel(target.address, target.tls)
            self._channels.append(channel)
            self._tasks.append(
                asyncio.get_running_loop().create_task(
                    self._follow(target, channel), name=f"subscribe-edits-{target.address}"
                )
            )

    async def stop(self) -> None:
        """End every subscription. Waits ``STOP_SECONDS`` at most for them: a transition to
        active stops them first, and must not wait on a connection that does not end."""
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=STOP_SECONDS)
            for task in pending:
                stack = io.StringIO()
                task.print_stack(file=stack)
                log.warning(
                    "edit subscription did not stop in time; left to end by itself",
                    task=task.get_name(),
                    waited_seconds=STOP_SECONDS,
                    stack=stack.getvalue(),
                )
        channels, self._channels = self._channels, []
        for channel in channels:
            await channel.close()
        self.subscribed.clear()

    async def _stream(
        self, target: SubscriptionTarget, channel: grpc.aio.Channel, since: int
    ) -> AsyncIterator[journal_pb2.SubscribedEdits]:
        """The subscription's messages, on the edits wire when the node has one and it can
        be reached, on gRPC otherwise."""
        stub = journal_pb2_grpc.QJournalServiceStub(channel)
        request = journal_pb2.SubscribeEditsRequest(
            journal_id=target.journal_id, cluster_id=target.cluster_id, since_txid=since
        )
        opened = await self._open_wire(target, stub)
        if opened is not None:
            async for message in self._wire_stream(target, request, *opened):
                yield message
            return
        call = stub.SubscribeEdits(request)
        try:
            # The node sends this once it holds the subscription (an aborted call sends none).
            metadata = await call.initial_metadata()
            if metadata is not None and any(key == SUBSCRIBED_KEY for key, _ in metadata):
                self.subscribed.add(target.address)
            async for message in call:
                yield message
        except grpc.RpcError as err:
            raise from_rpc_error(err) from None
        finally:
            call.cancel()

    async def _open_wire(
        self, target: SubscriptionTarget, stub: journal_pb2_grpc.QJournalServiceStub
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the node's edits wire, or None for gRPC: the node announces no
        wire, or it could not be reached (then it is asked again next time)."""
        address = target.address
        port = self._wire_ports.get(address)
        if port is None:
            try:
                state = await stub.GetJournalState(
                    journal_pb2.GetJournalStateRequest(
                        journal_id=target.journal_id, cluster_id=target.cluster_id
                    ),
                    timeout=WIRE_CONNECT_SECONDS,
                )
            except grpc.RpcError as err:
                log.info(
                    "edits wire not asked for; subscribing on gRPC",
                    journalnode=address,
                    error=describe_exception(from_rpc_error(err)),
                )
                return None
            port = self._wire_ports[address] = state.edits_port
        if not port:
            return None
        host = address.rsplit(":", 1)[0].strip("[]")
        context = client_ssl_context(target.tls)
        try:
            return await open_within(
                asyncio.open_connection(
                    host, port, ssl=context,
                    server_hostname=host if context is not None else None,
                    ssl_handshake_timeout=WIRE_CONNECT_SECONDS if context is not None else None,
                ),
                WIRE_CONNECT_SECONDS,
                lambda made: made[1].close(),
            )
        except (OSError, TimeoutError) as exc:
            del self._wire_ports[address]
            log.warning(
                "edits wire unavailable; subscribing on gRPC",
                journalnode=address,
                port=port,
                error=f"{type(exc).__name__}: {exc}",
            )
            return None

    async def _wire_stream(
        self,
        target: SubscriptionTarget,
        request: journal_pb2.SubscribeEditsRequest,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> AsyncIterator[journal_pb2.SubscribedEdits]:
        """``SubscribeEdits`` on the edits wire: the request, then ``WirePush`` frames."""
        address = target.address
        try:
            writer.write(KIND_SUBSCRIBE + frame(request.SerializeToString()))
            while True:
                try:
                    (length,) = HEADER.unpack(await reader.readexactly(HEADER.size))
                    if length > MAX_PUSH_BYTES:
                        raise FeedError(f"a push frame of {length} bytes from {address}")
                    push = journal_pb2.WirePush.FromString(await reader.readexactly(length))
                except asyncio.IncompleteReadError as exc:
                    # A node ends every subscription it ends itself with a last message
                    # (SubscriptionEnd); closed without one, it died or was cut off, which
                    # gRPC reports as an error too (stream_error, not stream_ended).
                    raise JournalUnavailableError(
                        f"edits wire to {address} closed without a last message"
                    ) from exc
                kind = push.WhichOneof("kind")
                if kind == "subscribed_since":
                    self.subscribed.add(address)
                    self.on_wire.add(address)
                elif kind == "edits":
                    yield push.edits
                else:
                    refused = push.refused
                    raise from_status(
                        status_code(refused.code), refused.details, refused.error_class or None
                    )
        except OSError:
            self._wire_ports.pop(address, None)
            raise
        finally:
            self.on_wire.discard(address)
            # Aborted, not closed: closing a TLS stream on uvloop while the node still
            # pushes logs "Fatal error on SSL protocol" (a write on the closed transport),
            # an alarming line at every failover and stop; the node sees the reset and ends
            # the subscription either way.
            writer.transport.abort()

    async def _follow(self, target: SubscriptionTarget, channel: grpc.aio.Channel) -> None:
        address = target.address
        bound = log.bind(journalnode=address, journal=target.journal_id)
        while True:
            since = self._next_txid()
            self.feeds.reset(address, since)
            reason, details = "stream_ended", "the stream ended without saying why"
            try:
                async for message in self._stream(target, channel, since):
                    if message.end:
                        reason = journal_pb2.SubscriptionEnd.Name(message.end).lower()
                        details = message.end_details
                        break
                    batch = pushed_edits(message)
                    try:
                        self.feeds.add(address, batch)
                    except FeedError as exc:
                        reason, details = "bad_push", str(exc)
                        break
                    self.pushed_txns += batch.count
                    self._on_push()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                reason, details = "stream_error", describe_exception(exc)
            finally:
                self.subscribed.discard(address)
            self._on_end(address, reason)
            level = bound.warning if reason in ("stream_error", "bad_push") else bound.debug
            level("edit subscription ended", reason=reason, why=details, since=since)
            if reason != "segment_finalized":
                await asyncio.sleep(self.retry_delay)


def subscription_targets(loggers: Sequence[Any], journal_id: str) -> list[SubscriptionTarget]:
    """A target per JournalNode of a reader QJM's loggers (same addresses, same TLS)."""
    return [
        SubscriptionTarget(
            lg.address,
            journal_id,
            lg.namespace_info.cluster_id,
            getattr(lg.channel, "tls", None),
        )
        for lg in loggers
    ]
