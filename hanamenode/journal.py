"""The shared edit log as the NameNode uses it: the ``JournalManager`` protocol, what the
tailer reads through (``EditSource``), and ``connect_journal``, the one place that picks the
backend from ``dfs.namenode.shared.edits.dir`` (docs/architecture.md §5.2, §9).

Two backends satisfy these protocols:

- ``qjournal://h1:8485;h2:8485;h3:8485/<journal-id>``: ``qjm.journal_manager``'s
  ``QuorumJournalManager`` (HDFS-3077), read by the tailer through
  ``hanamenode.tailer.QuorumEditSource``;
- ``zookeeper://h1:2181,h2:2181/<path>``: ``zkjournal.manager.ZKJournalManager``, the live
  log in ZooKeeper of the 2011 "Name Node Redundancy" design, which is its own edit source.

The NameNode never names either class outside this module and the tailer's adapter::

    journal = connect_journal(settings, ns_info)
    end = await journal.arecover_unfinalized_segments()    # fences every older writer
    out = await journal.astart_log_segment((end or 0) + 1)
    out.write_framed(txid, framed)
    await out.asend_batch(*out.take_written())            # durable once it returns
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sized
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import grpc
import structlog

from conf import Settings
from conf.keys import ZKJournalUri
from hanamenode.errors import from_rpc_error
from hanamenode.peers import NameNodePeers
from proto import edits_pb2, namenode_pb2
from proto.values import NamespaceInfo
from qjm.journal_manager import connect_from_settings
from qjm.reader import LoadResult
from zkjournal.manager import Fetch, ZKJournalManager
from zkjournal.packed import PackedSegments

log = structlog.get_logger(__name__)

__all__ = [
    "ApplyTailed",
    "EditSource",
    "JournalFactory",
    "JournalManager",
    "JournalOutputStream",
    "LoadResult",
    "PushFeed",
    "connect_journal",
    "fetch_from_peers",
    "packed_segments",
]

ApplyTailed = Callable[[edits_pb2.EditOp], bool]
"""Apply one op read from the log; False means stop (tailing was disabled meanwhile)."""


class JournalOutputStream(Protocol):
    """One open segment of the active's edit log (``QuorumOutputStream``,
    ``ZKOutputStream``): edits are written framed, taken as a batch, and sent; a batch is
    durable once ``asend_batch`` returns, and batches sent together stay in order."""

    @property
    def segment_txid(self) -> int: ...

    def write_framed(self, txid: int, framed: bytes) -> None: ...

    def take_written(self) -> tuple[int, int, bytes]: ...

    async def asend_batch(self, first: int, count: int, framed: bytes) -> None: ...


class JournalManager(Protocol):
    """The writer's side of the shared edit log for one active period, as ``FSEditLog`` and
    ``FSNamesystem`` use it. Made per active period (and for format); a fenced writer tells
    its fence listeners once, from any thread, and fails every later call."""

    @property
    def journal_id(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def timeouts(self) -> Any: ...

    def add_fence_listener(self, listener: Callable[[str], None]) -> None: ...

    async def arecover_unfinalized_segments(self) -> int | None: ...

    async def astart_log_segment(self, txid: int) -> JournalOutputStream: ...

    async def afinalize_log_segment(self, start: int, end: int) -> None: ...

    async def apurge_logs_older_than(self, min_txid_to_keep: int) -> None: ...

    async def aconfirm_epoch(self) -> None: ...

    def start_heartbeats(self) -> None: ...

    async def aclose(self) -> None: ...

    def close(self) -> None: ...

    def format(self, *, force: bool = False) -> None: ...

    def is_formatted(self) -> dict[str, bool]: ...


class PushFeed(Protocol):
    """Edits pushed to a follower as they are written (the QJM's SubscribeEdits streams, the
    ZooKeeper journal's watch): ``start`` and ``stop`` on the NameNode's loop; after each
    push the loop is told, and ``decide`` returns the ops that may be applied from
    ``next_txid`` on (``EditLogReadError`` when they cannot be: the tailer falls back to a
    round)."""

    @property
    def subscribed(self) -> Sized: ...

    def start(self) -> None: ...

    async def stop(self) -> None: ...

    def decide(self, next_txid: int) -> list[edits_pb2.EditOp]: ...


@runtime_checkable
class EditSource(Protocol):
    """What the tailer reads the shared log through (blocking calls: a bridge thread makes
    them), and what ``bootstrap-standby`` checks."""

    def load_edits(
        self,
        since_txid: int,
        apply: ApplyTailed,
        *,
        up_to: int | None = None,
        should_stop: Callable[[], bool] = lambda: False,
        on_target: Callable[[int], None] | None = None,
    ) -> LoadResult: ...

    def read_journaled_edits(self, since_txid: int, max_txns: int) -> list[edits_pb2.EditOp]: ...

    def push_feed(
        self,
        next_txid: Callable[[], int],
        on_push: Callable[[], None],
        on_ended: Callable[[str, str], None],
    ) -> PushFeed: ...

    def check_edits_available(self, since_txid: int) -> None: ...


JournalFactory = Callable[[NamespaceInfo], JournalManager]
"""Makes a journal manager for the configured journal (``connect_journal``; tests wrap it)."""


PACKED_DIR = "zkjournal"
"""Where a NameNode of the ZooKeeper journal keeps its packed segments, in its name dir."""

FETCH_TIMEOUT = 600.0


def packed_segments(name_dir: Path) -> PackedSegments:
    """The packed segments of the NameNode whose name dir is ``name_dir``."""
    return PackedSegments(name_dir / PACKED_DIR)


def connect_journal(
    settings: Settings,
    namespace_info: NamespaceInfo,
    *,
    nn_id: str = "",
    name_dir: Path | None = None,
) -> JournalManager:
    """The journal manager of ``dfs.namenode.shared.edits.dir``: the QJM for
    ``qjournal://``, the ZooKeeper journal for ``zookeeper://``. For the latter, NameNode
    ``nn_id`` packs the live log into ``name_dir`` (none: it packs nothing) and fetches the
    packed txids it missed from the other NameNodes (``GetEditSegments``)."""
    uri = settings.shared_edits_uri
    if isinstance(uri, ZKJournalUri):
        return ZKJournalManager.from_settings(
            settings,
            uri,
            namespace_info,
            nn_id=nn_id,
            packed=None if name_dir is None else packed_segments(name_dir),
            fetch=fetch_from_peers(settings, nn_id) if nn_id else None,
        )
    return connect_from_settings(settings, namespace_info)


def fetch_from_peers(settings: Settings, nn_id: str) -> Fetch:
    """``GetEditSegments`` of each other NameNode in turn, until one holds the txid asked:
    its framed records from there on (nothing when none does; each refusal logged)."""

    def fetch(since_txid: int) -> Iterator[bytes]:
        peers = NameNodePeers.from_settings(settings, nn_id)
        request = namenode_pb2.GetEditSegmentsRequest(since_txid=since_txid)
        try:
            for peer in peers.peers:
                try:
                    chunks = [
                        c.data
                        for c in peers.namenode(peer).GetEditSegments(
                            request, timeout=FETCH_TIMEOUT
                        )
                    ]
                except grpc.RpcError as err:
                    log.warning("cannot fetch packed segments", peer=str(peer),
                                since_txid=since_txid, error=str(from_rpc_error(err)))
                    continue
                if chunks:
                    log.info("fetched packed segments", peer=str(peer), since_txid=since_txid,
                             bytes=sum(len(c) for c in chunks))
                    return iter(chunks)
            return iter(())
        finally:
            peers.close()

    return fetch
