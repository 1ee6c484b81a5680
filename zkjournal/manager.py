"""ZKJournalManager: the shared edit log as a live log of znodes in ZooKeeper, the second
backend beside the QJM (docs/architecture.md §9.2, docs/protocol.md §15; issue 29, after the
December 2011 design "Name Node Redundancy").

The writer of one active period:

- **takes over** (``arecover_unfinalized_segments``) by bumping the epoch znode with a
  version check (two NameNodes racing: one wins, the other gets a clear error), then reads
  the tail znode: the end of the log. No Paxos round: ZooKeeper is the consensus, and every
  batch it holds is final. The transition then reads the log to that end (``load_edits``)
  before it serves;
- **appends** each batch of framed edits (the same bytes the QJM sends) as one ZooKeeper
  ``multi``: check the epoch znode's version (the fence), set the tail znode with the
  version the previous append left (so the appends of one writer land in order, none after
  one that failed), create the batch as a sequential znode. A batch larger than
  ``max_znode_bytes`` becomes several appends, in order. The appends are pipelined: kazoo
  sends them in the order they are made, and each returns once ZooKeeper committed it;
- is **fenced** when a multi's epoch check fails, when the read-index round finds the epoch
  znode moved, or when the watch on the epoch znode sees it move: it raises (and tells its
  fence listeners) a ``QuorumException`` carrying ``EpochError``, as the QJM does;
- answers the **read-index round** (``aconfirm_epoch``) with ``sync`` then ``exists`` on the
  epoch znode, pipelined: one round trip, shared by the waiting reads (the namesystem's
  ``SharedRounds``).

The same class is the followers' ``EditSource`` (``hanamenode.journal``): ``load_edits``
reads the batches from a txid on, and ``push_feed`` follows the tail znode with a kazoo
``DataWatch`` on a thread of its own, handing the new ops to the NameNode's loop.

    journal = ZKJournalManager.from_settings(settings, settings.zk_journal_uri, ns_info)
    end = await journal.arecover_unfinalized_segments()
    out = await journal.astart_log_segment((end or 0) + 1)
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, cast

import structlog
from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, KazooException, NodeExistsError, NoNodeError
from kazoo.protocol.states import ZnodeStat

from conf import Settings
from conf.keys import ZKJournalUri
from journalnode.errors import EpochError
from proto import edits_pb2, records
from proto.values import NamespaceInfo
from qjm.errors import describe_exception
from qjm.fencing import FenceLatch
from qjm.journal_manager import QuorumOutputStream
from qjm.metrics import READ_INDEX_ROUND_SECONDS, READ_INDEX_ROUNDS
from qjm.reader import EditLogReadError, LoadResult
from zk.client import ACL_KEY, close_client, make_client
from zkjournal.errors import (
    ZKJournalError,
    ZKJournalFencedError,
    ZKJournalNotFormattedError,
    fenced,
)
from zkjournal.layout import (
    BatchHeader,
    JournalPaths,
    Tail,
    batch_first_txid,
    batch_sequence,
    decode_batch,
    decode_epoch,
    decode_namespace,
    encode_batch,
    encode_epoch,
    encode_namespace,
    split_framed,
)
from zkjournal.metrics import (
    APPEND_SECONDS,
    DELETED_THROUGH,
    FETCHED_TXNS,
    LIVE_BATCHES,
    LIVE_BYTES,
    PACKED_TXID,
)
from zkjournal.packed import PackedSegments
from zkjournal.window import LiveBatch, deletion_bound

if TYPE_CHECKING:
    from kazoo.interfaces import IAsyncResult

__all__ = [
    "Fetch", "PublishSettings", "ZKJournalManager", "ZKPushFeed", "read_live_log", "read_tail",
]

log = structlog.get_logger(__name__)

READ_PIPELINE = 64
"""Batch znodes a reader asks for at once (kazoo pipelines them on its one connection)."""

START_TIMEOUT = 15.0

DELETE_CHUNK = 200
"""Batch znodes one multi of the publisher deletes (a multi's request is bounded too)."""

Fetch = Callable[[int], Iterator[bytes]]
"""Framed records from a txid on, out of another NameNode's packed segments."""


@dataclasses.dataclass(frozen=True, slots=True)
class PublishSettings:
    """How often the packer and the publisher run, and the window ZooKeeper keeps
    (``dfs.namenode.zookeeper-journal.publish.period``, ``.window.bytes``,
    ``.window.seconds``)."""

    period: float = 2.0
    window_bytes: int = 64 * 1024 * 1024
    window_seconds: float = 300.0


class _Timeouts:
    write_txns_timeout = 20.0


@dataclasses.dataclass(frozen=True, slots=True)
class LoadedBatch:
    """One batch znode as a reader found it."""

    name: str
    header: BatchHeader
    framed: bytes


class ZKJournalManager:
    """The writer (one active period) and the reader of one ZooKeeper journal."""

    def __init__(
        self,
        make_kazoo: Callable[[], KazooClient],
        uri: str,
        root: str,
        namespace_info: NamespaceInfo,
        *,
        timeouts: Any = None,
        max_znode_bytes: int = 512 * 1024,
        writer_name: str = "",
        nn_id: str = "",
        packed: PackedSegments | None = None,
        fetch: Fetch | None = None,
        publish: PublishSettings | None = None,
    ) -> None:
        self.uri = uri
        self.paths = JournalPaths(root)
        self.namespace_info = namespace_info
        self.timeouts = timeouts or _Timeouts()
        self.max_znode_bytes = max_znode_bytes
        self._make_kazoo = make_kazoo
        self._writer_name = writer_name
        self._kazoo: KazooClient | None = None
        self._kazoo_lock = threading.Lock()
        self._namespace_checked = False
        self._epoch = 0
        self._epoch_version = -1
        self._next_tail_version = -1
        self._next_txid = 0
        self._broken: str | None = None
        self._closed = False
        self._log = log.bind(journal=uri)
        self._fence_latch = FenceLatch(self._log)
        self.nn_id = nn_id
        self.packed = packed
        """This NameNode's packed segments (None: a tool's manager, which packs nothing)."""
        self._fetch = fetch
        self.publish = publish or PublishSettings()
        self._stop = threading.Event()
        self._packer: threading.Thread | None = None
        self._deleter: threading.Thread | None = None
        self._pack_lock = threading.Lock()
        self._sizes: dict[str, tuple[int, float]] = {}
        self.deleted_through = 0
        """The last txid whose batch this writer's publisher deleted."""

    @classmethod
    def from_settings(
        cls,
        settings: Settings,
        uri: ZKJournalUri,
        namespace_info: NamespaceInfo,
        *,
        nn_id: str = "",
        packed: PackedSegments | None = None,
        fetch: Fetch | None = None,
    ) -> ZKJournalManager:
        """A manager for ``uri`` with the ZooKeeper session settings, authentication and ACL
        of ``ha.zookeeper.*`` (the hosts are the URI's); NameNode ``nn_id`` packs into
        ``packed`` and fetches what it missed with ``fetch``."""
        zk = dataclasses.replace(settings.zk, quorum=uri.connect_string)
        explicit = ACL_KEY in settings.values
        return cls(
            lambda: make_client(zk, acl_explicit=explicit),
            str(uri),
            uri.path,
            namespace_info,
            timeouts=settings.qjm,
            max_znode_bytes=settings.zk_journal.max_znode_bytes,
            writer_name=nn_id,
            nn_id=nn_id,
            packed=packed,
            fetch=fetch,
            publish=PublishSettings(
                settings.zk_journal.publish_period,
                settings.zk_journal.window_bytes,
                settings.zk_journal.window_seconds,
            ),
        )

    # -- identity ------------------------------------------------------------------------------

    @property
    def journal_id(self) -> str:
        return self.paths.root

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def fenced(self) -> str | None:
        return self._fenced

    def __repr__(self) -> str:
        return f"ZKJournalManager({self.uri}, epoch={self._epoch})"

    # -- the client ------------------------------------------------------------------------------

    def client(self) -> KazooClient:
        """The started kazoo client (blocking the first time: connects)."""
        with self._kazoo_lock:
            if self._closed:
                raise ZKJournalError(f"ZooKeeper journal {self.uri}: the manager is closed")
            if self._kazoo is None:
                kazoo = self._make_kazoo()
                try:
                    kazoo.start(timeout=START_TIMEOUT)
                except Exception as exc:
                    close_client(kazoo)
                    raise ZKJournalError(
                        f"cannot connect to ZooKeeper for journal {self.uri}: "
                        f"{describe_exception(exc)}"
                    ) from exc
                self._kazoo = kazoo
            return self._kazoo

    async def _aclient(self) -> KazooClient:
        kazoo = self._kazoo
        return kazoo if kazoo is not None else await asyncio.to_thread(self.client)

    @staticmethod
    async def _await(result: IAsyncResult, what: str, timeout: float) -> Any:
        """The value of a kazoo asynchronous call, awaited on the running loop."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def settle(value: Any, exc: BaseException | None) -> None:
            if future.done():
                return
            if exc is not None:
                future.set_exception(exc)
            else:
                future.set_result(value)

        def done(res: IAsyncResult) -> None:
            try:
                value, exc = res.get_nowait(), None
            except Exception as err:  # handed to the awaiting coroutine, which raises it
                value, exc = None, err
            try:
                loop.call_soon_threadsafe(settle, value, exc)
            except RuntimeError:  # the loop closed: nobody awaits any more
                log.debug("kazoo answer after the loop closed", call=what)

        result.rawlink(done)
        try:
            async with asyncio.timeout(timeout):
                return await future
        except TimeoutError:
            raise ZKJournalError(f"{what}: no answer from ZooKeeper in {timeout:g}s") from None

    def close(self) -> None:
        self._stop.set()
        for thread in (self._packer, self._deleter):
            if thread is not None and thread is not threading.current_thread():
                thread.join(10.0)
        with self._kazoo_lock:
            self._closed = True
            kazoo, self._kazoo = self._kazoo, None
        if kazoo is not None:
            close_client(kazoo)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    def __enter__(self) -> ZKJournalManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- format --------------------------------------------------------------------------------

    def is_formatted(self) -> dict[str, bool]:
        """Whether the journal's znodes exist (with any namespace), keyed by the URI."""
        return {self.uri: self.client().exists(self.paths.root) is not None}

    def format(self, *, force: bool = False) -> None:
        """Create the journal's znodes for ``namespace_info``: the namespace info, the epoch
        (0), the tail (txid 0) and the empty live log. An existing journal is erased only
        with ``force``; ZKJournalError otherwise."""
        kazoo = self.client()
        root = self.paths.root
        if kazoo.exists(root) is not None:
            if not force:
                raise ZKJournalError(
                    f"ZooKeeper journal {self.uri} already exists; not erased (use --force)"
                )
            kazoo.delete(root, recursive=True)
        parent = root.rsplit("/", 1)[0]
        if parent:
            kazoo.ensure_path(parent)
        tx = kazoo.transaction()
        tx.create(root, encode_namespace(self.namespace_info))
        tx.create(self.paths.epoch, encode_epoch(0, ""))
        tx.create(self.paths.tail, Tail(0, 0).to_bytes())
        tx.create(self.paths.log, b"")
        tx.create(self.paths.persisted, b"{}")
        _check_results(tx.commit(), f"format {self.uri}")
        self._log.info("formatted the ZooKeeper journal", cluster=self.namespace_info.cluster_id)

    def check_namespace(self) -> None:
        """ZKJournalNotFormattedError unless the journal exists and holds this namespace."""
        if self._namespace_checked:
            return
        try:
            data, _ = self.client().get(self.paths.root)
        except NoNodeError:
            raise ZKJournalNotFormattedError(
                f"ZooKeeper journal {self.uri} is not formatted (no znode {self.paths.root}); "
                "run hanamenode format"
            ) from None
        stored = decode_namespace(data, self.paths.root)
        mine = self.namespace_info
        if (stored.cluster_id, stored.namespace_id) != (mine.cluster_id, mine.namespace_id):
            raise ZKJournalNotFormattedError(
                f"ZooKeeper journal {self.uri} belongs to cluster {stored.cluster_id} namespace "
                f"{stored.namespace_id}, not to this NameNode's cluster {mine.cluster_id} "
                f"namespace {mine.namespace_id}"
            )
        self._namespace_checked = True

    # -- fencing -------------------------------------------------------------------------------

    @property
    def _fenced(self) -> str | None:
        return self._fence_latch.reason

    def add_fence_listener(self, listener: Callable[[str], None]) -> None:
        self._fence_latch.add_listener(listener)

    def _fence(self, error: ZKJournalFencedError) -> ZKJournalFencedError:
        reason = str(error)
        self._broken = self._broken or reason
        self._fence_latch.fence(reason, "writer fenced: the epoch znode moved on")
        return error

    def _epoch_watch(self, data: bytes | None, stat: ZnodeStat | None) -> bool:
        """kazoo's DataWatch on the epoch znode (its thread): a version other than ours is a
        newer writer. False ends the watch."""
        if self._closed or self._fenced is not None:
            return False
        if stat is None or stat.version != self._epoch_version:
            now = "deleted" if stat is None else f"at version {stat.version}"
            self._fence(fenced(
                self.uri, "seen by the watch on the epoch znode", self._epoch,
                f"epoch znode {self.paths.epoch} is {now}, not version {self._epoch_version}",
            ))
            return False
        return True

    # -- taking over ---------------------------------------------------------------------------

    async def arecover_unfinalized_segments(self) -> int | None:
        """Bump the epoch (fencing every older writer), then return the last txid of the log
        (None when it is empty): the transition reads the log up to it before serving."""
        if self._epoch:
            raise ZKJournalError(f"ZooKeeper journal {self.uri}: this writer already took over")
        kazoo = await self._aclient()
        await asyncio.to_thread(self.check_namespace)
        timeout = self.timeouts.write_txns_timeout
        epoch_path = self.paths.epoch
        data, stat = await self._await(kazoo.get_async(epoch_path), f"get {epoch_path}", timeout)
        previous = decode_epoch(data, epoch_path)
        proposed = previous + 1
        try:
            new_stat = await self._await(
                kazoo.set_async(
                    epoch_path, encode_epoch(proposed, self._writer_name), version=stat.version
                ),
                f"set {epoch_path}",
                timeout,
            )
        except BadVersionError:
            raise ZKJournalError(
                f"ZooKeeper journal {self.uri}: another writer took an epoch while this one took "
                f"epoch {proposed}; not taking over"
            ) from None
        self._epoch, self._epoch_version = proposed, new_stat.version
        # After our epoch is in, no older writer's multi succeeds: the tail is final.
        tail_data, tail_stat = await self._await(
            kazoo.get_async(self.paths.tail), f"get {self.paths.tail}", timeout
        )
        tail = Tail.from_bytes(tail_data, self.paths.tail)
        self._next_tail_version = tail_stat.version
        self._next_txid = tail.last_txid + 1
        await asyncio.to_thread(kazoo.DataWatch, epoch_path, self._epoch_watch)
        self._log.info(
            "took a new epoch", epoch=proposed, previous=previous, end_txid=tail.last_txid
        )
        return tail.last_txid or None

    # -- writing -------------------------------------------------------------------------------

    async def astart_log_segment(self, txid: int) -> QuorumOutputStream:
        """The QJM's output stream (its buffer, its abort on a ``QuorumException``) over this
        manager's ``asend_edits``: one append a batch."""
        if not self._epoch:
            raise ZKJournalError("start_log_segment before arecover_unfinalized_segments")
        self._check_writable()
        if txid != self._next_txid:
            raise ZKJournalError(
                f"segment {txid} would not follow the live log, which ends at txid "
                f"{self._next_txid - 1}"
            )
        return QuorumOutputStream(cast(Any, self), txid)

    async def afinalize_log_segment(self, start: int, end: int) -> None:
        """The segment's end marker is in the live log already; nothing else is written
        (the publisher packs segments: docs/architecture.md §9.2)."""
        self._check_writable()
        if end != self._next_txid - 1:
            raise ZKJournalError(
                f"cannot finalize segment {start}-{end}: the live log ends at txid "
                f"{self._next_txid - 1}"
            )

    async def apurge_logs_older_than(self, min_txid_to_keep: int) -> None:
        """The checkpoints' purge bound (what every NameNode's newest image covers, the
        rule the QJM's JournalNodes purge by): record it in ``<path>/purge-bound`` (a multi
        checking this writer's epoch), and purge the active's packed segments wholly below
        it; every NameNode's packer purges its own by it (docs/architecture.md §9.3)."""
        await asyncio.to_thread(self.record_purge_bound, min_txid_to_keep)
        if self.packed is not None:
            purged = await asyncio.to_thread(self.packed.purge_below, min_txid_to_keep)
            self._log.info("purged packed segments", count=purged, below=min_txid_to_keep)

    def record_purge_bound(self, min_txid_to_keep: int) -> None:
        self._check_writable()
        kazoo = self.client()
        path = self.paths.purge_bound
        data = json.dumps({"min_txid_to_keep": min_txid_to_keep}).encode()
        if kazoo.exists(path) is None:
            with contextlib.suppress(NodeExistsError):
                kazoo.create(path, b"{}")
        tx = kazoo.transaction()
        tx.check(self.paths.epoch, self._epoch_version)
        tx.set_data(path, data)
        results = tx.commit()
        if isinstance(results[0], BadVersionError | NoNodeError):
            raise self._fence(fenced(self.uri, "its purge refused", self._epoch,
                                     f"epoch znode {self.paths.epoch} moved on"))
        _check_results(results, f"record the purge bound {min_txid_to_keep}")

    def start_heartbeats(self) -> None:
        """No heartbeats (the watch on the epoch znode tells an idle writer it was fenced):
        the active period's publisher starts instead, when this writer is a NameNode's
        (thread ``zk-journal-publisher-<nn>``, docs/architecture.md §9.3)."""
        if not self.nn_id or self._deleter is not None:
            return
        self.start_packing()  # the active packs its own appends
        self._deleter = threading.Thread(
            target=self._every_period, args=(self.delete_packed,),
            name=f"zk-journal-publisher-{self.nn_id}", daemon=True,
        )
        self._deleter.start()

    def _check_writable(self) -> None:
        if self._fenced is not None:
            raise ZKJournalFencedError(
                f"this writer is fenced: {self._fenced}",
                exceptions={self.uri: _epoch_error(self._fenced)},
            )
        if self._broken is not None:
            raise ZKJournalError(f"the ZooKeeper journal writer failed: {self._broken}")

    async def asend_edits(self, segment_txid: int, first: int, count: int, framed: bytes) -> None:
        """Append txids ``first``..``first + count - 1``; return once ZooKeeper holds them.
        The multis are sent before the first await, so appends stay in call order."""
        self._check_writable()
        if first != self._next_txid:
            raise ZKJournalError(
                f"txids {first}-{first + count - 1} do not follow the live log's txid "
                f"{self._next_txid - 1}"
            )
        kazoo = self._kazoo
        if kazoo is None:
            raise ZKJournalError("asend_edits before arecover_unfinalized_segments")
        appends = []
        for piece_first, piece_count, piece in split_framed(first, framed, self.max_znode_bytes):
            header = BatchHeader(self._epoch, piece_first, piece_count)
            tx = kazoo.transaction()
            tx.check(self.paths.epoch, self._epoch_version)
            tx.set_data(
                self.paths.tail,
                Tail(header.last_txid, self._epoch).to_bytes(),
                version=self._next_tail_version,
            )
            tx.create(self.paths.batch_prefix(piece_first), encode_batch(header, piece),
                      sequence=True)
            self._next_tail_version += 1
            appends.append((header, tx.commit_async()))
        self._next_txid = first + count
        timeout = self.timeouts.write_txns_timeout
        started = time.perf_counter()
        for header, pending in appends:
            what = f"append of txids {header.first_txid}-{header.last_txid}"
            try:
                results = await self._await(pending, what, timeout)
                self._check_append(results, header)
                APPEND_SECONDS.labels(self.journal_id).observe(time.perf_counter() - started)
            except ZKJournalFencedError as exc:
                raise self._fence(exc) from None
            except Exception as exc:
                self._broken = self._broken or f"{what} failed: {describe_exception(exc)}"
                if isinstance(exc, ZKJournalError):
                    raise
                raise ZKJournalError(f"{what} failed: {describe_exception(exc)}") from exc

    def _check_append(self, results: list[Any], header: BatchHeader) -> None:
        if not any(isinstance(r, Exception) for r in results):
            return
        epoch_result = results[0] if results else None
        what = f"the append of txids {header.first_txid}-{header.last_txid}"
        if isinstance(epoch_result, BadVersionError | NoNodeError):
            raise fenced(
                self.uri, f"{what} refused", self._epoch,
                f"epoch znode {self.paths.epoch} is no longer at version {self._epoch_version}",
            )
        raise ZKJournalError(
            f"ZooKeeper refused {what}: "
            + ", ".join(type(r).__name__ for r in results if isinstance(r, Exception))
            + " (the tail znode's version check fails when an earlier append of this writer "
            "did not reach ZooKeeper)"
        )

    # -- the read-index round -------------------------------------------------------------------

    async def aconfirm_epoch(self) -> None:
        """Return once ZooKeeper, synced after this call began, still holds our epoch
        znode version; fenced (``ZKJournalFencedError``) otherwise."""
        self._check_writable()
        kazoo = self._kazoo
        if kazoo is None or not self._epoch:
            raise ZKJournalError("confirm_epoch before this writer took an epoch")
        started = time.perf_counter()
        outcome = "failed"
        timeout = self.timeouts.write_txns_timeout
        try:
            # Sent together: ZooKeeper answers a session's requests in order, so the exists
            # is read after the sync brought this server up to the leader.
            synced = kazoo.sync_async(self.paths.epoch)
            exists = kazoo.exists_async(self.paths.epoch)
            await self._await(synced, "sync", timeout)
            stat = await self._await(exists, f"exists {self.paths.epoch}", timeout)
            if stat is None or stat.version != self._epoch_version:
                now = "deleted" if stat is None else f"at version {stat.version}"
                raise self._fence(fenced(
                    self.uri, "seen by the read-index round", self._epoch,
                    f"epoch znode {self.paths.epoch} is {now}, not {self._epoch_version}",
                ))
            outcome = "confirmed"
        except KazooException as exc:
            raise ZKJournalError(f"read-index round failed: {describe_exception(exc)}") from exc
        finally:
            READ_INDEX_ROUNDS.labels(self.journal_id, outcome).inc()
            READ_INDEX_ROUND_SECONDS.labels(self.journal_id).observe(
                time.perf_counter() - started
            )

    # -- reading (EditSource; blocking calls, from bridge threads) --------------------------------

    def load_edits(
        self,
        since_txid: int,
        apply: Callable[[edits_pb2.EditOp], bool],
        *,
        up_to: int | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        on_target: Callable[[int], None] | None = None,
    ) -> LoadResult:
        """Apply every op of the journal from ``since_txid`` (through ``up_to``): from this
        NameNode's packed segments what they hold, then from the live log; txids ZooKeeper
        no longer holds and this NameNode never packed are fetched from another NameNode
        first. ``on_target`` is told the tail's txid first."""
        self.start_packing()
        tail = read_tail(self)
        if on_target is not None:
            on_target(tail.last_txid)
        applied = last = 0

        def take(op: edits_pb2.EditOp) -> bool:
            nonlocal applied, last
            if (up_to is not None and op.txid > up_to) or should_stop() or not apply(op):
                return False
            applied += 1
            last = op.txid
            return True

        next_txid = since_txid
        for _ in range(2):  # the second time after fetching what was missing
            if self.packed is not None and next_txid <= self.packed.last_txid:
                for op in self.packed.read(next_txid, up_to):
                    if not take(op):
                        return LoadResult(applied, last, tail.last_txid)
                    next_txid = op.txid + 1
            if up_to is not None and next_txid > up_to:
                break
            _, batches = read_live_log(self, next_txid)
            if not batches or batches[0].header.first_txid <= next_txid:
                for op in ops_of(batches):
                    if op.txid >= next_txid and not take(op):
                        return LoadResult(applied, last, tail.last_txid)
                return LoadResult(applied, last, tail.last_txid)
            self.fetch_missing(next_txid, batches[0].header.first_txid)
        return LoadResult(applied, last, tail.last_txid)

    # -- packing and fetching (every NameNode; blocking) -----------------------------------------

    def start_packing(self) -> None:
        """Start this NameNode's packer (thread ``zk-journal-packer-<nn>``), once."""
        if self.packed is None or self._packer is not None or self._closed:
            return
        with self._pack_lock:
            if self._packer is None:
                self._packer = threading.Thread(
                    target=self._every_period, args=(self.pack,),
                    name=f"zk-journal-packer-{self.nn_id}", daemon=True,
                )
                self._packer.start()

    def _every_period(self, step: Callable[[], object]) -> None:
        while not self._stop.wait(self.publish.period):
            try:
                step()
            except Exception as exc:  # the next period tries again; the error is logged
                self._log.warning(
                    "ZooKeeper journal publisher step failed",
                    step=getattr(step, "__name__", str(step)),
                    error=describe_exception(exc),
                )
            if self._fenced is not None:
                return

    def pack(self) -> int:
        """Pack the live log's batches this NameNode has not packed into one segment on its
        disk, then record in ZooKeeper the last txid packed; that txid (0: nothing)."""
        packed = self.packed
        if packed is None:
            return 0
        with self._pack_lock:
            since = packed.last_txid + 1
            _, batches = read_live_log(self, since)
            if batches and batches[0].header.first_txid > since:
                self.fetch_missing(since, batches[0].header.first_txid)
                since = packed.last_txid + 1
                _, batches = read_live_log(self, since)
            if batches:
                framed = b"".join(b.framed for b in batches)
                first = batches[0].header.first_txid
                if first < since:
                    framed = framed[records.record_offsets(framed)[since - first] :]
                packed.write(since, batches[-1].header.last_txid, framed)
            last = packed.last_txid
        self._record_packed(last)
        PACKED_TXID.labels(self.journal_id).set(last)
        self._purge_by_bound(packed)
        return last

    def _purge_by_bound(self, packed: PackedSegments) -> None:
        """Purge this NameNode's packed segments below the active's last purge bound."""
        try:
            data, _ = self.client().get(self.paths.purge_bound)
        except NoNodeError:
            return  # no checkpoint asked for a purge yet
        bound = int(json.loads(data.decode()).get("min_txid_to_keep", 0))
        if bound > 1 and packed.purge_below(bound):
            self._log.info("purged packed segments by the active's bound", below=bound)

    def _record_packed(self, txid: int) -> None:
        kazoo = self.client()
        path = self.paths.persisted_by(self.nn_id)
        data = json.dumps({"packed_txid": txid}).encode()
        try:
            kazoo.set(path, data)
        except NoNodeError:
            try:
                kazoo.create(path, data, makepath=True)
            except NodeExistsError:
                kazoo.set(path, data)

    def fetch_missing(self, since_txid: int, live_from: int) -> None:
        """Txids ``since_txid``..``live_from - 1`` are no longer in ZooKeeper: fetch them
        from another NameNode's packed segments into this one's. ZKJournalError naming the
        gap when that is impossible."""
        what = (
            f"txids {since_txid}-{live_from - 1} are no longer in the live log of {self.uri} "
            "(its publisher deleted them)"
        )
        if self._fetch is None or self.packed is None:
            raise ZKJournalError(f"{what}, and this process fetches no packed segments")
        if self.packed.last_txid + 1 != since_txid and self.packed.last_txid:
            raise ZKJournalError(
                f"{what}, and this NameNode's packed segments end at txid "
                f"{self.packed.last_txid}: bootstrap-standby it again"
            )
        framed = b"".join(self._fetch(since_txid))
        scan = records.scan(framed)
        if scan.error is not None or not scan.count or scan.first_txid != since_txid:
            raise ZKJournalError(
                f"{what}; the other NameNodes' packed segments do not hold txid {since_txid} "
                f"(fetched {scan.count} records from txid {scan.first_txid}"
                + (f", {scan.error}" if scan.error else "") + ")"
            )
        self.packed.write(since_txid, scan.last_txid, framed[: scan.valid_len])
        FETCHED_TXNS.labels(self.journal_id).inc(scan.count)
        self._log.info("fetched packed segments from another NameNode",
                       first=since_txid, last=scan.last_txid)

    # -- deleting what is packed (the active's publisher; blocking) -------------------------------

    def delete_packed(self) -> int:
        """Delete the oldest batch znodes that ``window.deletion_bound`` allows, in multis
        that check this writer's epoch; the txid deleted through."""
        kazoo = self.client()
        if not self._epoch or self._fenced is not None:
            return self.deleted_through
        names = sorted(kazoo.get_children(self.paths.log), key=batch_sequence)
        firsts = [batch_first_txid(n) for n in names]
        tail = read_tail(self)
        new = [n for n in names if n not in self._sizes]
        pending = [(n, kazoo.exists_async(f"{self.paths.log}/{n}")) for n in new]
        for name, result in pending:
            stat = result.get()
            if stat is not None:
                self._sizes[name] = (stat.dataLength, stat.ctime / 1000.0)
        batches = [
            LiveBatch(
                firsts[i + 1] - 1 if i + 1 < len(names) else tail.last_txid,
                *self._sizes.get(name, (0, time.time())),
            )
            for i, name in enumerate(names)
        ]
        packed: dict[str, int] = {}
        for child in kazoo.get_children(self.paths.persisted):
            data, _ = kazoo.get(self.paths.persisted_by(child))
            packed[child] = int(json.loads(data.decode()).get("packed_txid", 0))
        bound = deletion_bound(
            batches, packed, self.nn_id, now=time.time(),
            max_bytes=self.publish.window_bytes, max_seconds=self.publish.window_seconds,
        )
        doomed = [n for n, b in zip(names, batches, strict=True) if b.last_txid <= bound]
        for start in range(0, len(doomed), DELETE_CHUNK):
            tx = kazoo.transaction()
            tx.check(self.paths.epoch, self._epoch_version)
            for name in doomed[start : start + DELETE_CHUNK]:
                tx.delete(f"{self.paths.log}/{name}")
            results = tx.commit()
            if isinstance(results[0], BadVersionError | NoNodeError):
                self._fence(fenced(self.uri, "its publisher's delete refused", self._epoch,
                                   f"epoch znode {self.paths.epoch} moved on"))
                return self.deleted_through
            _check_results(results, f"delete of {len(doomed[start:start + DELETE_CHUNK])} "
                           "packed batch znodes")
            for name in doomed[start : start + DELETE_CHUNK]:
                self._sizes.pop(name, None)
        kept = [b.size for n, b in zip(names, batches, strict=True) if b.last_txid > bound]
        LIVE_BATCHES.labels(self.journal_id).set(len(kept))
        LIVE_BYTES.labels(self.journal_id).set(sum(kept))
        if doomed:
            self.deleted_through = bound
            DELETED_THROUGH.labels(self.journal_id).set(bound)
            kazoo.set(self.paths.persisted, json.dumps({
                "deleted_through": bound, "packed": packed,
            }, sort_keys=True).encode())
            self._log.info("deleted packed batches from the live log", count=len(doomed),
                           through=bound, held=len(names) - len(doomed))
        return self.deleted_through

    def read_journaled_edits(self, since_txid: int, max_txns: int) -> list[edits_pb2.EditOp]:
        """Every edit of the live log is final: ``load_edits`` reads them all."""
        return []

    def check_edits_available(self, since_txid: int) -> None:
        """ZKJournalError unless every txid from ``since_txid`` on can be had: from the live
        log, from this NameNode's packed segments, or fetched from another NameNode's."""
        tail, batches = read_live_log(self, since_txid)
        if since_txid > tail.last_txid or (batches and batches[0].header.first_txid <= since_txid):
            return
        live_from = batches[0].header.first_txid if batches else tail.last_txid + 1
        if self.packed is not None and since_txid <= self.packed.last_txid:
            return
        if self.packed is not None:
            self.fetch_missing(since_txid, live_from)
            return
        framed = b"".join(self._fetch(since_txid)) if self._fetch is not None else b""
        scan = records.scan(framed)
        if scan.count and scan.first_txid == since_txid and scan.last_txid + 1 >= live_from:
            return
        raise ZKJournalError(
            f"the live log of {self.uri} starts at txid {live_from}, after txid {since_txid} "
            "that the image does not cover, and no other NameNode's packed segments hold "
            "the txids between: this NameNode could never catch up"
        )

    def push_feed(
        self,
        next_txid: Callable[[], int],
        on_push: Callable[[], None],
        on_ended: Callable[[str, str], None],
    ) -> ZKPushFeed:
        return ZKPushFeed(self, next_txid, on_push, on_ended)


def _epoch_error(reason: str) -> Exception:
    return EpochError(reason)


def _check_results(results: list[Any], what: str) -> None:
    errors = [r for r in results if isinstance(r, Exception)]
    if errors:
        if any(isinstance(e, NodeExistsError) for e in errors):
            raise ZKJournalError(f"{what}: a znode exists already ({errors})")
        raise ZKJournalError(f"{what} failed: {', '.join(type(e).__name__ for e in errors)}")


def read_tail(journal: ZKJournalManager) -> Tail:
    """What the tail znode says (blocking)."""
    data, _ = journal.client().get(journal.paths.tail)
    return Tail.from_bytes(data, journal.paths.tail)


def read_live_log(
    journal: ZKJournalManager, since_txid: int
) -> tuple[Tail, list[LoadedBatch]]:
    """The tail and the batches of the live log that hold txids from ``since_txid`` on, in
    order (blocking). ZKJournalError when the batches are not contiguous."""
    kazoo = journal.client()
    journal.check_namespace()
    paths = journal.paths
    tail_data, _ = kazoo.get(paths.tail)
    tail = Tail.from_bytes(tail_data, paths.tail)
    if since_txid > tail.last_txid:
        return tail, []
    names = sorted(kazoo.get_children(paths.log), key=batch_sequence)
    firsts = [batch_first_txid(n) for n in names]
    # A batch may hold since_txid unless the next one starts at or before it.
    wanted = [
        name for i, name in enumerate(names)
        if i + 1 == len(names) or firsts[i + 1] > since_txid
    ]
    batches: list[LoadedBatch] = []
    for start in range(0, len(wanted), READ_PIPELINE):
        chunk = wanted[start : start + READ_PIPELINE]
        pending = [(n, kazoo.get_async(f"{paths.log}/{n}")) for n in chunk]
        for name, result in pending:
            try:
                data, _ = result.get()
            except NoNodeError:
                # Packed and deleted between the listing and the read. The publisher deletes
                # oldest first, so every batch before it is gone too, even one read a moment
                # ago: drop them, and the log read starts after (the caller then reads the
                # packed segments for what is before).
                batches.clear()
                continue
            header, framed = decode_batch(data, name)
            if batches and header.first_txid != batches[-1].header.last_txid + 1:
                raise ZKJournalError(
                    f"the live log of {journal.uri} has a gap: batch {name} starts at txid "
                    f"{header.first_txid}, after txid {batches[-1].header.last_txid}"
                )
            batches.append(LoadedBatch(name, header, framed))
    return tail, batches


class ZKPushFeed:
    """The live log followed through a watch (``PushFeed``): a kazoo ``DataWatch`` on the
    tail znode wakes the thread ``zk-journal-feed``, which reads the new batches and hands
    their ops to the NameNode's loop (``on_push``); ``decide`` returns them in order."""

    def __init__(
        self,
        journal: ZKJournalManager,
        next_txid: Callable[[], int],
        on_push: Callable[[], None],
        on_ended: Callable[[str, str], None],
    ) -> None:
        self.journal = journal
        self._next_txid = next_txid
        self._on_push = on_push
        self._on_ended = on_ended
        self.subscribed: set[str] = set()
        self._ops: collections.deque[edits_pb2.EditOp] = collections.deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._thread = threading.Thread(target=self._run, name="zk-journal-feed", daemon=True)
        self._thread.start()

    async def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        thread = self._thread
        if thread is not None:
            await asyncio.to_thread(thread.join, 10.0)
        self.subscribed.clear()

    def _call_loop(self, fn: Callable[..., object], *args: object) -> None:
        loop = self._loop
        if loop is None:
            return
        try:
            loop.call_soon_threadsafe(fn, *args)
        except RuntimeError:
            log.debug("the NameNode's loop closed while the feed ran")

    def _tail_changed(self, data: bytes | None, stat: ZnodeStat | None) -> bool:
        self._wake.set()
        return not self._stop.is_set()

    def _run(self) -> None:
        uri = self.journal.uri
        try:
            self.journal.client().DataWatch(self.journal.paths.tail, self._tail_changed)
        except Exception as exc:
            log.warning("cannot watch the live log", journal=uri, error=describe_exception(exc))
            self._call_loop(self._on_ended, uri, "watch_failed")
            return
        self.subscribed.add(uri)
        try:
            while not self._stop.is_set():
                self._wake.wait(1.0)
                self._wake.clear()
                if self._stop.is_set():
                    break
                self._read_new()
        finally:
            self.subscribed.discard(uri)

    def _read_new(self) -> None:
        with self._lock:
            held = self._ops[-1].txid + 1 if self._ops else 0
        since = max(self._next_txid(), held)
        try:
            _, batches = read_live_log(self.journal, since)
        except Exception as exc:
            log.warning("reading the live log failed", journal=self.journal.uri,
                        error=describe_exception(exc))
            self._call_loop(self._on_ended, self.journal.uri, "read_failed")
            return
        ops = [op for op in ops_of(batches) if op.txid >= since]
        if not ops:
            return
        with self._lock:
            self._ops.extend(ops)
        self._call_loop(self._on_push)

    def decide(self, next_txid: int) -> list[edits_pb2.EditOp]:
        """The held ops from ``next_txid`` on (EditLogReadError when the first held op is
        later: the tailer then reads a round)."""
        with self._lock:
            while self._ops and self._ops[0].txid < next_txid:
                self._ops.popleft()
            if not self._ops:
                return []
            if self._ops[0].txid != next_txid:
                first = self._ops[0].txid
                self._ops.clear()
                raise EditLogReadError(
                    f"the live log's pushed edits start at txid {first}, not {next_txid}"
                )
            ops = list(self._ops)
            self._ops.clear()
        return ops


def ops_of(batches: list[LoadedBatch]) -> list[edits_pb2.EditOp]:
    """The ops of ``batches``, in order."""
    return [
        edits_pb2.EditOp.FromString(body)
        for batch in batches
        for _, body in records.iter_records(batch.framed)
    ]

